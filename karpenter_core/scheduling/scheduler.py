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

import math
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import TYPE_CHECKING

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import format_quantity, to_milli
from karpenter_core.apis.requirements import Requirement, Requirements
from karpenter_core.scheduling.cluster import in_flight
from karpenter_core.scheduling.preferences import PodState, inverse_groups
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot
from karpenter_core.scheduling.taints import Taint, untolerated
from karpenter_core.scheduling.templates import Daemon, NodePoolTemplate, bits, ports_conflict
from karpenter_core.scheduling.topology import (
    AFFINITY,
    ANTI_AFFINITY,
    INVERSE,
    SPREAD,
    DomainSource,
    Topology,
    TopologyGroup,
)
from karpenter_core.scheduling.volumes import Alternatives, VolumeTopology

if TYPE_CHECKING:
    from karpenter_core.cloudprovider.types import InstanceType, Offering

__all__ = [
    "MAX_INSTANCE_TYPES",
    "Minimize",
    "NewNodeClaim",
    "Prepared",
    "Results",
    "compile_templates",
    "schedulable",
    "schedule",
]

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
    min_values_relaxed: bool = False

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
        if name == "cpu":
            cores, milli = divmod(amount, 1000)
            parts.append(f"{cores}{f'.{milli:03d}'.rstrip('0') if milli else ''} CPU")
            continue
        value = format_quantity(
            Fraction(amount, 1000), binary=name in ("memory", "ephemeral-storage")
        )
        parts.append(f"{value} {name}")
    return " and ".join(parts) or "these requests"


_SELF_DESCRIBING = frozenset((wk.ARCH, wk.OS, wk.INSTANCE_TYPE))


def _describe_requirements(requirements: Requirements) -> str:
    """`` and arm64 in test-zone-b``: a pod's node requirements, in words."""
    words, zones, capacity = [], "", ""
    for key, requirement in sorted(requirements.items()):
        if requirement.complement:
            words.append(str(requirement))
            continue
        values = "/".join(sorted(requirement.values)) or f"no {key}"
        if key == wk.TOPOLOGY_ZONE:
            zones = f" in {values}"
        elif key == wk.CAPACITY_TYPE:
            capacity = f" as {values}"
        elif key in _SELF_DESCRIBING:
            words.append(values)
        else:
            words.append(f"{key}={values}")
    return "".join(f" and {w}" for w in words) + zones + capacity


def _signature(pod: PodInfo, volumes: Alternatives) -> tuple[object, ...]:
    """Pods with equal signatures are interchangeable: same node requirements (``volumes``: the
    alternatives their volumes allow), same sizing."""
    constrained = bool(pod.topology_spread or pod.pod_affinity or pod.pod_anti_affinity)
    return (
        tuple(sorted(pod.node_selector.items())),
        repr(pod.node_affinity_required),
        repr(pod.node_affinity_preferred),
        pod.tolerations,
        tuple(sorted(pod.requests.items())),
        pod.host_ports,
        volumes,
        (pod.namespace, tuple(sorted(pod.labels.items())), repr(pod.topology_spread),
         repr(pod.pod_affinity), repr(pod.pod_anti_affinity)) if constrained else None,
    )  # fmt: skip


