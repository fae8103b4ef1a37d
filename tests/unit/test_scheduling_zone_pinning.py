"""Zonal anti-affinity decided in one scheduling pass, where upstream needs one pass per pod.

Upstream Karpenter leaves a NodeClaim's zone open until launch, so in
``topology_test.go`` "should support pod anti-affinity with a zone topology" it places one of
three mutually exclusive pods per provisioning round, and in "should not violate pod
anti-affinity on zone (Schrödinger)" the second pod waits a round: until the first node exists,
nobody knows its zone. Here a NodeClaim that topology constrains is pinned to one zone when the
pod joins it, and the NodeClaim created for it carries that single zone as a requirement, so the
zone is known before launch and the remaining pods can be placed at once. These tests check the
placements in one pass and the premise upstream waits for: the zone a NodeClaim will launch in is
fixed by what is written to the API, and a later pass sees the same zones taken.
"""

from __future__ import annotations

from typing import Any

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.controllers.nodeclaims import nodeclaim_manifest
from karpenter_core.scheduling.scheduler import NewNodeClaim
from tests.unit.scheduling_fixtures import ZONE, ZONES, affinity, make_pod, make_pods, run, term

S2 = {"security": "s2"}
ANTI_S2 = affinity(required=[term(ZONE, S2)])


def written_zones(claim: NewNodeClaim) -> list[str]:
    """The zones the NodeClaim created for ``claim`` allows, as written to the API."""
    nodepool = {"metadata": {"name": claim.nodepool, "uid": "u"}, "spec": {"template": {}}}
    manifest = nodeclaim_manifest(claim, nodepool, claim.instance_types)
    [zone] = [r for r in manifest["spec"]["requirements"] if r["key"] == ZONE]
    assert zone["operator"] == "In"
    return list(zone["values"])


def as_launched(claim: NewNodeClaim, index: int) -> NodeClaim:
    """The NodeClaim created for ``claim``, launched but with no Node yet."""
    nodepool = {"metadata": {"name": claim.nodepool, "uid": "u"}, "spec": {"template": {}}}
    manifest: dict[str, Any] = nodeclaim_manifest(claim, nodepool, claim.instance_types)
    manifest["metadata"]["name"] = f"{claim.nodepool}-{index}"
    allocatable = {"cpu": "1900m", "memory": "3Gi", "pods": "110"}
    manifest["status"] = {"providerID": f"example://{index}", "allocatable": allocatable}
    return NodeClaim.from_manifest(manifest)


def test_three_mutually_exclusive_pods_take_the_three_zones_in_one_pass():
    # upstream: "should support pod anti-affinity with a zone topology" reaches skew (1, 1, 1)
    # after three rounds, and a fourth pod never schedules.
    pods = make_pods("s2", 4, labels=S2, pod_anti_affinity=ANTI_S2)
    out = run(pods)
    assert len(out.claims) == 3
    zones = [written_zones(claim) for claim in out.claims]
    assert sorted(z for [z] in zones) == sorted(ZONES)
    for claim, [zone] in zip(out.claims, zones, strict=True):
        # every launch option has an offering in the pinned zone, so the launch can honour it
        assert all(any(o.zone == zone for o in it.offerings) for it in claim.instance_types)
    [pending] = out.unschedulable
    assert "anti-affinity" in out.unschedulable[pending]


def test_a_later_pass_sees_the_zones_the_first_pass_pinned():
    # The premise upstream waits a round for: once the NodeClaims are created (launched, no Node
    # yet), the next pass places three of the pods on them, one per zone, and the fourth
    # mutually exclusive pod still finds no zone.
    pods = make_pods("s2", 3, labels=S2, pod_anti_affinity=ANTI_S2)
    first = run(pods)
    launched = [as_launched(claim, i) for i, claim in enumerate(first.claims)]
    late = make_pod("late", labels=S2, pod_anti_affinity=ANTI_S2)
    second = run([*pods, late], nodeclaims=launched)
    assert not second.claims
    assert sorted(second.results.existing) == [f"default-{i}" for i in range(3)]
    assert all(len(placed) == 1 for placed in second.results.existing.values())
    [(_, reason)] = second.unschedulable.items()
    assert "anti-affinity" in reason


def test_schrodinger_pods_are_both_placed_in_different_pinned_zones():
    # upstream: "should not violate pod anti-affinity on zone (Schrödinger)": the pod avoiding s2
    # is placed first; upstream leaves the s2 pod for the next round, here it goes to another
    # zone at once.
    avoider = make_pod("avoider", cpu="1", pod_anti_affinity=ANTI_S2)
    target = make_pod("target", labels=S2)
    out = run([avoider, target])
    assert not out.unschedulable
    avoider_claim, target_claim = out.claim_of("avoider"), out.claim_of("target")
    assert avoider_claim is not None and target_claim is not None
    assert avoider_claim is not target_claim
    [avoider_zone], [target_zone] = written_zones(avoider_claim), written_zones(target_claim)
    assert avoider_zone != target_zone
