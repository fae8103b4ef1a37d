"""NodePools compiled for scheduling: requirements, taints, limits and an instance-type index.

The index orders a NodePool's instance types by price and answers "which types can hold these
requests?" with integer bitsets: bit ``i`` is the ``i``-th cheapest type, so the lowest set bit of
a mask is the cheapest feasible type.
"""

from __future__ import annotations

import copy
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import format_quantity, parse_quantity, to_milli
from karpenter_core.apis.requirements import Requirements
from karpenter_core.scheduling.cluster import NODES, limit_usage
from karpenter_core.scheduling.taints import Taint, untolerated

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.types import InstanceType, Offering
    from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo

__all__ = ["NODES", "Daemon", "NodePoolTemplate", "TypeIndex", "bits", "ports_conflict"]


def ports_conflict(
    wanted: Iterable[tuple[str, int, str]], used: Iterable[tuple[str, int, str]]
) -> bool:
    """Whether two sets of host ports (IP, port, protocol) overlap; 0.0.0.0 overlaps every IP."""
    used = tuple(used)
    for ip, port, protocol in wanted:
        for used_ip, used_port, used_protocol in used:
            if (
                port == used_port
                and protocol == used_protocol
                and (ip == used_ip or "0.0.0.0" in (ip, used_ip))
            ):
                return True
    return False


class Daemon:
    """A DaemonSet as scheduling sees it: its pod's requests and host ports, and where it runs.

    Its pod runs on a node that satisfies its node selector and any one of its ORed required
    node-affinity terms, and whose taints it tolerates; PreferNoSchedule taints never keep a
    DaemonSet pod off a node.
    """

    __slots__ = ("pod", "terms")

    def __init__(self, pod: PodInfo) -> None:
        self.pod = pod
        selector = Requirements.from_labels(pod.node_selector)
        terms = []
        for term in pod.node_affinity_required or ((),):
            requirements = selector.copy()
            requirements.add(*Requirements.from_node_selector(term).values())
            terms.append(requirements)
        self.terms = tuple(terms)

    def tolerates(self, taints: Iterable[Taint]) -> bool:
        """Whether the pod tolerates every taint that could keep it off a node."""
        hard = [t for t in taints if t.effect != "PreferNoSchedule"]
        return not hard or untolerated(hard, self.pod.tolerations) is None

    def runs_on(
        self, node: Requirements, allow_undefined: frozenset[str] = wk.WELL_KNOWN_LABELS
    ) -> bool:
        """Whether some required term is compatible with the node's requirements."""
        return any(node.compatible(term, allow_undefined) is None for term in self.terms)