class _Existing:
    """An existing node (or an in-flight NodeClaim) and the pods this run adds to it."""

    __slots__ = (
        "available",
        "full",
        "labels",
        "node",
        "owners",
        "pods",
        "ports",
        "requirements",
        "shared",
        "taints",
    )
    allow_undefined = _NO_UNDEFINED

    def __init__(
        self,
        node: NodeInfo,
        daemons: Sequence[Daemon],
        requirements: Requirements | None = None,
    ) -> None:
        self.node = node
        self.requirements = requirements or node.label_requirements()
        self.labels = requirements.labels() if requirements else node.requirement_labels()
        """The single-valued requirements as labels (where the node counts in topology)."""
        self.taints = node.taints
        used = node.requested()
        self.ports = set(node.host_ports())
        running = {p.owner_name for p in node.pods if p.is_daemon()} if daemons else ()
        for ds in daemons:
            if ds.pod.name in running or not ds.tolerates(node.taints):
                continue
            if ds.runs_on(self.requirements, _NO_UNDEFINED):
                used = _add(used, ds.pod.requests)
                self.ports.update(ds.pod.host_ports)
        allocatable = node.allocatable
        self.available = {n: a - used.get(n, 0) for n, a in allocatable.items()}
        self.full = any(a < 0 for a in self.available.values())
        """Its pods and DaemonSets already request more of a resource it has than it has: no pod
        fits, whatever it requests."""
        self.pods: list[PodInfo] = []
        self.owners = [p for p in node.pods if p.pod_anti_affinity]
        """Bound pods with a required anti-affinity (they constrain pods placed later)."""
        self.shared = False
        """Part of a ``Prepared`` cluster: runs read it and add pods to a ``fresh`` copy."""

    def fresh(self) -> _Existing:
        """A copy of a shared node for one run to add pods to."""
        clone = _Existing.__new__(_Existing)
        clone.node = self.node
        clone.requirements = self.requirements
        clone.labels = self.labels
        clone.taints = self.taints
        clone.owners = self.owners
        clone.available = dict(self.available)
        clone.full = self.full
        clone.ports = set(self.ports)
        clone.pods = []
        clone.shared = False
        return clone

    def topology_requirements(self) -> Requirements:
        return self.requirements

    def try_add(
        self,
        solver: _Solver,
        state: PodState,
        options: Sequence[Requirements],
        groups: Sequence[TopologyGroup],
    ) -> bool:
        """Add the pod if the node holds it and meets one of ``options`` (its node requirements,
        one per volume alternative)."""
        pod = state.pod
        if self.full or not _fits(pod.requests, self.available):
            return False
        if untolerated(self.taints, state.tolerations) is not None:
            return False
        for requirements in options:
            if self.requirements.compatible(requirements, _NO_UNDEFINED) is None:
                break
        else:
            return False
        if pod.host_ports and ports_conflict(pod.host_ports, self.ports):
            return False
        if groups and solver.domains_for(pod, groups, self.requirements) is None:
            return False
        for name, amount in pod.requests.items():
            self.available[name] = self.available.get(name, 0) - amount
        self.ports.update(pod.host_ports)
        self.pods.append(pod)
        return True


