"""Prometheus metrics with upstream Karpenter's names (``karpenter_`` prefix).

Metrics live in their own registry (``REGISTRY``), served on /metrics by ``health.py``. Labels are
bounded: NodePool, provider, method, reason; never a pod. ``instrument`` wraps a CloudProvider so
that every call is timed and every error counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from karpenter_core.operator import logs

__all__ = [
    "REGISTRY",
    "instrument",
    "nodeclaim_created",
    "observe_scheduling",
    "unschedulable_pods",
]

REGISTRY = CollectorRegistry(auto_describe=True)
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def _counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    return Counter(f"karpenter_{name}", doc, labels, registry=REGISTRY)


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
    return Gauge(f"karpenter_{name}", doc, labels, registry=REGISTRY)


def _histogram(name: str, doc: str, labels: tuple[str, ...] = ()) -> Histogram:
    return Histogram(f"karpenter_{name}", doc, labels, registry=REGISTRY, buckets=_DURATION_BUCKETS)


# NodeClaims and nodes
NODECLAIMS_CREATED = _counter(
    "nodeclaims_created_total", "NodeClaims created, by reason.", ("reason", "nodepool")
)
NODECLAIMS_TERMINATED = _counter(
    "nodeclaims_terminated_total", "NodeClaims terminated.", ("nodepool",)
)
NODECLAIMS_DISRUPTED = _counter(
    "nodeclaims_disrupted_total", "NodeClaims disrupted, by reason.", ("reason", "nodepool")
)
NODES_CREATED = _counter("nodes_created_total", "Nodes registered.", ("nodepool",))
NODES_TERMINATED = _counter("nodes_terminated_total", "Nodes terminated.", ("nodepool",))
NODES_DRAINED = _counter("nodes_drained_total", "Nodes drained.", ("nodepool",))
PODS_STARTUP_DURATION = _histogram(
    "pods_startup_duration_seconds", "Time from a pod's creation until it is running."
)

# Scheduling
SCHEDULING_DURATION = _histogram(
    "scheduler_scheduling_duration_seconds", "Duration of scheduling simulations.", ("controller",)
)
SCHEDULER_QUEUE_DEPTH = _gauge(
    "scheduler_queue_depth", "Pods waiting to be scheduled in the current run.", ("controller",)
)
UNSCHEDULABLE_PODS = _gauge(
    "scheduler_unschedulable_pods_count",
    "Pods the last scheduling run could not place.",
    ("controller",),
)

# Cloud provider
CLOUDPROVIDER_DURATION = _histogram(
    "cloudprovider_duration_seconds",
    "Duration of cloud provider calls.",
    ("controller", "method", "provider"),
)
CLOUDPROVIDER_ERRORS = _counter(
    "cloudprovider_errors_total",
    "Cloud provider calls that raised.",
    ("controller", "method", "provider", "error"),
)

# Cluster state and NodePools
CLUSTER_STATE_SYNCED = _gauge(
    "cluster_state_synced", "1 when the cluster state has listed every watched resource."
)
CLUSTER_STATE_NODE_COUNT = _gauge("cluster_state_node_count", "Nodes in the cluster state.")
NODEPOOLS_USAGE = _gauge(
    "nodepools_usage", "Resources the NodePool's nodes provide.", ("nodepool", "resource_type")
)
NODEPOOLS_LIMIT = _gauge("nodepools_limit", "The NodePool's limits.", ("nodepool", "resource_type"))
NODEPOOLS_ALLOWED_DISRUPTIONS = _gauge(
    "nodepools_allowed_disruptions",
    "Nodes the NodePool's budgets allow to disrupt now.",
    ("nodepool", "reason"),
)

# Voluntary disruption
DISRUPTION_DECISIONS = _counter(
    "voluntary_disruption_decisions_total",
    "Disruption decisions made.",
    ("decision", "reason", "consolidation_type"),
)
DISRUPTION_ELIGIBLE_NODES = _gauge(
    "voluntary_disruption_eligible_nodes", "Nodes eligible for disruption.", ("reason",)
)
DISRUPTION_EVALUATION_DURATION = _histogram(
    "voluntary_disruption_decision_evaluation_duration_seconds",
    "Duration of one disruption method's evaluation.",
    ("method", "consolidation_type"),
)

PROVISIONER = "provisioner"


def observe_scheduling(seconds: float, queue_depth: int, controller: str = PROVISIONER) -> None:
    """Record one scheduling run: its duration and how many pods it considered."""
    SCHEDULING_DURATION.labels(controller).observe(seconds)
    SCHEDULER_QUEUE_DEPTH.labels(controller).set(queue_depth)


def unschedulable_pods(count: int, controller: str = PROVISIONER) -> None:
    """Record how many pods the last scheduling run could not place."""
    UNSCHEDULABLE_PODS.labels(controller).set(count)


def nodeclaim_created(nodepool: str, reason: str) -> None:
    """Count a NodeClaim created for ``reason`` (provisioning, or a disruption reason)."""
    NODECLAIMS_CREATED.labels(reason, nodepool).inc()


_PROVIDER_METHODS = frozenset(
    {
        "create",
        "delete",
        "get",
        "list",
        "get_instance_types",
        "is_drifted",
        "repair_policies",
        "supported_node_classes",
        "node_class_readiness",
    }
)


class _Instrumented:
    """A CloudProvider whose interface methods are timed and their errors counted."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider
        self.name = provider.name

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(self._provider, attribute)
        if attribute not in _PROVIDER_METHODS:
            return value
        return self._timed(attribute, value)

    def _timed(self, method: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            controller = str(logs.context().get("controller", ""))
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            except Exception as error:
                CLOUDPROVIDER_ERRORS.labels(
                    controller, method, self.name, type(error).__name__
                ).inc()
                raise
            finally:
                CLOUDPROVIDER_DURATION.labels(controller, method, self.name).observe(
                    time.perf_counter() - start
                )

        return timed


def instrument(provider: Any) -> Any:
    """Wrap a CloudProvider so every call is timed and counted (the controller label comes
    from the ``controller`` field bound with ``logs.bind``)."""
    return _Instrumented(provider)
