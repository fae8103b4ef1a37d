"""The EC2NodeClass CRD as served by a real kube-apiserver: it accepts what the model accepts.

Every object of the table goes to the pydantic model and, as a server-side dry run, to the
apiserver; both must accept it or both refuse it (the apiserver with the expected message).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client
from pydantic import ValidationError

from karpenter_aws.nodeclass import GROUP, NODE_CLASS, PLURAL, VERSION, EC2NodeClass
from karpenter_conformance.cluster import crds as cluster_crds
from karpenter_core.cli.main import cli
from karpenter_core.sdk.crds import node_class_crd
from karpenter_core.sdk.testing import NodeClassStore, node_class_manifest, pruned

pytestmark = pytest.mark.integration

DISCOVERY = {"karpenter.sh/discovery": "test-cluster"}
METADATA_DEFAULTS = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "required",
}
REMOVE = object()
"""A spec value in a case that removes the field from the base spec."""


def spec_with(**changes: Any) -> dict[str, Any]:
    """A valid spec (al2023 alias, a role) with fields replaced, or removed with REMOVE."""
    spec: dict[str, Any] = {
        "subnetSelectorTerms": [{"tags": DISCOVERY}],
        "securityGroupSelectorTerms": [{"tags": DISCOVERY}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole",
    }
    spec.update(changes)
    return {key: value for key, value in spec.items() if value is not REMOVE}


def root_device(**ebs: Any) -> dict[str, Any]:
    return {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "20Gi", **ebs}}


GOOD: dict[str, dict[str, Any]] = {
    "alias al2023@latest with a role": spec_with(),
    "pinned alias": spec_with(amiSelectorTerms=[{"alias": "al2023@v20240625"}]),
    "al2 alias": spec_with(amiSelectorTerms=[{"alias": "al2@latest"}]),
    "bottlerocket alias with its family": spec_with(
        amiSelectorTerms=[{"alias": "bottlerocket@v1.20.0"}], amiFamily="Bottlerocket"
    ),
    "windows alias at latest": spec_with(amiSelectorTerms=[{"alias": "windows2022@latest"}]),
    "alias with amiFamily Custom": spec_with(amiFamily="Custom"),
    "instanceProfile instead of role": spec_with(role=REMOVE, instanceProfile="NodeProfile"),
    "ami id, name with owner and ssm parameter terms": spec_with(
        amiFamily="AL2",
        amiSelectorTerms=[
            {"id": "ami-0123456789abcdef0"},
            {"name": "my-ami-*", "owner": "self"},
            {"tags": {"team": "a"}, "owner": "123456789012"},
            {"ssmParameter": "/my/ami"},
        ],
    ),
    "subnet and security group terms by id and name": spec_with(
        subnetSelectorTerms=[{"id": "subnet-0a1b2c"}, {"tags": {"Name": "*"}}],
        securityGroupSelectorTerms=[{"id": "sg-0a1b2c"}, {"name": "default"}],
    ),
    "thirty subnet terms": spec_with(
        subnetSelectorTerms=[{"id": f"subnet-{index:04x}"} for index in range(30)]
    ),
    "twenty selector tags": spec_with(
        subnetSelectorTerms=[{"tags": {f"key{index}": "v" for index in range(20)}}]
    ),
    "ordinary tags": spec_with(tags={"team": "a", "karpenter.sh/custom": "x", "Name": "node"}),
    "empty tag value": spec_with(tags={"team": ""}),
    "explicit null instanceProfile": spec_with(instanceProfile=None),
    "one root volume and another volume": spec_with(
        blockDeviceMappings=[
            root_device(volumeType="gp3", iops=3000, throughput=125, encrypted=True),
            {"deviceName": "/dev/xvdb", "ebs": {"snapshotID": "snap-0123"}},
        ]
    ),
    "largest volume sizes": spec_with(
        blockDeviceMappings=[
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "64T"}},
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "59000Gi"}},
            {"deviceName": "/dev/xvdc", "ebs": {"volumeSize": "64000G"}},
            {"deviceName": "/dev/xvdd", "ebs": {"volumeSize": "58Ti"}},
        ]
    ),
    "metadata options set in part": spec_with(
        metadataOptions={"httpTokens": "optional", "httpPutResponseHopLimit": 2}
    ),
    "metadata options hop limit 64": spec_with(metadataOptions={"httpPutResponseHopLimit": 64}),
    "kubelet settings": spec_with(
        kubelet={
            "maxPods": 110,
            "podsPerCore": 10,
            "clusterDNS": ["10.100.0.10"],
            "systemReserved": {"cpu": "100m", "memory": "100Mi", "pid": "100"},
            "kubeReserved": {"ephemeral-storage": "1Gi"},
            "evictionHard": {"memory.available": "5%", "nodefs.available": "10Gi"},
            "evictionSoft": {"memory.available": "10%"},
            "evictionSoftGracePeriod": {"memory.available": "1m30s"},
            "evictionMaxPodGracePeriod": 60,
            "imageGCHighThresholdPercent": 85,
            "imageGCLowThresholdPercent": 80,
            "cpuCFSQuota": True,
        }
    ),
    "instance store, public IP, monitoring, user data": spec_with(
        instanceStorePolicy="RAID0",
        associatePublicIPAddress=False,
        detailedMonitoring=True,
        userData="#!/bin/bash\necho hello\n",
    ),
}

BAD: dict[str, tuple[dict[str, Any], str]] = {
    "neither role nor instanceProfile": (
        spec_with(role=REMOVE),
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    "both role and instanceProfile": (
        spec_with(instanceProfile="NodeProfile"),
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    "empty role": (spec_with(role=""), "role cannot be empty"),
    "alias without a version": (
        spec_with(amiSelectorTerms=[{"alias": "al2023"}]),
        "'alias' is improperly formatted, must match the format 'family@version'",
    ),
    "alias of an unknown family": (
        spec_with(amiSelectorTerms=[{"alias": "ubuntu@latest"}]),
        "family is not supported",
    ),
    "windows alias pinned": (
        spec_with(amiSelectorTerms=[{"alias": "windows2019@v20240101"}]),
        "windows families may only specify version 'latest'",
    ),
    "windows alias with a second version": (
        spec_with(amiSelectorTerms=[{"alias": "windows2022@latest@v1"}]),
        "windows families may only specify version 'latest'",
    ),
    "alias longer than 30 characters": (
        spec_with(amiSelectorTerms=[{"alias": "al2023@" + "v" * 30}]),
        "Too long",
    ),
    "alias with another term": (
        spec_with(amiSelectorTerms=[{"alias": "al2023@latest"}, {"id": "ami-0123"}]),
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    ),
    "alias with tags in its term": (
        spec_with(amiSelectorTerms=[{"alias": "al2023@latest", "tags": {"a": "b"}}]),
        "'alias' is mutually exclusive",
    ),
    "amiFamily of another alias": (
        spec_with(amiFamily="AL2"),
        "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    ),
    "amiFamily Bottlerocket with a windows alias": (
        spec_with(amiSelectorTerms=[{"alias": "windows2022@latest"}], amiFamily="Bottlerocket"),
        "if set, amiFamily must be 'Windows2022' or 'Custom'",
    ),
    "no alias and no amiFamily": (
        spec_with(amiSelectorTerms=[{"id": "ami-0123"}]),
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
    "unknown amiFamily": (spec_with(amiFamily="Ubuntu"), 'Unsupported value: "Ubuntu"'),
    "ami id with a name": (
        spec_with(amiFamily="AL2", amiSelectorTerms=[{"id": "ami-0123", "name": "x"}]),
        "'id' is mutually exclusive",
    ),
    "ami owner alone": (
        spec_with(amiFamily="AL2", amiSelectorTerms=[{"owner": "self"}]),
        "expected at least one, got none, ['alias', 'tags', 'id', 'name', 'ssmParameter']",
    ),
    "empty ami name": (
        spec_with(amiFamily="AL2", amiSelectorTerms=[{"name": ""}]),
        "should be at least 1 chars long",
    ),
    "empty ami term": (
        spec_with(amiFamily="AL2", amiSelectorTerms=[{}]),
        "expected at least one, got none",
    ),
    "malformed ami id": (
        spec_with(amiFamily="AL2", amiSelectorTerms=[{"id": "img-0123"}]),
        "should match '^ami-[0-9a-z]+$'",
    ),
    "no ami terms": (spec_with(amiSelectorTerms=[]), "should have at least 1 items"),
    "subnet id with tags": (
        spec_with(subnetSelectorTerms=[{"id": "subnet-0123", "tags": DISCOVERY}]),
        "'id' is mutually exclusive",
    ),
    "malformed subnet id": (
        spec_with(subnetSelectorTerms=[{"id": "sn-0123"}]),
        "should match '^subnet-[0-9a-z]+$'",
    ),
    "empty subnet term": (
        spec_with(subnetSelectorTerms=[{}]),
        "expected at least one, got none",
    ),
    "no subnet terms": (spec_with(subnetSelectorTerms=[]), "should have at least 1 items"),
    "thirty-one subnet terms": (
        spec_with(subnetSelectorTerms=[{"id": f"subnet-{index:04x}"} for index in range(31)]),
        "must have at most 30 items",
    ),
    "security group name with id": (
        spec_with(securityGroupSelectorTerms=[{"name": "default", "id": "sg-0123"}]),
        "is mutually exclusive",
    ),
    "empty security group name": (
        spec_with(securityGroupSelectorTerms=[{"name": ""}]),
        "should be at least 1 chars long",
    ),
    "security group name with tags": (
        spec_with(securityGroupSelectorTerms=[{"name": "default", "tags": DISCOVERY}]),
        "'name' is mutually exclusive",
    ),
    "empty selector tag value": (
        spec_with(subnetSelectorTerms=[{"tags": {"Name": ""}}]),
        "empty tag keys or values aren't supported",
    ),
    "twenty-one selector tags": (
        spec_with(subnetSelectorTerms=[{"tags": {f"key{index}": "v" for index in range(21)}}]),
        "must have at most 20 items",
    ),
    "cluster tag": (
        spec_with(tags={"kubernetes.io/cluster/test-cluster": "owned"}),
        "tag contains a restricted tag matching kubernetes.io/cluster/",
    ),
    "nodepool tag": (
        spec_with(tags={"karpenter.sh/nodepool": "default"}),
        "tag contains a restricted tag matching karpenter.sh/nodepool",
    ),
    "nodeclaim tag": (
        spec_with(tags={"karpenter.sh/nodeclaim": "x"}),
        "tag contains a restricted tag matching karpenter.sh/nodeclaim",
    ),
    "nodeclass tag": (
        spec_with(tags={"karpenter.k8s.aws/ec2nodeclass": "x"}),
        "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
    ),
    "eks cluster name tag": (
        spec_with(tags={"eks:eks-cluster-name": "x"}),
        "tag contains a restricted tag matching eks:eks-cluster-name",
    ),
    "empty tag key": (spec_with(tags={"": "x"}), "empty tag keys aren't supported"),
    "two root volumes": (
        spec_with(blockDeviceMappings=[root_device(), {**root_device(), "deviceName": "/dev/b"}]),
        "must have only one blockDeviceMappings with rootVolume",
    ),
    "unknown volume type": (
        spec_with(blockDeviceMappings=[root_device(volumeType="gp4")]),
        'Unsupported value: "gp4"',
    ),
    "volume neither sized nor from a snapshot": (
        spec_with(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"encrypted": True}}]),
        "snapshotID or volumeSize must be defined",
    ),
    "volume size above 64T": (
        spec_with(blockDeviceMappings=[root_device(volumeSize="65T")]),
        "spec.blockDeviceMappings[0].ebs.volumeSize in body should match",
    ),
    "volume size in Mi": (
        spec_with(blockDeviceMappings=[root_device(volumeSize="100Mi")]),
        "spec.blockDeviceMappings[0].ebs.volumeSize in body should match",
    ),
    "volume size zero": (
        spec_with(blockDeviceMappings=[root_device(volumeSize="0Gi")]),
        "spec.blockDeviceMappings[0].ebs.volumeSize in body should match",
    ),
    "negative iops": (
        spec_with(blockDeviceMappings=[root_device(iops=-1)]),
        "should be greater than or equal to 0",
    ),
    "unknown httpTokens": (
        spec_with(metadataOptions={"httpTokens": "sometimes"}),
        'Unsupported value: "sometimes"',
    ),
    "hop limit 0": (
        spec_with(metadataOptions={"httpPutResponseHopLimit": 0}),
        "should be greater than or equal to 1",
    ),
    "hop limit 65": (
        spec_with(metadataOptions={"httpPutResponseHopLimit": 65}),
        "should be less than or equal to 64",
    ),
    "unknown instanceStorePolicy": (
        spec_with(instanceStorePolicy="RAID1"),
        'Unsupported value: "RAID1"',
    ),
    "image GC high not above low": (
        spec_with(kubelet={"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}),
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    ),
    "image GC above 100": (
        spec_with(kubelet={"imageGCHighThresholdPercent": 101}),
        "should be less than or equal to 100",
    ),
    "evictionSoft without a grace period": (
        spec_with(kubelet={"evictionSoft": {"memory.available": "10%"}}),
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    ),
    "grace period without evictionSoft": (
        spec_with(kubelet={"evictionSoftGracePeriod": {"memory.available": "1m"}}),
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    ),
    "unknown eviction signal": (
        spec_with(kubelet={"evictionHard": {"memory.free": "5%"}}),
        "valid keys for evictionHard are",
    ),
    "unknown reserved resource": (
        spec_with(kubelet={"systemReserved": {"nvidia.com/gpu": "1"}}),
        "valid keys for systemReserved are",
    ),
    "malformed reserved quantity": (
        spec_with(kubelet={"kubeReserved": {"cpu": "lots"}}),
        "spec.kubelet.kubeReserved.cpu in body should match",
    ),
    "malformed grace period": (
        spec_with(
            kubelet={
                "evictionSoft": {"memory.available": "10%"},
                "evictionSoftGracePeriod": {"memory.available": "90"},
            }
        ),
        "spec.kubelet.evictionSoftGracePeriod.memory.available in body should match",
    ),
    "negative maxPods": (
        spec_with(kubelet={"maxPods": -1}),
        "should be greater than or equal to 0",
    ),
}


def manifest(spec: dict[str, Any]) -> dict[str, Any]:
    return node_class_manifest(NODE_CLASS, spec, "ec2nc")


def model_error(spec: dict[str, Any]) -> str | None:
    """The model's complaint about ``spec``, or None when it accepts it."""
    try:
        EC2NodeClass.from_manifest(manifest(spec))
    except ValidationError as error:
        return str(error)
    return None