class _Claim:
    """A NodeClaim being filled: its requirements and the instance types that still fit."""

    __slots__ = (
        "cheapest_cpu",
        "cheapest_memory",
        "free_cpu",
        "free_memory",
        "growths",
        "hostname",
        "mask",
        "min_values_relaxed",
        "pods",
        "ports",
        "requests",
        "requirements",
        "reserved",
        "template",
    )

    def __init__(
        self,
        template: NodePoolTemplate,
        hostname: str,
        requirements: Requirements,
        mask: int,
        pod: PodInfo,
        reserved: dict[str, int],
        min_values_relaxed: bool,
    ) -> None:
        self.template = template
        self.hostname = hostname
        self.reserved = reserved
        self.requirements = requirements
        self.mask = mask
        self.requests = dict(pod.requests)
        self.pods = [pod]
        self.ports = set(pod.host_ports)
        """The host ports of its pods (a DaemonSet's ports narrow its instance types instead)."""
        self.min_values_relaxed = min_values_relaxed
        self.free_cpu = self.free_memory = self.cheapest_cpu = self.cheapest_memory = 0
        self.growths: dict[tuple[tuple[str, int], ...], float] = {}
        """``growth`` per pod requests, until a pod is added."""
        self._update_free()

    def _update_free(self) -> None:
        """Room left on the largest type still possible (a cheap first test for every pod), and
        on the cheapest type that holds its pods now."""
        index = self.template.index
        cpu, memory = self.requests.get("cpu", 0), self.requests.get("memory", 0)
        self.free_cpu = index.largest("cpu", self.mask) - cpu
        self.free_memory = index.largest("memory", self.mask) - memory
        cheapest = index.usable[(self.mask & -self.mask).bit_length() - 1]
        self.cheapest_cpu = cheapest.get("cpu", 0) - cpu
        self.cheapest_memory = cheapest.get("memory", 0) - memory

    def holds_cheaply(self, pod: PodInfo) -> bool:
        """Whether the cheapest type that holds its pods now holds ``pod`` as well."""
        cheapest = self.mask & -self.mask
        return bool(self.template.index.fitting(_add(self.requests, pod.requests), cheapest))

    def growth(self, pod: PodInfo) -> float:
        """How much dearer the first type (in the NodePool's price order) that would hold its pods
        and ``pod`` is than the first that holds them now, at the offerings its requirements
        allow (infinite when no type would hold them)."""
        template = self.template
        grown = template.index.fitting(_add(self.requests, pod.requests), self.mask)
        if not grown:
            return math.inf
        offerings = template.compatible(self.requirements)[1]
        now = offerings[(self.mask & -self.mask).bit_length() - 1].price
        return offerings[(grown & -grown).bit_length() - 1].price - now

    @property
    def taints(self) -> tuple[Taint, ...]:
        return self.template.taints

    @property
    def allow_undefined(self) -> frozenset[str]:
        return self.template.allow_undefined

    def topology_requirements(self) -> Requirements:
        labelled = self.requirements.copy()
        labelled.add(Requirement(wk.HOSTNAME, False, frozenset((self.hostname,))))
        return labelled

    def try_add(
        self,
        solver: _Solver,
        state: PodState,
        options: Sequence[Requirements],
        groups: Sequence[TopologyGroup],
    ) -> bool:
        """Add the pod with the first of ``options`` (its node requirements, one per volume
        alternative) the NodeClaim can still meet."""
        template = self.template
        pod = state.pod
        requests = _add(self.requests, pod.requests)
        fitting = template.index.fitting(requests, self.mask)
        if not fitting:
            return False
        if untolerated(template.taints, state.tolerations) is not None:
            return False
        if pod.host_ports:
            if ports_conflict(pod.host_ports, self.ports):
                return False
            fitting &= ~template.daemon_port_conflicts(pod.host_ports)
            if not fitting:
                return False
        for requirements in options:
            chosen = self._with(solver, pod, requirements, groups, requests, fitting)
            if chosen is not None:
                break
        else:
            return False
        merged, mask, narrowed, relaxed = chosen
        if template.limits and mask != self.mask:
            self.reserved = template.reserve(mask, self.reserved)
        self.mask = mask
        self.requirements = merged
        self.requests = requests
        self.min_values_relaxed = self.min_values_relaxed or relaxed
        self.ports.update(pod.host_ports)
        self.growths.clear()
        self._update_free()
        if narrowed:
            solver.topology.record_narrowed(self.pods, self, frozenset(narrowed))
        self.pods.append(pod)
        return True

    def _with(
        self,
        solver: _Solver,
        pod: PodInfo,
        requirements: Requirements,
        groups: Sequence[TopologyGroup],
        requests: Mapping[str, int],
        mask: int,
    ) -> tuple[Requirements, int, list[str], bool] | None:
        """The NodeClaim's requirements and types with the pod's ``requirements`` added and its
        topology keys pinned, the keys newly pinned, and whether minValues were relaxed; None
        when they cannot be met."""
        template = self.template
        merged = self.requirements
        if requirements:
            if self.requirements.compatible(requirements, template.allow_undefined) is not None:
                return None
            merged = self.requirements.copy()
            merged.add(*requirements.values())
            mask &= template.compatible(merged)[0]
            if not mask:
                return None
        narrowed: list[str] = []
        if groups:
            chosen = solver.narrow(pod, groups, template, merged, mask, self.hostname)
            if chosen is None:
                return None
            merged, mask, narrowed = chosen
        relaxed = solver.min_values_check(template, requests, merged)
        if relaxed is None:
            return None
        return merged, mask, narrowed, relaxed

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
        if self.ports:
            fitting &= ~template.daemon_port_conflicts(tuple(self.ports))
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
            min_values_relaxed=self.min_values_relaxed,
        )


