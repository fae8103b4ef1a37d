"""The AKSNodeClass CRD as served by a real kube-apiserver: it accepts what the model accepts.

Every object of the table goes to the pydantic model and, as a server-side dry run, to the
apiserver; both must accept it or both refuse it (the apiserver with the expected message).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from pydantic import ValidationError

from karpenter_azure.nodeclass import GROUP, NODE_CLASS, PLURAL, VERSION, AKSNodeClass
from karpenter_conformance.cluster import crds as cluster_crds
from karpenter_core.sdk.crds import crd_path, node_class_crd
from karpenter_core.sdk.testing import NodeClassStore, node_class_manifest, pruned

pytestmark = pytest.mark.integration

SUBNET = (
    "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/MC_rg_cluster_eastus"
    "/providers/Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"
)
KUBELET_DEFAULTS = {
    "cpuManagerPolicy": "none",
    "cpuCFSQuota": True,
    "cpuCFSQuotaPeriod": "100ms",
    "topologyManagerPolicy": "none",
    "containerLogMaxSize": "50Mi",
    "containerLogMaxFiles": 5,
}

GOOD: dict[str, dict[str, Any]] = {
    "empty spec": {},
    "every field": {
        "vnetSubnetID": SUBNET,
        "osDiskSizeGB": 2048,
        "imageFamily": "AzureLinux",
        "fipsMode": "FIPS",
        "tags": {"team": "a", "k" * 512: "v" * 256},
        "maxPods": 10,
        "security": {"encryptionAtHost": True},
        "kubelet": {
            "cpuManagerPolicy": "static",
            "cpuCFSQuota": False,
            "cpuCFSQuotaPeriod": "1s",
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 0,
            "topologyManagerPolicy": "single-numa-node",
            "allowedUnsafeSysctls": ["kernel.msg*", "net.ipv4.route.min_pmtu"],
            "containerLogMaxSize": "1Gi",
            "containerLogMaxFiles": 2,
            "podPidsLimit": -1,
        },
    },
    "lower-case subnet id": {"vnetSubnetID": SUBNET.lower()},
    "smallest disk and most pods": {"osDiskSizeGB": 30, "maxPods": 250},
    "each image family": {"imageFamily": "Ubuntu2404"},
    "ubuntu 22.04": {"imageFamily": "Ubuntu2204", "fipsMode": "Disabled"},
    "FIPS with the default family": {"fipsMode": "FIPS"},
    "an empty kubelet": {"kubelet": {}},
}

BAD: dict[str, tuple[dict[str, Any], str]] = {
    "subnet id that is not one": (
        {"vnetSubnetID": "aks-subnet"},
        "spec.vnetSubnetID in body should match",
    ),
    "subnet id of another resource type": (
        {"vnetSubnetID": SUBNET.replace("virtualNetworks", "networkSecurityGroups")},
        "spec.vnetSubnetID in body should match",
    ),
    "disk too small": ({"osDiskSizeGB": 29}, "should be greater than or equal to 30"),
    "disk too large": ({"osDiskSizeGB": 2049}, "should be less than or equal to 2048"),
    "unknown image family": ({"imageFamily": "Ubuntu2004"}, 'Unsupported value: "Ubuntu2004"'),
    "unknown fips mode": ({"fipsMode": "On"}, 'Unsupported value: "On"'),
    "FIPS on Ubuntu2204": (
        {"fipsMode": "FIPS", "imageFamily": "Ubuntu2204"},
        "FIPS is not yet supported for Ubuntu2204 or Ubuntu2404",
    ),
    "FIPS on Ubuntu2404": (
        {"fipsMode": "FIPS", "imageFamily": "Ubuntu2404"},
        "FIPS is not yet supported for Ubuntu2204 or Ubuntu2404",
    ),
    "too few pods": ({"maxPods": 9}, "should be greater than or equal to 10"),
    "too many pods": ({"maxPods": 251}, "should be less than or equal to 250"),
    "long tag key": ({"tags": {"k" * 513: "v"}}, "tags keys must be less than 512 characters"),
    "tag key with a question mark": (
        {"tags": {"a?b": "v"}},
        "tags keys must not contain '<', '>', '%', '&', or '?'",
    ),
    "tag key with a percent sign": (
        {"tags": {"50%": "v"}},
        "tags keys must not contain '<', '>', '%', '&', or '?'",
    ),
    "tag key with a backslash": ({"tags": {"a\\b": "v"}}, "tags keys must not contain '\\'"),
    "long tag value": ({"tags": {"k": "v" * 257}}, "tags values must be less than 256 characters"),
    "image GC high not above low": (
        {"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}},
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    ),
    "image GC above 100": (
        {"kubelet": {"imageGCLowThresholdPercent": 101}},
        "should be less than or equal to 100",
    ),
    "unknown cpu manager policy": (
        {"kubelet": {"cpuManagerPolicy": "dynamic"}},
        'Unsupported value: "dynamic"',
    ),
    "unknown topology manager policy": (
        {"kubelet": {"topologyManagerPolicy": "strict"}},
        'Unsupported value: "strict"',
    ),
    "log size without a unit": (
        {"kubelet": {"containerLogMaxSize": "50"}},
        "spec.kubelet.containerLogMaxSize in body should match",
    ),
    "log size with a trailing newline": (
        {"kubelet": {"containerLogMaxSize": "50Mi\n"}},
        "spec.kubelet.containerLogMaxSize in body should match",
    ),
    "one log file": (
        {"kubelet": {"containerLogMaxFiles": 1}},
        "should be greater than or equal to 2",
    ),
    "quota period without a unit": (
        {"kubelet": {"cpuCFSQuotaPeriod": "100"}},
        "spec.kubelet.cpuCFSQuotaPeriod in body should match",
    ),
}

CRD_PATH = crd_path(NODE_CLASS)


def manifest(spec: dict[str, Any]) -> dict[str, Any]:
    return node_class_manifest(NODE_CLASS, spec, "aksnc")


def model_error(spec: dict[str, Any]) -> str | None:
    """The model's complaint about ``spec``, or None when it accepts it."""
    try:
        AKSNodeClass.from_manifest(manifest(spec))
    except ValidationError as error:
        return str(error)
    return None