@pytest.fixture(scope="module")
def installed_crd(kube_cluster: Any) -> str:
    """The EC2NodeClass CRD generated now from the model, applied and Established."""
    (name,) = cluster_crds.apply_documents(kube_cluster.kubeconfig, [node_class_crd(NODE_CLASS)])
    return name


@pytest.fixture
def node_classes(kube_client: client.ApiClient, installed_crd: str) -> Iterator[NodeClassStore]:
    store = NodeClassStore(client.CustomObjectsApi(kube_client), NODE_CLASS, manifest)
    try:
        yield store
    finally:
        store.delete_created()


@pytest.mark.parametrize("spec", GOOD.values(), ids=GOOD.keys())
def test_both_accept(node_classes: NodeClassStore, spec: dict[str, Any]) -> None:
    assert model_error(spec) is None
    stored = node_classes.dry_run(spec)

    parsed = EC2NodeClass.from_manifest(stored)
    model_spec = parsed.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert pruned(model_spec) == pruned(stored["spec"]), "the model and the apiserver disagree"


@pytest.mark.parametrize(("spec", "message"), BAD.values(), ids=BAD.keys())
def test_both_refuse(node_classes: NodeClassStore, spec: dict[str, Any], message: str) -> None:
    assert model_error(spec) is not None, "the model accepts what the apiserver should refuse"
    assert message in node_classes.rejection(spec)