class _Solver:
    def __init__(
        self,
        snapshot: Snapshot,
        minimize: Minimize,
        ignore_preferences: bool,
        min_values_strict: bool,
        prepared: Prepared | None,
        rescheduled: Collection[str] = (),
    ) -> None:
        self.minimize = minimize
        self.rescheduled = rescheduled
        self.ignore_preferences = ignore_preferences
        self.min_values_strict = min_values_strict
        self.results = Results()
        if prepared is None:
            daemons = _daemons(snapshot)
            self.templates = compile_templates(snapshot, daemons)
            self.existing = _existing(snapshot, daemons)
        else:
            daemons = prepared.daemons
            present = {node.name for node in snapshot.nodes}
            released = [node for node in prepared.nodes if node.name not in present]
            self.templates = [template.released(released) for template in prepared.templates]
            self.existing = [e for e in prepared.existing if e.node.name in present]
        for template in self.templates:
            if not template.index.types:
                self.results.warnings.append(
                    f"NodePool {template.name}: no instance type satisfies its requirements"
                )
        self.existing += self._in_flight(snapshot, daemons)
        self.claims: list[_Claim] = []
        self.waiting: dict[tuple[object, ...], int] = {}
        self._plans: dict[tuple[int, int, tuple[object, ...]], list[float]] = {}
        self.volumes = VolumeTopology(
            snapshot.persistent_volume_claims, snapshot.persistent_volumes, snapshot.storage_classes
        )
        self.topology = Topology(self._domain_sources, self._bound)
        for existing in self.existing:
            for pod in existing.owners:
                self.topology.record_owner(pod, inverse_groups(pod, self.topology), existing)
        self._topology_reason = ""
        self._required = Requirements()
        self._requirements: dict[
            tuple[object, ...], tuple[list[Requirements] | str, Requirements]
        ] = {}

    def _bound(self) -> Iterable[tuple[PodInfo, _Existing]]:
        """Pods already bound to existing nodes, with their nodes."""
        return ((pod, e) for e in self.existing for pod in e.node.pods)

    def _domain_sources(self, key: str) -> list[DomainSource]:
        """Where ``key`` takes values: each NodePool (its instance types and offerings, within its
        requirements) and each existing node (its label)."""
        sources = []
        for template in self.templates:
            allowed = template.requirements.get_or_exists(key)
            values: set[str] = set()
            for it in template.index.types:
                found = [it.requirements.get(key)]
                found += [o.requirements.get(key) for o in it.offerings if o.available]
                for requirement in found:
                    if requirement is not None and not requirement.complement:
                        values.update(v for v in requirement.values if allowed.has(v))
            if not allowed.complement and key not in (wk.TOPOLOGY_ZONE, wk.CAPACITY_TYPE):
                values.update(allowed.values)
            sources.append(
                DomainSource(
                    frozenset(values),
                    template.requirements,
                    template.taints,
                    template.allow_undefined,
                )
            )
        for existing in self.existing:
            value = existing.labels.get(key)
            if value is not None:
                sources.append(
                    DomainSource(
                        frozenset((value,)), existing.requirements, existing.taints, _NO_UNDEFINED
                    )
                )
        if key == wk.HOSTNAME:
            sources += [
                DomainSource(
                    frozenset((claim.hostname,)),
                    claim.requirements,
                    claim.taints,
                    claim.template.allow_undefined,
                )
                for claim in self.claims
            ]
        return sources

    def _in_flight(self, snapshot: Snapshot, daemons: Sequence[Daemon]) -> list[_Existing]:
        """NodeClaims launched but not registered yet, as capacity that pods may wait for."""
        if not snapshot.nodeclaims:
            return []
        catalog = {
            name: {it.name: it for it in types} for name, types in snapshot.instance_types.items()
        }
        unregistered = in_flight(snapshot.nodeclaims, snapshot.nodes)
        out = []
        for claim in sorted(unregistered, key=lambda c: c.metadata.name or ""):
            manifest = claim.to_manifest()
            meta, spec = manifest["metadata"], manifest["spec"]
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
            out.append(_Existing(node, daemons, requirements))
        return out

    def solve(self, pods: Sequence[PodInfo]) -> Results:
        """Place pods largest first; a pod that fails relaxes one preference and waits its turn
        again, until a whole round of the queue brings no progress."""
        ordered = sorted(
            pods,
            key=lambda p: (
                -p.requests.get("cpu", 0),
                -p.requests.get("memory", 0),
                p.created,
                p.uid,
            ),
        )
        queue: deque[tuple[PodState, tuple[object, ...]]] = deque()
        for pod in ordered:
            volume_requirements = self.volumes.requirements(pod, pod.key in self.rescheduled)
            if isinstance(volume_requirements, str):
                self.results.unschedulable[pod.key] = volume_requirements
                continue
            signature = _signature(pod, volume_requirements)
            self.waiting[signature] = self.waiting.get(signature, 0) + 1
            queue.append((PodState(pod, volume_requirements, self.ignore_preferences), signature))
        failures: dict[str, str] = {}
        idle = 0
        while queue and idle < len(queue):
            state, signature = queue.popleft()
            reason = self._try(state, signature)
            if reason is None:
                self.waiting[signature] -= 1
                failures.pop(state.pod.key, None)
                idle = 0
                continue
            failures[state.pod.key] = reason
            idle = 0 if state.relax() is not None else idle + 1
            queue.append((state, signature))
        self.results.unschedulable.update(failures)
        for existing in self.existing:
            if existing.pods:
                self.results.existing[existing.node.name] = existing.pods
        self.results.new_nodeclaims = [claim.finish() for claim in self.claims]
        return self.results

    def _try(self, state: PodState, signature: tuple[object, ...]) -> str | None:
        pod = state.pod
        key = (signature, state.relaxations)
        cached = self._requirements.get(key)
        if cached is None:
            cached = self._requirements[key] = (state.node_options(), state.required())
        # ``requirements``: the node requirements to meet, one set per volume alternative; or
        # the conflict that leaves none (shared by the signature, so named per pod here).
        requirements, required = cached
        if isinstance(requirements, str):
            return state.volume_conflict(requirements)
        self._required = required
        owned = state.groups(self.topology, required) if self.topology_possible(state) else []
        checks = [g for g in owned if g.kind != INVERSE]
        if self.topology.groups:
            checks += [g for g in self.topology.selecting(pod) if g.kind == INVERSE]
        placed: _Existing | _Claim | None = None
        cpu, memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
        for index, existing in enumerate(self.existing):
            available = existing.available
            if cpu > available.get("cpu", 0) or memory > available.get("memory", 0):
                continue
            if existing.shared:  # a prepared node: this run adds its pods to a copy
                existing = existing.fresh()
            if existing.try_add(self, state, requirements, checks):
                self.existing[index] = existing
                placed = existing
                break
        else:
            placed = self._add_to_open(state, requirements, checks)
        if placed is None:
            reasons: list[str] = []
            for template in self.templates:
                reason = self._open(template, state, requirements, checks, signature)
                if reason is None:
                    placed = self.claims[-1]
                    break
                reasons.append(reason)
            else:
                if not self.templates:
                    return "no NodePool can launch nodes for it, and no existing node has room"
                return "; ".join(dict.fromkeys(reasons))
        self.topology.place(pod, placed)
        self.topology.record_owner(pod, owned, placed)
        return None

    def _add_to_open(
        self,
        state: PodState,
        requirements: Sequence[Requirements],
        checks: Sequence[TopologyGroup],
    ) -> _Claim | None:
        """Add the pod to an open NodeClaim: the first (in the order they opened) whose cheapest
        type still has room for it, else the one whose cheapest type grows the least in price.

        Growing the first claim that could hold the pod, as first-fit does, can move a node to a
        much dearer type while another claim has room to spare.
        """
        pod = state.pod
        cpu, memory = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
        full = _full_hosts(pod, checks)
        shape = tuple(pod.requests.items())
        best: _Claim | None = None
        least = math.inf
        for claim in self.claims:
            if cpu > claim.free_cpu or memory > claim.free_memory:
                continue
            if full and claim.hostname in full:
                continue
            if (
                cpu <= claim.cheapest_cpu
                and memory <= claim.cheapest_memory
                and claim.holds_cheaply(pod)
            ):
                if claim.try_add(self, state, requirements, checks):
                    return claim
                continue
            growth = claim.growths.get(shape)
            if growth is None:
                growth = claim.growths[shape] = claim.growth(pod)
            if growth < least:
                best, least = claim, growth
        if best is None:
            return None
        if best.try_add(self, state, requirements, checks):
            return best
        # Rarely the least growth fails on requirements or topology: the others, least first
        # (ties in the order they opened).
        growing = [
            (claim.growths[shape], claim)
            for claim in self.claims
            if claim is not best
            and claim.growths.get(shape, math.inf) < math.inf
            and cpu <= claim.free_cpu
            and memory <= claim.free_memory
            and not (full and claim.hostname in full)
        ]
        growing.sort(key=lambda entry: entry[0])
        for _, claim in growing:
            if claim.try_add(self, state, requirements, checks):
                return claim
        return None

    def topology_possible(self, state: PodState) -> bool:
        pod = state.pod
        return bool(pod.topology_spread or pod.pod_affinity or pod.pod_anti_affinity)

    def domains_for(
        self,
        pod: PodInfo,
        groups: Sequence[TopologyGroup],
        node_requirements: Requirements,
        hostname: str | None = None,
    ) -> list[tuple[str, list[str]]] | None:
        """For each constrained key, the domains this pod may use on that node, best first.

        The pod's own domains come from its required node constraints only (``_required``):
        neither a preference nor a volume shrinks the domains a spread is measured over (a
        volume restricts ``node_requirements`` instead).
        """
        pod_requirements = self._required
        by_key: dict[str, list[TopologyGroup]] = {}
        for group in groups:
            by_key.setdefault(group.key, []).append(group)
        out = []
        for key, key_groups in by_key.items():
            node_domains: Requirement | None
            if key == wk.HOSTNAME and hostname is not None:
                node_domains = Requirement(key, False, frozenset((hostname,)))
            else:
                node_domains = node_requirements.get(key)
            if node_domains is None:
                if hostname is None:  # an existing node without the label is in no domain
                    if any(g.kind in (SPREAD, AFFINITY) for g in key_groups):
                        self._topology_reason = f"node has no {key} label"
                        return None
                    continue
                node_domains = Requirement(key, True)
            pod_domains = pod_requirements.get_or_exists(key)
            universe = self.topology.domains(key)
            allowed: list[str] | None = None
            for group in key_groups:
                domains = pod_domains
                if group.kind == SPREAD and group.filter_requirements is None:
                    domains = Requirement(key, True)
                options = group.allowed(pod, domains, node_domains, universe)
                if allowed is not None:
                    keep = set(options)
                    options = [d for d in allowed if d in keep]
                allowed = options
                if not allowed:
                    self._topology_reason = group.describe(domains, node_domains)
                    return None
            out.append((key, allowed or []))
        return out

    def narrow(
        self,
        pod: PodInfo,
        groups: Sequence[TopologyGroup],
        template: NodePoolTemplate,
        requirements: Requirements,
        mask: int,
        hostname: str,
    ) -> tuple[Requirements, int, list[str]] | None:
        """Pin each constrained key of a NodeClaim to the best allowed domain that still fits."""
        choices = self.domains_for(pod, groups, requirements, hostname)
        if choices is None:
            return None
        narrowed = []
        for key, domains in choices:
            if key == wk.HOSTNAME:
                continue
            current = requirements.get(key)
            if current is not None and not current.complement and len(current.values) == 1:
                continue
            for domain in domains:
                candidate = requirements.copy()
                candidate.add(Requirement(key, False, frozenset((domain,))))
                candidate_mask = mask & template.compatible(candidate)[0]
                if candidate_mask:
                    requirements, mask = candidate, candidate_mask
                    narrowed.append(key)
                    break
            else:
                self._topology_reason = (
                    f"no instance type is offered in the {key} domains topology allows "
                    f"({', '.join(domains[:5])})"
                )
                return None
        return requirements, mask, narrowed

    def min_values_check(
        self, template: NodePoolTemplate, requests: Mapping[str, int], requirements: Requirements
    ) -> bool | None:
        """False when minValues hold, True when relaxed (BestEffort), None when they fail."""
        if not template.min_values:
            return False
        options = template.index.fitting(requests, template.compatible(requirements)[0])
        shortfall = template.min_values_shortfall(options, requirements)
        if shortfall is None:
            return False
        if self.min_values_strict:
            self._topology_reason = shortfall
            return None
        return True

    def _open(
        self,
        template: NodePoolTemplate,
        state: PodState,
        options: Sequence[Requirements],
        groups: Sequence[TopologyGroup],
        signature: tuple[object, ...],
    ) -> str | None:
        """Open a NodeClaim from ``template`` with the first of ``options`` (the pod's node
        requirements, one per volume alternative) it can launch; else why not."""
        reasons = []
        for requirements in options:
            reason = self._open_with(template, state, requirements, groups, signature)
            if reason is None:
                return None
            reasons.append(reason)
        return "; ".join(dict.fromkeys(reasons))

    def _open_with(
        self,
        template: NodePoolTemplate,
        state: PodState,
        requirements: Requirements,
        groups: Sequence[TopologyGroup],
        signature: tuple[object, ...],
    ) -> str | None:
        pod = state.pod
        prefix = f"NodePool {template.name}: " if len(self.templates) > 1 else ""
        taint = untolerated(template.taints, state.tolerations)
        if taint is not None:
            return f"{prefix}did not tolerate taint {taint}"
        conflict = template.requirements.compatible(requirements, template.allow_undefined)
        if conflict is not None:
            return f"{prefix}{conflict}"
        merged = template.requirements.copy()
        merged.add(*requirements.values())
        compatible, offerings = template.compatible(merged)
        if not compatible:
            return f"{prefix}no instance type with an available offering matches {_shown(requirements, merged)}"
        index = template.index
        mask = index.fitting(pod.requests, compatible)
        if not mask:
            if not compatible & index.viable:
                return (
                    f"{prefix}the DaemonSets that would run on its nodes request more than any "
                    "instance type has"
                )
            viable = compatible & index.viable
            too_big = {
                name: amount
                for name, amount in pod.requests.items()
                if amount > index.largest(name, viable)
            }
            wanted = _describe(too_big or pod.requests) + _describe_requirements(requirements)
            return f"{prefix}no instance type has {wanted}"
        if pod.host_ports:
            mask &= ~template.daemon_port_conflicts(pod.host_ports)
            if not mask:
                return f"{prefix}a DaemonSet on its nodes uses the same host port"
        mask, limit_reason = template.within_limits(mask)
        if not mask:
            return limit_reason
        hostname = f"{template.name}-{len(self.claims)}.placeholder"
        hostnames = self.topology.universe.get(wk.HOSTNAME)
        if hostnames is not None:
            hostnames.add(hostname)
        if groups:
            chosen = self.narrow(pod, groups, template, merged, mask, hostname)
            if chosen is None:
                if hostnames is not None:
                    hostnames.discard(hostname)
                return f"{prefix}{self._topology_reason}"
            merged, mask, _ = chosen
            compatible, offerings = template.compatible(merged)
        relaxed = self.min_values_check(template, pod.requests, merged)
        if relaxed is None:
            if hostnames is not None:
                hostnames.discard(hostname)
            return f"{prefix}{self._topology_reason}"
        # Pods capped per node leave room that other pods fill: such NodeClaims are not sized.
        if self.minimize is Minimize.PRICE and not state.limited_per_node(groups):
            mask = self._size(template, mask, offerings, pod, signature)
        reserved = template.reserve(mask)
        self.claims.append(_Claim(template, hostname, merged, mask, pod, reserved, relaxed))
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
        key = (mask, id(offerings), signature)
        waiting = self.waiting[signature]
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _plan(template, mask, offerings, pod, waiting)
        price = plan[waiting] if waiting < len(plan) else plan[-1]
        return sum(1 << i for i in bits(mask) if offerings[i].price <= price)


