"""What keeps a disruption pass fast as clusters and NodePools grow: NodePools compiled once per
pass, consolidations that cannot pay ruled out without a simulation, empty nodes batched per
NodePool, and multi-node commands capped."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_core.controllers.context import Context
from karpenter_core.controllers.disruption import DisruptionController
from karpenter_core.disruption.planner import Options, next_command
from karpenter_core.operator.settings import Settings
from karpenter_core.scheduling import scheduler, templates
from tests.unit.disruption_fixtures import NOW, decide, node, pods, pool, snapshot

ALL = [{"nodes": "100%"}]
ON_DEMAND = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]


def _pool(name: str = "default", budgets: list[dict[str, str]] = ALL) -> Any:
    """An on-demand NodePool (no spot replacement is cheaper than its nodes)."""
    return pool(name, budgets=budgets, requirements=ON_DEMAND)


def _count(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Count the calls of ``owner.name`` (one entry per call)."""
    calls: list[int] = []
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_empty_nodes_make_one_command_per_nodepool():
    nodes = [
        node("a-0", "c-2", nodepool="a"),
        node("b-0", "c-2", nodepool="b"),
        node("a-1", "c-2", nodepool="a"),
    ]
    pools = [_pool("a"), _pool("b")]
    result = decide(nodes, pools, rounds=3)
    assert [(c.reason, [n.name for n in c.candidates]) for c in result.commands] == [
        ("empty", ["a-0", "a-1"]),
        ("empty", ["b-0"]),
    ]


def _underused(count: int) -> list[Any]:
    """``count`` c-4 nodes holding one 500m pod each: any of them can take the others' pods."""
    return [node(f"n-{i}", "c-4", pods=pods(f"app{i}-x", f"n-{i}", 1)) for i in range(count)]


def test_multi_node_commands_stop_at_the_configured_maximum():
    nodes = _underused(6)
    unlimited = decide(nodes, [_pool()])
    capped = decide(nodes, [_pool()], options=Options(max_multi_node=3))
    assert [len(c.candidates) for c in unlimited.commands] == [5]
    assert [(c.reason, len(c.candidates)) for c in capped.commands] == [("underutilized", 3)]


def test_the_multi_node_maximum_is_a_setting_the_controller_hands_the_planner():
    settings = Settings.load(env={"MULTI_NODE_CONSOLIDATION_MAX": "7"})
    context = Context(settings, None, None, None, None)  # type: ignore[arg-type]
    assert DisruptionController(context)._options().max_multi_node == 7
    assert Settings().multi_node_consolidation_max == 100


def test_multi_node_commands_stop_at_the_budget():
    result = decide(_underused(6), [_pool(budgets=[{"nodes": "2"}])])
    assert [len(c.candidates) for c in result.commands] == [2]


def test_a_pass_builds_the_nodepools_and_the_nodes_state_once(monkeypatch):
    # Three NodePools, several simulations (multi-node's binary search): each NodePool is
    # compiled for scheduling, and each node's starting state built, once for the whole pass,
    # not once per simulation.
    nodes = [
        node(f"n-{i}", "c-4", nodepool=f"p{i % 3}", pods=pods(f"app{i}-x", f"n-{i}", 1))
        for i in range(6)
    ]
    cluster = snapshot(nodes, [_pool(f"p{i}") for i in range(3)])
    solves = _count(monkeypatch, scheduler._Solver, "solve")
    compiled = _count(monkeypatch, templates.NodePoolTemplate, "__init__")
    built = _count(monkeypatch, scheduler._Existing, "__init__")
    command = next_command(cluster, NOW, Options())
    assert command is not None and len(command.candidates) == 5
    assert len(solves) >= 3
    assert len(compiled) == 3
    assert len(built) == len(nodes)


def test_a_full_cluster_pass_simulates_nothing(monkeypatch):
    # Every c-2 node is full of 600m pods: no pod fits in another node's 100m of room, and no
    # instance type cheaper than the nodes removed holds their pods, so no consolidation can
    # pay and no scheduling simulation runs; every candidate is still considered.
    nodes = [
        node(f"n-{i}", "c-2", pods=pods(f"app{i}-x", f"n-{i}", 3, cpu="600m")) for i in range(8)
    ]
    solves = _count(monkeypatch, scheduler._Solver, "solve")
    blocked: dict[str, str] = {}
    command = next_command(snapshot(nodes, [_pool()]), NOW, Options(), blocked)
    assert command is None
    assert solves == []
    assert blocked == {n.name: "no cheaper placement for its pods" for n in nodes}


def test_room_found_for_one_set_of_candidates_is_looked_for_again_for_another():
    # Multi-node consolidation first tries [a, b]: a's pod has no room outside them, and no
    # merge pays (b is a c-8 already). Single-node consolidation then tries a alone: its pod
    # fits beside b's pods, so a is deleted.
    nodes = [
        node("a", "c-2", pods=pods("a-x", "a", 1, cpu="1")),
        node("b", "c-8", pods=pods("b-x", "b", 6, cpu="1")),
    ]
    result = decide(nodes, [_pool()])
    assert [
        (c.reason, [n.name for n in c.candidates], c.replacements) for c in result.commands
    ] == [("underutilized", ["a"], [])]
