"""``karpenter convert``'s output as a real kube-apiserver reads it: every object it writes for
older manifests is accepted by the CRDs, with strict field validation (as ``kubectl apply``)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client

from karpenter_aws.nodeclass import NODE_CLASS
from karpenter_conformance.cluster import crds as cluster_crds
from karpenter_core.cli.convert import convert
from karpenter_core.sdk.crds import node_class_crd

pytestmark = pytest.mark.integration

OLD = """
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: default}
spec:
  requirements:
    - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
    - {key: node.kubernetes.io/instance-type, operator: In, values: ["m5.*", "c5.*"]}
  limits: {resources: {cpu: 1000}}
  providerRef: {name: default}
  weight: 70
  consolidation: {enabled: true}
  ttlSecondsAfterEmpty: 30
  kubeletConfiguration: {maxPods: 58}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: batch}
spec:
  labels: {team: batch}
  taints: [{key: batch, effect: NoSchedule}]
  providerRef: {name: default}
  ttlSecondsUntilExpired: 604800
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: default}
spec:
  subnetSelector: {karpenter.sh/discovery: my-cluster}
  securityGroupSelector: {aws-ids: "sg-0123456789abcdef0"}
  amiSelector: {"aws::name": "my-ami-*", "aws::owners": "self"}
  amiFamily: AL2
  tags: {team: platform}
---
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: al2023}
      requirements: [{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}]
  disruption: {expireAfter: 168h}
---
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: al2023}
spec:
  amiFamily: AL2023
  role: KarpenterNodeRole-my-cluster
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: my-cluster}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: my-cluster}}]
"""


@pytest.fixture(scope="module")
def installed_crd(kube_cluster: Any) -> str:
    """The EC2NodeClass CRD next to the cluster's NodePool CRD."""
    (name,) = cluster_crds.apply_documents(kube_cluster.kubeconfig, [node_class_crd(NODE_CLASS)])
    return name


def test_the_converted_manifests_apply_with_strict_field_validation(
    kube_client: client.ApiClient, installed_crd: str, tmp_path: Any
) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(OLD)
    result = CliRunner().invoke(convert, ["-f", str(path), "--region", "us-east-1"])
    assert result.exit_code == 0, result.output
    objects = [obj for obj in yaml.safe_load_all(result.stdout) if obj]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("EC2NodeClass", "al2023"),
        ("EC2NodeClass", "default"),
        ("EC2NodeClass", "default-batch"),
        ("NodePool", "batch"),
        ("NodePool", "default"),
        ("NodePool", "general"),
    ]
    api = client.CustomObjectsApi(kube_client)
    for obj in objects:
        group, _, version = obj["apiVersion"].partition("/")
        plural = {"NodePool": "nodepools", "EC2NodeClass": "ec2nodeclasses"}[obj["kind"]]
        try:
            api.create_cluster_custom_object(
                group, version, plural, obj, dry_run="All", field_validation="Strict"
            )
        except client.ApiException as error:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {error.body}")