def _per_host_limits(
    pod: PodInfo, groups: Sequence[TopologyGroup]
) -> list[tuple[TopologyGroup, int]]:
    """Hostname groups with the most matching pods a node may already hold for ``pod`` to join."""
    limits = []
    for group in groups:
        if group.key != wk.HOSTNAME:
            continue
        if group.kind in (ANTI_AFFINITY, INVERSE):
            limits.append((group, 0))
        elif group.kind == SPREAD:
            limits.append((group, group.max_skew - (1 if group.selects(pod) else 0)))
    return limits


def _full_hosts(pod: PodInfo, groups: Sequence[TopologyGroup]) -> frozenset[str]:
    """The hosts that already hold as many pods matching a hostname group of ``pod`` as the
    group allows for ``pod`` to join."""
    return frozenset(
        host
        for group, limit in _per_host_limits(pod, groups)
        for host, count in group.counts.items()
        if count > limit
    )


def _shown(requirements: Requirements, merged: Requirements) -> str:
    return str(requirements) if requirements else str(merged)


def _plan(
    template: NodePoolTemplate,
    mask: int,
    offerings: Mapping[int, Offering],
    pod: PodInfo,
    waiting: int,
) -> list[float]:
    """``plan[n]``: the dearest type the next NodeClaim may use for ``n`` waiting pods.

    That is the price of the first node of the cheapest plan, or no cap at all when one node for
    all ``n`` pods costs no more than that plan (other pods may still fill a larger node).
    """
    cheapest_by_held: dict[int, float] = {}
    for i in bits(mask):
        held = template.index.fit_count(i, pod.requests)
        price = offerings[i].price
        if price < cheapest_by_held.get(held, float("inf")):
            cheapest_by_held[held] = price
    options = sorted(cheapest_by_held.items())
    # Beyond the knapsack, the lowest price per pod; of equal ratios the larger node, as below.
    best_ratio = min(price / held for held, price in options)
    by_ratio = max(
        (o for o in options if math.isclose(o[1] / o[0], best_ratio, rel_tol=1e-9)),
        key=lambda option: option[1],
    )
    bound = min(waiting, 2 * options[-1][0])
    whole = [float("inf")] * (bound + 1)  # cheapest single node holding n pods
    for held, price in options:
        for n in range(min(held, bound), 0, -1):
            if price >= whole[n]:
                break
            whole[n] = price
    cost = [0.0] * (bound + 1)
    first = [0.0] * (bound + 2)
    for n in range(1, bound + 1):
        best_cost = best_price = float("inf")
        for held, price in options:
            total = price + cost[max(0, n - held)]
            # On a tie (up to float rounding of the sums) the larger node opens first: smaller
            # pods can still fill its gaps, and fewer NodeClaims are launched.
            tie = math.isclose(total, best_cost, rel_tol=1e-9)
            if (total < best_cost and not tie) or (tie and price > best_price):
                best_cost, best_price = total, price
        cost[n] = best_cost
        first[n] = float("inf") if whole[n] <= best_cost * (1 + 1e-9) else best_price
    first[bound + 1] = by_ratio[1]
    return first


