"""The nodeclass controller against the real apiserver: status, drift hash annotations,
NodeClaim re-stamping and the termination finalizer. Azure is served by injected functions (the
resolver's and the subnet reader's seams), and for the provider's controller by the real
azure-mgmt clients against the fake ARM server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from kubernetes import client

from karpenter_azure.fake_arm import FakeARM, Latency, seed
from karpenter_azure.images import AKS_UBUNTU_GALLERY, ImageResolver, ImageVersion
from karpenter_azure.nodeclass import (
    GROUP,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    KIND,
    NODE_CLASS,
    PLURAL,
    VERSION,
    AKSNodeClass,
    nodeclass_hash,
)
from karpenter_azure.nodeclass_controller import NodeClassController
from karpenter_conformance.cluster import crds as cluster_crds
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.sdk.crds import node_class_crd

pytestmark = pytest.mark.integration

SUBNET = (
    "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/MC_rg_cluster_eastus"
    "/providers/Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"
)
PUBLISHED = datetime(2025, 3, 1, tzinfo=UTC)


class Azure:
    """Image versions and subnets the controller reads."""

    def __init__(self) -> None:
        self.subnets = {("MC_rg_cluster_eastus", "aks-vnet-12345678", "aks-subnet")}

    def list_versions(self, location: str, gallery: str, definition: str) -> list[ImageVersion]:
        return [ImageVersion("202503.01.0", PUBLISHED)]

    def get_subnet(self, group: str, vnet: str, subnet: str) -> dict[str, str]:
        if (group, vnet, subnet) not in self.subnets:
            raise ResourceNotFoundError(f"subnet {subnet} not found")
        return {"name": subnet}


@pytest.fixture(scope="module")
def installed_crd(kube_cluster: Any) -> str:
    (name,) = cluster_crds.apply_documents(kube_cluster.kubeconfig, [node_class_crd(NODE_CLASS)])
    return name


@pytest.fixture
def api(kube_client: client.ApiClient, installed_crd: str) -> Iterator[client.CustomObjectsApi]:
    custom = client.CustomObjectsApi(kube_client)
    yield custom
    for item in custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]:
        if item["spec"]["nodeClassRef"]["group"] == GROUP:
            custom.delete_cluster_custom_object(
                "karpenter.sh", "v1", "nodeclaims", item["metadata"]["name"]
            )
    for item in custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        name = item["metadata"]["name"]
        custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": None}}
        )
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def controller(kube_client: client.ApiClient, azure: Azure) -> NodeClassController:
    context = ProviderContext(kube_client=kube_client)
    return NodeClassController(
        context,
        images=ImageResolver(azure.list_versions, "eastus", context.clock),
        get_subnet=azure.get_subnet,
        cluster_subnet_id=SUBNET,
        node_resource_group="MC_rg_cluster_eastus",
    )


def create(api: client.CustomObjectsApi, spec: dict[str, Any]) -> str:
    name = f"aksnc-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    return name


def get(api: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    stored: dict[str, Any] = api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    return stored


def nodeclaim(api: client.CustomObjectsApi, node_class: str, annotations: dict[str, str]) -> str:
    name = f"nc-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeClassRef": {"group": GROUP, "kind": KIND, "name": node_class},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        },
    }
    api.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", body)
    return name


def conditions(stored: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in stored["status"]["conditions"]}


def test_a_nodeclass_is_resolved_stamped_and_ready(
    api: client.CustomObjectsApi, kube_client: client.ApiClient
) -> None:
    name = create(api, {"imageFamily": "AzureLinux"})
    controller(kube_client, Azure()).sync()

    stored = get(api, name)
    model = AKSNodeClass.from_manifest(stored)
    assert stored["metadata"]["annotations"] == {
        HASH_ANNOTATION: nodeclass_hash(model.spec),
        HASH_VERSION_ANNOTATION: HASH_VERSION,
    }
    assert NodeClassController.finalizer in stored["metadata"]["finalizers"]
    assert model.not_ready() is None
    version = client.VersionApi(kube_client).get_code().git_version
    assert stored["status"]["kubernetesVersion"] == version.removeprefix("v")
    assert len(stored["status"]["images"]) == 3
    assert all("/versions/202503.01.0" in image["id"] for image in stored["status"]["images"])


def test_a_spec_change_is_resolved_again_for_the_new_generation(
    api: client.CustomObjectsApi, kube_client: client.ApiClient
) -> None:
    azure = Azure()
    nodeclasses = controller(kube_client, azure)
    name = create(api, {})
    nodeclasses.sync()
    missing = SUBNET.replace("aks-subnet", "gone").replace("aks-vnet-12345678", "byo-vnet")
    api.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, name, {"spec": {"vnetSubnetID": missing}}
    )
    nodeclasses.sync()

    stored = get(api, name)
    assert conditions(stored)["SubnetsReady"] == "False"
    assert conditions(stored)["Ready"] == "False"
    assert {c["observedGeneration"] for c in stored["status"]["conditions"]} == {2}
    model = AKSNodeClass.from_manifest(stored)
    assert stored["metadata"]["annotations"][HASH_ANNOTATION] == nodeclass_hash(model.spec)
    assert "does not match the cluster" in (model.not_ready_reason() or "")


def test_a_hash_version_change_restamps_undrifted_nodeclaims(
    api: client.CustomObjectsApi, kube_client: client.ApiClient
) -> None:
    name = create(api, {"osDiskSizeGB": 64})
    old = {HASH_ANNOTATION: "12345", HASH_VERSION_ANNOTATION: "v3"}
    claim = nodeclaim(api, name, old)
    nodeclasses = controller(kube_client, Azure())
    nodeclasses.sync()

    annotations = api.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim)[
        "metadata"
    ]["annotations"]
    model = AKSNodeClass.from_manifest(get(api, name))
    assert annotations[HASH_VERSION_ANNOTATION] == HASH_VERSION
    assert annotations[HASH_ANNOTATION] == nodeclass_hash(model.spec)


def test_a_deleted_nodeclass_waits_for_its_nodeclaims(
    api: client.CustomObjectsApi, kube_client: client.ApiClient
) -> None:
    nodeclasses = controller(kube_client, Azure())
    name = create(api, {})
    nodeclasses.sync()
    claim = nodeclaim(api, name, {})
    api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    nodeclasses.sync()
    assert get(api, name)["metadata"]["deletionTimestamp"]

    api.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim)
    nodeclasses.sync()
    with pytest.raises(client.ApiException) as gone:
        get(api, name)
    assert gone.value.status == 404


def test_the_controller_of_a_provider_reads_azure_through_its_clients(
    api: client.CustomObjectsApi, kube_client: client.ApiClient
) -> None:
    name = create(api, {"imageFamily": "Ubuntu2204"})
    with FakeARM(latency=Latency.none()) as fake:
        fake.publish_image(
            AKS_UBUNTU_GALLERY, "2204gen2containerd", "202507.01.0", "2025-07-01T00:00:00Z"
        )
        subnet = fake.subnet_id()
        settings = SimpleNamespace(
            region="eastus", vnet_subnet_id=subnet, node_resource_group=seed.NODE_RESOURCE_GROUP
        )
        clients = SimpleNamespace(compute=fake.compute_client(), network=fake.network_client())
        provider = SimpleNamespace(settings=settings, clients=clients)
        NodeClassController.for_provider(ProviderContext(kube_client=kube_client), provider).sync()

    stored = get(api, name)
    assert AKSNodeClass.from_manifest(stored).not_ready() is None
    latest = seed.IMAGE_VERSIONS[-1][0]
    assert [image["id"].split("/images/")[1] for image in stored["status"]["images"]] == [
        "2204gen2containerd/versions/202507.01.0",
        f"2204containerd/versions/{latest}",
        f"2204gen2arm64containerd/versions/{latest}",
    ]
    assert any(r.method == "GET" and r.path == subnet for r in fake.requests)
