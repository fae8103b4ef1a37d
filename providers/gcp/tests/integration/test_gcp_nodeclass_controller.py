"""The GCENodeClass controller against the real apiserver, with google-cloud-compute against the
fake GCE server: the status it writes passes the CRD's status schema, the hash annotations and
the finalizer are kept, and a deleted GCENodeClass waits for its NodeClaims."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from karpenter_conformance.cluster import crds as cluster_crds
from karpenter_core.sdk.crds import node_class_crd
from karpenter_core.sdk.record import ProviderContext
from karpenter_gcp.clients import GCPClients
from karpenter_gcp.nodeclass import (
    GROUP,
    HASH_ANNOTATION,
    KIND,
    NODE_CLASS,
    PLURAL,
    VERSION,
    GCENodeClass,
    nodeclass_hash,
)
from karpenter_gcp.nodeclass_controller import NodeClassController, StatusResolver
from karpenter_gcp.testing import FakeGCE

pytestmark = pytest.mark.integration

NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")


@pytest.fixture(scope="module")
def installed_crd(kube_cluster: Any) -> str:
    (name,) = cluster_crds.apply_documents(kube_cluster.kubeconfig, [node_class_crd(NODE_CLASS)])
    return name


@pytest.fixture
def api(kube_client: client.ApiClient, installed_crd: str) -> Iterator[client.CustomObjectsApi]:
    custom = client.CustomObjectsApi(kube_client)
    yield custom
    for item in custom.list_cluster_custom_object(*NODECLAIMS)["items"]:
        if item["spec"]["nodeClassRef"]["group"] == GROUP:
            custom.delete_cluster_custom_object(*NODECLAIMS, item["metadata"]["name"])
    for item in custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        name = item["metadata"]["name"]
        custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": None}}
        )
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


@pytest.fixture
def controller(kube_client: client.ApiClient) -> Iterator[NodeClassController]:
    """The controller over the fake GCE server, which also publishes Ubuntu images of the
    apiserver's own Kubernetes minor version."""
    version = client.VersionApi(kube_client).get_code().git_version
    minor = "-".join(version.removeprefix("v").split(".")[:2])
    with FakeGCE() as fake:
        for arch, token in (("X86_64", "amd64"), ("ARM64", "arm64")):
            fake.images["ubuntu-os-gke-cloud"].append(
                {
                    "name": f"ubuntu-gke-2404-{minor}-{token}-v20260416",
                    "architecture": arch,
                    "creationTimestamp": "2026-04-16T10:00:00.000-07:00",
                    "status": "READY",
                }
            )
        clients = GCPClients.create("test-project", endpoint=fake.endpoint)
        resolver = StatusResolver(clients.images, clients.subnetworks, "test-project", fake.region)
        yield NodeClassController(ProviderContext(kube_client=kube_client), resolver)


def create(api: client.CustomObjectsApi, kind: str, spec: dict[str, Any]) -> str:
    name = f"gcenc-{uuid.uuid4().hex[:8]}"
    group, version, plural = (GROUP, VERSION, PLURAL) if kind == KIND else NODECLAIMS
    body = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": name}}
    api.create_cluster_custom_object(group, version, plural, {**body, "spec": spec})
    return name


def test_a_nodeclass_is_resolved_stamped_and_ready(
    api: client.CustomObjectsApi, controller: NodeClassController
) -> None:
    spec = {
        "imageSelectorTerms": [{"alias": "Ubuntu@latest"}],
        "networkConfig": {"subnetwork": "default"},
    }
    name = create(api, KIND, spec)
    controller.sync()

    stored = GCENodeClass.from_manifest(api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
    assert stored.not_ready_reason() is None
    assert stored.metadata.annotations[HASH_ANNOTATION] == nodeclass_hash(stored.spec)
    assert stored.metadata.finalizers == [NodeClassController.finalizer]
    assert [image.requirements[0].values for image in stored.status.images] == [
        ["amd64"],
        ["arm64"],
    ]
    assert (
        stored.status.subnetwork == "projects/test-project/regions/us-central1/subnetworks/default"
    )


def test_a_deleted_nodeclass_waits_for_its_nodeclaims(
    api: client.CustomObjectsApi, controller: NodeClassController
) -> None:
    name = create(api, KIND, {"imageSelectorTerms": [{"alias": "Ubuntu@latest"}]})
    controller.sync()
    claim = create(
        api,
        "NodeClaim",
        {
            "nodeClassRef": {"group": GROUP, "kind": KIND, "name": name},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        },
    )
    api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    controller.sync()
    assert api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)["metadata"]["finalizers"]

    api.delete_cluster_custom_object(*NODECLAIMS, claim)
    controller.sync()
    assert not api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