class TypeIndex:
    """A NodePool's instance types ordered by price (bit 0 cheapest), with capacity masks.

    A type whose usable capacity is negative in any resource (its DaemonSets alone request more
    than it has) holds no pod at all, whatever the pod requests: ``viable`` leaves it out.
    """

    __slots__ = ("masks", "types", "usable", "values", "viable")

    def __init__(self, types: Sequence[InstanceType], usable: Sequence[dict[str, int]]) -> None:
        self.types = list(types)
        self.usable = list(usable)
        self.viable = (1 << len(self.types)) - 1
        self.values: dict[str, list[int]] = {}
        self.masks: dict[str, list[int]] = {}
        for name in {name for amounts in self.usable for name in amounts}:
            order = sorted(range(len(self.types)), key=lambda i: self.usable[i].get(name, 0))
            masks = [0] * (len(order) + 1)
            for position in range(len(order) - 1, -1, -1):
                masks[position] = masks[position + 1] | (1 << order[position])
            self.values[name] = [self.usable[i].get(name, 0) for i in order]
            self.masks[name] = masks
            self.viable &= masks[bisect_left(self.values[name], 0)]

    def fitting(self, requests: Mapping[str, int], mask: int | None = None) -> int:
        """The viable types (within ``mask``) whose usable capacity holds ``requests``."""
        result = self.viable if mask is None else mask & self.viable
        for name, amount in requests.items():
            if amount <= 0:
                continue
            values = self.values.get(name)
            if values is None:
                return 0
            result &= self.masks[name][bisect_left(values, amount)]
            if not result:
                return 0
        return result

    def at_most(self, name: str, amount: int) -> int:
        """The types with at most ``amount`` of ``name`` (none of it counts as zero)."""
        every = (1 << len(self.types)) - 1
        values = self.values.get(name)
        if values is None:
            return every if amount >= 0 else 0
        return every & ~self.masks[name][bisect_right(values, amount)]

    def largest(self, name: str, mask: int) -> int:
        """The most usable ``name`` any type in ``mask`` has (a bisection over the masks)."""
        masks = self.masks.get(name)
        if masks is None or not mask & masks[0]:
            return 0
        low, high = 0, len(masks) - 2  # masks[low] & mask holds; find the last position that does
        while low < high:
            middle = (low + high + 1) // 2
            if masks[middle] & mask:
                low = middle
            else:
                high = middle - 1
        return self.values[name][low]

    def fit_count(self, index: int, requests: Mapping[str, int]) -> int:
        """How many pods of ``requests`` the type at ``index`` holds."""
        usable = self.usable[index]
        count = 1 << 62
        for name, amount in requests.items():
            if amount > 0:
                count = min(count, usable.get(name, 0) // amount)
        return count


def bits(mask: int) -> list[int]:
    """Positions of the set bits, lowest first."""
    digits = bin(mask)[:1:-1]
    return [i for i, digit in enumerate(digits) if digit == "1"]


class NodePoolTemplate:
    """A NodePool ready for scheduling: the NodeClaims it would create share these properties."""

    def __init__(
        self,
        nodepool: NodePool,
        instance_types: Sequence[InstanceType],
        daemons: Sequence[Daemon],
        existing_nodes: Sequence[NodeInfo],
        nodeclaims: Sequence[NodeClaim] = (),
    ) -> None:
        """``nodeclaims``: the NodeClaims in flight (no Node yet), which count against the
        limits with the nodes (``cluster.limit_usage``)."""
        manifest: dict[str, Any] = nodepool.to_manifest()
        spec = manifest.get("spec") or {}
        template = spec.get("template") or {}
        template_spec = template.get("spec") or {}
        self.name: str = manifest["metadata"]["name"]
        self.weight: int = int(spec.get("weight") or 0)
        self.labels: dict[str, str] = dict((template.get("metadata") or {}).get("labels") or {})
        self.labels[wk.NODEPOOL] = self.name
        self.taints = tuple(Taint.from_manifest(t) for t in template_spec.get("taints") or ())
        self.startup_taints = tuple(
            Taint.from_manifest(t) for t in template_spec.get("startupTaints") or ()
        )
        self.node_class_ref: dict[str, Any] = dict(template_spec.get("nodeClassRef") or {})
        self.requirements = Requirements.from_node_selector(template_spec.get("requirements") or ())
        self.requirements.add(*Requirements.from_labels(self.labels).values())
        self.limits: dict[str, int] = {
            name: to_milli(parse_quantity(value))
            for name, value in (spec.get("limits") or {}).items()
        }
        self.remaining: dict[str, int] = dict(self.limits)
        self.min_values: dict[str, int] = {
            key: r.min_values for key, r in self.requirements.items() if r.min_values
        }
        if self.remaining:
            catalog = {it.name: it for it in instance_types}
            used = limit_usage(existing_nodes, nodeclaims, catalog).get(self.name, {})
            for name in self.remaining:
                self.remaining[name] -= used.get(name, 0)
        self.instance_types = [
            it for it in instance_types if self.requirements.intersects(it.requirements) is None
        ]
        self.allow_undefined = wk.WELL_KNOWN_LABELS | frozenset(
            key for it in self.instance_types for key in it.requirements
        )
        self.daemons = [
            ds
            for ds in daemons
            if ds.tolerates(self.taints) and ds.runs_on(self.requirements, self.allow_undefined)
        ]
        self._running: dict[str, list[Daemon]] = {}
        self._compatible: dict[Requirements, tuple[int, dict[int, Offering]]] = {}
        priced = []
        for it in self.instance_types:
            offering = it.cheapest_offering(self.requirements)
            if offering is not None:
                priced.append((offering.price, it.name, it))
        priced.sort(key=lambda entry: entry[:2])
        types = [entry[2] for entry in priced]
        usable = []
        for it in types:
            overhead = self.daemon_overhead(it)
            room = dict(it.allocatable)
            for name, amount in overhead.items():
                room[name] = room.get(name, 0) - amount
            usable.append(room)
        self.index = TypeIndex(types, usable)
        self._daemon_ports = [
            (
                ds.pod.host_ports,
                sum(1 << i for i, it in enumerate(types) if ds in self._runs_on(it)),
            )
            for ds in self.daemons
            if ds.pod.host_ports
        ]
        limited = types if self.limits else []
        self.capacity_index = TypeIndex(limited, [it.capacity for it in limited])

    def released(self, nodes: Sequence[NodeInfo] = ()) -> NodePoolTemplate:
        """A copy for one scheduling run: it shares the compiled instance types and caches, has
        its own limit counters, and gives back what ``nodes`` of this NodePool counted against
        its limits (nodes a simulation removes; those being deleted counted nothing)."""
        clone = copy.copy(self)
        clone.remaining = dict(self.remaining)
        if clone.remaining and nodes:
            freed = limit_usage(nodes, (), {}).get(self.name, {})
            for name in clone.remaining:
                clone.remaining[name] += freed.get(name, 0)
        return clone

    def _runs_on(self, instance_type: InstanceType) -> list[Daemon]:
        """The DaemonSets that would run on a node of this type."""
        running = self._running.get(instance_type.name)
        if running is None:
            node = self.requirements.copy()
            node.add(*instance_type.requirements.values())
            running = self._running[instance_type.name] = [
                ds for ds in self.daemons if ds.runs_on(node)
            ]
        return running

    def daemon_overhead(self, instance_type: InstanceType) -> dict[str, int]:
        """Requests of the DaemonSet pods that would run on a node of this type."""
        total: dict[str, int] = {}
        for ds in self._runs_on(instance_type):
            for name, amount in ds.pod.requests.items():
                total[name] = total.get(name, 0) + amount
        return total

    def daemon_port_conflicts(self, ports: Sequence[tuple[str, int, str]]) -> int:
        """The types on which a DaemonSet that would run there uses one of ``ports``."""
        blocked = 0
        if ports:
            for daemon_ports, mask in self._daemon_ports:
                if ports_conflict(ports, daemon_ports):
                    blocked |= mask
        return blocked

    def compatible(self, requirements: Requirements) -> tuple[int, dict[int, Offering]]:
        """Types compatible with ``requirements`` and the cheapest offering each may launch with."""
        cached = self._compatible.get(requirements)
        if cached is not None:
            return cached
        mask = 0
        offerings: dict[int, Offering] = {}
        for i, it in enumerate(self.index.types):
            if requirements.intersects(it.requirements) is not None:
                continue
            offering = it.cheapest_offering(requirements)
            if offering is not None:
                mask |= 1 << i
                offerings[i] = offering
        self._compatible[requirements] = (mask, offerings)
        return mask, offerings

    def min_values_shortfall(self, mask: int, requirements: Requirements) -> str | None:
        """Why the types in ``mask`` span fewer values than a requirement's minValues, or None."""
        for key, minimum in self.min_values.items():
            allowed = requirements.get_or_exists(key)
            values: set[str] = set()
            for i in bits(mask):
                requirement = self.index.types[i].requirements.get(key)
                if requirement is not None and not requirement.complement:
                    values.update(v for v in requirement.values if allowed.has(v))
                if len(values) >= minimum:
                    break
            if len(values) < minimum:
                return (
                    f"minValues: NodePool {self.name} needs {minimum} values of {key}, "
                    f"only {len(values)} fit"
                )
        return None

    def within_limits(self, mask: int) -> tuple[int, str | None]:
        """The types in ``mask`` a launch can use without exceeding the limits, or why none."""
        if not self.limits:
            return mask, None
        if NODES in self.remaining and self.remaining[NODES] < 1000:
            return 0, self._limit_reason(NODES)
        kept = mask
        blocking = None
        for name, left in self.remaining.items():
            if name == NODES:
                continue
            allowed = self.capacity_index.at_most(name, left)
            if blocking is None and mask & ~allowed:
                blocking = name
            kept &= allowed
        return kept, (self._limit_reason(blocking) if not kept and blocking else None)

    def reserve(self, mask: int, previous: Mapping[str, int] | None = None) -> dict[str, int]:
        """Count a NodeClaim against the limits: the largest capacity it may still launch with.

        With ``previous`` (its earlier reservation) only the difference is counted, so a NodeClaim
        whose instance types narrow gives capacity back.
        """
        if not self.limits:
            return {}
        reserved = {
            name: self.capacity_index.largest(name, mask) for name in self.limits if name != NODES
        }
        for name, amount in reserved.items():
            self.remaining[name] -= amount - (previous or {}).get(name, 0)
        if previous is None and NODES in self.remaining:
            self.remaining[NODES] -= 1000
        return reserved

    def within_reservation(self, mask: int, reserved: Mapping[str, int]) -> int:
        """The types in ``mask`` no larger, in any limited resource, than ``reserved``."""
        if not self.limits:
            return mask
        for name in self.limits:
            if name != NODES:
                mask &= self.capacity_index.at_most(name, reserved.get(name, 0))
        return mask

    def _limit_reason(self, name: str) -> str:
        limit = format_quantity(Fraction(self.limits[name], 1000), binary=name == "memory")
        return f"would exceed NodePool {self.name} limit {name}={limit}"