def _daemons(snapshot: Snapshot) -> list[Daemon]:
    return [Daemon(ds) for ds in snapshot.daemonsets]


def compile_templates(
    snapshot: Snapshot, daemons: Sequence[Daemon] | None = None
) -> list[NodePoolTemplate]:
    """The snapshot's NodePools compiled for scheduling, in the order the scheduler tries them
    (weight, then name); ``daemons``: the snapshot's DaemonSets, when already compiled."""
    if daemons is None:
        daemons = _daemons(snapshot)
    claims = in_flight(snapshot.nodeclaims, snapshot.nodes) if snapshot.nodeclaims else []
    return [
        NodePoolTemplate(
            nodepool,
            snapshot.instance_types.get(nodepool.metadata.name or "", ()),
            daemons,
            snapshot.nodes,
            claims,
        )
        for nodepool in sorted(
            snapshot.nodepools, key=lambda np: (-(np.spec.weight or 0), np.metadata.name)
        )
    ]


def _existing(snapshot: Snapshot, daemons: Sequence[Daemon]) -> list[_Existing]:
    """The nodes a run may place pods on, initialized ones first, by name; deleting ones left
    out."""
    return [
        _Existing(node, daemons)
        for node in sorted(snapshot.nodes, key=lambda n: (not n.initialized, n.name))
        if not node.deleting
    ]


