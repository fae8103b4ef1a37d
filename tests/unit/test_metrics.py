"""Metrics: the values the controllers set, read back from the registry, and a static check that
every registered metric is set by some code outside ``metrics.py``."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import InsufficientCapacity, RepairPolicy
from karpenter_core.controllers.context import Context
from karpenter_core.controllers.node_repair import NodeRepair
from karpenter_core.controllers.status_conditions import StatusConditionController
from karpenter_core.controllers.termination import DrainPlan, TerminationController, drain_reason
from karpenter_core.operator import metrics
from karpenter_core.operator.kube import NotFound, TooManyRequests
from karpenter_core.state.cluster import ClusterNode, ClusterPod
from karpenter_kwok.nodeclass import KWOKNodeClass
from tests.unit.nodepool_fixtures import StaticState, nodepool_controller

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


def _value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def _nodepool(name: str, budgets: list[dict[str, Any]], limits: dict[str, str]) -> NodePool:
    return NodePool.from_manifest(
        {
            "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [],
                        "nodeClassRef": {"group": "g.sh", "kind": "K", "name": "n"},
                    }
                },
                "limits": limits,
                "disruption": {"budgets": budgets},
            },
        }
    )


def _node(name: str, nodepool: str, *, initialized: bool = True, **extra: Any) -> ClusterNode:
    labels = {"karpenter.sh/nodepool": nodepool}
    if initialized:
        labels["karpenter.sh/initialized"] = "true"
    return ClusterNode.decode(
        {
            "metadata": {"name": name, "labels": labels, **extra.pop("metadata", {})},
            "spec": {"providerID": f"p://{name}", "taints": extra.pop("taints", [])},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "20Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def test_nodepool_controller_sets_usage_limits_and_allowed_disruptions() -> None:
    budgets = [
        {"nodes": "50%", "reasons": ["Drifted"]},
        {"nodes": "3"},
    ]
    pool = _nodepool("metrics-a", budgets, {"cpu": "100", "memory": "1000Gi"})
    nodes = [_node(f"a-{i}", "metrics-a") for i in range(4)]
    nodes.append(_node("a-new", "metrics-a", initialized=False))
    nodes.append(
        _node(
            "a-going",
            "metrics-a",
            taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
        )
    )
    controller = nodepool_controller(StaticState([pool], nodes))
    controller.reconcile()

    usage = "karpenter_nodepools_usage"
    assert _value(usage, nodepool="metrics-a", resource_type="cpu") == 24.0
    assert _value(usage, nodepool="metrics-a", resource_type="memory") == 6 * 8 * 2**30
    assert _value(usage, nodepool="metrics-a", resource_type="ephemeral_storage") == 6 * 20 * 2**30
    assert _value(usage, nodepool="metrics-a", resource_type="nodes") == 6.0
    limit = "karpenter_nodepools_limit"
    assert _value(limit, nodepool="metrics-a", resource_type="cpu") == 100.0
    assert _value(limit, nodepool="metrics-a", resource_type="memory") == 1000 * 2**30
    allowed = "karpenter_nodepools_allowed_disruptions"
    # 5 initialized nodes: Drifted is held to ceil(50% of 5) = 3 and 3 -> 3; the others to 3.
    assert _value(allowed, nodepool="metrics-a", reason="Drifted") == 3.0
    assert _value(allowed, nodepool="metrics-a", reason="Empty") == 3.0
    assert _value(allowed, nodepool="metrics-a", reason="Underutilized") == 3.0
    consuming = "karpenter_nodepools_nodes_consuming_budgets"
    assert _value(consuming, nodepool="metrics-a", reason="Empty") == 1.0


def test_allowed_disruptions_follow_the_reason_and_percentage() -> None:
    budgets = [{"nodes": "10%", "reasons": ["Empty"]}, {"nodes": "0", "reasons": ["Drifted"]}]
    pool = _nodepool("metrics-b", budgets, {})
    nodes = [_node(f"b-{i}", "metrics-b") for i in range(15)]
    nodepool_controller(StaticState([pool], nodes)).reconcile()
    allowed = "karpenter_nodepools_allowed_disruptions"
    assert _value(allowed, nodepool="metrics-b", reason="Empty") == 2.0  # ceil(1.5)
    assert _value(allowed, nodepool="metrics-b", reason="Drifted") == 0.0
    # No budget covers Underutilized: every node may go.
    assert _value(allowed, nodepool="metrics-b", reason="Underutilized") == 15.0
    assert _value("karpenter_nodepools_limit", nodepool="metrics-b", resource_type="cpu") is None


def test_series_of_a_deleted_nodepool_are_removed() -> None:
    pool = _nodepool("metrics-c", [{"nodes": "1"}], {"cpu": "10"})
    state = StaticState([pool], [_node("c-0", "metrics-c")])
    controller = nodepool_controller(state)
    controller.reconcile()
    assert _value("karpenter_nodepools_limit", nodepool="metrics-c", resource_type="cpu") == 10
    state.pools = []
    controller.reconcile()
    for family in metrics.REGISTRY.collect():
        assert all(s.labels.get("nodepool") != "metrics-c" for s in family.samples), family.name


def test_removed_limit_is_no_longer_exported() -> None:
    pool = _nodepool("metrics-d", [{"nodes": "1"}], {"cpu": "10", "memory": "10Gi"})
    state = StaticState([pool], [_node("d-0", "metrics-d")])
    controller = nodepool_controller(state)
    controller.reconcile()
    state.pools = [_nodepool("metrics-d", [{"nodes": "1"}], {"cpu": "10"})]
    controller.reconcile()
    limit = "karpenter_nodepools_limit"
    assert _value(limit, nodepool="metrics-d", resource_type="memory") is None
    assert _value(limit, nodepool="metrics-d", resource_type="cpu") == 10


def test_nodeclaim_and_node_counters_carry_upstream_labels() -> None:
    labels = {
        "karpenter.sh/nodepool": "metrics-e",
        "karpenter.sh/capacity-type": "spot",
        "topology.kubernetes.io/zone": "zone-a",
    }
    metrics.nodeclaim_created("provisioned", "metrics-e", min_values_relaxed=True)
    assert (
        _value(
            "karpenter_nodeclaims_created_total",
            reason="provisioned",
            nodepool="metrics-e",
            min_values_relaxed="true",
        )
        == 1
    )
    metrics.nodeclaim_disrupted("drifted", labels)
    assert (
        _value(
            "karpenter_nodeclaims_disrupted_total",
            reason="drifted",
            nodepool="metrics-e",
            capacity_type="spot",
        )
        == 1
    )
    metrics.nodeclaim_terminated(labels, time.time() - 5)
    terminated = {"nodepool": "metrics-e", "capacity_type": "spot", "zone": "zone-a"}
    assert _value("karpenter_nodeclaims_terminated_total", **terminated) == 1
    duration = "karpenter_nodeclaims_termination_duration_seconds"
    assert _value(f"{duration}_sum", nodepool="metrics-e") == pytest.approx(5, abs=1)
    metrics.node_created(labels)
    assert _value("karpenter_nodes_created_total", nodepool="metrics-e", zone="zone-a") == 1
    metrics.node_terminated(labels, time.time() - 3000, time.time() - 10)
    assert _value("karpenter_nodes_terminated_total", nodepool="metrics-e", zone="zone-a") == 1
    node_duration = "karpenter_nodes_termination_duration_seconds_sum"
    assert _value(node_duration, nodepool="metrics-e") == pytest.approx(10, abs=1)
    lifetime = "karpenter_nodes_lifetime_duration_seconds_bucket"
    assert _value(lifetime, nodepool="metrics-e", le="2700.0") == 0
    assert _value(lifetime, nodepool="metrics-e", le="3600.0") == 1


def test_scheduling_run_replaces_the_previous_queue_depth_series() -> None:
    metrics.scheduling_started("metrics-test", 7)
    metrics.scheduling_started("metrics-test", 3)
    samples = [
        s
        for family in metrics.SCHEDULER_QUEUE_DEPTH.collect()
        for s in family.samples
        if s.labels["controller"] == "metrics-test"
    ]
    assert [s.value for s in samples] == [3]
    assert samples[0].labels["scheduling_id"]


_DEFINITION = re.compile(r"^([A-Z][A-Z_]+) = _?(?:counter|gauge|histogram|summary)\(", re.I | re.M)
_BLOCK = re.compile(r"^(?:def|class) (\w+)\b(.*?)(?=^\S)", re.S | re.M)
_SETTER = r"\.(?:labels|inc|set|observe|set_function)\("


def test_every_registered_metric_is_set_by_some_code() -> None:
    """Each metric metrics.py registers is set by code outside it: directly
    (``metrics.NAME.inc()``), or by a helper of metrics.py (or what the helper calls) that code
    outside calls."""
    source = (ROOT / "karpenter_core/operator/metrics.py").read_text()
    names = _DEFINITION.findall(source)
    assert "NODEPOOLS_ALLOWED_DISRUPTIONS" in names and "CLOUDPROVIDER_DURATION" in names
    code = "\n".join(
        path.read_text()
        for base in ("karpenter_core", "providers")
        for path in (ROOT / base).rglob("*.py")
        if path != ROOT / "karpenter_core/operator/metrics.py"
    )
    blocks = {m.group(1): m.group(2) for m in _BLOCK.finditer(source + "\nend")}
    reachable = {
        name
        for name in blocks
        if not name.startswith("_") and re.search(rf"metrics\.{name}\(", code)
    }
    while True:
        more = {
            name
            for name in blocks
            if name not in reachable
            and any(re.search(rf"\b{name}\b", blocks[r]) for r in reachable)
        }
        if not more:
            break
        reachable |= more
    unset = [
        name
        for name in names
        if not re.search(rf"metrics\.{name}{_SETTER}", code)
        and not any(re.search(rf"\b{name}{_SETTER}", blocks[r]) for r in reachable)
    ]
    assert unset == []


class _FailingProvider:
    name = "metrics-fake"

    def create(self, nodeclaim: Any) -> Any:
        raise InsufficientCapacity("no capacity")

    def delete(self, nodeclaim: Any) -> None:
        raise RuntimeError("boom")


def test_provider_calls_are_labelled_with_upstream_method_and_error_names() -> None:
    provider = metrics.instrument(_FailingProvider())
    with pytest.raises(InsufficientCapacity):
        provider.create(None)
    with pytest.raises(RuntimeError):
        provider.delete(None)
    labels = {"controller": "", "provider": "metrics-fake"}
    errors = "karpenter_cloudprovider_errors_total"
    assert _value(errors, **labels, method="Create", error="InsufficientCapacityError") == 1
    assert _value(errors, **labels, method="Delete", error="") == 1
    assert _value("karpenter_cloudprovider_duration_seconds_count", **labels, method="Create") == 1


def test_evaluation_duration_is_labelled_by_reason() -> None:
    metrics.DISRUPTION_EVALUATION_DURATION.labels("empty", "empty").observe(0.5)
    name = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count"
    assert (_value(name, reason="empty", consolidation_type="empty") or 0) >= 1


# -- status conditions, drain and repair ----------------------------------------------------------


def _get(metric: str, *groups: dict[str, str], **labels: str) -> float | None:
    merged = {k: v for group in groups for k, v in group.items()}
    return metrics.REGISTRY.get_sample_value(metric, {**merged, **labels})


def _claim_manifest(name: str, conditions: list[dict[str, str]], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "pool-s"}, **meta},
        "spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "nc"},
        },
        "status": {"conditions": conditions},
    }


class _ClaimState:
    def __init__(self) -> None:
        self.claims: list[NodeClaim] = []
        self.pools: list[NodePool] = []

    def nodeclaims(self) -> list[NodeClaim]:
        return self.claims

    def nodepools(self) -> list[NodePool]:
        return self.pools

    def generation(self) -> int:
        return 0


class _NodeClassProvider:
    def supported_node_classes(self) -> list[type[Any]]:
        return [KWOKNodeClass]


def test_status_condition_metrics_follow_nodeclaim_conditions() -> None:
    state = _ClaimState()
    context = Context(
        settings=None,  # type: ignore[arg-type]
        client=None,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        provider=_NodeClassProvider(),  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
    )
    controller = StatusConditionController(context)
    launched = {"type": "Launched", "status": "True", "reason": "Launched"}
    unknown = {"type": "Ready", "status": "Unknown", "reason": "AwaitingReconciliation"}
    start = datetime.fromtimestamp(time.time() - 60, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    state.claims = [
        NodeClaim.from_manifest(
            _claim_manifest(
                "claim-s",
                [
                    {**launched, "lastTransitionTime": start},
                    {**unknown, "lastTransitionTime": start},
                ],
            )
        )
    ]
    controller.reconcile()

    extra = {"karpenter_kwok_sh_kwoknodeclass": "nc", "karpenter_sh_nodepool": "pool-s"}
    obj = {"namespace": "", "name": "claim-s"}
    ready_unknown = {"type": "Ready", "status": "Unknown", "reason": "AwaitingReconciliation"}
    count = "operator_nodeclaim_status_condition_count"
    assert _get(count, obj, ready_unknown, extra) == 1
    generic = {"group": "karpenter.sh", "kind": "NodeClaim"}
    assert _get("operator_status_condition_count", obj, ready_unknown, generic) == 1
    seconds = _get(
        "operator_nodeclaim_status_condition_current_status_seconds",
        obj,
        ready_unknown,
        extra,
    )
    assert seconds is not None and 59 <= seconds <= 120
    transitions = "operator_nodeclaim_status_condition_transitions_total"
    assert _value(transitions, **ready_unknown, **extra) == 1

    later = datetime.fromtimestamp(time.time() - 30, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {"type": "Ready", "status": "True", "reason": "Ready"}
    deleted = {"deletionTimestamp": later, "finalizers": ["karpenter.sh/termination"]}
    state.claims = [
        NodeClaim.from_manifest(
            _claim_manifest(
                "claim-s",
                [{**launched, "lastTransitionTime": start}, {**ready, "lastTransitionTime": later}],
                **deleted,
            )
        )
    ]
    controller.reconcile()

    assert _get(count, obj, ready_unknown, extra) is None
    assert _get("operator_status_condition_count", obj, ready_unknown, generic) is None
    assert _get(count, obj, ready, extra) == 1
    assert _value(transitions, **ready, **extra) == 1
    lasted = "operator_nodeclaim_status_condition_transition_seconds"
    assert _value(f"{lasted}_count", type="Ready", status="Unknown", **extra) == 1
    assert _value(f"{lasted}_sum", type="Ready", status="Unknown", **extra) == 30
    terminating = "operator_nodeclaim_termination_current_time_seconds"
    assert (_get(terminating, obj, extra) or 0) >= 29

    state.claims = []
    controller.reconcile()

    assert _get(count, obj, ready, extra) is None
    assert _get(terminating, obj, extra) is None
    assert _value("operator_nodeclaim_termination_duration_seconds_count", **extra) == 1
    assert (_value("operator_termination_duration_seconds_count", **generic) or 0) >= 1


def test_status_condition_metrics_cover_nodepools() -> None:
    state = _ClaimState()
    pool = NodePool.from_manifest(
        {
            **_nodepool("pool-c", [], {}).to_manifest(),
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]},
        }
    )
    state.pools = [pool]
    context = Context(
        settings=None,  # type: ignore[arg-type]
        client=None,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        provider=_NodeClassProvider(),  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
    )
    StatusConditionController(context).reconcile()
    labels = {
        "namespace": "",
        "name": "pool-c",
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
    }
    assert _get("operator_nodepool_status_condition_count", labels) == 1
    assert (
        _get("operator_status_condition_count", labels, group="karpenter.sh", kind="NodePool") == 1
    )


class _EvictingClient:
    def evict(self, namespace: str, name: str) -> dict[str, Any]:
        if name == "guarded":
            raise TooManyRequests(429, "TooManyRequests", "violates a PDB", 0.0)
        if name == "gone":
            raise NotFound(404, "NotFound", "pods not found")
        return {}


class _Events:
    def publish(self, *args: Any) -> None:
        pass


def _running_pod(name: str) -> ClusterPod:
    return ClusterPod.decode(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"nodeName": "node-d", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }
    )


def test_drain_counts_eviction_requests_by_code_and_drained_pods_by_reason() -> None:
    before = {
        code: _value("karpenter_pods_eviction_requests_total", code=code) or 0
        for code in ("200", "404", "429")
    }
    drained = _value("karpenter_pods_drained_total", reason="Underutilized") or 0
    context = Context(
        settings=None,  # type: ignore[arg-type]
        client=_EvictingClient(),  # type: ignore[arg-type]
        state=None,  # type: ignore[arg-type]
        provider=None,  # type: ignore[arg-type]
        events=_Events(),  # type: ignore[arg-type]
    )
    controller = TerminationController(context)
    try:
        claim = NodeClaim.from_manifest(
            _claim_manifest(
                "claim-d",
                [{"type": "DisruptionReason", "status": "True", "reason": "Underutilized"}],
            )
        )
        plan = DrainPlan(evict=[_running_pod(n) for n in ("web-1", "web-2", "guarded", "gone")])
        controller._drain(_node("node-d", "pool-s"), plan, drain_reason(claim))
    finally:
        controller.close()

    counts = {
        code: (_value("karpenter_pods_eviction_requests_total", code=code) or 0) - before[code]
        for code in before
    }
    assert counts == {"200": 2, "404": 1, "429": 1}
    assert (_value("karpenter_pods_drained_total", reason="Underutilized") or 0) - drained == 2
    assert drain_reason(NodeClaim.from_manifest(_claim_manifest("c", []))) == "Forceful Termination"


class _RepairState:
    def __init__(self, node: ClusterNode, claim: NodeClaim) -> None:
        self.node, self.claim = node, claim

    def nodes(self) -> list[ClusterNode]:
        return [self.node, *(_node(f"healthy-{i}", "pool-r") for i in range(5))]

    def nodeclaim_for_node(self, node: Any) -> NodeClaim:
        return self.claim


class _RepairProvider:
    def repair_policies(self) -> list[RepairPolicy]:
        return [RepairPolicy("MemoryPressure", "True", timedelta(minutes=1))]


class _DeletingClient:
    def delete(self, path: str) -> None:
        pass


def test_node_repair_counts_unhealthy_nodeclaims_by_condition() -> None:
    since = datetime.fromtimestamp(time.time() - 600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    node = ClusterNode.decode(
        {
            "metadata": {
                "name": "node-r",
                "labels": {"karpenter.sh/nodepool": "pool-r", "karpenter.sh/capacity-type": "spot"},
            },
            "spec": {"providerID": "p://r"},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "True", "lastTransitionTime": since}
                ]
            },
        }
    )
    claim = NodeClaim.from_manifest(
        {**_claim_manifest("claim-r", []), "status": {"imageID": "ami-1"}}
    )
    context = Context(
        settings=None,  # type: ignore[arg-type]
        client=_DeletingClient(),  # type: ignore[arg-type]
        state=_RepairState(node, claim),  # type: ignore[arg-type]
        provider=_RepairProvider(),  # type: ignore[arg-type]
        events=_Events(),  # type: ignore[arg-type]
    )
    NodeRepair(context).reconcile()
    labels = {"nodepool": "pool-r", "capacity_type": "spot", "image_id": "ami-1"}
    name = "karpenter_nodeclaims_unhealthy_disrupted_total"
    assert _get(name, labels, condition="memory_pressure") == 1