@pytest.fixture(scope="module")
def installed_crd(kube_cluster: Any) -> str:
    """The AKSNodeClass CRD generated now from the model, applied and Established."""
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

    parsed = AKSNodeClass.from_manifest(stored)
    model_spec = parsed.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert pruned(model_spec) == pruned(stored["spec"]), (
        "the model and the apiserver disagree on the defaults"
    )


@pytest.mark.parametrize(("spec", "message"), BAD.values(), ids=BAD.keys())
def test_both_refuse(node_classes: NodeClassStore, spec: dict[str, Any], message: str) -> None:
    assert model_error(spec) is not None, "the model accepts what the apiserver should refuse"
    assert message in node_classes.rejection(spec)


def test_the_apiserver_fills_upstreams_defaults(node_classes: NodeClassStore) -> None:
    spec = node_classes.create({"kubelet": {"podPidsLimit": 100}})["spec"]

    assert spec["osDiskSizeGB"] == 128
    assert spec["imageFamily"] == "Ubuntu"
    assert spec["kubelet"] == {**KUBELET_DEFAULTS, "podPidsLimit": 100}


def test_status_round_trips(node_classes: NodeClassStore) -> None:
    stored = node_classes.create({})
    image = (
        "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/"
        "2204gen2containerd/versions/202501.02.0"
    )
    status = {
        "images": [
            {
                "id": image,
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {
                        "key": "karpenter.azure.com/sku-hyperv-generation",
                        "operator": "In",
                        "values": ["2"],
                    },
                ],
            }
        ],
        "kubernetesVersion": "1.31.2",
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

    node_class = AKSNodeClass.from_manifest(updated)
    assert node_class.not_ready_reason() is None
    assert node_class.status.kubernetes_version == "1.31.2"
    assert node_class.status.images[0].id == image
    assert updated["status"] == status


def test_the_generated_crd_is_the_shipped_one(installed_crd: str) -> None:
    shipped = [doc for doc in yaml.safe_load_all(CRD_PATH.read_text()) if doc]
    assert installed_crd == f"{PLURAL}.{GROUP}"
    assert shipped == [node_class_crd(NODE_CLASS)]