class Prepared:
    """A cluster made ready for many scheduling runs on it less some of its nodes (disruption
    simulations): its NodePools compiled and its nodes' starting state, built once. Building
    them is most of the cost of a run that places a few pods in a large cluster."""

    __slots__ = ("daemons", "existing", "nodes", "snapshot", "templates")

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.nodes = list(snapshot.nodes)
        self.daemons = _daemons(snapshot)
        self.templates = compile_templates(snapshot, self.daemons)
        self.existing = _existing(snapshot, self.daemons)
        for existing in self.existing:
            existing.shared = True

    def free_capacity(self) -> dict[str, dict[str, int]]:
        """What each node a run may place pods on (nodes not being deleted, NodeClaims in
        flight) has left, by name: its allocatable less its pods' requests and those of the
        DaemonSet pods it will run."""
        solver = _Solver(self.snapshot, Minimize.PRICE, False, True, self)
        return {existing.node.name: existing.available for existing in solver.existing}


def schedulable(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """The pods the provisioner schedules: not bound, not preempting (nominated to a node by
    kube-scheduler), not DaemonSet-owned, not mirror pods."""
    return [
        p
        for p in pods
        if not p.node_name and not p.nominated_node and not p.is_daemon() and not p.is_mirror()
    ]


def schedule(
    snapshot: Snapshot,
    minimize: Minimize = Minimize.PRICE,
    *,
    ignore_preferences: bool = False,
    min_values_strict: bool = True,
    prepared: Prepared | None = None,
    rescheduled: Collection[str] = (),
) -> Results:
    """Place the snapshot's pending pods on existing nodes and new NodeClaims.

    ``ignore_preferences`` is PREFERENCE_POLICY=Ignore; ``min_values_strict`` False is
    MIN_VALUES_POLICY=BestEffort (NodeClaims that cannot meet minValues are marked relaxed).
    ``prepared`` is a larger cluster made ready earlier, which ``snapshot`` is with some nodes
    removed (its pending pods and NodeClaims may differ): the run starts from copies of its
    state, the removed nodes' capacity given back to their NodePools' limits. ``rescheduled``:
    the keys of pending pods that run now and are being moved (a disruption simulation), whose
    volume claims are read for their topology only, not checked as a pending pod's.
    """
    solver = _Solver(
        snapshot, minimize, ignore_preferences, min_values_strict, prepared, rescheduled
    )
    return solver.solve(schedulable(snapshot.pending))
