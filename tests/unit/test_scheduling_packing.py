"""Which NodeClaims open and which open NodeClaim a pod joins, on upstream's fake catalog.

Cases from upstream Karpenter's ``pkg/controllers/provisioning/scheduling/suite_test.go``
("Binpacking > ...") and ``pkg/controllers/provisioning/suite_test.go`` ("Provisioning >
Preferential Fallback > Ignore Preferences > ..."). In that catalog a 2 CPU / 2Gi type costs
exactly half a 4 CPU / 4Gi one, so plans of equal cost are common.
"""

from __future__ import annotations

from collections import Counter

from karpenter_core.scheduling.snapshot import PodInfo
from tests.unit.scheduling_fixtures import (
    ZONE,
    instance_type,
    make_pod,
    make_pods,
    pod_manifest,
    run,
)
from tests.unit.upstream_fake_catalog import default_catalog

CATALOG = default_catalog()
AMD64 = {"kubernetes.io/arch": "amd64"}


def memory_pods(prefix: str, count: int, memory: str) -> list[PodInfo]:
    """amd64 pods that request memory only (upstream's ``test.Pods`` with a memory request)."""
    pods = []
    for i in range(count):
        manifest = pod_manifest(f"{prefix}-{i}", memory=memory, node_selector=AMD64)
        del manifest["spec"]["containers"][0]["resources"]["requests"]["cpu"]
        pods.append(PodInfo.from_manifest(manifest))
    return pods


def test_equal_cost_plans_open_the_larger_node():
    # upstream: "Binpacking > should create new nodes when a node is at capacity": 40 pods of
    # 1.8G fit two to a 4Gi type and one to a 2Gi type at half the price; upstream opens 20 of
    # the larger.
    out = run(memory_pods("p", 40, "1.8G"), catalog=CATALOG)
    assert not out.unschedulable
    assert Counter(c.instance_type.name for c in out.claims) == {"default-instance-type": 20}


def test_small_pods_fill_the_gaps_of_large_ones():
    # upstream: "Binpacking > should pack small and large pods together": the 20 small pods of
    # 400M fill the room each pair of large pods leaves.
    pods = memory_pods("large", 40, "1.8G") + memory_pods("small", 20, "400M")
    out = run(pods, catalog=CATALOG)
    assert not out.unschedulable
    assert Counter(c.instance_type.name for c in out.claims) == {"default-instance-type": 20}


def test_a_pod_joins_an_open_nodeclaim_with_room_before_one_that_must_grow():
    # upstream: "Preferential Fallback > Ignore Preferences > should ignore node affinity
    # preferences": two 3 CPU pods in test-zone-2 and a 2 CPU pod in test-zone-1 each open a
    # 4 CPU NodeClaim; the 1 CPU pod joins the zone-1 one, which has room, rather than growing
    # the first zone-2 one into the 16 CPU type.
    zone1 = make_pod("zone1", cpu="2", memory="1Mi", node_selector={ZONE: "test-zone-1"})
    zone2 = make_pods("zone2", 2, cpu="3", memory="1Mi", node_selector={ZONE: "test-zone-2"})
    preferring = make_pod(
        "preferring",
        cpu="1",
        memory="1Mi",
        node_preferences=[(1, [{"key": ZONE, "operator": "In", "values": ["test-zone-2"]}])],
    )
    out = run([zone1, *zone2, preferring], catalog=CATALOG, ignore_preferences=True)
    assert not out.unschedulable
    assert out.where("preferring") == out.where("zone1")
    assert {c.instance_type.name for c in out.claims} == {"default-instance-type"}
    assert round(out.results.cost_per_hour, 4) == round(3 * CATALOG[0].offerings[0].price, 4)


def test_when_every_open_nodeclaim_must_grow_the_cheapest_growth_wins():
    # Two open NodeClaims: a 3.5 CPU pod on the 4 CPU type and a 1.5 CPU pod on the 2 CPU type.
    # A 0.45 CPU pod fits neither's current type; growing the second to the 4 CPU type costs
    # 0.41/h more, growing the first needs the 16 CPU type (14.5/h more).
    big = make_pod("big", cpu="3500m", memory="1Mi")
    small = make_pod("small", cpu="1500m", memory="1Mi", node_selector=AMD64)
    extra = make_pod("extra", cpu="450m", memory="1Mi")
    out = run([big, small, extra], catalog=CATALOG)
    assert not out.unschedulable
    assert out.where("extra") == out.where("small")
    assert Counter(c.instance_type.name for c in out.claims) == {"default-instance-type": 2}


def test_a_nodeclaim_out_of_pod_slots_on_its_cheapest_type_must_grow():
    # The 2 CPU type takes two pods, the 4 CPU type four. NodeClaim A (zone-a) holds two pods on
    # the 2 CPU type with CPU to spare but no pod slot; B (zone-b) one pod with a slot left. The
    # last pod joins B rather than growing A to the 4 CPU type.
    catalog = [
        instance_type("two-slots", 2, 4, 0.10, pods=2),
        instance_type("four-slots", 4, 8, 0.20, pods=4),
    ]
    a1 = make_pod("a1", cpu="1200m", node_selector={ZONE: "zone-a"})
    b1 = make_pod("b1", cpu="1", node_selector={ZONE: "zone-b"})
    a2 = make_pod("a2", cpu="500m", node_selector={ZONE: "zone-a"})
    last = make_pod("last", cpu="100m")
    out = run([a1, b1, a2, last], catalog=catalog)
    assert not out.unschedulable
    assert out.where("a1") == out.where("a2") != out.where("b1")
    assert out.where("last") == out.where("b1")
    assert Counter(c.instance_type.name for c in out.claims) == {"two-slots": 2}
