"""Disruption decisions in simulation: the cases upstream's disruption suites cover (emptiness,
consolidation, drift, expiration, budgets, blocks), as facts about ``plan``.

Scenarios use the small explicit catalog of ``disruption_fixtures`` (exact prices) unless they
need another one; ``decide`` runs one pass (``rounds=1``) at ``NOW`` unless told otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from karpenter_core.controllers.nodepool import HASH_VERSION, nodepool_hash
from karpenter_core.disruption.candidates import candidates
from karpenter_core.disruption.planner import WANTED, Options, next_command, plan
from karpenter_core.scheduling.snapshot import NodeInfo
from tests.unit.disruption_fixtures import (
    CAPACITY_TYPE,
    DAY_OLD,
    DO_NOT_DISRUPT,
    NOW,
    ZONE,
    daemon_pod,
    decide,
    mirror_pod,
    node,
    pdb,
    pod,
    pods,
    pool,
    snapshot,
    summary,
)
from tests.unit.scheduling_fixtures import INSTANCE_TYPE, instance_type, make_pod

ON_DEMAND_ONLY = {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}


def empty_nodes(count: int, prefix: str = "empty") -> list[NodeInfo]:
    return [node(f"{prefix}-{i:02d}") for i in range(count)]


def full_node(name: str, **kwargs: Any) -> NodeInfo:
    """A spot c-2 whose pods leave it no room (1.8 of 1.9 CPU): nothing cheaper holds them and,
    without the spot-to-spot gate, consolidation leaves it alone."""
    kwargs.setdefault("capacity_type", "spot")
    return node(name, "c-2", pods=pods(f"{name}-app", name, 2, cpu="900m"), **kwargs)


# --- emptiness -----------------------------------------------------------------------------------


def test_empty_nodes_are_removed_together_within_the_budget():
    # Upstream Emptiness: every budget-permitted empty consolidatable node in one command.
    nodes = [*empty_nodes(3), full_node("busy")]
    result = decide(nodes, [pool(budgets=[{"nodes": "2"}])])
    assert summary(result) == [("empty", ["empty-00", "empty-01"], [])]
    assert result.commands[0].savings_per_hour == pytest.approx(0.40)


def test_emptiness_removes_every_empty_node_over_successive_passes():
    # Upstream: each pass recomputes the budget on the nodes left; all empty nodes go eventually.
    nodes = [*empty_nodes(4), full_node("busy")]
    result = decide(nodes, [pool(budgets=[{"nodes": "2"}])], rounds=50)
    assert [c.reason for c in result.commands] == ["empty", "empty"]
    removed = sorted(n.name for c in result.commands for n in c.candidates)
    assert removed == [f"empty-{i:02d}" for i in range(4)]


def test_daemonset_and_mirror_pods_do_not_make_a_node_non_empty():
    # Upstream: a node is empty when it has no reschedulable pods (DaemonSet and mirror pods
    # are not rescheduled), so emptiness removes it.
    node_a = node("a", pods=[daemon_pod("logs-a1", "a"), mirror_pod("etcd-a", "a")])
    result = decide([node_a, full_node("busy")], [pool(budgets=[{"nodes": "100%"}])])
    assert summary(result) == [("empty", ["a"], [])]


def test_unmanaged_uninitialized_and_deleting_nodes_are_never_candidates():
    # Upstream: nodes without a NodePool, not yet initialized or already marked for deletion
    # are not disruption candidates (and are not reported as blocked either).
    nodes = [
        node("unmanaged", nodepool=None),
        node("fresh", initialized=False),
        node("going", deleting=True),
    ]
    result = decide(nodes, [pool(budgets=[{"nodes": "100%"}])], rounds=50)
    assert result.commands == []
    assert result.blocked == {}


# --- budgets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "count", "allowed"),
    [
        ("0", 10, 0),
        ("1", 10, 1),
        ("3", 10, 3),
        ("10%", 10, 1),
        ("10%", 15, 2),  # percentages round up
        ("25%", 10, 3),
        ("100%", 10, 10),
    ],
)
def test_budget_nodes_as_a_count_or_a_percentage(nodes, count, allowed):
    # Upstream Budget.GetAllowedDisruptions: a count, or ceil(percentage x NodePool nodes).
    result = decide(empty_nodes(count), [pool(budgets=[{"nodes": nodes}])])
    removed = [n.name for c in result.commands for n in c.candidates]
    assert len(removed) == allowed


def test_default_budget_is_ten_percent():
    # Upstream: a NodePool without budgets gets nodes: 10%.
    result = decide(empty_nodes(20), [pool()])
    assert [len(c.candidates) for c in result.commands] == [2]


def test_nodes_being_deleted_use_up_the_budget():
    # Upstream BuildDisruptionBudgetMapping: nodes marked for deletion count as disrupting and
    # are subtracted from the allowed disruptions.
    nodes = [*empty_nodes(3), node("going", deleting=True)]
    result = decide(nodes, [pool(budgets=[{"nodes": "2"}])])
    assert summary(result) == [("empty", ["empty-00"], [])]


def test_uninitialized_nodes_do_not_count_towards_a_percentage_budget():
    # Upstream BuildDisruptionBudgetMapping counts only managed, initialized nodes in the
    # NodePool's total, so 10% of 10 initialized nodes (plus 1 launching) allows 1, not 2.
    nodes = [*empty_nodes(10), node("launching", initialized=False)]
    result = decide(nodes, [pool(budgets=[{"nodes": "10%"}])])
    assert [len(c.candidates) for c in result.commands] == [1]


WEEKDAY_HOURS = {"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}
MONDAY = datetime(2025, 1, 6, tzinfo=NOW.tzinfo)


@pytest.mark.parametrize(
    ("now", "removed"),
    [
        (MONDAY.replace(hour=9), 0),  # the schedule hits: active
        (MONDAY.replace(hour=12), 0),
        (MONDAY.replace(hour=16, minute=59), 0),
        (MONDAY.replace(hour=17), 3),  # hit + duration: no longer active
        (MONDAY.replace(hour=8, minute=59), 3),
        (MONDAY + timedelta(days=5, hours=12), 3),  # Saturday noon
    ],
)
def test_scheduled_budget_applies_only_inside_its_window(now, removed):
    # Upstream Budget.IsActive: active from each cron hit (UTC) for `duration`; an inactive
    # budget does not limit, so with no other budget every empty node may go.
    nodes = empty_nodes(3, prefix="idle")
    result = decide(nodes, [pool(budgets=[WEEKDAY_HOURS])], now=now)
    assert sum(len(c.candidates) for c in result.commands) == removed


def test_most_restrictive_active_budget_wins():
    # Upstream GetAllowedDisruptionsByReason: the minimum over active budgets for the reason.
    budgets = [{"nodes": "3"}, {"nodes": "1", "schedule": "0 9 * * *", "duration": "1h"}]
    inside = decide(empty_nodes(5), [pool(budgets=budgets)], now=MONDAY.replace(hour=9, minute=30))
    outside = decide(empty_nodes(5), [pool(budgets=budgets)], now=MONDAY.replace(hour=12))
    assert [len(c.candidates) for c in inside.commands] == [1]
    assert [len(c.candidates) for c in outside.commands] == [3]


def test_budget_scoped_to_other_reasons_does_not_limit_emptiness():
    # Upstream: a budget with `reasons` only limits those reasons.
    budgets = [{"nodes": "0", "reasons": ["Underutilized", "Drifted"]}]
    result = decide(empty_nodes(3), [pool(budgets=budgets)])
    assert summary(result) == [("empty", ["empty-00", "empty-01", "empty-02"], [])]


def test_budget_scoped_to_empty_keeps_empty_nodes_even_from_consolidation():
    # Upstream multi- and single-node consolidation skip empty candidates ("if there was an
    # empty node that wasn't consolidated before this, assume it was due to budgets").
    budgets = [{"nodes": "0", "reasons": ["Empty"]}]
    result = decide([node("idle-a"), node("idle-b")], [pool(budgets=budgets)], rounds=50)
    assert result.commands == []


def test_budget_scoped_to_underutilized_blocks_consolidation_but_not_emptiness():
    # Upstream: Underutilized budgets limit multi/single-node consolidation only.
    budgets = [{"nodes": "0", "reasons": ["Underutilized"]}]
    nodes = [node("idle"), node("light", "c-8", pods=[pod("web-0", "light")])]
    result = decide(nodes, [pool(budgets=budgets)], rounds=50)
    assert summary(result) == [("empty", ["idle"], [])]


# --- consolidation -------------------------------------------------------------------------------


def test_consolidate_after_never_disables_emptiness_and_consolidation():
    # Upstream: consolidateAfter Never (nil) -> Unconsolidatable, neither emptiness nor
    # consolidation considers the NodePool's nodes.
    nodes = [node("idle"), node("light", "c-8", pods=[pod("web-0", "light")])]
    result = decide(nodes, [pool(consolidate_after="Never")], rounds=50)
    assert result.commands == []


@pytest.mark.parametrize(
    ("age", "removed"), [(timedelta(minutes=30), False), (timedelta(hours=2), True)]
)
def test_consolidate_after_waits_for_the_node_to_settle(age, removed):
    # Upstream Consolidatable condition: now - (last pod event or initialization) >=
    # consolidateAfter; the node's creation time stands for that here.
    idle = node("idle", created=NOW - age)
    result = decide([idle], [pool(consolidate_after="1h", budgets=[{"nodes": "1"}])])
    assert bool(result.commands) is removed


def test_when_empty_never_touches_a_busy_node():
    # Upstream: consolidation (multi/single) requires WhenEmptyOrUnderutilized; WhenEmpty
    # NodePools only lose empty nodes, even when a busy node's pods would fit elsewhere.
    nodes = [
        node("idle"),
        node("light", pods=[pod("web-0", "light")]),
        node("roomy", "c-8", pods=[pod("api-0", "roomy")]),
    ]
    result = decide(nodes, [pool(policy="WhenEmpty", budgets=[{"nodes": "100%"}])], rounds=50)
    assert summary(result) == [("empty", ["idle"], [])]


def test_node_whose_pods_fit_elsewhere_is_deleted():
    # Upstream computeConsolidation: pods all schedule on remaining nodes -> delete, no launch.
    nodes = [
        node("light", pods=[pod("web-0", "light")]),
        node("pinned", "c-8", pods=[pod("db-0", "pinned", annotations={DO_NOT_DISRUPT: "true"})]),
    ]
    result = decide(nodes, [pool(budgets=[{"nodes": "100%"}])])
    assert summary(result) == [("underutilized", ["light"], [])]
    assert result.commands[0].savings_per_hour == pytest.approx(0.20)


def test_node_replaced_by_a_cheaper_type():
    # Upstream single-node consolidation: one new NodeClaim, only types strictly cheaper than
    # the candidate kept; the cheapest launches.
    light = node("light", "c-8", pods=pods("web", "light", 2))
    result = decide([light], [pool(requirements=[ON_DEMAND_ONLY])])
    assert summary(result) == [("underutilized", ["light"], [("c-2", "on-demand")])]
    command = result.commands[0]
    assert command.savings_per_hour == pytest.approx(0.40 - 0.10)
    replacement = command.replacements[0]
    assert all(
        min(o.price for o in it.offerings if o.capacity_type == "on-demand") < 0.40
        for it in replacement.instance_types
    )
    assert "c-8" not in {it.name for it in replacement.instance_types}


def test_on_demand_node_may_be_replaced_by_spot():
    # Upstream: on-demand -> [spot, on-demand] filtered by price and pinned to spot.
    light = node("light", "c-8", pods=pods("web", "light", 2))
    result = decide([light], [pool()])
    assert summary(result) == [("underutilized", ["light"], [("c-2", "spot")])]
    assert result.commands[0].savings_per_hour == pytest.approx(0.40 - 0.07)


def test_node_is_not_replaced_by_one_at_the_same_price():
    # Upstream: a replacement must be strictly cheaper ("Can't replace with a cheaper node").
    snug = node("snug", "c-2", pods=pods("web", "snug", 3))
    result = decide([snug], [pool(requirements=[ON_DEMAND_ONLY])], rounds=50)
    assert result.commands == []


def test_two_underused_nodes_are_merged_into_one_cheaper_node():
    # Upstream multi-node consolidation: the largest prefix of candidates whose pods fit on one
    # new, cheaper node; neither node's pods fit on the other (2.5 + 2.5 CPU > 3.9).
    nodes = [
        node("left", "c-4", pods=pods("web", "left", 5)),
        node("right", "c-4", pods=pods("api", "right", 5)),
    ]
    result = decide(nodes, [pool(budgets=[{"nodes": "100%"}])])
    assert summary(result) == [("underutilized", ["left", "right"], [("c-8", "spot")])]
    assert result.commands[0].savings_per_hour == pytest.approx(0.40 - 0.28)


def test_multi_node_does_not_replace_nodes_with_one_of_their_own_type():
    # Upstream filterOutSameInstanceType: merging [c-4, c-4] into a c-4 is just deleting one of
    # them with more pods moved, so multi-node drops it and single-node deletes the lighter one.
    nodes = [
        node("left", "c-4", pods=pods("web", "left", 2, cpu="750m")),
        node("right", "c-4", pods=pods("api", "right", 3, cpu="500m")),
    ]
    result = decide(nodes, [pool(requirements=[ON_DEMAND_ONLY], budgets=[{"nodes": "100%"}])])
    assert summary(result) == [("underutilized", ["left"], [])]


def test_single_node_consolidation_tries_every_candidate_the_budget_allows():
    # Upstream SingleNodeConsolidation: a budget of 1 means any one candidate of the NodePool
    # may be disrupted; a first candidate that cannot move does not stop the search.
    nodes = [
        # Lowest disruption cost (1 pod), but its pod needs zone-a and the room of a c-4.
        node(
            "stuck", "c-4", pods=[pod("db-0", "stuck", cpu="3500m", node_selector={ZONE: "zone-a"})]
        ),
        # Five small pods on a c-8: a c-4 holds them.
        node("roomy", "c-8", zone="zone-b", pods=pods("web", "roomy", 5, cpu="600m")),
    ]
    result = decide(nodes, [pool(requirements=[ON_DEMAND_ONLY], budgets=[{"nodes": "1"}])])
    assert summary(result) == [("underutilized", ["roomy"], [("c-4", "on-demand")])]


def test_candidates_sorted_by_disruption_cost():
    # Upstream DisruptionCost: sum of EvictionCost (1 + deletion-cost/2^27 + priority/2^25)
    # times the fraction of expireAfter left; cheapest to disrupt first.
    expiring = pool(expire_after="100h")
    young = NOW - timedelta(hours=10)
    nodes = [
        node("three", pods=pods("a", "three", 3), created=young),  # 3 x 0.9 = 2.7
        node(
            "costly",
            pods=[
                pod(
                    "b-0",
                    "costly",
                    annotations={"controller.kubernetes.io/pod-deletion-cost": str(2**27)},
                )
            ],
            created=young,
        ),  # 2 x 0.9 = 1.8
        node("old", pods=pods("c", "old", 2), created=NOW - timedelta(hours=60)),  # 2 x 0.4
    ]
    found, _ = candidates(snapshot(nodes, [expiring]), NOW)
    assert [c.name for c in found] == ["old", "costly", "three"]
    assert [round(c.cost, 6) for c in found] == [0.8, 1.8, 2.7]


# --- spot ----------------------------------------------------------------------------------------


def test_spot_node_is_never_replaced_by_on_demand():
    # Upstream: all-spot candidates only consider spot replacements (computeSpotToSpot...).
    light = node("light", "c-8", capacity_type="spot", pods=pods("web", "light", 2))
    result = decide([light], [pool()], rounds=50)
    assert result.commands == []
    with_gate = decide([light], [pool()], options=Options(spot_to_spot=True), rounds=50)
    # Only 4 cheaper spot types in this catalog: fewer than upstream's 15.
    assert with_gate.commands == []


def _ladder(count: int) -> list:
    """``count`` 2-CPU types t-00 ... priced 0.10, 0.11, ... (spot 0.7 x)."""
    return [instance_type(f"t-{i:02d}", 2, 4, round(0.10 + 0.01 * i, 2)) for i in range(count)]


LADDER = _ladder(20)


@pytest.mark.parametrize(
    ("current", "gate", "replaced"),
    [
        ("t-15", True, True),  # 15 cheaper spot types
        ("t-14", True, False),  # 14 cheaper: not enough
        ("t-19", False, False),  # gate off
    ],
)
def test_spot_to_spot_needs_the_gate_and_15_cheaper_types(current, gate, replaced):
    # Upstream single-node spot-to-spot: SpotToSpotConsolidation gate, >= 15 cheaper spot
    # types, and the replacement launches from the 15 cheapest only.
    light = node(
        "light", current, capacity_type="spot", pods=[pod("web-0", "light")], catalog=LADDER
    )
    result = decide([light], [pool()], catalog=LADDER, options=Options(spot_to_spot=gate))
    if not replaced:
        assert result.commands == []
        return
    assert summary(result) == [("underutilized", ["light"], [("t-00", "spot")])]
    replacement = result.commands[0].replacements[0]
    assert [it.name for it in replacement.instance_types] == [f"t-{i:02d}" for i in range(15)]
    assert result.commands[0].savings_per_hour == pytest.approx(0.7 * (0.25 - 0.10))


def test_multi_node_spot_to_spot_has_no_15_type_rule():
    # Upstream computeSpotToSpotConsolidation: "For multi-node consolidation: we don't have any
    # requirement to check the remaining instance type flexibility".
    catalog = [instance_type("small-4", 4, 8, 0.20), instance_type("big-8", 8, 16, 0.30)]
    nodes = [
        node(
            "left",
            "small-4",
            capacity_type="spot",
            pods=pods("a", "left", 3, cpu="1"),
            catalog=catalog,
        ),
        node(
            "right",
            "small-4",
            capacity_type="spot",
            pods=pods("b", "right", 3, cpu="1"),
            catalog=catalog,
        ),
    ]
    pools = [pool(budgets=[{"nodes": "100%"}])]
    result = decide(nodes, pools, catalog=catalog, options=Options(spot_to_spot=True))
    assert summary(result) == [("underutilized", ["left", "right"], [("big-8", "spot")])]


# --- blocks: do-not-disrupt and PodDisruptionBudgets ---------------------------------------------


def test_do_not_disrupt_pod_blocks_its_node():
    # Upstream ValidatePodsDisruptable: a pod annotated karpenter.sh/do-not-disrupt makes its
    # node no candidate (DisruptionBlocked event).
    nodes = [
        node("light", pods=[pod("job-0", "light", annotations={DO_NOT_DISRUPT: "true"})]),
        node("roomy", "c-8", pods=[pod("web-0", "roomy")]),
    ]
    result = decide(nodes, [pool(budgets=[{"nodes": "100%"}])], rounds=50)
    assert "light" not in {c.name for command in result.commands for c in command.candidates}
    assert "do-not-disrupt" in result.blocked["light"]
    assert "default/job-0" in result.blocked["light"]


def test_do_not_disrupt_node_blocks_even_when_empty():
    # Upstream: a Node annotated karpenter.sh/do-not-disrupt is never a candidate.
    nodes = [node("idle", annotations={DO_NOT_DISRUPT: "true"})]
    result = decide(nodes, [pool(budgets=[{"nodes": "100%"}])], rounds=50)
    assert result.commands == []
    assert "do-not-disrupt" in result.blocked["idle"]


def test_do_not_disrupt_daemonset_pod_blocks_its_node():
    # Upstream ValidatePodsDisruptable checks every pod on the node: "we will allow Mirror Pods
    # and DaemonSets to block disruption using this annotation".
    agent = daemon_pod("agent-0", "idle")
    agent.annotations[DO_NOT_DISRUPT] = "true"
    result = decide([node("idle", pods=[agent])], [pool(budgets=[{"nodes": "100%"}])])
    assert result.commands == []
    assert "do-not-disrupt" in result.blocked["idle"]


WEB = {"app": "web"}


@pytest.mark.parametrize(
    ("budget", "blocked"),
    [
        ({"disruptions_allowed": 0, "min_available": 1}, True),  # status says 0
        ({"disruptions_allowed": 1, "min_available": 2}, False),  # status wins over the spec
        ({"min_available": 2}, True),  # 2 pods, 2 must stay: 0 allowed
        ({"min_available": "100%"}, True),
        ({"min_available": 1}, False),
        ({"max_unavailable": 0}, True),
        ({"max_unavailable": "50%"}, False),
    ],
)
def test_pod_disruption_budget_allowing_no_disruption_blocks(budget, blocked):
    # Upstream: a PDB with disruptionsAllowed 0 for one of the node's pods blocks the node;
    # without a status, disruptionsAllowed is computed from minAvailable / maxUnavailable.
    nodes = [
        node("light", pods=[pod("web-0", "light", labels=WEB)]),
        # Room for light's pod; annotated so that only light is a candidate.
        node(
            "roomy",
            "c-8",
            annotations={DO_NOT_DISRUPT: "true"},
            pods=[pod("web-1", "roomy", labels=WEB), *pods("x", "roomy", 6)],
        ),
    ]
    budgets = [pdb("web", WEB, **budget)]
    result = decide(nodes, [pool(budgets=[{"nodes": "100%"}])], pdbs=budgets)
    if blocked:
        assert "light" in result.blocked
        assert "PodDisruptionBudget default/web" in result.blocked["light"]
        assert "light" not in {c.name for command in result.commands for c in command.candidates}
    else:
        assert summary(result) == [("underutilized", ["light"], [])]


def test_pod_disruption_budget_in_another_namespace_does_not_apply():
    # Upstream: a PDB selects pods in its own namespace only.
    nodes = [
        node("light", pods=[pod("web-0", "light", labels=WEB)]),
        node("roomy", "c-8", annotations={DO_NOT_DISRUPT: "true"}, pods=pods("x", "roomy", 6)),
    ]
    budgets = [pdb("web", WEB, disruptions_allowed=0, namespace="other")]
    result = decide(nodes, [pool(budgets=[{"nodes": "100%"}])], pdbs=budgets)
    assert summary(result) == [("underutilized", ["light"], [])]


def test_pod_covered_by_several_pod_disruption_budgets_blocks():
    # Upstream CanEvictPods: the Eviction API refuses a pod matched by more than one PDB.
    nodes = [
        node("light", pods=[pod("web-0", "light", labels={**WEB, "tier": "front"})]),
        node("roomy", "c-8", annotations={DO_NOT_DISRUPT: "true"}, pods=pods("x", "roomy", 6)),
    ]
    budgets = [
        pdb("web", WEB, max_unavailable=1),
        pdb("front", {"tier": "front"}, max_unavailable=1),
    ]
    result = decide(nodes, [pool(budgets=[{"nodes": "100%"}])], pdbs=budgets)
    assert result.commands == []
    assert "several PodDisruptionBudgets" in result.blocked["light"]


# --- drift ---------------------------------------------------------------------------------------

IN_ZONE_B = {"key": ZONE, "operator": "In", "values": ["zone-b"]}


def test_node_no_longer_meeting_the_nodepool_requirements_is_replaced():
    # Upstream RequirementsDrifted: a node label outside the NodePool's requirements; drift
    # replaces it with a node that meets them (every pod must schedule).
    drifted = full_node("old")
    result = decide([drifted], [pool(requirements=[IN_ZONE_B])])
    assert summary(result) == [("drifted", ["old"], [("c-2", "spot")])]
    assert result.commands[0].replacements[0].offering.zone == "zone-b"


def test_drift_replaces_nodes_one_at_a_time_within_the_drifted_budget():
    # Upstream Drift: one candidate per command, within the Drifted budget; successive passes
    # replace the rest.
    nodes = [full_node(f"old-{i}", created=DAY_OLD - timedelta(hours=i)) for i in range(3)]
    pools = [
        pool(
            requirements=[IN_ZONE_B],
            budgets=[{"nodes": "1", "reasons": ["Drifted"]}],
        )
    ]
    first = decide(nodes, pools)
    assert summary(first) == [("drifted", ["old-2"], [("c-2", "spot")])]  # oldest first
    every = decide(nodes, pools, rounds=50)
    assert [c.reason for c in every.commands] == ["drifted"] * 3
    assert all(len(c.candidates) == 1 for c in every.commands)


def test_drift_budget_of_zero_blocks_drift():
    # Upstream: budgets with reasons [Drifted] limit drift.
    pools = [
        pool(
            requirements=[IN_ZONE_B],
            budgets=[{"nodes": "0", "reasons": ["Drifted"]}],
        )
    ]
    result = decide([full_node("old")], pools, rounds=50)
    assert result.commands == []


def test_drift_tries_the_next_candidate_when_one_cannot_be_rescheduled():
    # Upstream Drift.ComputeCommand: a candidate whose pods cannot all schedule is skipped
    # (DisruptionBlocked) and the next one is tried; the budget only needs to be above 0.
    nodes = [
        node(
            "oldest",
            "c-2",
            created=DAY_OLD - timedelta(days=2),
            pods=[pod("zonal-0", "oldest", cpu="1500m", node_selector={ZONE: "zone-a"})],
        ),
        node("newer", "c-2", pods=[pod("web-0", "newer", cpu="1500m")]),
    ]
    pools = [pool(requirements=[IN_ZONE_B, ON_DEMAND_ONLY], budgets=[{"nodes": "1"}])]
    result = decide(nodes, pools)
    assert summary(result) == [("drifted", ["newer"], [("c-2", "on-demand")])]


def test_empty_drifted_nodes_go_first_one_per_command():
    # Upstream Drift (v1.x): empty candidates are tried before non-empty ones (less churn), one
    # candidate per command; emptiness does not run when consolidateAfter is Never.
    nodes = [
        full_node("busy", created=DAY_OLD - timedelta(days=3)),  # drifted first
        node("idle-b"),
        node("idle-a"),
    ]
    pools = [pool(requirements=[IN_ZONE_B], consolidate_after="Never", budgets=[{"nodes": "1"}])]
    assert summary(decide(nodes, pools)) == [("drifted", ["idle-a"], [])]
    every = decide(nodes, pools, rounds=50)
    assert [(c.reason, [n.name for n in c.candidates]) for c in every.commands] == [
        ("drifted", ["idle-a"]),
        ("drifted", ["idle-b"]),
        ("drifted", ["busy"]),
    ]


def test_nodepool_template_hash_change_is_drift():
    # Upstream NodePoolDrifted: the NodeClaim's nodepool-hash differs from the NodePool's at the
    # same hash version; a matching hash is not drift.
    pools = [pool(labels={"team": "b"})]
    current = nodepool_hash(pools[0].to_manifest())
    stale = {"karpenter.sh/nodepool-hash": "1", "karpenter.sh/nodepool-hash-version": HASH_VERSION}
    fresh = {**stale, "karpenter.sh/nodepool-hash": current}
    result = decide([full_node("stale", annotations=stale)], pools)
    assert summary(result) == [("drifted", ["stale"], [("c-2", "spot")])]
    assert decide([full_node("fresh", annotations=fresh)], pools).commands == []
    other_version = {**stale, "karpenter.sh/nodepool-hash-version": "v3"}
    assert decide([full_node("other", annotations=other_version)], pools).commands == []


def test_provider_drift_reason_is_drift():
    # Upstream: CloudProvider.IsDrifted returning a reason marks the NodeClaim drifted.
    options = Options(drifted=lambda c: "ImageDrifted" if c.name == "old" else "")
    nodes = [full_node("old"), full_node("new")]
    result = decide(nodes, [pool()], options=options)
    assert summary(result) == [("drifted", ["old"], [("c-2", "spot")])]


# --- expiration ----------------------------------------------------------------------------------


def test_expired_node_is_deleted_regardless_of_budgets():
    # Upstream v1: expiration deletes the NodeClaim at creation + expireAfter; forceful, it
    # consults no disruption budget.
    nodes = [
        full_node("ancient", created=NOW - timedelta(days=31)),
        full_node("recent", created=NOW - timedelta(days=29)),
    ]
    pools = [pool(expire_after="720h", budgets=[{"nodes": "0"}])]
    result = decide(nodes, pools)
    assert [(c.reason, [n.name for n in c.candidates]) for c in result.commands] == [
        ("expired", ["ancient"])
    ]
    never = [pool(expire_after="Never", budgets=[{"nodes": "0"}])]
    assert decide(nodes, never).commands == []


def test_expiration_is_not_blocked_by_do_not_disrupt():
    # Upstream: do-not-disrupt "does not block expiration" (it only delays draining up to the
    # terminationGracePeriod); expiration is not a voluntary disruption.
    ancient = node(
        "ancient",
        created=NOW - timedelta(days=31),
        pods=[pod("job-0", "ancient", annotations={DO_NOT_DISRUPT: "true"})],
    )
    result = decide([ancient], [pool(expire_after="720h", budgets=[{"nodes": "0"}])])
    assert [(c.reason, [n.name for n in c.candidates]) for c in result.commands] == [
        ("expired", ["ancient"])
    ]


def test_expired_node_is_deleted_and_its_pods_need_new_capacity_not_counted_as_saved():
    # Upstream v1: expiration deletes the NodeClaim, launching nothing first; pods that fit
    # nowhere else go pending and provisioning launches for them. That new capacity is what
    # the pods cost again, so it comes off the saving.
    ancient = node("ancient", pods=pods("web", "ancient", 5, cpu="500m"), created=DAY_OLD)
    result = decide([ancient], [pool(expire_after="12h", budgets=[{"nodes": "0"}])])
    (command,) = result.commands
    assert command.reason == "expired"
    assert command.replacements == []
    (launch,) = command.provisioned
    assert sorted(p.key for p in launch.pods) == [f"default/web-{i}" for i in range(5)]
    assert command.savings_per_hour == pytest.approx(0.20 - launch.price)
    assert command.savings_per_hour < 0.20


def test_expired_pods_that_fit_elsewhere_need_nothing_new():
    ancient = node("ancient", pods=[pod("web-0", "ancient")], created=DAY_OLD)
    roomy = node("roomy", "c-8", pods=pods("api", "roomy", 2), created=NOW)
    pools = [pool(expire_after="12h", consolidate_after="Never")]
    (command,) = decide([ancient, roomy], pools, rounds=50).commands
    assert (command.reason, command.provisioned) == ("expired", [])
    assert command.savings_per_hour == pytest.approx(0.20)


# --- pending pods --------------------------------------------------------------------------------


def test_pending_pods_are_counted_once_in_later_commands():
    # A pending pod takes part in every simulation once: after an earlier command it does not
    # stay both pending and on the node it was placed on, so a replacement is not sized for it
    # twice. Bound or pending, the same pods give the same replacement.
    def cluster(pending: int) -> tuple[list[NodeInfo], list[Any]]:
        waiting = [make_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(pending)]
        bound = pods("web", "big", 6, cpu="1", memory="1Gi")[pending:]
        return [node("idle"), node("big", "c-8", pods=bound)], waiting

    results = {}
    for pending in (0, 3):
        nodes, waiting = cluster(pending)
        snap = snapshot(nodes, [pool(budgets=[{"nodes": "100%"}])])
        snap.pending = waiting
        result = plan(snap, NOW, rounds=50)
        results[pending] = result
        assert [c.reason for c in result.commands] == ["empty", "underutilized"]
    for result in results.values():
        (replacement,) = result.commands[1].replacements
        keys = [p.key for p in replacement.pods]
        assert len(keys) == len(set(keys)) == 6
    assert summary(results[3]) == summary(results[0])


def test_an_empty_node_pending_pods_would_land_on_is_not_removed():
    # Capacity just launched for pending pods, empty until the kube-scheduler binds them, is not
    # removed as empty: the empty node a pending pod lands on stays (and says why), the other
    # goes; with two such pods both stay.
    pools = [pool(budgets=[{"nodes": "100%"}])]
    for waiting, removed in ((1, 1), (2, 0)):
        snap = snapshot([node("fresh-0"), node("fresh-1"), full_node("busy")], pools)
        snap.pending = [make_pod(f"web-{i}", cpu="3") for i in range(waiting)]
        blocked: dict[str, str] = {}
        command = next_command(snap, NOW, blocked=blocked)
        kept = sorted(name for name, why in blocked.items() if why == WANTED)
        assert len(kept) == waiting
        if removed:
            assert command is not None and command.reason == "empty"
            assert sorted(c.name for c in command.candidates) == sorted(
                {"fresh-0", "fresh-1"} - set(kept)
            )
        else:  # "busy" may move onto them with the pending pods; neither goes
            assert command is None or not {c.name for c in command.candidates} & {
                "fresh-0",
                "fresh-1",
            }


def test_an_empty_node_goes_when_the_pending_pods_fit_as_well_elsewhere():
    # Pods evicted by a consolidation are pending for a moment; while they fit on the nodes that
    # stay, they do not hold an empty node back.
    nodes = [node("fresh"), node("roomy", pods=[pod("api-0", "roomy")]), full_node("busy")]
    snap = snapshot(nodes, [pool(budgets=[{"nodes": "100%"}])])
    snap.pending = [make_pod(f"web-{i}", cpu="1") for i in range(3)]
    command = next_command(snap, NOW)
    assert command is not None
    assert (command.reason, [c.name for c in command.candidates]) == ("empty", ["fresh"])


def test_a_pending_pod_that_fits_nowhere_does_not_stop_consolidation():
    # Upstream: a consolidation needs every pod of its candidates to schedule; pending pods
    # that cannot schedule anywhere do not count against it.
    nodes = [
        node("light", pods=[pod("web-0", "light")]),
        node("roomy", "c-8", pods=pods("api", "roomy", 2), created=NOW),
    ]
    snap = snapshot(nodes, [pool(consolidate_after="1h", budgets=[{"nodes": "100%"}])])
    snap.pending = [make_pod("huge", cpu="64")]
    assert summary(plan(snap, NOW, rounds=1)) == [("underutilized", ["light"], [])]


# --- policies ------------------------------------------------------------------------------------


def test_preference_policy_reaches_every_simulation():
    # PREFERENCE_POLICY=Respect: the pod's preferred zone-b is a requirement first, so moving
    # it needs a zone-b node; Ignore lets it join the roomy zone-a node, so its node is deleted.
    prefers_b = [(1, [{"key": ZONE, "operator": "In", "values": ["zone-b"]}])]
    light = node("light", pods=[pod("web-0", "light", node_preferences=prefers_b)])
    roomy = node("roomy", "c-8", pods=pods("api", "roomy", 2), created=NOW)
    pools = [pool(consolidate_after="1h", budgets=[{"nodes": "100%"}])]
    respect = decide([light, roomy], pools, options=Options(preference_policy="Respect"))
    ignore = decide([light, roomy], pools, options=Options(preference_policy="Ignore"))
    assert summary(respect) == [("underutilized", ["light"], [("c-2", "spot")])]
    assert respect.commands[0].replacements[0].offering.zone == "zone-b"
    assert summary(ignore) == [("underutilized", ["light"], [])]


def test_min_values_policy_reaches_every_simulation():
    # minValues 3 on instance types, and a 3-CPU pod only c-4 and c-8 hold: Strict cannot
    # place it on a new node, so the drifted node stays; BestEffort relaxes minValues.
    requirements = [
        {"key": INSTANCE_TYPE, "operator": "In", "values": ["c-2", "c-4", "c-8"], "minValues": 3}
    ]
    drifted = node("old", pods=[pod("web-0", "old", cpu="3")])
    pools = [pool(requirements=requirements, consolidate_after="Never")]

    def options(policy: str) -> Options:
        return Options(drifted=lambda c: "ImageDrifted", min_values_policy=policy)

    strict = decide([drifted], pools, options=options("Strict"))
    best_effort = decide([drifted], pools, options=options("BestEffort"))
    assert strict.commands == []
    assert summary(best_effort) == [("drifted", ["old"], [("c-4", "spot")])]
    assert best_effort.commands[0].replacements[0].min_values_relaxed


# --- what blocks a node --------------------------------------------------------------------------


def test_nodes_consolidation_may_not_touch_are_listed_with_the_reason():
    settling = node("settling", created=NOW - timedelta(seconds=12))
    touched = node("touched", pods=[pod("web-0", "touched")])
    touched.last_pod_event = (NOW - timedelta(seconds=5)).timestamp()
    result = decide([settling, touched], [pool(consolidate_after="30s")], rounds=50)
    assert result.commands == []
    assert result.blocked == {
        "settling": "consolidateAfter (30s) has not elapsed since its creation (12s ago)",
        "touched": "consolidateAfter (30s) has not elapsed since the last pod event (5s ago)",
    }
    never = decide([node("idle")], [pool(consolidate_after="Never")], rounds=50)
    assert never.blocked == {"idle": "NodePool default has consolidateAfter Never"}
    when_empty = decide([touched], [pool(policy="WhenEmpty")], rounds=50)
    assert when_empty.blocked == {
        "touched": "NodePool default has consolidationPolicy WhenEmpty and the node has 1 "
        "pod(s) to move"
    }
    no_budget = decide([node("idle")], [pool(budgets=[{"nodes": "0"}])], rounds=50)
    assert no_budget.blocked == {
        "idle": "the disruption budget of NodePool default allows no more Empty disruptions"
    }


# --- karpenter simulate --disrupt ----------------------------------------------------------------

KARPENTER = str(Path(sys.executable).parent / "karpenter")

CLUSTER = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: kubernetes.io/os, operator: In, values: [linux]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 0s
    budgets: [{nodes: "100%"}]
"""

