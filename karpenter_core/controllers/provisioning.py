"""Provisioning: batch pending pods, run the scheduler, create NodeClaims, nominate pods.

The decisions are pure (``limit_check``, ``without_preemptors``, ``nodeclaims.nodeclaim_manifest``
and those of ``karpenter_core.scheduling.cluster``, which ``simulate`` shares);
``Provisioner.provision`` does the I/O around them: snapshot, create, events, nominations.

Pods the kube-scheduler has not decided on yet are provisioned with those it marked
Unschedulable: the scheduler places every pending pod on existing nodes and in-flight NodeClaims
first, so a launch is only for pods that fit nowhere, and nothing waits for the verdict. As
upstream's, a pass also places the pods of nodes being deleted (``rescheduled_pods``), so their
new room is coming up before they are evicted; a node being deleted or marked for deletion starts
a pass every ``RESYNC_PERIOD`` while it is there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import format_quantity, to_milli
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.validation import instance_types_of
from karpenter_core.controllers.nodeclaims import nodeclaim_manifest
from karpenter_core.controllers.objects import NODECLAIMS, name_of
from karpenter_core.operator import metrics
from karpenter_core.operator.events import Reason
from karpenter_core.scheduling.cluster import (
    NODES,
    add_usage,
    claim_capacity,
    not_launchable,
    rescheduled_pods,
    with_expected_allocatable,
)
from karpenter_core.scheduling.scheduler import NewNodeClaim, Results, schedule
from karpenter_core.state.cluster import ClusterPod

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.types import InstanceType
    from karpenter_core.controllers.context import Context
    from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo

__all__ = [
    "Batcher",
    "LimitCheck",
    "Provisioner",
    "limit_check",
    "without_preemptors",
]

log = logging.getLogger("karpenter.provisioner")

RESYNC_PERIOD = 5.0
"""Seconds between checks for pending pods no batch is handling and for nodes being disrupted."""

MIN_NOMINATION = 10.0
"""Seconds a pod stays nominated to its node or NodeClaim at least (refreshed by every pass):
the window is twice ``BATCH_MAX_DURATION``, no shorter than this, as upstream's."""

CREATE_WORKERS = 16
"""NodeClaims of one pass created at once, at most."""


