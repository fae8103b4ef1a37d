"""Disruption candidates: managed, initialized nodes with their price, pods and disruption cost."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.duration import parse_nillable_duration
from karpenter_core.apis.v1.nodeclaim import CONDITION_DRIFTED
from karpenter_core.scheduling.cluster import (
    budget_selector,
    currently_reschedulable,
    tolerates_disruption,
)
from karpenter_core.scheduling.topology import LabelSelector

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.types import InstanceType, Offering
    from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot

__all__ = [
    "Candidate",
    "PodDisruptionBudgets",
    "candidates",
    "drift_order",
    "duration",
    "evictable",
    "eviction_cost",
    "node_offering",
    "reschedulable",
]

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def reschedulable(node: NodeInfo) -> list[PodInfo]:
    """The pods that would need a new home (upstream's ``IsReschedulable``): not DaemonSet-owned,
    not mirror pods, not terminating unless a StatefulSet's (its successor waits for it)."""
    return [
        p
        for p in node.pods
        if not p.is_daemon()
        and not p.is_mirror()
        and (not p.terminating or p.owner_kind == "StatefulSet")
    ]


def evictable(pod: PodInfo) -> bool:
    """Disruption would call the Eviction API on the pod, so its PodDisruptionBudget counts
    (upstream's ``IsEvictable``, less the do-not-disrupt check made before): not terminating,
    not a mirror pod, not tolerating the ``karpenter.sh/disrupted:NoSchedule`` taint. DaemonSet
    pods are evicted too."""
    return (
        not pod.terminating
        and not pod.is_mirror()
        and pod.owner_kind != "Node"
        and not tolerates_disruption(pod)
    )


def eviction_cost(pod: PodInfo) -> float:
    """Upstream's EvictionCost: 1, plus the pod-deletion-cost annotation / 2^27, plus the
    priority / 2^25, clamped to [-10, 10]."""
    try:
        deletion = int(pod.annotations.get(DELETION_COST, "0"))
    except ValueError:
        deletion = 0
    return min(max(1 + deletion / 2**27 + pod.priority / 2**25, -10.0), 10.0)


class PodDisruptionBudgets:
    """How many more disruptions each PodDisruptionBudget allows, and which pods it covers."""

    def __init__(self, pdbs: Sequence[Mapping[str, Any]], pods: Sequence[PodInfo]) -> None:
        self.budgets: list[tuple[str, str, LabelSelector, int, bool]] = []
        """(namespace, name, selector, disruptions allowed, unhealthy pods always evictable)."""
        for pdb in pdbs:
            selector = budget_selector(pdb)
            if selector is None:
                continue  # it covers no pod
            meta = pdb.get("metadata") or {}
            spec = pdb.get("spec") or {}
            namespace = str(meta.get("namespace") or "default")
            status = pdb.get("status") or {}
            if "disruptionsAllowed" in status:
                allowed = int(status["disruptionsAllowed"])
            else:
                covered = sum(
                    1 for p in pods if p.namespace == namespace and selector.matches(p.labels)
                )
                allowed = _allowed(spec, covered)
            unhealthy = spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
            self.budgets.append(
                (namespace, str(meta.get("name") or ""), selector, allowed, unhealthy)
            )

    def blocking(self, pod: PodInfo) -> str | None:
        """Why evicting ``pod`` is not allowed now, or None. A pod whose Ready condition is
        False passes a budget with ``unhealthyPodEvictionPolicy: AlwaysAllow``, as the
        Eviction API lets it through."""
        covering = [
            (name, allowed, unhealthy)
            for namespace, name, selector, allowed, unhealthy in self.budgets
            if namespace == pod.namespace and selector.matches(pod.labels)
        ]
        if len(covering) > 1:
            names = ", ".join(sorted(name for name, _, _ in covering))
            return f"pod {pod.key} is covered by several PodDisruptionBudgets ({names})"
        if not covering:
            return None
        name, allowed, unhealthy = covering[0]
        if allowed <= 0 and not (unhealthy and pod.not_ready):
            return f"PodDisruptionBudget {pod.namespace}/{name} allows no disruption of {pod.key}"
        return None


def _count(value: Any, total: int) -> int:
    text = str(value)
    if text.endswith("%"):
        return math.ceil(int(text[:-1]) * total / 100)
    return int(text)


def _allowed(spec: Mapping[str, Any], covered: int) -> int:
    """disruptionsAllowed as the disruption controller computes it, every pod being healthy."""
    try:
        if spec.get("maxUnavailable") is not None:
            return _count(spec["maxUnavailable"], covered)
        if spec.get("minAvailable") is not None:
            return covered - _count(spec["minAvailable"], covered)
    except ValueError:
        return 0
    return covered


class Candidate:
    """A node that disruption may remove or replace."""

    __slots__ = (
        "cost",
        "instance_type",
        "node",
        "nodepool",
        "offering",
        "pods",
    )

    def __init__(
        self,
        node: NodeInfo,
        nodepool: NodePool,
        instance_type: InstanceType | None,
        offering: Offering | None,
        pods: list[PodInfo],
        cost: float,
    ) -> None:
        self.node = node
        self.nodepool = nodepool
        self.instance_type = instance_type
        self.offering = offering
        self.pods = pods
        self.cost = cost

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def price(self) -> float | None:
        """Price per hour, from the provider's catalog; None when the node's offering is unknown."""
        return None if self.offering is None else self.offering.price

    @property
    def capacity_type(self) -> str:
        return self.node.labels.get(wk.CAPACITY_TYPE, "")

    def __repr__(self) -> str:
        return f"Candidate({self.name})"


def node_offering(
    node: NodeInfo, types: Sequence[InstanceType]
) -> tuple[InstanceType | None, Offering | None]:
    """The node's instance type among ``types`` and its offering (zone and capacity type), each
    None when not found."""
    name = node.labels.get(wk.INSTANCE_TYPE)
    instance_type = next((it for it in types if it.name == name), None)
    if instance_type is None:
        return None, None
    zone = node.labels.get(wk.TOPOLOGY_ZONE)
    capacity_type = node.labels.get(wk.CAPACITY_TYPE)
    offering = next(
        (o for o in instance_type.offerings if o.zone == zone and o.capacity_type == capacity_type),
        None,
    )
    return instance_type, offering


@lru_cache(maxsize=256)
def duration(text: str) -> timedelta | None:
    """A NodePool's (validated) duration field read once, not once per node: ``Never`` is None."""
    return parse_nillable_duration(text)


def lifetime_remaining(node: NodeInfo, nodepool: NodePool, now: datetime) -> float:
    """The fraction of the node's expireAfter still ahead (1 without expiry)."""
    expire = duration(nodepool.spec.template.spec.expire_after)
    if expire is None or not node.created or expire.total_seconds() <= 0:
        return 1.0
    age = now.timestamp() - node.created
    return min(max(1 - age / expire.total_seconds(), 0.0), 1.0)


def _pod_block(node: NodeInfo, pdbs: PodDisruptionBudgets, now: float) -> str | None:
    """Why the node's pods stop its disruption, or None: a running pod protected by
    ``karpenter.sh/do-not-disrupt`` (DaemonSet and mirror pods included, terminating pods not),
    or a pod to evict whose PodDisruptionBudget allows no eviction (``evictable``)."""
    for pod in node.pods:
        if not pod.terminating and pod.do_not_disrupt_active(now):
            until = pod.do_not_disrupt_until()
            return f"pod {pod.key} is annotated {wk.DO_NOT_DISRUPT}" + (
                f" (protected until {datetime.fromtimestamp(until, UTC):%Y-%m-%dT%H:%M:%SZ})"
                if until is not None
                else ""
            )
    if pdbs.budgets:
        for pod in node.pods:
            if evictable(pod) and (reason := pdbs.blocking(pod)) is not None:
                return reason
    return None


def _grace_bounded(node: NodeInfo) -> bool:
    """The node's NodeClaim sets ``terminationGracePeriod``: its drain ends in bounded time
    whatever its pods' protections."""
    return node.nodeclaim is not None and node.nodeclaim.spec.termination_grace_period is not None


def _candidate(
    snapshot: Snapshot, node: NodeInfo, nodepool: NodePool, pods: list[PodInfo], now: datetime
) -> Candidate:
    instance_type, offering = node_offering(
        node, snapshot.instance_types.get(nodepool.metadata.name or "", ())
    )
    cost = sum(eviction_cost(p) for p in pods) * lifetime_remaining(node, nodepool, now)
    return Candidate(node, nodepool, instance_type, offering, pods, cost)


def candidates(
    snapshot: Snapshot,
    now: datetime,
    include_blocked: bool = False,
    eventual: list[Candidate] | None = None,
) -> tuple[list[Candidate], dict[str, str]]:
    """Every node disruption could act on, and why each other managed node is blocked.

    Unmanaged nodes (no known NodePool, or labelled with one but without a NodeClaim), nodes
    not initialized or already deleting (the Node or its NodeClaim) are not candidates at all;
    nodes annotated karpenter.sh/do-not-disrupt "true", and pods that are protected by the
    annotation or whose PodDisruptionBudget allows no eviction (``_pod_block``) block their node
    (``include_blocked`` keeps them, for expiration, which they do not stop). ``eventual``, if
    given, receives the nodes blocked only by their pods whose NodeClaim sets
    terminationGracePeriod (upstream's eventual disruption: drift may take them), each with
    only the pods eviction would move (``cluster.currently_reschedulable``).
    """
    nodepools = {np.metadata.name: np for np in snapshot.nodepools}
    pdbs = PodDisruptionBudgets(snapshot.pdbs, [p for n in snapshot.nodes for p in n.pods])
    seconds = now.timestamp()
    out: list[Candidate] = []
    blocked: dict[str, str] = {}
    for node in snapshot.nodes:
        nodepool = nodepools.get(node.nodepool or "")
        if nodepool is None or node.unclaimed or not node.initialized or node.deleting:
            continue
        pods = reschedulable(node)
        if node.annotations.get(wk.DO_NOT_DISRUPT) == "true":
            blocked[node.name] = f"node {node.name} is annotated {wk.DO_NOT_DISRUPT}"
            if not include_blocked:
                continue
        elif (reason := _pod_block(node, pdbs, seconds)) is not None:
            blocked[node.name] = reason
            if eventual is not None and _grace_bounded(node):
                moved = currently_reschedulable(pods, snapshot.pdbs, seconds)
                eventual.append(_candidate(snapshot, node, nodepool, moved, now))
            if not include_blocked:
                continue
        out.append(_candidate(snapshot, node, nodepool, pods, now))
    out.sort(key=lambda c: (c.cost, c.name))
    return out, blocked


def drift_order(candidate: Candidate, now: datetime) -> tuple[bool, float, float, str]:
    """The order drift takes drifted candidates in, as upstream: those without pods to move
    first, then the earliest drifted (the NodeClaim's Drifted condition's lastTransitionTime;
    a drift found now, without the condition, counts from ``now``), then the oldest."""
    claim = candidate.node.nodeclaim
    since = now.timestamp()
    if claim is not None:
        condition = next((c for c in claim.status.conditions if c.type == CONDITION_DRIFTED), None)
        if condition is not None and condition.status == "True":
            since = min(since, condition.last_transition_time.timestamp())
    return (bool(candidate.pods), since, candidate.node.created, candidate.name)
