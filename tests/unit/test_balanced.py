"""consolidationPolicy Balanced: a consolidation move only when its share of the NodePool's cost
saved is at least half its share of the NodePool's disruption cost (upstream v1.14, K = 2).

Catalog (``disruption_fixtures``): c-2 0.10/h, c-4 0.20/h, c-8 0.40/h on demand; a c-4 node
has 3.9 CPU allocatable."""

from __future__ import annotations

import math

import pytest

from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.controllers.context import Context
from karpenter_core.controllers.disruption import DisruptionController
from karpenter_core.disruption.balanced import Score, Scorer, disruption_cost
from karpenter_core.disruption.candidates import candidates
from karpenter_core.operator import metrics
from karpenter_core.operator.settings import Settings
from karpenter_core.scheduling.snapshot import NodeInfo
from tests.unit.disruption_fixtures import NOW, decide, node, pod, pods, pool, snapshot, summary

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
ON_DEMAND = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]


def on_demand(policy: str, name: str = "default") -> NodePool:
    """An on-demand NodePool with ``policy``, any number of nodes disrupted at once."""
    return pool(name, policy=policy, budgets=[{"nodes": "100%"}], requirements=ON_DEMAND)


def full(name: str, pool_name: str = "default") -> NodeInfo:
    """A c-4 node with two 1.95-CPU pods: no room left, and neither pod fits a c-2 (disruption
    cost 3)."""
    return node(name, nodepool=pool_name, pods=pods(f"{name}-app", name, 2, cpu="1950m"))


def small_pods_node() -> NodeInfo:
    """A c-4 node with eight 100m pods: they fit a c-2 (0.10/h), saving 0.10/h, for a
    disruption cost of 9."""
    return node("small", pods=pods("small-app", "small", 8, cpu="100m", memory="128Mi"))


def test_disruption_cost_is_one_for_the_node_plus_each_pods_eviction_cost_at_least_zero() -> None:
    plain = pod("plain-0", "n")
    precious = pod("precious-0", "n", annotations={DELETION_COST: str(9 * 2**27)})
    expendable = pod("spare-0", "n", annotations={DELETION_COST: str(-(2**31) + 1)})
    assert disruption_cost([]) == 1.0
    assert disruption_cost([plain]) == 2.0
    assert disruption_cost([precious]) == 11.0  # 1 + 9, the clamp's ceiling is 10
    assert disruption_cost([expendable]) == 1.0  # -10 after the clamp, counted as 0
    assert disruption_cost([plain, precious, expendable]) == 12.0


def test_score_value_and_threshold() -> None:
    assert Score("p", 0.05, 0.10).value == pytest.approx(0.5)
    assert Score("p", 0.05, 0.10).approved  # exactly 1/K passes
    assert not Score("p", 0.0499, 0.10).approved
    assert Score("p", 0.0, 0.0).value == 0.0  # nothing saved
    assert not Score("p", -0.1, 0.1).approved
    assert Score("p", 0.1, 0.0).value == math.inf
    assert str(Score("p", 0.042, 0.10)) == (
        "NodePool p has consolidationPolicy Balanced: score 0.42 < 0.50 "
        "(saves 4.2% of its cost for 10.0% of its disruption cost)"
    )


def test_a_marginal_replace_is_refused_under_balanced_and_done_under_the_default() -> None:
    nodes = [small_pods_node(), full("a"), full("b"), full("c")]

    default = decide(nodes, [on_demand("WhenEmptyOrUnderutilized")])
    assert summary(default) == [("underutilized", ["small"], [("c-2", "on-demand")])]
    assert default.commands[0].scores == []  # only Balanced NodePools are scored

    balanced = decide(nodes, [on_demand("Balanced")])
    assert balanced.commands == []
    # saves 0.10 of 0.80 (12.5%) for 9 of 9 + 3 x 3 = 18 (50%): 0.25 < 0.5
    assert balanced.blocked["small"] == (
        "NodePool default has consolidationPolicy Balanced: score 0.25 < 0.50 "
        "(saves 12.5% of its cost for 50.0% of its disruption cost)"
    )


def test_a_merge_not_worth_it_is_refused_and_a_delete_worth_it_done_instead() -> None:
    nodes = [
        node("light", pods=[pod("light-0", "light")]),
        node("roomy", pods=pods("roomy-app", "roomy", 3, cpu="1")),
        full("a"),
        full("b"),
    ]
    # The default merges light, a and b into one c-8 (light's pod moves to roomy): 0.20 saved.
    default = decide(nodes, [on_demand("WhenEmptyOrUnderutilized")])
    assert summary(default) == [("underutilized", ["a", "b", "light"], [("c-8", "on-demand")])]

    # Balanced: that merge saves 25% of the cost for 2 + 3 + 3 of 12 (66.7%), 0.38 < 0.5;
    # deleting light alone saves 25% for 2 of 12 (16.7%), 1.5.
    balanced = decide(nodes, [on_demand("Balanced")])
    assert summary(balanced) == [("underutilized", ["light"], [])]
    [score] = balanced.commands[0].scores
    assert (score.nodepool, score.approved) == ("default", True)
    assert score.value == pytest.approx(0.25 / (2 / 12))

    # WhenEmpty moves no pod at all.
    assert decide(nodes, [on_demand("WhenEmpty")]).commands == []