class Batcher:
    """Collects triggers into batches: a batch ends ``idle`` seconds after the last trigger that
    named something new to the batch, or ``maximum`` seconds after the first, whichever comes
    first. Repeated triggers for the same key (a pending pod updated again) do not extend it."""

    def __init__(
        self, idle: float, maximum: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``clock`` gives seconds (monotonic) for the idle and maximum windows."""
        self.idle = idle
        self.maximum = maximum
        self._clock = clock
        self._cond = threading.Condition()
        self._first: float | None = None
        self._last = 0.0
        self._keys: set[str] = set()

    def trigger(self, key: str = "") -> None:
        """Something may need capacity (``key``: what, if known: a pending pod's key, or the
        name of a node being deleted)."""
        with self._cond:
            now = self._clock()
            if self._first is None:
                self._first = now
                self._last = now
            elif not key or key not in self._keys:
                self._last = now
            if key:
                self._keys.add(key)
            self._cond.notify_all()

    def ready(self) -> bool:
        """Whether a batch is complete now; if so, the next trigger starts a new one."""
        with self._cond:
            return self._take() is None

    def _take(self) -> float | None:
        """None if a batch is complete (and taken); else seconds until it may be (inf: none
        has started)."""
        if self._first is None:
            return float("inf")
        left = min(self._last + self.idle, self._first + self.maximum) - self._clock()
        if left > 0:
            return left
        self._first = None
        self._keys.clear()
        return None

    def wait(self, stop: threading.Event, poll: float = 0.2, timeout: float | None = None) -> bool:
        """Block until a batch is complete (True), or ``stop`` is set or ``timeout`` seconds
        pass without a batch starting (False). A batch begun before the call (during the last
        pass) has its windows restarted by it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._first is not None:
                # Triggers that came during the last pass start this batch now, as upstream's
                # do: its windows count from here, so pods that keep arriving join it.
                self._first = self._last = self._clock()
            while not stop.is_set():
                left = self._take()
                if left is None:
                    return True
                if self._first is None and deadline is not None and time.monotonic() >= deadline:
                    return False
                self._cond.wait(min(left, poll))
        return False


def without_preemptors(
    pending: Sequence[PodInfo], awaiting: Set[str], nodes: Iterable[NodeInfo]
) -> list[PodInfo]:
    """The pending pods to provision for, leaving out those still ``awaiting`` the
    kube-scheduler (keys) that could preempt a bound pod (one of lower priority is bound): the
    kube-scheduler may make room for them by preemption, so they wait for its verdict."""
    lowest = min((pod.priority for node in nodes for pod in node.pods), default=None)
    if lowest is None:
        return list(pending)
    return [pod for pod in pending if pod.key not in awaiting or pod.priority <= lowest]


@dataclass(frozen=True, slots=True)
class LimitCheck:
    """The launch options within a NodePool's limits, or why none is."""

    instance_types: list[InstanceType]
    blocked: str | None = None


def _show(name: str, amount: int) -> str:
    return format_quantity(Fraction(amount, 1000), binary=name == "memory")


def limit_check(
    nodepool: NodePool, options: Sequence[InstanceType], used: Mapping[str, int]
) -> LimitCheck:
    """Which of ``options`` a new NodeClaim of ``nodepool`` may launch without exceeding its
    limits, given what the NodePool ``used`` already (its entry of ``cluster.limit_usage``, the
    rule the scheduler planned with)."""
    limits = {name: to_milli(value) for name, value in nodepool.spec.limits.items()}
    if not limits:
        return LimitCheck(list(options))
    name = nodepool.metadata.name or ""
    count = used.get(NODES, 0)
    if NODES in limits and count + 1000 > limits[NODES]:
        return LimitCheck(
            [],
            f"NodePool {name} limit nodes={_show(NODES, limits[NODES])} reached "
            f"({count // 1000} nodes)",
        )
    kept = []
    blocking: str | None = None
    for option in options:
        over = next(
            (
                resource
                for resource, limit in limits.items()
                if resource != NODES
                and used.get(resource, 0) + option.capacity.get(resource, 0) > limit
            ),
            None,
        )
        if over is None:
            kept.append(option)
        elif blocking is None:
            blocking = over
    if kept or blocking is None:
        return LimitCheck(kept)
    return LimitCheck(
        [],
        f"NodePool {name} limit {blocking}={_show(blocking, limits[blocking])} would be exceeded "
        f"({_show(blocking, used.get(blocking, 0))} in use)",
    )


class Provisioner:
    """Turns batches of pending pods into NodeClaims."""

    name = "provisioning"

    def __init__(self, context: Context) -> None:
        self.context = context
        settings = context.settings
        self.batcher = Batcher(settings.batch_idle_duration, settings.batch_max_duration)
        self.nomination = max(2 * settings.batch_max_duration, MIN_NOMINATION)
        """Seconds a pass's nominations last."""
        context.state.on_pending_pod(self._on_pending)

    def _on_pending(self, pod: PodInfo) -> None:
        """A pending pod starts or extends a batch unless it waits for a node or NodeClaim a
        previous batch chose for it that is still coming up."""
        if self._displaced(pod):
            self.batcher.trigger(pod.key)

    def _displaced(self, pod: PodInfo) -> bool:
        """Not nominated, or nominated to capacity that is up and still did not take it (the
        kube-scheduler gave its place to a pod we had not seen yet)."""
        state = self.context.state
        target = state.nomination(pod.key)
        if target is None:
            return True
        node = state.node(target)
        if node is None:
            claim = state.nodeclaim(target)
            if claim is None:
                return True
            node = state.node_for_nodeclaim(claim)
            if node is None:
                return False
        return node.ready() and node.labels.get(wk.NODE_INITIALIZED) == "true"

    def run(self, stop: threading.Event) -> None:
        """Provision a batch each time one completes, until ``stop`` is set. Every
        ``RESYNC_PERIOD`` without a batch, pending pods whose nomination ran out (the node they
        were meant for filled up with other pods) start one, and so does a node being deleted
        or marked for deletion (``ClusterState.being_deleted``: its pods are provisioned for).
        A ``karpenter.sh/disrupted`` taint alone (one left behind) does not."""
        self.batcher.trigger()  # pods that were pending before we started
        while not stop.is_set():
            if not self.batcher.wait(stop, timeout=RESYNC_PERIOD):
                for pod in self.context.state.pending_pods(awaiting=True):
                    self._on_pending(pod)
                for name in self.context.state.being_deleted():
                    self.batcher.trigger(name)
                continue
            while not self.context.state.wait_for_sync(0.5):
                if stop.is_set():
                    return
            try:
                self.provision()
            except Exception:
                log.exception("provisioning failed; retrying with the next batch")
                self.batcher.trigger()

    def provision(self) -> Results | None:
        """One pass: schedule the pending pods and create the NodeClaims they need."""
        context = self.context
        state = context.state
        nodepools = sorted(
            (np for np in state.nodepools() if not_launchable(np) is None),
            key=lambda np: (-(np.spec.weight or 0), np.metadata.name or ""),
        )
        instance_types = {
            np.metadata.name or "": instance_types_of(context.provider, np) for np in nodepools
        }
        catalog = {it.name: it for types in instance_types.values() for it in types}
        started = time.perf_counter()
        # Nodes and pending pods are taken at one moment, so no pod counts twice.
        snapshot = state.snapshot(instance_types, awaiting=True)
        awaiting = {
            pod.key
            for pod in snapshot.pending
            if isinstance(pod, ClusterPod) and not pod.unschedulable
        }
        snapshot.pending = without_preemptors(snapshot.pending, awaiting, snapshot.nodes)
        rescheduled = rescheduled_pods(snapshot, context.now().timestamp())
        snapshot.pending += rescheduled
        if not snapshot.pending:
            return None
        snapshot.nodeclaims = with_expected_allocatable(snapshot.nodeclaims, catalog)
        metrics.scheduling_started(self.name, len(snapshot.pending))
        results = schedule(
            snapshot,
            ignore_preferences=context.settings.preference_policy == "Ignore",
            min_values_strict=context.settings.min_values_policy == "Strict",
        )
        metrics.SCHEDULING_DURATION.labels(self.name).observe(time.perf_counter() - started)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "placements",
                extra={
                    "existing": {name: len(pods) for name, pods in results.existing.items()},
                    "nodes": {
                        n.name: [n.allocatable.get("cpu"), len(n.pods)]
                        for n in snapshot.nodes
                        if n.nodepool
                    },
                    "claims": {
                        c.metadata.name: str(c.status.allocatable.get("cpu"))
                        for c in snapshot.nodeclaims
                    },
                },
            )
        for warning in results.warnings:
            log.info("scheduler: %s", warning)
        until = time.time() + self.nomination
        ready = {node.name for node in snapshot.nodes if node.initialized}
        for node_name, pods in results.existing.items():
            for pod in pods:
                if pod.key in awaiting and node_name in ready:
                    continue  # the kube-scheduler is placing it on room that is up
                state.nominate(pod.key, node_name, until)
                context.events.publish(
                    pod, "Normal", Reason.NOMINATED, f"Pod should schedule on: node/{node_name}"
                )
        pools = {np.metadata.name or "": np for np in nodepools}
        self._create(results, pools, catalog, until)
        pending = {pod.key: pod for pod in snapshot.pending}
        for key, reason in results.unschedulable.items():
            if key in pending:
                context.events.publish(
                    pending[key],
                    "Warning",
                    Reason.FAILED_SCHEDULING,
                    f"Failed to schedule pod, {reason}",
                )
        metrics.UNSCHEDULABLE_PODS.labels(self.name).set(len(results.unschedulable))
        log.info(
            "provisioned",
            extra={
                "pods": len(snapshot.pending),
                "from_deleting_nodes": len(rescheduled),
                "nodeclaims": len(results.new_nodeclaims),
                "on_existing": sum(len(pods) for pods in results.existing.values()),
                "unschedulable": len(results.unschedulable),
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
        return results

    def _create(
        self,
        results: Results,
        nodepools: Mapping[str, NodePool],
        catalog: Mapping[str, InstanceType],
        until: float,
    ) -> None:
        """Create the NodeClaims of ``results`` within their NodePools' limits (counted now, by
        the rule the scheduler planned with, each checked counting those before it), all at
        once, then nominate their pods. A failed create is raised after the others are
        recorded."""
        context = self.context
        usage = context.state.limit_usage(catalog)
        launches: list[tuple[NewNodeClaim, dict[str, Any], int]] = []
        for claim in results.new_nodeclaims:
            nodepool = nodepools[claim.nodepool]
            used = usage.setdefault(claim.nodepool, {})
            check = limit_check(nodepool, claim.instance_types, used)
            if check.blocked is not None:
                context.events.publish(
                    nodepool, "Warning", Reason.NODEPOOL_LIMIT_EXCEEDED, check.blocked
                )
                for pod in claim.pods:
                    results.unschedulable[pod.key] = check.blocked
                log.info("not launching for %d pods: %s", len(claim.pods), check.blocked)
                continue
            manifest = nodeclaim_manifest(claim, nodepool.to_manifest(), check.instance_types)
            add_usage(used, claim_capacity(NodeClaim.from_manifest(manifest), catalog))
            launches.append((claim, manifest, len(check.instance_types)))
        if not launches:
            return
        with ThreadPoolExecutor(min(len(launches), CREATE_WORKERS), "nodeclaim-create") as pool:
            futures = [pool.submit(context.client.create, NODECLAIMS, m) for _, m, _ in launches]
        failure: BaseException | None = None
        for (claim, _, options), future in zip(launches, futures, strict=True):
            if (error := future.exception()) is not None:
                failure = failure or error
                continue
            created = future.result()
            context.state.update_nodeclaim(created)
            name = name_of(created)
            metrics.nodeclaim_created("provisioned", claim.nodepool, claim.min_values_relaxed)
            log.info(
                "created nodeclaim",
                extra={
                    "nodeclaim": name,
                    "nodepool": claim.nodepool,
                    "pods": len(claim.pods),
                    "instance_types": options,
                    "cheapest": claim.instance_type.name,
                },
            )
            for pod in claim.pods:
                context.state.nominate(pod.key, name, until)
                context.events.publish(
                    pod, "Normal", Reason.NOMINATED, f"Pod should schedule on: nodeclaim/{name}"
                )
        if failure is not None:
            raise failure
