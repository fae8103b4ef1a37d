"""The Azure provider: which offering a launch takes, what Azure's capacity and quota errors keep
out and for how long, zones, tags and providerIDs; then the provider against the fake ARM server:
fallback to another zone or size after Azure's allocation errors, image drift and its
replacement, get, list and delete."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from karpenter_azure.cloudprovider import arm_zone, choose_offering, launch_tags
from karpenter_azure.conformance import AzureProfile
from karpenter_azure.fake_arm import FakeARM, Latency, seed
from karpenter_azure.instances import ArmError, provider_id, vm_name_of
from karpenter_azure.nodeclass import AKSNodeClass
from karpenter_azure.plugin import karpenter_register_providers
from karpenter_azure.unavailable import UnavailableOfferings, capacity_error
from karpenter_conformance.fakekube import FakeKube
from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import (
    InstanceType,
    InsufficientCapacity,
    NodeClaimNotFound,
    Offering,
)

ZONES = ("eastus-1", "eastus-2", "eastus-3")


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def offering(zone: str, capacity_type: str, price: float, available: bool = True) -> Offering:
    return Offering(
        Requirements.from_labels({wk.TOPOLOGY_ZONE: zone, wk.CAPACITY_TYPE: capacity_type}),
        price,
        available=available,
    )


def instance_type(name: str, offerings: list[Offering], cpu: int = 2) -> InstanceType:
    return InstanceType(
        name,
        Requirements.from_labels({wk.INSTANCE_TYPE: name, wk.ARCH: "amd64", wk.OS: "linux"}),
        offerings,
        {"cpu": cpu * 1000, "memory": 8 * 2**30 * 1000, "pods": 250_000},
    )


def sized(name: str, on_demand: float, spot: float, zones: tuple[str, ...] = ZONES) -> InstanceType:
    return instance_type(
        name,
        [offering(z, "on-demand", on_demand) for z in zones]
        + [offering(z, "spot", spot) for z in zones],
    )


CAPACITY_SPOT_OR_ON_DEMAND = Requirements.from_node_selector(
    [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}]
)
ON_DEMAND = Requirements.from_node_selector(
    [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]
)


# -- choosing -------------------------------------------------------------------------------


def test_the_cheapest_offering_wins() -> None:
    types = [sized("Standard_D4s_v5", 0.192, 0.04), sized("Standard_D2s_v5", 0.096, 0.02)]
    chosen = choose_offering(types, CAPACITY_SPOT_OR_ON_DEMAND, {})
    assert chosen is not None
    assert (chosen[0].name, chosen[1].capacity_type, chosen[1].zone) == (
        "Standard_D2s_v5",
        "spot",
        "eastus-1",
    )


def test_requirements_and_requests_narrow_the_choice() -> None:
    types = [sized("Standard_D2s_v5", 0.096, 0.02), sized("Standard_D8s_v5", 0.384, 0.08)]
    types[1] = instance_type("Standard_D8s_v5", list(types[1].offerings), cpu=8)
    chosen = choose_offering(types, ON_DEMAND, {"cpu": 4000})
    assert chosen is not None
    assert (chosen[0].name, chosen[1].capacity_type) == ("Standard_D8s_v5", "on-demand")
    assert choose_offering(types, ON_DEMAND, {"cpu": 16000}) is None


def test_at_one_price_spot_comes_before_on_demand() -> None:
    types = [sized("Standard_D2s_v5", 0.05, 0.05)]
    chosen = choose_offering(types, CAPACITY_SPOT_OR_ON_DEMAND, {})
    assert chosen is not None and chosen[1].capacity_type == "spot"


def test_at_one_price_a_zone_comes_before_a_regional_placement() -> None:
    regional = offering("0", "on-demand", 0.096)
    zonal = offering("eastus-3", "on-demand", 0.096)
    chosen = choose_offering([instance_type("Standard_D2s_v5", [regional, zonal])], ON_DEMAND, {})
    assert chosen is not None and chosen[1] is zonal


def test_unavailable_offerings_are_skipped() -> None:
    types = [
        instance_type(
            "Standard_D2s_v5",
            [
                offering("eastus-1", "on-demand", 0.09, available=False),
                offering("eastus-2", "on-demand", 0.1),
            ],
        )
    ]
    chosen = choose_offering(types, ON_DEMAND, {})
    assert chosen is not None and chosen[1].zone == "eastus-2"


# -- Azure's errors -------------------------------------------------------------------------


def marks(unavailable: UnavailableOfferings) -> set[tuple[str, str, str]]:
    by_type = unavailable.snapshot()
    return {(ct, name, zone) for name, pairs in by_type.items() for ct, zone in pairs}


def test_a_zonal_allocation_failure_keeps_that_zone_out_for_an_hour() -> None:
    clock = Clock()
    unavailable = UnavailableOfferings(clock)
    d2 = sized("Standard_D2s_v5", 0.096, 0.02)
    error = capacity_error(
        unavailable, ArmError(200, "ZonalAllocationFailed", "no capacity"), d2, "eastus-2", "spot"
    )
    assert isinstance(error, InsufficientCapacity)
    assert marks(unavailable) == {
        ("spot", "Standard_D2s_v5", "eastus-2"),
        ("on-demand", "Standard_D2s_v5", "eastus-2"),
    }
    clock.now += timedelta(minutes=59)
    assert unavailable.is_unavailable("spot", "Standard_D2s_v5", "eastus-2")
    clock.now += timedelta(minutes=2)
    assert not unavailable.is_unavailable("spot", "Standard_D2s_v5", "eastus-2")
    assert marks(unavailable) == set()


def test_an_allocation_failure_keeps_every_zone_of_the_size_out() -> None:
    unavailable = UnavailableOfferings(Clock())
    d2 = sized("Standard_D2s_v5", 0.096, 0.02)
    capacity_error(
        unavailable, ArmError(200, "AllocationFailed", "no"), d2, "eastus-1", "on-demand"
    )
    assert marks(unavailable) == {
        (ct, "Standard_D2s_v5", z) for ct in ("spot", "on-demand") for z in ZONES
    }


@pytest.mark.parametrize(
    ("capacity_type", "ttl"), [("spot", timedelta(hours=1)), ("on-demand", timedelta(hours=23))]
)
def test_sku_not_available_keeps_the_capacity_type_out(capacity_type: str, ttl: timedelta) -> None:
    clock = Clock()
    unavailable = UnavailableOfferings(clock)
    d2 = sized("Standard_D2s_v5", 0.096, 0.02)
    capacity_error(
        unavailable, ArmError(409, "SkuNotAvailable", "no"), d2, "eastus-1", capacity_type
    )
    assert marks(unavailable) == {(capacity_type, "Standard_D2s_v5", z) for z in ZONES}
    clock.now += ttl - timedelta(seconds=1)
    assert unavailable.is_unavailable(capacity_type, "Standard_D2s_v5", "eastus-3")
    clock.now += timedelta(seconds=2)
    assert not unavailable.is_unavailable(capacity_type, "Standard_D2s_v5", "eastus-3")


def test_the_spot_quota_keeps_every_spot_offering_out() -> None:
    unavailable = UnavailableOfferings(Clock())
    d2 = sized("Standard_D2s_v5", 0.096, 0.02)
    message = "Operation could not be completed as it results in exceeding approved LowPriorityCores quota."
    error = capacity_error(
        unavailable, ArmError(409, "OperationNotAllowed", message), d2, "eastus-1", "spot"
    )
    assert isinstance(error, InsufficientCapacity)
    assert unavailable.is_unavailable("spot", "Standard_E64s_v5", "westus2-1")
    assert not unavailable.is_unavailable("on-demand", "Standard_D2s_v5", "eastus-1")


@pytest.mark.parametrize(
    ("message", "ttl"),
    [
        ("exceeding approved standardDSv5Family Family Cores quota. Current Limit: 10", 10),
        ("exceeding approved standardDSv5Family Family Cores quota. Current Limit: 0", 60),
    ],
)
def test_a_family_quota_keeps_the_size_out_for_its_ttl(message: str, ttl: int) -> None:
    clock = Clock()
    unavailable = UnavailableOfferings(clock)
    d2 = sized("Standard_D2s_v5", 0.096, 0.02)
    capacity_error(
        unavailable, ArmError(409, "OperationNotAllowed", message), d2, "eastus-1", "on-demand"
    )
    assert marks(unavailable) == {("on-demand", "Standard_D2s_v5", z) for z in ZONES}
    clock.now += timedelta(minutes=ttl) - timedelta(seconds=1)
    assert marks(unavailable)
    clock.now += timedelta(seconds=2)
    assert not marks(unavailable)


def test_the_regional_quota_is_insufficient_capacity_without_marks() -> None:
    unavailable = UnavailableOfferings(Clock())
    message = "Operation results in exceeding approved Total Regional Cores quota."
    error = capacity_error(
        unavailable,
        ArmError(409, "OperationNotAllowed", message),
        sized("Standard_D2s_v5", 0.096, 0.02),
        "eastus-1",
        "on-demand",
    )
    assert isinstance(error, InsufficientCapacity)
    assert marks(unavailable) == set()


def test_other_errors_are_not_capacity_errors() -> None:
    unavailable = UnavailableOfferings(Clock())
    error = capacity_error(
        unavailable,
        ArmError(400, "InvalidParameter", "bad image"),
        sized("Standard_D2s_v5", 0.096, 0.02),
        "eastus-1",
        "on-demand",
    )
    assert error is None
    assert unavailable.seq == 0


def test_a_longer_mark_is_not_shortened() -> None:
    clock = Clock()
    unavailable = UnavailableOfferings(clock)
    unavailable.mark("spot", "Standard_D2s_v5", "eastus-1", "test", timedelta(hours=1))
    unavailable.mark("spot", "Standard_D2s_v5", "eastus-1", "test", timedelta(minutes=3))
    clock.now += timedelta(minutes=30)
    assert unavailable.is_unavailable("spot", "Standard_D2s_v5", "eastus-1")


# -- names ----------------------------------------------------------------------------------


def test_provider_ids_are_cloud_provider_azures() -> None:
    pid = provider_id("sub-1", "MC_rg_Cluster_eastus", "aks-default-abcde")
    assert pid == (
        "azure:///subscriptions/sub-1/resourceGroups/mc_rg_cluster_eastus/providers/"
        "Microsoft.Compute/virtualMachines/aks-default-abcde"
    )
    assert vm_name_of(pid) == "aks-default-abcde"
    with pytest.raises(NodeClaimNotFound, match="not an Azure VM's providerID"):
        vm_name_of("aws:///us-east-1a/i-0abc")


def test_zone_labels_map_to_arm_zones() -> None:
    assert arm_zone("eastus", "eastus-2") == "2"
    assert arm_zone("eastus", "0") == ""
    assert arm_zone("westcentralus", "westcentralus-1") == "1"


def test_launch_tags_use_underscores_and_karpenters_win() -> None:
    node_class = AKSNodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {"tags": {"team/owner": "infra", "karpenter.azure.com/cluster": "other"}},
        }
    )
    tags = launch_tags("prod", node_class, "general")
    assert tags == {
        "team_owner": "infra",
        "karpenter.azure.com_cluster": "prod",
        "compute.aks.billing": "linux",
        "karpenter.azure.com_aksnodeclass": "default",
        "karpenter.sh_nodepool": "general",
    }


# -- the provider against the fake ARM server -------------------------------------------------


@pytest.fixture(scope="module")
def profile() -> Iterator[AzureProfile]:
    profile = AzureProfile()
    profile.start()
    yield profile
    profile.stop()


@pytest.fixture
def fake(profile: AzureProfile) -> FakeARM:
    profile.reset()
    profile._server.set_latency(Latency.none())
    return profile._server


class NodeClasses:
    """The provider's read view of AKSNodeClasses."""

    def __init__(self, *manifests: dict[str, Any]) -> None:
        self.by_name = {m["metadata"]["name"]: AKSNodeClass.model_validate(m) for m in manifests}

    def __call__(self, kind: str, name: str) -> AKSNodeClass | None:
        return self.by_name.get(name) if kind == "AKSNodeClass" else None


