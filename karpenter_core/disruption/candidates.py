"""Disruption candidates: managed, initialized nodes with their price, pods and disruption cost."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.duration import parse_nillable_duration
from karpenter_core.scheduling.cluster import budget_selector
from karpenter_core.scheduling.topology import LabelSelector

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.types import InstanceType, Offering
    from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot

__all__ = [
    "Candidate",
    "PodDisruptionBudgets",
    "candidates",
    "duration",
    "eviction_cost",
    "node_offering",
    "reschedulable",
]

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def reschedulable(node: NodeInfo) -> list[PodInfo]:
    """The pods that would need a new home: not DaemonSet-owned, not mirror pods."""
    return [p for p in node.pods if not p.is_daemon() and not p.is_mirror()]


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
        self.budgets: list[tuple[str, str, LabelSelector, int]] = []
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
            self.budgets.append((namespace, str(meta.get("name") or ""), selector, allowed))

    def blocking(self, pod: PodInfo) -> str | None:
        """Why evicting ``pod`` is not allowed now, or None."""
        covering = [
            (name, allowed)
            for namespace, name, selector, allowed in self.budgets
            if namespace == pod.namespace and selector.matches(pod.labels)
        ]
        if len(covering) > 1:
            names = ", ".join(sorted(name for name, _ in covering))
            return f"pod {pod.key} is covered by several PodDisruptionBudgets ({names})"
        if covering and covering[0][1] <= 0:
            return f"PodDisruptionBudget {pod.namespace}/{covering[0][0]} allows no disruption of {pod.key}"
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


def candidates(
    snapshot: Snapshot, now: datetime, include_blocked: bool = False
) -> tuple[list[Candidate], dict[str, str]]:
    """Every node disruption could act on, and why each other managed node is blocked.

    Unmanaged nodes (no known NodePool), nodes not initialized or already deleting are not
    candidates at all; nodes or pods annotated karpenter.sh/do-not-disrupt and pods whose
    PodDisruptionBudget allows no eviction block their node (``include_blocked`` keeps them, for
    expiration, which they do not stop).
    """
    nodepools = {np.metadata.name: np for np in snapshot.nodepools}
    pdbs = PodDisruptionBudgets(snapshot.pdbs, [p for n in snapshot.nodes for p in n.pods])
    out: list[Candidate] = []
    blocked: dict[str, str] = {}
    for node in snapshot.nodes:
        nodepool = nodepools.get(node.nodepool or "")
        if nodepool is None or not node.initialized or node.deleting:
            continue
        pods = reschedulable(node)
        reason = (
            f"node {node.name} is annotated {wk.DO_NOT_DISRUPT}"
            if node.annotations.get(wk.DO_NOT_DISRUPT) == "true"
            else None
        )
        reason = (
            reason
            or next(
                (
                    f"pod {p.key} is annotated {wk.DO_NOT_DISRUPT}"
                    for p in node.pods
                    if p.annotations.get(wk.DO_NOT_DISRUPT) == "true"
                ),
                None,
            )
            or next((r for r in map(pdbs.blocking, pods) if r is not None), None)
        )
        if reason is not None:
            blocked[node.name] = reason
            if not include_blocked:
                continue
        instance_type, offering = node_offering(
            node, snapshot.instance_types.get(nodepool.metadata.name or "", ())
        )
        cost = sum(eviction_cost(p) for p in pods) * lifetime_remaining(node, nodepool, now)
        out.append(Candidate(node, nodepool, instance_type, offering, pods, cost))
    out.sort(key=lambda c: (c.cost, c.name))
    return out, blocked