NODE = """---
apiVersion: v1
kind: Node
metadata:
  name: %(name)s
  labels:
    karpenter.sh/nodepool: default
    karpenter.sh/initialized: "true"
    karpenter.sh/capacity-type: on-demand
    node.kubernetes.io/instance-type: %(type)s
    topology.kubernetes.io/zone: test-zone-a
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: %(name)s
status:
  capacity: {cpu: "%(cpu)d", memory: %(memory)dGi, pods: "110"}
  allocatable: {cpu: "%(cpu)d", memory: %(memory)dGi, pods: "110"}
"""

POD = """---
apiVersion: v1
kind: Pod
metadata:
  name: %(name)s
  namespace: shop
  annotations: {%(annotations)s}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-rs, uid: u1, controller: true}]
spec:
  nodeName: %(node)s
  containers:
  - name: app
    image: registry.k8s.io/pause:3.9
    resources: {requests: {cpu: "%(cpu)s", memory: 512Mi}}
"""


def _cluster() -> str:
    nodes = [
        {"name": "empty-1", "type": "c-4x-amd64-linux", "cpu": 4, "memory": 8},
        {"name": "big-1", "type": "c-16x-amd64-linux", "cpu": 16, "memory": 32},
        {"name": "pinned-1", "type": "c-2x-amd64-linux", "cpu": 2, "memory": 4},
    ]
    pod_docs = [
        {"name": "web-0", "node": "big-1", "cpu": "500m", "annotations": ""},
        {"name": "web-1", "node": "big-1", "cpu": "500m", "annotations": ""},
        {
            "name": "batch-0",
            "node": "pinned-1",
            "cpu": "1800m",
            "annotations": 'karpenter.sh/do-not-disrupt: "true"',
        },
    ]
    return CLUSTER + "".join([*(NODE % n for n in nodes), *(POD % p for p in pod_docs)])


