"""Termination: a deleted NodeClaim or Node is drained, its instance deleted, its finalizers taken off.

Deleting a NodeClaim deletes its Node; the Node's finalizer holds it while Karpenter taints it
``karpenter.sh/disrupted:NoSchedule``, drains it through the Eviction API tier by tier
(non-critical non-daemon, non-critical daemon, critical non-daemon, critical daemon),
respecting PodDisruptionBudgets, and leaves pods annotated ``karpenter.sh/do-not-disrupt`` alone
until the NodeClaim's terminationGracePeriod runs out (they are then deleted, as are pods whose
own grace period would overrun that deadline). Then the instance is deleted until the provider
says it is gone, and the finalizers come off: the Node's, then the NodeClaim's. A NotReady Node
whose instance is already gone just loses its finalizer.

``drain_plan`` decides, purely, what to do with a node's pods at a moment.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.duration import parse_duration
from karpenter_core.apis.v1.nodeclaim import CONDITION_DISRUPTION_REASON
from karpenter_core.cloudprovider.types import NodeClaimNotFound
from karpenter_core.controllers.objects import node_path, nodeclaim_path, pod_path, status_condition
from karpenter_core.controllers.runtime import KeyedWorkers, LoopController
from karpenter_core.controllers.writes import remove_finalizer
from karpenter_core.operator import metrics
from karpenter_core.operator.events import Reason
from karpenter_core.operator.kube import (
    ApiError,
    Conflict,
    NotFound,
    TooManyRequests,
    retry_on_conflict,
)
from karpenter_core.scheduling.taints import Taint, untolerated

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.controllers.context import Context
    from karpenter_core.state.cluster import ClusterNode, ClusterPod

__all__ = [
    "DISRUPTED_TAINT",
    "DrainPlan",
    "TerminationController",
    "drain_plan",
    "drain_reason",
    "tier_of",
]

log = logging.getLogger("karpenter.termination")

DISRUPTED_TAINT = Taint(wk.DISRUPTED_TAINT_KEY, "", wk.DISRUPTED_TAINT_EFFECT)
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})


def tier_of(pod: ClusterPod) -> int:
    """Drain order: 0 non-critical non-daemon, 1 non-critical daemon, 2 critical non-daemon,
    3 critical daemon."""
    critical = pod.priority_class in CRITICAL_PRIORITY_CLASSES
    return 2 * critical + pod.is_daemon()


def _drainable(pod: ClusterPod) -> bool:
    """Pods the drain waits for: not mirror pods, not finished, not tolerating the taint."""
    return (
        not pod.is_mirror()
        and not pod.is_terminal()
        and untolerated((DISRUPTED_TAINT,), pod.tolerations) is not None
    )


@dataclass(slots=True)
class DrainPlan:
    """What to do now: pods to evict, pods to delete (with grace seconds), pods waited for."""

    evict: list[ClusterPod] = field(default_factory=list)
    delete: list[tuple[ClusterPod, int]] = field(default_factory=list)
    waiting: int = 0

    @property
    def drained(self) -> bool:
        """Nothing left on the node that the drain waits for."""
        return not (self.evict or self.delete or self.waiting)


def drain_plan(pods: Iterable[ClusterPod], now: datetime, deadline: datetime | None) -> DrainPlan:
    """The drain step for a node's pods at ``now``, given the termination deadline (None: none).

    Only the first tier that still has pods is worked on. A pod is deleted instead of evicted
    once its own grace period would overrun the deadline (grace clamped to what is left);
    do-not-disrupt pods wait for that moment.
    """
    plan = DrainPlan()
    remaining = [pod for pod in pods if _drainable(pod)]
    if not remaining:
        return plan
    tier = min(tier_of(pod) for pod in remaining)
    for pod in remaining:
        if tier_of(pod) != tier or pod.terminating:
            plan.waiting += 1
            continue
        if deadline is not None and now >= deadline - timedelta(seconds=pod.grace_period):
            left = max(0, int((deadline - now).total_seconds()))
            plan.delete.append((pod, min(pod.grace_period, left)))
        elif pod.do_not_disrupt_active(now.timestamp()):
            plan.waiting += 1
        else:
            plan.evict.append(pod)
    return plan


def drain_reason(nodeclaim: NodeClaim | None) -> str:
    """The ``reason`` of pods drained from a node: its NodeClaim's DisruptionReason when True,
    else "Forceful Termination" (a NodeClaim deleted by hand); "" without a NodeClaim."""
    if nodeclaim is None:
        return ""
    found = status_condition(nodeclaim, CONDITION_DISRUPTION_REASON)
    if found is not None and found.status == "True":
        return found.reason
    return "Forceful Termination"


def termination_deadline(nodeclaim: NodeClaim | None) -> datetime | None:
    """When the NodeClaim's terminationGracePeriod ends (from its deletion), or None."""
    if nodeclaim is None or nodeclaim.metadata.deletion_timestamp is None:
        return None
    grace = nodeclaim.spec.termination_grace_period
    if not grace:
        return None
    return nodeclaim.metadata.deletion_timestamp + parse_duration(grace)


