"""The provisioning scheduler: where pending pods go, and which NodeClaims to launch for them.

Pure: a ``Snapshot`` in, ``Results`` out. ``simulate``, the provisioning controller and the
disruption simulations all call ``schedule``.

Pods are taken largest first. Each goes to the first existing node that can hold it, else to an
open NodeClaim, else opens a NodeClaim on the first NodePool (by weight) that can launch it. Opening
a NodeClaim fixes its size for the pods of the same shape still waiting: the instance type with the
lowest price per pod it can hold, so 50 pods of 2 CPU become one node for 47 plus one for 3 rather
than one oversized node. In ``Minimize.NODECLAIMS`` mode (consolidation) NodeClaims grow as large as
any instance type allows, so a valid single replacement is never split in two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import TYPE_CHECKING

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import format_quantity, to_milli
from karpenter_core.scheduling.requirements import Requirements
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot
from karpenter_core.scheduling.taints import Taint, untolerated
from karpenter_core.scheduling.templates import NodePoolTemplate, bits, daemon_requirements

if TYPE_CHECKING:
    from karpenter_core.cloudprovider.types import InstanceType, Offering

__all__ = ["MAX_INSTANCE_TYPES", "Minimize", "NewNodeClaim", "Results", "schedulable", "schedule"]

MAX_INSTANCE_TYPES = 600
"""Instance types kept on a NodeClaim for the provider to choose from at launch (upstream's cap)."""

_NO_UNDEFINED: frozenset[str] = frozenset()


class Minimize(StrEnum):
    """What the scheduler optimises once every placeable pod is placed."""

    PRICE = "price"
    NODECLAIMS = "nodeclaims"


@dataclass(slots=True)
class NewNodeClaim:
    """A NodeClaim the scheduler would create."""

    nodepool: str
    requirements: Requirements
    taints: tuple[Taint, ...]
    startup_taints: tuple[Taint, ...]
    labels: dict[str, str]
    node_class_ref: dict[str, object]
    pods: list[PodInfo]
    requests: dict[str, int]
    instance_types: list[InstanceType]
    instance_type: InstanceType
    offering: Offering

    @property
    def price(self) -> float:
        """Price per hour of the offering the provider would launch."""
        return self.offering.price


@dataclass(slots=True)
class Results:
    """The scheduling decision."""

    new_nodeclaims: list[NewNodeClaim] = field(default_factory=list)
    existing: dict[str, list[PodInfo]] = field(default_factory=dict)
    unschedulable: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def cost_per_hour(self) -> float:
        """Total price per hour of the NodeClaims to launch."""
        return sum(claim.price for claim in self.new_nodeclaims)


def _add(into: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    out = dict(into)
    for name, amount in more.items():
        out[name] = out.get(name, 0) + amount
    return out


def _fits(requests: Mapping[str, int], available: Mapping[str, int]) -> bool:
    return all(amount <= available.get(name, 0) for name, amount in requests.items() if amount > 0)


def _describe(requests: Mapping[str, int]) -> str:
    parts = []
    for name, amount in sorted(requests.items(), key=lambda kv: (kv[0] != "cpu", kv[0])):
        if amount <= 0 or name == "pods":
            continue
        value = format_quantity(
            Fraction(amount, 1000), binary=name in ("memory", "ephemeral-storage")
        )
        parts.append(f"{value} CPU" if name == "cpu" else f"{value} {name}")
    return " and ".join(parts) or "these requests"


def _signature(pod: PodInfo) -> tuple[object, ...]:
    return (
        tuple(sorted(pod.node_selector.items())),
        repr(pod.node_affinity_required),
        pod.tolerations,
        tuple(sorted(pod.requests.items())),
    )


class _Existing:
    __slots__ = ("available", "node", "pods", "requirements")

    def __init__(
        self,
        node: NodeInfo,
        daemonsets: Sequence[PodInfo],
        requirements: Requirements | None = None,
    ) -> None:
        self.node = node
        self.requirements = requirements or Requirements.from_labels(node.labels)
        used = node.requested()
        running = {p.owner_name for p in node.pods if p.is_daemon()}
        for ds in daemonsets:
            if ds.name in running or untolerated(node.taints, ds.tolerations) is not None:
                continue
            if self.requirements.compatible(daemon_requirements(ds), _NO_UNDEFINED) is None:
                used = _add(used, ds.requests)
        self.available = {n: a - used.get(n, 0) for n, a in node.allocatable.items()}
        self.pods: list[PodInfo] = []

    def try_add(self, pod: PodInfo, requirements: Requirements) -> bool:
        if not _fits(pod.requests, self.available):
            return False
        if untolerated(self.node.taints, pod.tolerations) is not None:
            return False
        if self.requirements.compatible(requirements, _NO_UNDEFINED) is not None:
            return False
        for name, amount in pod.requests.items():
            self.available[name] = self.available.get(name, 0) - amount
        self.pods.append(pod)
        return True


class _Claim:
    __slots__ = ("mask", "pods", "requests", "requirements", "reserved", "template")

    def __init__(
        self,
        template: NodePoolTemplate,
        requirements: Requirements,
        mask: int,
        pod: PodInfo,
        reserved: dict[str, int],
    ) -> None:
        self.template = template
        self.reserved = reserved
        self.requirements = requirements
        self.mask = mask
        self.requests = dict(pod.requests)
        self.pods = [pod]

    def try_add(self, pod: PodInfo, requirements: Requirements) -> bool:
        template = self.template
        if untolerated(template.taints, pod.tolerations) is not None:
            return False
        merged = self.requirements
        if requirements:
            if self.requirements.compatible(requirements, template.allow_undefined) is not None:
                return False
            merged = self.requirements.copy()
            merged.add(*requirements.values())
        requests = _add(self.requests, pod.requests)
        mask = template.index.fitting(requests, self.mask)
        if mask and merged is not self.requirements:
            mask &= template.compatible(merged)[0]
        if not mask:
            return False
        self.mask = mask
        self.requirements = merged
        self.requests = requests
        self.pods.append(pod)
        return True

    def finish(self) -> NewNodeClaim:
        template = self.template
        compatible, offerings = template.compatible(self.requirements)
        types = template.index.types

        def rank(i: int) -> tuple[float, str, str]:
            return offerings[i].price, offerings[i].zone, types[i].name

        best = min(bits(self.mask), key=rank)
        # Every type that holds the pods, within the capacity reserved against the limits, stays
        # an option so the provider can fall back when the cheapest offering has no capacity.
        fitting = template.index.fitting(self.requests, compatible)
        options = self.mask | template.within_reservation(fitting, self.reserved)
        ranked = sorted(bits(options), key=rank)
        overhead = template.daemon_overhead(types[best])
        return NewNodeClaim(
            nodepool=template.name,
            requirements=self.requirements,
            taints=template.taints,
            startup_taints=template.startup_taints,
            labels={**template.labels, **self.requirements.labels()},
            node_class_ref=template.node_class_ref,
            pods=self.pods,
            requests=_add(self.requests, overhead),
            instance_types=[types[i] for i in ranked[:MAX_INSTANCE_TYPES]],
            instance_type=types[best],
            offering=offerings[best],
        )


class _Solver:
    def __init__(self, snapshot: Snapshot, minimize: Minimize) -> None:
        self.minimize = minimize
        self.results = Results()
        self.templates: list[NodePoolTemplate] = []
        for nodepool in sorted(
            snapshot.nodepools, key=lambda np: (-(np.spec.weight or 0), np.metadata.name)
        ):
            template = NodePoolTemplate(
                nodepool,
                snapshot.instance_types.get(nodepool.metadata.name, ()),
                snapshot.daemonsets,
                snapshot.nodes,
            )
            if not template.index.types:
                self.results.warnings.append(
                    f"NodePool {template.name}: no instance type satisfies its requirements"
                )
            self.templates.append(template)
        self.existing = [
            _Existing(node, snapshot.daemonsets)
            for node in sorted(snapshot.nodes, key=lambda n: (not n.initialized, n.name))
            if not node.deleting
        ]
        self.existing += self._in_flight(snapshot)
        self.claims: list[_Claim] = []
        self.waiting: dict[tuple[object, ...], int] = {}
        self._plans: dict[tuple[int, tuple[object, ...]], list[float]] = {}

    def _in_flight(self, snapshot: Snapshot) -> list[_Existing]:
        """NodeClaims launched but not registered yet, as capacity that pods may wait for."""
        registered = {node.name for node in snapshot.nodes}
        registered |= {node.provider_id for node in snapshot.nodes if node.provider_id}
        catalog = {
            name: {it.name: it for it in types} for name, types in snapshot.instance_types.items()
        }
        out = []
        for claim in sorted(snapshot.nodeclaims, key=lambda c: c.metadata.name or ""):
            manifest = claim.to_manifest()
            meta, spec, status = manifest["metadata"], manifest["spec"], manifest.get("status", {})
            if (
                meta.get("deletionTimestamp")
                or {status.get("nodeName"), status.get("providerID")} & registered
            ):
                continue
            requirements = Requirements.from_node_selector(spec.get("requirements") or ())
            requirements.add(*Requirements.from_labels(meta.get("labels") or {}).values())
            nodepool = requirements.labels().get(wk.NODEPOOL, "")
            allocatable = dict(claim.status.allocatable)
            if allocatable:
                capacity = {n: to_milli(q) for n, q in allocatable.items()}
            else:
                instance_type = catalog.get(nodepool, {}).get(
                    requirements.labels().get(wk.INSTANCE_TYPE, "")
                )
                if instance_type is None:
                    self.results.warnings.append(
                        f"NodeClaim {meta.get('name')}: capacity unknown until it launches; not counted"
                    )
                    continue
                capacity = instance_type.allocatable
            node = NodeInfo(
                meta.get("name") or "",
                requirements.labels(),
                capacity,
                taints=[Taint.from_manifest(t) for t in spec.get("taints") or ()],
                initialized=False,
            )
            out.append(_Existing(node, snapshot.daemonsets, requirements))
        return out

    def solve(self, pods: Sequence[PodInfo]) -> Results:
        queue = sorted(
            pods,
            key=lambda p: (
                -p.requests.get("cpu", 0),
                -p.requests.get("memory", 0),
                p.created,
                p.uid,
            ),
        )
        signatures = [_signature(p) for p in queue]
        for signature in signatures:
            self.waiting[signature] = self.waiting.get(signature, 0) + 1
        for pod, signature in zip(queue, signatures, strict=True):
            reason = self._place(pod, signature)
            self.waiting[signature] -= 1
            if reason is not None:
                self.results.unschedulable[pod.key] = reason
        for existing in self.existing:
            if existing.pods:
                self.results.existing[existing.node.name] = existing.pods
        self.results.new_nodeclaims = [claim.finish() for claim in self.claims]
        return self.results

    def _place(self, pod: PodInfo, signature: tuple[object, ...]) -> str | None:
        reasons: list[str] = []
        for requirements in _requirement_options(pod):
            for existing in self.existing:
                if existing.try_add(pod, requirements):
                    return None
            for claim in sorted(self.claims, key=lambda c: len(c.pods)):
                if claim.try_add(pod, requirements):
                    return None
            for template in self.templates:
                reason = self._open(template, pod, requirements, signature)
                if reason is None:
                    return None
                reasons.append(reason)
        if not self.templates:
            return "no NodePool can launch nodes for it, and no existing node has room"
        unique = list(dict.fromkeys(reasons))
        return "; ".join(unique)

    def _open(
        self,
        template: NodePoolTemplate,
        pod: PodInfo,
        requirements: Requirements,
        signature: tuple[object, ...],
    ) -> str | None:
        prefix = f"NodePool {template.name}: " if len(self.templates) > 1 else ""
        taint = untolerated(template.taints, pod.tolerations)
        if taint is not None:
            return f"{prefix}did not tolerate taint {taint}"
        conflict = template.requirements.compatible(requirements, template.allow_undefined)
        if conflict is not None:
            return f"{prefix}{conflict}"
        merged = template.requirements.copy()
        merged.add(*requirements.values())
        compatible, offerings = template.compatible(merged)
        if not compatible:
            return f"{prefix}no instance type with an available offering matches {requirements or merged}"
        index = template.index
        mask = index.fitting(pod.requests, compatible)
        if not mask:
            too_big = {
                name: amount
                for name, amount in pod.requests.items()
                if amount > index.largest(name, compatible)
            }
            return f"{prefix}no instance type has {_describe(too_big or pod.requests)}"
        mask, limit_reason = template.within_limits(mask)
        if not mask:
            return limit_reason
        if self.minimize is Minimize.PRICE:
            mask = self._size(template, mask, offerings, pod, signature)
        reserved = template.reserve(mask)
        self.claims.append(_Claim(template, merged, mask, pod, reserved))
        return None

    def _size(
        self,
        template: NodePoolTemplate,
        mask: int,
        offerings: Mapping[int, Offering],
        pod: PodInfo,
        signature: tuple[object, ...],
    ) -> int:
        """Keep the types no dearer than the first node of the cheapest plan for the waiting pods.

        For ``n`` identical pods the cheapest set of nodes is a small knapsack over "pods per node":
        ``cost(n) = min over types of price + cost(n - held)``. It is solved once per pod shape
        and candidate set, up to twice the largest node; beyond that the type with the lowest
        price per pod opens the next node.
        """
        key = (mask, signature)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _plan(template, mask, offerings, pod, self.waiting[signature])
        waiting = self.waiting[signature]
        price = plan[waiting] if waiting < len(plan) else plan[-1]
        return sum(1 << i for i in bits(mask) if offerings[i].price <= price)


def _plan(
    template: NodePoolTemplate,
    mask: int,
    offerings: Mapping[int, Offering],
    pod: PodInfo,
    waiting: int,
) -> list[float]:
    """``plan[n]``: the price of the first node to open for ``n`` waiting pods (last: any larger)."""
    cheapest_by_held: dict[int, float] = {}
    for i in bits(mask):
        held = template.index.fit_count(i, pod.requests)
        price = offerings[i].price
        if price < cheapest_by_held.get(held, float("inf")):
            cheapest_by_held[held] = price
    options = sorted(cheapest_by_held.items())
    by_ratio = min(options, key=lambda option: (option[1] / option[0], option[1]))
    bound = min(waiting, 2 * options[-1][0])
    cost = [0.0] * (bound + 1)
    first = [0.0] * (bound + 2)
    for n in range(1, bound + 1):
        best_cost = best_price = float("inf")
        for held, price in options:
            total = price + cost[max(0, n - held)]
            # On a tie the larger node opens first: smaller pods can still fill its gaps.
            if total < best_cost or (total == best_cost and price > best_price):
                best_cost, best_price = total, price
        cost[n] = best_cost
        first[n] = best_price
    first[bound + 1] = by_ratio[1]
    return first


def _requirement_options(pod: PodInfo) -> list[Requirements]:
    """The pod's node requirements, one set per required node-affinity term (they are ORed)."""
    base = Requirements.from_labels(pod.node_selector)
    if not pod.node_affinity_required:
        return [base]
    options = []
    for term in pod.node_affinity_required:
        option = base.copy()
        option.add(*Requirements.from_node_selector(term).values())
        options.append(option)
    return options


def schedulable(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """The pods the provisioner schedules: not bound and not owned by a DaemonSet."""
    return [p for p in pods if not p.node_name and not p.is_daemon()]


def schedule(snapshot: Snapshot, minimize: Minimize = Minimize.PRICE) -> Results:
    """Place the snapshot's pending pods on existing nodes and new NodeClaims."""
    return _Solver(snapshot, minimize).solve(schedulable(snapshot.pending))