@pytest.mark.slow
def test_simulate_disrupt_json_end_to_end(tmp_path):
    # The shape: [{"reason", "nodes", "replacements": [{"instance_type",
    # "capacity_type", "zone", "price"}], "savings_per_hour"}], priced from the KWOK catalog.
    path = tmp_path / "cluster.yaml"
    path.write_text(_cluster())
    result = subprocess.run(
        [KARPENTER, "simulate", "--disrupt", "-o", "json", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    disruption = report["disruption"]
    assert [(d["reason"], d["nodes"]) for d in disruption] == [
        ("empty", ["empty-1"]),
        ("underutilized", ["big-1"]),
    ]
    assert disruption[0]["replacements"] == []
    assert disruption[0]["savings_per_hour"] == pytest.approx(0.10859, abs=1e-6)
    (replacement,) = disruption[1]["replacements"]
    assert {k: replacement[k] for k in ("instance_type", "capacity_type", "zone", "price")} == {
        "instance_type": "c-2x-amd64-linux",
        "capacity_type": "spot",
        "zone": "test-zone-a",
        "price": pytest.approx(0.038006, abs=1e-6),
    }
    assert disruption[1]["savings_per_hour"] == pytest.approx(0.43436 - 0.038006, abs=1e-5)
    for command in disruption:
        assert set(command) >= {"reason", "nodes", "replacements", "savings_per_hour"}
    assert "do-not-disrupt" in report["disruption_blocked"]["pinned-1"]


@pytest.mark.slow
def test_simulate_disrupt_table_lists_commands_and_savings(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(_cluster())
    result = subprocess.run(
        [KARPENTER, "simulate", "--disrupt", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Disruption:" in result.stdout
    assert "empty: delete: empty-1" in result.stdout
    assert "underutilized: replace with c-2x-amd64-linux spot test-zone-a" in result.stdout
    assert "left pinned-1" in result.stdout
