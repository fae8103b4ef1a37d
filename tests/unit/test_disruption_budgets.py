"""Disruption budgets counted as upstream's BuildDisruptionBudgetMapping: per NodePool, a
percentage of that pool's initialized nodes rounded up, less the nodes already disrupting
(being deleted or NotReady)."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_core.scheduling.snapshot import NodeInfo
from tests.unit.disruption_fixtures import decide, node, pool


def _empty(count: int, nodepool: str = "default") -> list[NodeInfo]:
    return [node(f"{nodepool}-{i:02}", "c-2", nodepool=nodepool) for i in range(count)]


def _ready_condition(status: str | None) -> dict[str, Any]:
    conditions = [] if status is None else [{"type": "Ready", "status": status}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
        "status": {"allocatable": {"cpu": "2"}, "conditions": conditions},
    }


@pytest.mark.parametrize(
    ("status", "not_ready"), [("True", False), ("False", True), ("Unknown", True), (None, False)]
)
def test_a_node_is_not_ready_when_its_ready_condition_is_not_true(status, not_ready):
    assert NodeInfo.from_manifest(_ready_condition(status)).not_ready is not_ready


def test_not_ready_nodes_use_up_the_budget():
    # 10 nodes at 10% allow 1 disruption; a NotReady node is already disrupting.
    nodes = _empty(10)
    nodes[9].not_ready = True
    result = decide(nodes, [pool(budgets=[{"nodes": "10%"}])])
    assert result.commands == []


def test_a_not_ready_node_being_deleted_counts_once():
    nodes = [*_empty(3), node("going", deleting=True)]
    nodes[3].not_ready = True
    result = decide(nodes, [pool(budgets=[{"nodes": "2"}])])
    assert [len(c.candidates) for c in result.commands] == [1]


def test_each_nodepool_counts_only_its_own_disrupting_nodes():
    # Pool a: 11 nodes at 10% -> 2, one NotReady -> 1 more. Pool b: 3 nodes at 10% -> 1, its
    # budget untouched by pool a's NotReady node.
    nodes = [*_empty(11, "a"), *_empty(3, "b")]
    nodes[10].not_ready = True
    budgets = [{"nodes": "10%"}]
    # Each NodePool's empty nodes make one command of their own.
    result = decide(nodes, [pool("a", budgets=budgets), pool("b", budgets=budgets)], rounds=2)
    by_pool = [
        [c.nodepool.metadata.name for c in command.candidates] for command in result.commands
    ]
    assert by_pool == [["a"], ["b"]]
