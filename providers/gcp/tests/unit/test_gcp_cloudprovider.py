"""The GCP provider as the core uses it: what a GCENodeClass changes in its machine types, the
offline provider (``karpenter simulate``), and the record's controllers; then the live provider
against the profile's fake GCE server (slow): a stockout moves the next create to another zone,
a NodeClaim without a providerID is deleted by name, preemptions are watched in every zone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import google.auth
import pytest
from google.auth.exceptions import DefaultCredentialsError

from karpenter_conformance.fakekube import FakeKube
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import (
    CloudProviderError,
    InsufficientCapacity,
    NodeClaimNotFound,
)
from karpenter_gcp.cloudprovider import LOCAL_SSD_GIB, GCPCloudProvider, build_options
from karpenter_gcp.conformance import GCPProfile
from karpenter_gcp.nodeclass import GCENodeClass
from karpenter_gcp.plugin import karpenter_register_providers
from karpenter_gcp.settings import GCPSettings

[RECORD] = karpenter_register_providers()
REF = {"group": "karpenter.k8s.gcp", "kind": "GCENodeClass", "name": "default"}


def node_class(**spec: Any) -> GCENodeClass:
    return GCENodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {"imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}], **spec},
        }
    )


def nodepool(ref: dict[str, str] = REF) -> NodePool:
    return NodePool.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"nodeClassRef": ref, "requirements": []}}},
        }
    )


def nodeclaim(name: str, *requirements: dict[str, Any]) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "labels": {wk.NODEPOOL: "p"}},
            "spec": {
                "nodeClassRef": REF,
                "requirements": list(requirements),
                "resources": {"requests": {"cpu": "1"}},
            },
        }
    )


def offline(node_class: GCENodeClass | None = None, **settings: str) -> GCPCloudProvider:
    context = ProviderContext(
        settings=RECORD.settings(settings), node_classes=lambda kind, name: node_class
    )
    provider = RECORD.factory(context)
    assert isinstance(provider, GCPCloudProvider)
    return provider


# -- pure and offline -----------------------------------------------------------------------


def test_build_options_follow_the_kubelet_and_the_disks() -> None:
    settings = GCPSettings(region="us-central1", vm_memory_overhead_percent=0.05)
    options = build_options(
        settings,
        node_class(
            kubeletConfiguration={"maxPods": 64, "kubeReserved": {"memory": "1Gi", "cpu": "100m"}},
            disks=[
                {"boot": True, "sizeGiB": 200, "category": "pd-ssd"},
                {"category": "local-ssd"},
                {"category": "local-ssd"},
            ],
        ),
    )
    assert options.max_pods == 64
    assert options.kube_reserved == (("cpu", "100m"), ("memory", "1Gi"))
    assert options.boot_disk_gib == 200
    assert (options.local_ssd_count, options.local_ssd_gib) == (2, 2 * LOCAL_SSD_GIB)
    assert options.vm_memory_overhead_percent == 0.05
    assert build_options(settings, None) == build_options(settings, node_class())


def test_offline_provider_serves_the_packaged_catalog_and_launches_nothing() -> None:
    provider = offline(region="europe-west4")
    types = provider.get_instance_types(nodepool())
    assert types and all(o.zone.startswith("europe-west4-") for t in types for o in t.offerings)
    assert provider.get_instance_types(nodepool({**REF, "kind": "AKSNodeClass"})) == []
    with pytest.raises(CloudProviderError, match="offline"):
        provider.create(nodeclaim("a"))


def test_a_kubelet_max_pods_shapes_the_offline_catalog() -> None:
    provider = offline(node_class(kubeletConfiguration={"maxPods": 32}), region="us-central1")
    pods = {t.capacity["pods"] for t in provider.get_instance_types(nodepool())}
    assert pods == {32_000}


def controllers(settings: dict[str, str]) -> list[str]:
    context = ProviderContext(settings=RECORD.settings(settings), kube_client=FakeKube())
    assert RECORD.controllers is not None
    return [type(c).__name__ for c in RECORD.controllers(context, RECORD.factory(context))]


def test_preemption_handling_can_be_turned_off() -> None:
    settings = {"gcp_region": "us-central1", "gcp_api_endpoint": "http://127.0.0.1:9"}
    assert controllers({**settings, "gcp_interruption": "false"}) == ["NodeClassController"]


def test_no_google_credentials_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_credentials(**_: Any) -> Any:
        raise DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    settings = {"gcp_region": "us-central1", "gcp_project_id": "my-project"}
    context = ProviderContext(settings=RECORD.settings(settings), kube_client=FakeKube())
    with pytest.raises(CloudProviderError, match=r"^the gcp provider found no Google credentials"):
        RECORD.factory(context)


# -- live, against the fake GCE server --------------------------------------------------------


def profile_settings(profile: GCPProfile) -> dict[str, str]:
    return {k.replace("-", "_"): v for k, v in profile.settings().items()}


@pytest.fixture
def live() -> Iterator[tuple[GCPProfile, GCPCloudProvider]]:
    profile = GCPProfile()
    profile.start()
    try:
        ready = GCENodeClass.model_validate(profile.node_class())
        context = ProviderContext(
            settings=RECORD.settings(profile_settings(profile)),
            kube_client=FakeKube(),
            node_classes=lambda kind, name: ready,
        )
        provider = RECORD.factory(context)
        assert isinstance(provider, GCPCloudProvider)
        yield profile, provider
    finally:
        profile.stop()


@pytest.mark.slow
def test_a_stockout_moves_the_next_create_to_another_zone(
    live: tuple[GCPProfile, GCPCloudProvider],
) -> None:
    profile, provider = live
    on_demand = {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
    n2 = {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["n2-standard-2"]}  # 4 zones
    first = provider.create(nodeclaim("first", on_demand, n2))
    zone = first.metadata.labels[wk.TOPOLOGY_ZONE]
    profile.insufficient_capacity("n2-standard-2", zone, "on-demand")
    with pytest.raises(InsufficientCapacity, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
        provider.create(nodeclaim("second", on_demand, n2))
    moved = provider.create(nodeclaim("second", on_demand, n2))
    assert moved.metadata.labels[wk.INSTANCE_TYPE] == "n2-standard-2"
    assert moved.metadata.labels[wk.TOPOLOGY_ZONE] != zone


@pytest.mark.slow
def test_the_preemption_controller_watches_the_regions_zones(
    live: tuple[GCPProfile, GCPCloudProvider],
) -> None:
    profile, provider = live
    assert controllers(profile_settings(profile)) == ["NodeClassController", "PreemptionController"]
    assert provider.zones == [f"us-central1-{z}" for z in "abcf"]


@pytest.mark.slow
def test_a_nodeclaim_without_a_provider_id_is_deleted_by_name(
    live: tuple[GCPProfile, GCPCloudProvider],
) -> None:
    _, provider = live
    created = provider.create(nodeclaim("nameless"))
    provider.delete(nodeclaim("nameless"))
    with pytest.raises(NodeClaimNotFound):
        provider.get(created.status.provider_id or "")
    with pytest.raises(NodeClaimNotFound):
        provider.delete(nodeclaim("nameless"))
