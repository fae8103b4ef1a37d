"""The GCENodeClass status controller: its status computation through google-cloud-compute
against the fake GCE server, and one pass of the SDK's status loop against the fake Kubernetes
API (status, hash annotations, finalizer)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from karpenter_conformance.fakekube import FakeKube
from karpenter_core.sdk.record import ProviderContext
from karpenter_gcp.clients import GCPClients
from karpenter_gcp.nodeclass import HASH_ANNOTATION, GCENodeClass, nodeclass_hash
from karpenter_gcp.nodeclass_controller import (
    NodeClassController,
    StatusResolver,
    resolve_status,
    subnetwork_path,
)
from karpenter_gcp.testing import FakeGCE

pytestmark = pytest.mark.slow

PROJECT, REGION = "test-project", "us-central1"
VERSION = "v1.34.1-gke.1829001"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
COS = "projects/gke-node-images/global/images/gke-1341-gke1829001-cos"
UBUNTU = "projects/ubuntu-os-gke-cloud/global/images/ubuntu-gke-2404-1-34"
SUBNETWORK = f"projects/{PROJECT}/regions/{REGION}/subnetworks/default"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGCE]:
    with FakeGCE(PROJECT, REGION) as server:
        yield server


@pytest.fixture(scope="module")
def clients(fake: FakeGCE) -> GCPClients:
    return GCPClients.create(PROJECT, endpoint=fake.endpoint)


def node_class(status: dict[str, Any] | None = None, **spec: Any) -> GCENodeClass:
    spec.setdefault("imageSelectorTerms", [{"alias": "ContainerOptimizedOS@latest"}])
    return GCENodeClass.from_manifest(
        {"metadata": {"name": "default", "generation": 2}, "spec": spec, "status": status or {}}
    )


def resolve(clients: GCPClients, nc: GCENodeClass) -> tuple[dict[str, Any], bool]:
    return resolver(clients)(nc, VERSION, NOW)


def resolver(clients: GCPClients) -> StatusResolver:
    return StatusResolver(clients.images, clients.subnetworks, PROJECT, REGION)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_resolved_nodeclass_is_ready(clients: GCPClients) -> None:
    status, failed = resolve(clients, node_class(networkConfig={"subnetwork": "default"}))

    assert not failed
    assert [image["sourceImage"] for image in status["images"]] == [
        f"{COS}-121-18867-199-38-c-pre",
        f"{COS}-arm64-121-18867-199-38-c-pre",
        f"{COS}-121-18867-199-38-c-nvda",
    ]
    assert status["subnetwork"] == SUBNETWORK
    assert conditions(status) == {
        "ImagesReady": ("True", "ImagesReady"),
        "SubnetworkReady": ("True", "SubnetworkReady"),
        "Ready": ("True", "Ready"),
    }
    assert {c["observedGeneration"] for c in status["conditions"]} == {2}


def test_ubuntu_resolves_both_architectures_and_not_a_deprecated_pin(clients: GCPClients) -> None:
    latest, _ = resolve(clients, node_class(imageSelectorTerms=[{"alias": "Ubuntu@latest"}]))
    assert [image["sourceImage"] for image in latest["images"]] == [
        f"{UBUNTU}-amd64-v20260416",
        f"{UBUNTU}-arm64-v20260416",
    ]
    old = [{"family": "Ubuntu2404", "version": "v20260301"}]
    pinned, failed = resolve(clients, node_class(imageSelectorTerms=old))
    assert not failed and pinned["images"] == []
    assert conditions(pinned)["ImagesReady"] == ("False", "ImagesNotFound")
    assert conditions(pinned)["Ready"] == ("False", "UnhealthyDependents")


def test_an_unset_subnetwork_is_the_clusters(clients: GCPClients) -> None:
    status, _ = resolve(clients, node_class())
    assert "subnetwork" not in status
    assert conditions(status)["SubnetworkReady"] == ("True", "SubnetworkReady")


@pytest.mark.parametrize(
    ("subnetwork", "reason"),
    [
        ("missing", "SubnetworkNotFound"),
        (f"projects/{PROJECT}/regions/europe-west1/subnetworks/default", "SubnetworkInvalid"),
        ("regions/x/default", "SubnetworkInvalid"),
    ],
)
def test_a_subnetwork_that_is_not_there_is_reported(
    clients: GCPClients, subnetwork: str, reason: str
) -> None:
    status, failed = resolve(clients, node_class(networkConfig={"subnetwork": subnetwork}))
    assert not failed
    assert conditions(status)["SubnetworkReady"] == ("False", reason)


def test_a_failed_image_listing_keeps_the_images_and_their_condition(
    fake: FakeGCE, clients: GCPClients
) -> None:
    ready, _ = resolve(clients, node_class())
    fake.faults.throttle(count=2, path="/global/images")  # not retried by the client
    try:
        kept, failed = resolve(clients, node_class(status=ready))
        unknown, _ = resolve(clients, node_class())
    finally:
        fake.faults.clear()
    assert failed
    assert kept["images"] == ready["images"]
    assert conditions(kept)["ImagesReady"] == ("True", "ImagesReady")
    assert conditions(unknown)["ImagesReady"] == ("Unknown", "ImagesResolutionFailed")


def test_one_call_resolves_as_the_resolver_does(clients: GCPClients) -> None:
    nc = node_class()
    once = resolve_status(
        nc,
        images_client=clients.images,
        subnetworks_client=clients.subnetworks,
        project=PROJECT,
        region=REGION,
        kubernetes_version=VERSION,
        now=NOW,
    )
    assert once == resolve(clients, nc)


def test_the_providers_controller_resolves_with_its_clients(clients: GCPClients) -> None:
    kube = FakeKube()
    try:
        provider = SimpleNamespace(clients=clients, settings=SimpleNamespace(region=REGION))
        context = ProviderContext(kube_client=kube.api_client(), clock=lambda: NOW)
        made = NodeClassController.for_provider(context, provider)
    finally:
        kube.stop()
    assert made.resolve(node_class(), VERSION, NOW) == resolve(clients, node_class())


def test_subnetwork_paths() -> None:
    assert subnetwork_path("nodes", PROJECT, REGION) == (PROJECT, REGION, "nodes")
    url = f"https://www.googleapis.com/compute/v1/{SUBNETWORK}"
    assert subnetwork_path(url, "other", "other") == (PROJECT, REGION, "default")
    assert subnetwork_path("subnetworks/nodes", PROJECT, REGION) is None


def test_a_sync_writes_status_hash_and_finalizer(
    clients: GCPClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = FakeKube()
    try:
        controller = NodeClassController(
            ProviderContext(kube_client=kube.api_client(), clock=lambda: NOW),
            resolver(clients),
        )
        monkeypatch.setattr(controller._cluster, "version_info", lambda: {"gitVersion": VERSION})
        collection = "/apis/karpenter.k8s.gcp/v1alpha1/gcenodeclasses"
        kube.put(
            collection,
            {
                "metadata": {"name": "default"},
                "spec": {"imageSelectorTerms": [{"alias": "Ubuntu@latest"}]},
            },
        )

        controller.sync()

        stored = GCENodeClass.from_manifest(kube.object(f"{collection}/default") or {})
    finally:
        kube.stop()
    assert stored.metadata.finalizers == ["karpenter.k8s.gcp/termination"]
    assert stored.metadata.annotations[HASH_ANNOTATION] == nodeclass_hash(stored.spec)
    assert stored.not_ready_reason() is None
    assert [image.source_image for image in stored.status.images] == [
        f"{UBUNTU}-amd64-v20260416",
        f"{UBUNTU}-arm64-v20260416",
    ]


def test_a_pinned_cos_build_may_be_deprecated_and_a_missing_id_is_not_found(
    clients: GCPClients,
) -> None:
    old = [{"alias": "ContainerOptimizedOS@121.18867.90.4"}]
    pinned, _ = resolve(clients, node_class(imageSelectorTerms=old))
    assert [image["sourceImage"] for image in pinned["images"]] == [
        f"{COS}-121-18867-90-4-c-pre",
        f"{COS}-arm64-121-18867-90-4-c-pre",
        f"{COS}-121-18867-90-4-c-nvda",
    ]
    gone = [{"id": "projects/gke-node-images/global/images/gone"}]
    missing, failed = resolve(clients, node_class(imageSelectorTerms=gone))
    assert not failed
    assert conditions(missing)["ImagesReady"] == ("False", "ImagesNotFound")