def test_metadata_options_defaults_applied_by_the_apiserver(node_classes: NodeClassStore) -> None:
    whole = node_classes.create(spec_with())["spec"]
    partial = node_classes.create(spec_with(metadataOptions={"httpTokens": "optional"}))["spec"]

    assert whole["metadataOptions"] == METADATA_DEFAULTS
    assert partial["metadataOptions"] == {**METADATA_DEFAULTS, "httpTokens": "optional"}
    model = EC2NodeClass.from_manifest(manifest(spec_with()))
    assert model.spec.metadata_options.model_dump(by_alias=True) == METADATA_DEFAULTS


def test_root_volume_defaults_to_false(node_classes: NodeClassStore) -> None:
    mapping = {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi"}}
    stored = node_classes.create(spec_with(blockDeviceMappings=[mapping]))

    assert stored["spec"]["blockDeviceMappings"] == [{**mapping, "rootVolume": False}]


def test_status_round_trips(node_classes: NodeClassStore) -> None:
    stored = node_classes.create(spec_with())
    status = {
        "subnets": [{"id": "subnet-0a", "zone": "us-east-1a", "zoneID": "use1-az1"}],
        "securityGroups": [{"id": "sg-0a", "name": "default"}],
        "amis": [
            {
                "id": "ami-0a",
                "name": "al2023",
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                ],
            }
        ],
        "instanceProfile": "profile-0a",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    name = stored["metadata"]["name"]
    updated = node_classes.api.patch_cluster_custom_object_status(
        GROUP, VERSION, PLURAL, name, {"status": status}
    )

    node_class = EC2NodeClass.from_manifest(updated)
    assert node_class.not_ready_reason() is None
    assert node_class.status.subnets[0].zone_id == "use1-az1"
    assert node_class.status.amis[0].requirements[0].values == ["amd64"]
    assert updated["status"]["amis"][0]["deprecated"] is False


def test_cli_crds_include_the_ec2nodeclass(installed_crd: str) -> None:
    result = CliRunner().invoke(cli, ["crds"])

    assert result.exit_code == 0, result.output
    documents = [document for document in yaml.safe_load_all(result.output) if document]
    by_name = {document["metadata"]["name"]: document for document in documents}
    assert installed_crd == f"{PLURAL}.{GROUP}"
    assert by_name[installed_crd] == node_class_crd(NODE_CLASS)