def test_nodes_that_are_not_candidates_count_in_the_nodepools_totals() -> None:
    # A do-not-disrupt node full of 39 small pods is no candidate, but its cost and disruption
    # count: the refused replace above now saves 0.10 of 1.00 for 9 of 18 + 40 (0.64).
    guarded = node(
        "guarded",
        annotations={"karpenter.sh/do-not-disrupt": "true"},
        pods=pods("guarded-app", "guarded", 39, cpu="100m", memory="128Mi"),
    )
    nodes = [small_pods_node(), full("a"), full("b"), full("c"), guarded]
    result = decide(nodes, [on_demand("Balanced")])
    assert summary(result) == [("underutilized", ["small"], [("c-2", "on-demand")])]
    assert result.commands[0].scores[0].value == pytest.approx((0.10 / 1.00) / (9 / 58))


def test_a_move_across_nodepools_scores_each_balanced_one_on_its_share_of_the_savings() -> None:
    nodes = [
        node("x", nodepool="left", pods=[pod("x-0", "x")]),
        node("y", "c-2", nodepool="right", pods=[pod("y-0", "y")]),
        full("lx", "left"),
        full("ry", "right"),
    ]
    pools = [on_demand("Balanced", "left"), on_demand("WhenEmptyOrUnderutilized", "right")]
    cluster = snapshot(nodes, pools)
    found, _ = candidates(cluster, NOW)
    move = [c for c in found if c.name in ("x", "y")]
    # Only left is Balanced. Its nodes make 0.20 of the 0.30 removed, so it gets two thirds of
    # the 0.15 saved: 0.10 of its 0.40 per hour, for 2 of its 2 + 3 disruption cost.
    [score] = Scorer(cluster).scores(move, 0.15)
    assert score.nodepool == "left"
    assert score.savings_fraction == pytest.approx(0.10 / 0.40)
    assert score.disruption_fraction == pytest.approx(2 / 5)


def test_costly_pods_make_a_node_hopeless_and_keep_it() -> None:
    def cluster(annotations: dict[str, str]) -> list[NodeInfo]:
        light = node("light", pods=[pod("light-0", "light", annotations=annotations)])
        return [light, *(full(f"n{i}") for i in range(5))]

    def hopeless(nodes: list[NodeInfo]) -> str:
        found, _ = candidates(snapshot(nodes, [on_demand("Balanced")]), NOW)
        return Scorer(snapshot(nodes, [on_demand("Balanced")])).hopeless(
            [c for c in found if c.name == "light"]
        )

    # Six nodes: deleting light saves 1/6 (16.7%), for 2 of 2 + 5 x 3 = 17 (11.8%): 1.42.
    assert hopeless(cluster({})) == ""
    # A pod-deletion-cost of 9 x 2^27 makes its pod cost 10: 11 of 26 (42.3%), 0.39 < 0.5,
    # so no move of light can pass and it is not even simulated.
    costly = cluster({DELETION_COST: str(9 * 2**27)})
    assert "score 0.39 < 0.50" in hopeless(costly)
    result = decide(costly, [on_demand("Balanced")])
    assert result.commands == []
    assert "score 0.39 < 0.50" in result.blocked["light"]
    # The default replaces it with a c-2 (its pod fits nowhere else).
    default = decide(costly, [on_demand("WhenEmptyOrUnderutilized")])
    assert summary(default) == [("underutilized", ["light"], [("c-2", "on-demand")])]


@pytest.mark.parametrize(("policy", "eligible"), [("Balanced", 1), ("WhenEmpty", 0)])
def test_busy_nodes_of_a_balanced_nodepool_are_eligible_for_consolidation(
    policy: str, eligible: int
) -> None:
    settings = Settings(disable_leader_election=True, metrics_port=0, health_probe_port=0)
    controller = DisruptionController(Context(settings, None, None, None, None))  # type: ignore[arg-type]
    cluster = snapshot([small_pods_node(), full("a"), node("idle")], [on_demand(policy)])
    controller._eligible(cluster, NOW, {"a"})
    sample = metrics.REGISTRY.get_sample_value
    name = "karpenter_voluntary_disruption_eligible_nodes"
    # "a" is excluded (nominated or in flight); "small" is eligible unless the policy is WhenEmpty
    assert sample(name, {"reason": "underutilized"}) == eligible
    assert sample(name, {"reason": "empty"}) == 1
