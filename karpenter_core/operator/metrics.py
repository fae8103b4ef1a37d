"""Prometheus metrics with upstream Karpenter's names and label sets (``karpenter_`` prefix).

Metrics live in their own registry (``REGISTRY``), served on /metrics by ``health.py``. Labels are
bounded: NodePool, zone, capacity type, provider, method, reason; never a pod. ``instrument``
wraps a CloudProvider so that every call is timed and every error counted. The helpers below
take an object's labels (a NodeClaim's or a Node's) and pick the metric labels from them.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary

from karpenter_core.apis import labels as wk
from karpenter_core.cloudprovider.types import (
    InsufficientCapacity,
    NodeClaimNotFound,
    NodeClassNotReady,
)
from karpenter_core.operator import logs

__all__ = [
    "REGISTRY",
    "StatusMetrics",
    "error_label",
    "forget_nodepool",
    "instrument",
    "node_created",
    "node_terminated",
    "nodeclaim_created",
    "nodeclaim_disrupted",
    "nodeclaim_terminated",
    "scheduling_started",
    "snake_case",
]

REGISTRY = CollectorRegistry(auto_describe=True)
# Upstream's bucket sets: controller-runtime's for durations, then its termination histograms'.
_DURATION_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8),
    *(0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25),
    *(30, 40, 50, 60, 120, 150, 300, 450, 600),
)
_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_HOUR, _DAY = 3600, 86400
_LIFETIME_BUCKETS = (
    *(900, 1800, 2700, _HOUR, 2 * _HOUR, 4 * _HOUR, 6 * _HOUR, 8 * _HOUR, 10 * _HOUR),
    *(12 * _HOUR, 16 * _HOUR, 20 * _HOUR, _DAY, 2 * _DAY, 3 * _DAY, 5 * _DAY, 10 * _DAY),
    *(15 * _DAY, 20 * _DAY, 25 * _DAY, 30 * _DAY),
)


def _counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    return Counter(f"karpenter_{name}", doc, labels, registry=REGISTRY)


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
    return Gauge(f"karpenter_{name}", doc, labels, registry=REGISTRY)


def _histogram(
    name: str, doc: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = ()
) -> Histogram:
    return Histogram(
        f"karpenter_{name}", doc, labels, registry=REGISTRY, buckets=buckets or _DURATION_BUCKETS
    )


def _summary(name: str, doc: str, labels: tuple[str, ...] = ()) -> Summary:
    return Summary(f"karpenter_{name}", doc, labels, registry=REGISTRY)


# NodeClaims and nodes
NODECLAIMS_CREATED = _counter(
    "nodeclaims_created_total",
    "NodeClaims created, by reason, NodePool and whether minValues was relaxed.",
    ("reason", "nodepool", "min_values_relaxed"),
)
NODECLAIMS_TERMINATED = _counter(
    "nodeclaims_terminated_total",
    "NodeClaims terminated, by NodePool, capacity type and zone.",
    ("nodepool", "capacity_type", "zone"),
)
NODECLAIMS_DISRUPTED = _counter(
    "nodeclaims_disrupted_total",
    "NodeClaims disrupted, by reason, NodePool and capacity type.",
    ("reason", "nodepool", "capacity_type"),
)
NODECLAIMS_TERMINATION_DURATION = _histogram(
    "nodeclaims_termination_duration_seconds",
    "Time from a NodeClaim's deletion until its finalizer is removed.",
    ("nodepool",),
    tuple(float(2**i) for i in range(12)),
)
NODES_CREATED = _counter("nodes_created_total", "Nodes registered.", ("nodepool", "zone"))
NODES_TERMINATED = _counter("nodes_terminated_total", "Nodes terminated.", ("nodepool", "zone"))
NODES_DRAINED = _counter("nodes_drained_total", "Nodes drained.", ("nodepool",))
NODES_TERMINATION_DURATION = _summary(
    "nodes_termination_duration_seconds",
    "Time from a node's deletion until its finalizer is removed.",
    ("nodepool",),
)
NODES_LIFETIME = _histogram(
    "nodes_lifetime_duration_seconds",
    "A terminated node's lifetime, from its creation.",
    ("nodepool",),
    _LIFETIME_BUCKETS,
)
NODECLAIMS_UNHEALTHY_DISRUPTED = _counter(
    "nodeclaims_unhealthy_disrupted_total",
    "Unhealthy NodeClaims disrupted by node repair, by the node condition, NodePool, capacity type "
    "and image.",
    ("condition", "nodepool", "capacity_type", "image_id"),
)
PODS_EVICTION_REQUESTS = _counter(
    "pods_eviction_requests_total", "Pod eviction requests, by response code.", ("code",)
)
PODS_DRAINED = _counter(
    "pods_drained_total",
    "Pods evicted while draining a node, by the node's disruption reason.",
    ("reason",),
)
PODS_STARTUP_DURATION = _summary(
    "pods_startup_duration_seconds", "Time from a pod's creation until it is running."
)

# Scheduling
SCHEDULING_DURATION = _histogram(
    "scheduler_scheduling_duration_seconds", "Duration of scheduling simulations.", ("controller",)
)
SCHEDULER_QUEUE_DEPTH = _gauge(
    "scheduler_queue_depth",
    "Pods waiting to be scheduled in the current run.",
    ("controller", "scheduling_id"),
)
UNSCHEDULABLE_PODS = _gauge(
    "scheduler_unschedulable_pods_count",
    "Pods the last scheduling run could not place.",
    ("controller",),
)

# Cloud provider
CLOUDPROVIDER_DURATION = Histogram(
    "karpenter_cloudprovider_duration_seconds",
    "Duration of cloud provider calls.",
    ("controller", "method", "provider"),
    registry=REGISTRY,
    buckets=_DEFAULT_BUCKETS,
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
    "Nodes the NodePool's budgets allow to be disrupting at once, by disruption reason.",
    ("nodepool", "reason"),
)
NODEPOOLS_NODES_CONSUMING_BUDGETS = _gauge(
    "nodepools_nodes_consuming_budgets",
    "The NodePool's nodes being disrupted now, which count against its budgets.",
    ("nodepool", "reason"),
)

# Voluntary disruption
DISRUPTION_FAILED_VALIDATIONS = _counter(
    "voluntary_disruption_failed_validations_total",
    "Disruption commands that failed validation, by consolidation type.",
    ("consolidation_type",),
)
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
    "Duration of one disruption evaluation, by the reason it decided on.",
    ("reason", "consolidation_type"),
)

# operatorpkg's status metrics (``operator_`` prefix): the generic forms carry group and kind;
# the per-kind forms (``operator_<kind>_...``) are built by ``status_metrics``.
_CONDITION_BUCKETS = tuple(0.5 * 2**i for i in range(15))
_OBJECT = ("namespace", "name")
_CONDITION = ("type", "status", "reason")
_KIND = ("group", "kind")
_COUNT_DOC = "1 for each condition an object has, by type, status and reason."
_CURRENT_STATUS_DOC = "Seconds a condition has had its current status."
_TRANSITIONS_DOC = "Condition transitions observed, by type, status and reason."
_TRANSITION_SECONDS_DOC = "Seconds a condition had a status before it changed."
_TERMINATING_DOC = "Seconds an object has been terminating."
_TERMINATION_DOC = "Seconds from an object's deletion until it is gone."
STATUS_CONDITION_COUNT = Gauge(
    "operator_status_condition_count",
    _COUNT_DOC,
    (*_OBJECT, *_CONDITION, *_KIND),
    registry=REGISTRY,
)
STATUS_CONDITION_CURRENT_STATUS = Gauge(
    "operator_status_condition_current_status_seconds",
    _CURRENT_STATUS_DOC,
    (*_OBJECT, *_CONDITION, *_KIND),
    registry=REGISTRY,
)
STATUS_CONDITION_TRANSITIONS = Counter(
    "operator_status_condition_transitions_total",
    _TRANSITIONS_DOC,
    (*_CONDITION, *_KIND),
    registry=REGISTRY,
)
STATUS_CONDITION_TRANSITION_SECONDS = Histogram(
    "operator_status_condition_transition_seconds",
    _TRANSITION_SECONDS_DOC,
    ("type", "status", *_KIND),
    registry=REGISTRY,
    buckets=_DEFAULT_BUCKETS,
)
TERMINATION_CURRENT_TIME = Gauge(
    "operator_termination_current_time_seconds",
    _TERMINATING_DOC,
    (*_OBJECT, *_KIND),
    registry=REGISTRY,
)
TERMINATION_DURATION = Histogram(
    "operator_termination_duration_seconds",
    _TERMINATION_DOC,
    _KIND,
    registry=REGISTRY,
    buckets=_DEFAULT_BUCKETS,
)


def _nodepool(labels: Mapping[str, str]) -> str:
    return labels.get(wk.NODEPOOL, "")


def nodeclaim_created(reason: str, nodepool: str, min_values_relaxed: bool = False) -> None:
    """Count a NodeClaim created for ``reason`` ("provisioned", or a disruption reason)."""
    NODECLAIMS_CREATED.labels(reason, nodepool, str(min_values_relaxed).lower()).inc()


def nodeclaim_disrupted(reason: str, labels: Mapping[str, str]) -> None:
    """Count a NodeClaim disrupted for ``reason``; ``labels`` are its (or its Node's) labels."""
    NODECLAIMS_DISRUPTED.labels(reason, _nodepool(labels), labels.get(wk.CAPACITY_TYPE, "")).inc()


def nodeclaim_terminated(labels: Mapping[str, str], deleted: float | None) -> None:
    """Count a NodeClaim whose finalizer was removed; ``deleted`` is its deletion time."""
    nodepool = _nodepool(labels)
    NODECLAIMS_TERMINATED.labels(
        nodepool, labels.get(wk.CAPACITY_TYPE, ""), labels.get(wk.TOPOLOGY_ZONE, "")
    ).inc()
    if deleted is not None:
        NODECLAIMS_TERMINATION_DURATION.labels(nodepool).observe(max(time.time() - deleted, 0.0))


def node_created(labels: Mapping[str, str]) -> None:
    """Count a node registered; ``labels`` are its NodeClaim's."""
    NODES_CREATED.labels(_nodepool(labels), labels.get(wk.TOPOLOGY_ZONE, "")).inc()


def node_terminated(labels: Mapping[str, str], created: float, deleted: float | None) -> None:
    """Count a node whose finalizer was removed, with its termination time and lifetime."""
    nodepool = _nodepool(labels)
    NODES_TERMINATED.labels(nodepool, labels.get(wk.TOPOLOGY_ZONE, "")).inc()
    now = time.time()
    if deleted is not None:
        NODES_TERMINATION_DURATION.labels(nodepool).observe(max(now - deleted, 0.0))
    if created:
        NODES_LIFETIME.labels(nodepool).observe(max(now - created, 0.0))


def _drop(metric: Gauge, names: tuple[str, ...], key: str, value: str) -> None:
    """Remove ``metric``'s series (label names ``names``) whose ``key`` label is ``value``."""
    matching = [
        sample.labels
        for family in metric.collect()
        for sample in family.samples
        if sample.labels.get(key) == value
    ]
    for labels in matching:
        metric.remove(*(labels[name] for name in names))


def scheduling_started(controller: str, queue_depth: int) -> None:
    """Record the pods a scheduling run starts with, under a new ``scheduling_id`` (the previous
    run's series is dropped, as upstream does)."""
    _drop(SCHEDULER_QUEUE_DEPTH, ("controller", "scheduling_id"), "controller", controller)
    SCHEDULER_QUEUE_DEPTH.labels(controller, str(uuid.uuid4())).set(queue_depth)


_NODEPOOL_GAUGES: tuple[tuple[Gauge, tuple[str, ...]], ...] = (
    (NODEPOOLS_USAGE, ("nodepool", "resource_type")),
    (NODEPOOLS_LIMIT, ("nodepool", "resource_type")),
    (NODEPOOLS_ALLOWED_DISRUPTIONS, ("nodepool", "reason")),
    (NODEPOOLS_NODES_CONSUMING_BUDGETS, ("nodepool", "reason")),
)


def forget_nodepool(nodepool: str) -> None:
    """Drop every per-NodePool gauge series of a NodePool that is gone."""
    for gauge, names in _NODEPOOL_GAUGES:
        _drop(gauge, names, "nodepool", nodepool)


# Upstream's method names for the CloudProvider calls that are timed.
_PROVIDER_METHODS = {
    "create": "Create",
    "delete": "Delete",
    "get": "Get",
    "list": "List",
    "get_instance_types": "GetInstanceTypes",
    "is_drifted": "IsDrifted",
    "repair_policies": "RepairPolicies",
    "supported_node_classes": "GetSupportedNodeClasses",
    "node_class_readiness": "NodeClassReadiness",
}


def error_label(error: BaseException) -> str:
    """The ``error`` label: upstream's name for the provider errors it tells apart, else ""."""
    if isinstance(error, InsufficientCapacity):
        return "InsufficientCapacityError"
    if isinstance(error, NodeClaimNotFound):
        return "NodeClaimNotFoundError"
    if isinstance(error, NodeClassNotReady):
        return "NodeClassNotReadyError"
    return ""


class _Instrumented:
    """A CloudProvider whose interface methods are timed and their errors counted."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider
        self.name = provider.name

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(self._provider, attribute)
        method = _PROVIDER_METHODS.get(attribute)
        if method is None:
            return value
        return self._timed(method, value)

    def _timed(self, method: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            controller = str(logs.context().get("controller", ""))
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            except Exception as error:
                CLOUDPROVIDER_ERRORS.labels(controller, method, self.name, error_label(error)).inc()
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


def snake_case(name: str) -> str:
    """``MemoryPressure`` -> ``memory_pressure``, as upstream turns condition types into labels."""
    snake = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", snake).lower()


def _label_name(key: str) -> str:
    return re.sub(r"[/.-]", "_", key)


def _per_kind(metric_type: Any, name: str, doc: str, labels: tuple[str, ...], **kw: Any) -> Any:
    """Register a per-kind metric, replacing one of the same name built earlier (tests build
    the controllers more than once)."""
    previous = _PER_KIND.pop(name, None)
    if previous is not None:
        REGISTRY.unregister(previous)
    metric = metric_type(name, doc, labels, registry=REGISTRY, **kw)
    _PER_KIND[name] = metric
    return metric


_PER_KIND: dict[str, Any] = {}


def _child(metric: Any, values: tuple[str, ...]) -> Any:
    return metric.labels(*values) if values else metric


class StatusMetrics:
    """One kind's condition and termination metrics, as operatorpkg's status controller exports
    them: ``operator_<kind>_status_condition_*`` and ``operator_<kind>_termination_*`` with the
    object labels ``labels`` (label keys such as ``karpenter.sh/nodepool``) added, and, when
    ``generic``, the ``operator_status_condition_*`` and ``operator_termination_*`` forms
    labelled with group and kind."""

    def __init__(self, group: str, kind: str, labels: Sequence[str], generic: bool) -> None:
        self.group, self.kind, self.generic = group, kind, generic
        prefix = f"operator_{kind.lower()}"
        extra = tuple(re.sub(r"[/.-]", "_", key) for key in labels)
        gauge = (*_OBJECT, *_CONDITION, *extra)
        self.count = _per_kind(Gauge, f"{prefix}_status_condition_count", _COUNT_DOC, gauge)
        self.current = _per_kind(
            Gauge,
            f"{prefix}_status_condition_current_status_seconds",
            _CURRENT_STATUS_DOC,
            gauge,
        )
        self.transitions = _per_kind(
            Counter,
            f"{prefix}_status_condition_transitions",
            _TRANSITIONS_DOC,
            (*_CONDITION, *extra),
        )
        self.transition_seconds = _per_kind(
            Histogram,
            f"{prefix}_status_condition_transition_seconds",
            _TRANSITION_SECONDS_DOC,
            ("type", "status", *extra),
            buckets=_CONDITION_BUCKETS,
        )
        self.terminating = _per_kind(
            Gauge,
            f"{prefix}_termination_current_time_seconds",
            _TERMINATING_DOC,
            (*_OBJECT, *extra),
        )
        self.termination = _per_kind(
            Histogram,
            f"{prefix}_termination_duration_seconds",
            _TERMINATION_DOC,
            extra,
            buckets=_CONDITION_BUCKETS,
        )

    def condition(
        self,
        obj: tuple[str, str],
        condition: tuple[str, str, str],
        values: tuple[str, ...],
        seconds: float,
    ) -> None:
        """Export a condition an object has, and how long it has had its status."""
        self.count.labels(*obj, *condition, *values).set(1)
        self.current.labels(*obj, *condition, *values).set(seconds)
        if self.generic:
            STATUS_CONDITION_COUNT.labels(*obj, *condition, self.group, self.kind).set(1)
            STATUS_CONDITION_CURRENT_STATUS.labels(*obj, *condition, self.group, self.kind).set(
                seconds
            )

    def forget_condition(
        self,
        obj: tuple[str, str],
        condition: tuple[str, str, str],
        values: tuple[str, ...],
        changed: bool,
    ) -> None:
        """Drop an object's condition series; the generic ones (which do not carry the
        object's labels) only if the condition ``changed``."""
        for metric, generic in (
            (self.count, STATUS_CONDITION_COUNT),
            (self.current, STATUS_CONDITION_CURRENT_STATUS),
        ):
            metric.remove(*obj, *condition, *values)
            if self.generic and changed:
                generic.remove(*obj, *condition, self.group, self.kind)

    def transition(
        self,
        condition: tuple[str, str, str],
        values: tuple[str, ...],
        previous: tuple[str, float] | None,
    ) -> None:
        """Count a condition reaching a status; ``previous`` is the status it had before and
        for how many seconds, when that was seen."""
        self.transitions.labels(*condition, *values).inc()
        if self.generic:
            STATUS_CONDITION_TRANSITIONS.labels(*condition, self.group, self.kind).inc()
        if previous is None:
            return
        status, seconds = previous
        self.transition_seconds.labels(condition[0], status, *values).observe(seconds)
        if self.generic:
            STATUS_CONDITION_TRANSITION_SECONDS.labels(
                condition[0], status, self.group, self.kind
            ).observe(seconds)

    def terminating_for(
        self, obj: tuple[str, str], values: tuple[str, ...], seconds: float
    ) -> None:
        """Export how long an object has been terminating."""
        self.terminating.labels(*obj, *values).set(seconds)
        if self.generic:
            TERMINATION_CURRENT_TIME.labels(*obj, self.group, self.kind).set(seconds)

    def terminated(
        self, obj: tuple[str, str], values: tuple[str, ...], seconds: float | None
    ) -> None:
        """An object is gone: drop its termination series and, if it was seen terminating,
        record how long its termination took."""
        self.terminating.remove(*obj, *values)
        if self.generic:
            TERMINATION_CURRENT_TIME.remove(*obj, self.group, self.kind)
        if seconds is None:
            return
        _child(self.termination, values).observe(seconds)
        if self.generic:
            TERMINATION_DURATION.labels(self.group, self.kind).observe(seconds)