class TerminationController(LoopController):
    """Finalizes deleted NodeClaims and Nodes."""

    name = "termination"

    def __init__(self, context: Context, period: float = 1.0, workers: int = 16) -> None:
        super().__init__(context.state)
        self.context = context
        self.period = period
        self.workers = KeyedWorkers("termination", workers)

    def close(self) -> None:
        """Stop the workers."""
        self.workers.shutdown()

    def reconcile(self) -> None:
        """Work on every deleting Node and NodeClaim that still carries our finalizer."""
        state = self.context.state
        keys: set[Any] = set()
        for node in state.nodes():
            if node.deletion_time is not None and wk.TERMINATION_FINALIZER in node.finalizers:
                keys.add(("node", node.name))
                self.workers.submit(("node", node.name), partial(self._node, node.name))
        for claim in state.nodeclaims():
            name = claim.metadata.name or ""
            if (
                claim.metadata.deletion_timestamp is not None
                and wk.TERMINATION_FINALIZER in claim.metadata.finalizers
            ):
                keys.add(("nodeclaim", name))
                self.workers.submit(("nodeclaim", name), partial(self._nodeclaim, name))
        self.workers.forget(keys)

    # -- NodeClaims -----------------------------------------------------------------------

    def _nodeclaim(self, name: str) -> float | None:
        context = self.context
        claim = context.state.nodeclaim(name)
        if claim is None or claim.metadata.deletion_timestamp is None:
            return None
        node = context.state.node_for_nodeclaim(claim)
        if node is not None:
            if node.deletion_time is None:
                log.info("deleting node", extra={"nodeclaim": name, "node": node.name})
                try:
                    context.client.delete(node_path(node.name))
                except NotFound:
                    return 0.2
            return None  # the Node's own termination takes it from here
        if not self._instance_gone(claim):
            return context.settings.nodeclaim_requeue
        if remove_finalizer(
            context, nodeclaim_path(name), claim.to_manifest(), wk.TERMINATION_FINALIZER
        ):
            deleted = claim.metadata.deletion_timestamp
            metrics.nodeclaim_terminated(
                claim.metadata.labels, deleted.timestamp() if deleted is not None else None
            )
            log.info("nodeclaim terminated", extra={"nodeclaim": name})
        context.state.delete_nodeclaim(name)
        return None

    def _instance_gone(self, claim: NodeClaim) -> bool:
        """Ask the provider to delete the instance; True once it reports it gone."""
        try:
            self.context.provider.delete(claim)
        except NodeClaimNotFound:
            return True
        return False

    # -- Nodes ----------------------------------------------------------------------------

    def _node(self, name: str) -> float | None:
        context = self.context
        state = context.state
        node = state.node(name)
        if node is None or node.deletion_time is None:
            return None
        claim = state.nodeclaim_for_node(node)
        nodepool = node.labels.get(wk.NODEPOOL, "")
        if claim is not None and claim.metadata.deletion_timestamp is None:
            with contextlib.suppress(NotFound):
                context.client.delete(nodeclaim_path(claim.metadata.name or ""))
            return 0.2
        if not node.ready() and claim is not None and self._gone(node):
            log.info("node not ready and its instance is gone", extra={"node": name})
            self._finish_node(node, nodepool)
            return None
        if DISRUPTED_TAINT not in node.taints:
            self._taint(name)
        plan = drain_plan(state.pods_on(name), context.now(), termination_deadline(claim))
        if not plan.drained:
            self._drain(node, plan, drain_reason(claim))
            return 1.0
        if claim is not None and not self._instance_gone(claim):
            return context.settings.nodeclaim_requeue
        metrics.NODES_DRAINED.labels(nodepool).inc()
        self._finish_node(node, nodepool)
        return None

    def _gone(self, node: ClusterNode) -> bool:
        try:
            self.context.provider.get(node.provider_id)
        except NodeClaimNotFound:
            return True
        return False

    def _finish_node(self, node: ClusterNode, nodepool: str) -> None:
        context = self.context
        try:
            raw = context.client.get(node_path(node.name))
        except NotFound:
            return
        if remove_finalizer(context, node_path(node.name), raw, wk.TERMINATION_FINALIZER):
            metrics.node_terminated(node.labels, node.created, node.deletion_time)
            log.info("node terminated", extra={"node": node.name, "nodepool": nodepool})

    def _taint(self, name: str) -> None:
        context = self.context

        def attempt() -> None:
            raw = context.client.get(node_path(name))
            taints = list((raw.get("spec") or {}).get("taints") or ())
            if any(t.get("key") == wk.DISRUPTED_TAINT_KEY for t in taints):
                return
            taints.append({"key": wk.DISRUPTED_TAINT_KEY, "effect": wk.DISRUPTED_TAINT_EFFECT})
            body = {
                "metadata": {"resourceVersion": raw["metadata"]["resourceVersion"]},
                "spec": {"taints": taints},
            }
            context.state.update_node(context.client.patch(node_path(name), body))

        try:
            retry_on_conflict(attempt)
        except NotFound:
            return

    def _drain(self, node: ClusterNode, plan: DrainPlan, reason: str) -> None:
        context = self.context
        blocked: list[str] = []
        for pod in plan.evict:
            try:
                context.client.evict(pod.namespace, pod.name)
            except ApiError as error:
                if error.status:
                    metrics.PODS_EVICTION_REQUESTS.labels(str(error.status)).inc()
                if isinstance(error, TooManyRequests):
                    blocked.append(f"{pod.key}: {error.message}")
                elif not isinstance(error, (NotFound, Conflict)):
                    raise
                continue
            metrics.PODS_EVICTION_REQUESTS.labels("200").inc()
            metrics.PODS_DRAINED.labels(reason).inc()
            context.events.publish(
                pod, "Normal", Reason.EVICTED, f"Evicted pod: draining node {node.name}"
            )
        for pod, grace in plan.delete:
            try:
                context.client.delete(pod_path(pod.namespace, pod.name), grace_period=grace)
                context.events.publish(
                    pod,
                    "Normal",
                    Reason.EVICTED,
                    f"Deleted pod: node {node.name} reached its terminationGracePeriod",
                )
            except NotFound:
                continue
        if blocked:
            context.events.publish(
                node,
                "Warning",
                Reason.FAILED_DRAINING,
                f"Failed to drain node, {len(blocked)} pods are waiting to be evicted: "
                + "; ".join(blocked[:3]),
            )