def provider_for(profile: AzureProfile, node_classes: NodeClasses) -> Any:
    [record] = karpenter_register_providers()
    context = ProviderContext(
        settings=record.settings({k.replace("-", "_"): v for k, v in profile.settings().items()}),
        clients={"credential": profile._server.credential()},
        node_classes=node_classes,
    )
    return record.factory(context)


def claim(name: str, *requirements: dict[str, Any]) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "labels": {wk.NODEPOOL: "general"}},
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.azure.com",
                    "kind": "AKSNodeClass",
                    "name": "default",
                },
                "requirements": list(requirements),
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
            },
        }
    )


def nodepool() -> NodePool:
    return NodePool.model_validate(
        {
            "metadata": {"name": "general"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": {
                            "group": "karpenter.azure.com",
                            "kind": "AKSNodeClass",
                            "name": "default",
                        },
                        "requirements": [],
                    }
                }
            },
        }
    )


def only(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


@pytest.mark.slow
def test_a_zonal_allocation_failure_moves_the_next_create_to_another_zone(
    profile: AzureProfile, fake: FakeARM
) -> None:
    provider = provider_for(profile, NodeClasses(profile.node_class()))
    on_demand = only(wk.CAPACITY_TYPE, "on-demand")
    first = provider.create(claim("probe", on_demand))
    size = first.metadata.labels[wk.INSTANCE_TYPE]
    zone = first.metadata.labels[wk.TOPOLOGY_ZONE]
    fake.fail_creates("ZonalAllocationFailed", sku=size, zone=zone)
    pinned = (on_demand, only(wk.INSTANCE_TYPE, size))
    with pytest.raises(InsufficientCapacity, match=f"in zone {zone}"):
        provider.create(claim("refused", *pinned))
    assert {vm["name"] for vm in fake.vms()} == {"aks-probe"}  # the failed VM was cleaned up
    assert [n["name"] for n in fake.nics()] == ["aks-probe"]
    moved = provider.create(claim("moved", *pinned))
    assert moved.metadata.labels[wk.INSTANCE_TYPE] == size
    assert moved.metadata.labels[wk.TOPOLOGY_ZONE] != zone
    [offering] = [
        o
        for t in provider.get_instance_types(nodepool())
        if t.name == size
        for o in t.offerings
        if o.zone == zone and o.capacity_type == "on-demand"
    ]
    assert not offering.available


@pytest.mark.slow
def test_an_allocation_failure_moves_the_next_create_to_another_size(
    profile: AzureProfile, fake: FakeARM
) -> None:
    provider = provider_for(profile, NodeClasses(profile.node_class()))
    # zonal placements only: a failure keeps out every zone of the size's placement scope
    spot = (only(wk.CAPACITY_TYPE, "spot"), only(wk.TOPOLOGY_ZONE, *ZONES))
    first = provider.create(claim("probe", *spot))
    size = first.metadata.labels[wk.INSTANCE_TYPE]
    fake.fail_creates("AllocationFailed", sku=size)
    with pytest.raises(InsufficientCapacity, match=size):
        provider.create(claim("refused", *spot))
    moved = provider.create(claim("moved", *spot))
    assert moved.metadata.labels[wk.INSTANCE_TYPE] != size
    assert moved.metadata.labels[wk.CAPACITY_TYPE] == "spot"


@pytest.mark.slow
def test_a_new_node_image_drifts_the_node_and_its_replacement_boots_it(
    profile: AzureProfile, fake: FakeARM
) -> None:
    node_class = profile.node_class()
    provider = provider_for(profile, NodeClasses(node_class))
    launched = provider.create(claim("old-image"))
    old_image = launched.status.image_id
    assert old_image and provider.is_drifted(launched) == ""

    definition = old_image.split("/images/")[1].split("/")[0]
    fake.publish_image(seed.AKS_UBUNTU_COMMUNITY_GALLERY, definition, "202507.01.0")
    provider = provider_for(profile, NodeClasses(profile.node_class()))  # resolved again
    assert provider.is_drifted(launched) == "ImageDrift"

    replacement = provider.create(claim("new-image"))
    assert replacement.status.image_id == old_image.replace("202506.10.0", "202507.01.0")
    assert provider.is_drifted(replacement) == ""


@pytest.mark.slow
def test_get_list_and_delete_through_the_provider(profile: AzureProfile, fake: FakeARM) -> None:
    provider = provider_for(profile, NodeClasses(profile.node_class()))
    launched = provider.create(claim("general-abcde"))
    again = provider.create(claim("general-abcde"))
    assert again.status.provider_id == launched.status.provider_id
    assert len(fake.vms()) == 1
    [listed] = provider.list()
    assert listed.metadata.name == "general-abcde"
    assert listed.metadata.labels[wk.NODEPOOL] == "general"
    assert (
        provider.get(launched.status.provider_id).status.provider_id == launched.status.provider_id
    )
    with pytest.raises(NodeClaimNotFound):
        for _ in range(40):
            provider.delete(launched)
            time.sleep(0.05)
    assert provider.list() == [] and fake.nics() == []


# -- drift that needs the Node ------------------------------------------------------------------


def test_k8s_version_drift_reads_the_node_once_a_minute() -> None:
    kube = FakeKube()
    try:
        kube.put(
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "aks-general-abcde"},
                "status": {"nodeInfo": {"kubeletVersion": "v1.32.6"}},
            },
        )
        current = {
            "type": "KubernetesVersionReady",
            "status": "True",
            "reason": "Ready",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        node_class = {
            "metadata": {"name": "default"},
            "spec": {},
            "status": {"kubernetesVersion": "1.33.2", "conditions": [current]},
        }
        clock = Clock()
        [record] = karpenter_register_providers()
        provider = record.factory(
            ProviderContext(
                settings=record.settings({"region": "eastus"}),
                kube_client=kube.api_client(),
                clock=clock,
                node_classes=NodeClasses(node_class),
            )
        )
        launched = claim("general-abcde")
        launched.status.node_name = "aks-general-abcde"
        assert provider.is_drifted(launched) == "K8sVersionDrift"
        reads = [r for r in kube.requests if r[1].startswith("/api/v1/nodes/")]
        assert provider.is_drifted(launched) == "K8sVersionDrift"
        assert [r for r in kube.requests if r[1].startswith("/api/v1/nodes/")] == reads
        kube.put(
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "aks-general-abcde"},
                "status": {"nodeInfo": {"kubeletVersion": "v1.33.2"}},
            },
        )
        clock.now += timedelta(minutes=1, seconds=1)
        assert provider.is_drifted(launched) == ""
    finally:
        kube.stop()
