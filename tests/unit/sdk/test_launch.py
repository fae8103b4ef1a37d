"""The SDK's launch choices: the cheapest offering a NodeClaim allows, and the labels a kubelet
may register its node with."""

from __future__ import annotations

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.common import Taint
from karpenter_core.sdk.launch import (
    cheapest_offering,
    kubelet_labels,
    registration_taint,
    with_registration_taint,
)
from karpenter_core.sdk.types import InstanceType, Offering

ANY = Requirements.from_node_selector(
    [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}]
)


def offering(zone: str, capacity_type: str, price: float, available: bool = True) -> Offering:
    labels = {wk.TOPOLOGY_ZONE: zone, wk.CAPACITY_TYPE: capacity_type}
    return Offering(Requirements.from_labels(labels), price, available=available)


def instance_type(name: str, offerings: list[Offering], cpu: int = 2) -> InstanceType:
    return InstanceType(
        name,
        Requirements.from_labels({wk.INSTANCE_TYPE: name}),
        offerings,
        {"cpu": cpu * 1000, "pods": 110_000},
    )


def test_the_cheapest_available_offering_that_fits_wins() -> None:
    small = instance_type("small", [offering("a", "on-demand", 1.0), offering("b", "spot", 0.3)])
    big = instance_type("big", [offering("a", "spot", 0.2, available=False)], cpu=8)
    chosen = cheapest_offering([big, small], ANY, {})
    assert chosen is not None and (chosen[0].name, chosen[1].zone) == ("small", "b")
    assert cheapest_offering([big, small], ANY, {"cpu": 4000}) is None


def test_at_one_price_spot_then_offerings_not_deferred_come_first() -> None:
    offerings = [
        offering("r", "spot", 0.5),
        offering("z", "spot", 0.5),
        offering("a", "on-demand", 0.5),
    ]
    chosen = cheapest_offering([instance_type("t", offerings)], ANY, {})
    assert chosen is not None and chosen[1].zone == "r"
    chosen = cheapest_offering(
        [instance_type("t", offerings)], ANY, {}, deferred=lambda o: o.zone == "r"
    )
    assert chosen is not None and chosen[1].zone == "z"


def test_node_admission_refuses_restricted_labels() -> None:
    assert kubelet_labels(
        {
            "node-role.kubernetes.io/worker": "",
            "example.k8s.io/x": "y",
            "topology.kubernetes.io/zone": "eastus-1",
            "team": "infra",
        }
    ) == {"topology.kubernetes.io/zone": "eastus-1", "team": "infra"}


def test_the_registration_taint_is_added_once() -> None:
    gpu = Taint(key="gpu", value="true", effect="NoSchedule")
    assert with_registration_taint([gpu]) == [gpu, registration_taint()]
    assert with_registration_taint([registration_taint(), gpu]) == [registration_taint(), gpu]
