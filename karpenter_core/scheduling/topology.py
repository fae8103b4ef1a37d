"""Topology: spread constraints and pod (anti-)affinity, counted per domain.

A group is one constraint shape (kind, topology key, selector, namespaces, skew) shared by every pod
that declares it, so 500 replicas share one group. ``counts`` holds, per domain (a value of the
key), the pods the selector matches there; for ``INVERSE`` groups (the required anti-affinity of
pods already placed) it holds the pods owning the term.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirement, Requirements
from karpenter_core.scheduling.taints import Toleration, untolerated

if TYPE_CHECKING:
    from karpenter_core.scheduling.snapshot import PodInfo
    from karpenter_core.scheduling.taints import Taint

__all__ = [
    "AFFINITY",
    "ANTI_AFFINITY",
    "INVERSE",
    "SPREAD",
    "DomainSource",
    "LabelSelector",
    "Placement",
    "Topology",
    "TopologyGroup",
]

SPREAD = "topology spread"
AFFINITY = "affinity"
ANTI_AFFINITY = "anti-affinity"
INVERSE = "inverse anti-affinity"


class LabelSelector:
    """A Kubernetes label selector (matchLabels and matchExpressions), hashable."""

    __slots__ = ("_hash", "expressions", "labels")

    def __init__(
        self,
        labels: Iterable[tuple[str, str]] = (),
        expressions: Iterable[tuple[str, str, frozenset[str]]] = (),
    ) -> None:
        self.labels = tuple(sorted(labels))
        self.expressions = tuple(sorted(expressions, key=lambda e: (e[0], e[1], sorted(e[2]))))
        self._hash = hash((self.labels, self.expressions))

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any] | None) -> LabelSelector | None:
        """A selector from its JSON; None (no selector) selects nothing."""
        if obj is None:
            return None
        return cls(
            (obj.get("matchLabels") or {}).items(),
            (
                (str(e["key"]), str(e["operator"]), frozenset(e.get("values") or ()))
                for e in obj.get("matchExpressions") or ()
            ),
        )

    def with_labels(self, extra: Mapping[str, str]) -> LabelSelector:
        """This selector, also requiring ``extra`` labels (matchLabelKeys)."""
        return LabelSelector([*self.labels, *extra.items()], self.expressions)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy the selector."""
        for key, value in self.labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.expressions:
            present = key in labels
            if operator == "In":
                ok = present and labels[key] in values
            elif operator == "NotIn":
                ok = not present or labels[key] not in values
            elif operator == "Exists":
                ok = present
            elif operator == "DoesNotExist":
                ok = not present
            else:
                ok = False
            if not ok:
                return False
        return True

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LabelSelector)
            and self.labels == other.labels
            and self.expressions == other.expressions
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.labels]
        parts += [f"{k} {op} {sorted(v)}" for k, op, v in self.expressions]
        return "{" + ", ".join(parts) + "}"


class DomainSource(NamedTuple):
    """Where domains come from: a NodePool or an existing node, with what a pod must match there."""

    values: frozenset[str]
    requirements: Requirements
    taints: tuple[Taint, ...]
    allow_undefined: frozenset[str]


class TopologyGroup:
    """One constraint shape and its per-domain counts."""

    __slots__ = (
        "blocker",
        "counts",
        "eligible",
        "filter_requirements",
        "filter_tolerations",
        "key",
        "kind",
        "max_skew",
        "min_domains",
        "namespaces",
        "selector",
    )

    def __init__(
        self,
        kind: str,
        key: str,
        selector: LabelSelector,
        namespaces: frozenset[str] | None,
        max_skew: int = 0,
        min_domains: int | None = None,
        filter_requirements: Requirements | None = None,
        filter_tolerations: tuple[Toleration, ...] | None = None,
    ) -> None:
        self.kind = kind
        self.key = key
        self.selector = selector
        self.namespaces = namespaces
        self.max_skew = max_skew
        self.min_domains = min_domains
        self.filter_requirements = filter_requirements
        self.filter_tolerations = filter_tolerations
        self.counts: dict[str, int] = {}
        self.blocker: dict[str, str] = {}
        self.eligible: set[str] | None = None

    def selects(self, pod: PodInfo) -> bool:
        """Whether the group's selector (and namespaces) match ``pod``."""
        if self.namespaces is not None and pod.namespace not in self.namespaces:
            return False
        return self.selector.matches(pod.labels)

    def counts_on(
        self,
        requirements: Requirements,
        taints: Sequence[Taint],
        allow_undefined: frozenset[str] = frozenset(),
    ) -> bool:
        """Whether a node like this is in the spread (its node affinity and taint policies)."""
        if self.filter_requirements is not None and (
            requirements.compatible(self.filter_requirements, allow_undefined) is not None
        ):
            return False
        return (
            self.filter_tolerations is None
            or untolerated(
                (t for t in taints if t.effect != "PreferNoSchedule"), self.filter_tolerations
            )
            is None
        )

    def record(self, domains: Iterable[str], pod: PodInfo) -> None:
        """Count ``pod`` in each domain."""
        for domain in domains:
            self.counts[domain] = self.counts.get(domain, 0) + 1
            self.blocker.setdefault(domain, pod.key)

    def allowed(
        self,
        pod: PodInfo,
        pod_domains: Requirement,
        node_domains: Requirement,
        universe: Iterable[str],
    ) -> list[str]:
        """Domains of ``node_domains`` this pod may use, best first."""
        counts = self.counts
        if node_domains.complement:
            options = [d for d in universe if node_domains.has(d) and pod_domains.has(d)]
        else:
            options = [d for d in node_domains.values if pod_domains.has(d)]
        if self.kind == SPREAD:
            minimum = self._minimum(pod_domains, universe)
            own = 1 if self.selects(pod) else 0
            kept = [d for d in options if counts.get(d, 0) + own - minimum <= self.max_skew]
            return sorted(kept, key=lambda d: (counts.get(d, 0), d))
        if self.kind == AFFINITY:
            # Only when no reachable domain holds a matching pod may a self-selecting pod start one.
            if any(c > 0 and pod_domains.has(d) for d, c in counts.items()):
                return sorted(d for d in options if counts.get(d, 0) > 0)
            return sorted(options) if self.selects(pod) else []
        return sorted(d for d in options if counts.get(d, 0) == 0)

    def _minimum(self, pod_domains: Requirement, universe: Iterable[str]) -> int:
        if self.key == wk.HOSTNAME:
            return 0
        domains = universe if self.eligible is None else self.eligible
        eligible = [self.counts.get(d, 0) for d in domains if pod_domains.has(d)]
        if not eligible or (self.min_domains is not None and len(eligible) < self.min_domains):
            return 0
        return min(eligible)

    def describe(self, pod_domains: Requirement, node_domains: Requirement) -> str:
        """Why no domain was allowed, for a person."""
        if self.kind in (ANTI_AFFINITY, INVERSE):
            values = node_domains.values if not node_domains.complement else self.blocker
            blocker = next((self.blocker[d] for d in sorted(values) if d in self.blocker), None)
            side = "anti-affinity" if self.kind == ANTI_AFFINITY else "the anti-affinity of"
            who = f" {blocker}" if blocker else ""
            return f"{side}{' with' if self.kind == ANTI_AFFINITY else ''}{who} on {self.key}"
        if self.kind == AFFINITY:
            return f"pod affinity {self.selector!r} on {self.key}: no matching pod in a reachable domain"
        return (
            f"topology spread on {self.key} (maxSkew {self.max_skew}): "
            "every reachable domain would exceed the skew"
        )


class Placement(Protocol):
    """Where a pod went: an existing node or a NodeClaim (whose requirements may still narrow)."""

    @property
    def taints(self) -> Sequence[Taint]:
        """Its taints."""
        ...

    @property
    def allow_undefined(self) -> frozenset[str]:
        """Labels it may still get (a NodeClaim's well-known labels), for spread node filters."""
        ...

    def topology_requirements(self) -> Requirements:
        """Its requirements, hostname included."""
        ...


class Topology:
    """All topology groups of one scheduling run, the domains of each key, and the counts."""

    def __init__(
        self,
        sources: Callable[[str], list[DomainSource]],
        bound: Callable[[], Iterable[tuple[PodInfo, Placement]]],
    ) -> None:
        self._sources = sources
        self._bound = bound
        self.universe: dict[str, set[str]] = {}
        self.groups: dict[tuple[object, ...], TopologyGroup] = {}
        self.placements: list[tuple[PodInfo, Placement]] = []
        self._selecting: dict[tuple[object, ...], list[TopologyGroup]] = {}

    def domains(self, key: str) -> set[str]:
        """Every known value of ``key`` (NodePool offerings, existing nodes, open NodeClaims)."""
        values = self.universe.get(key)
        if values is None:
            values = self.universe[key] = set()
            for source in self._sources(key):
                values.update(source.values)
        return values

    def group(
        self, identity: tuple[object, ...], factory: Callable[[], TopologyGroup]
    ) -> TopologyGroup:
        """The group with this identity; a new one counts the pods placed so far."""
        group = self.groups.get(identity)
        if group is None:
            group = self.groups[identity] = factory()
            self._selecting.clear()
            if group.kind == SPREAD and (
                group.filter_requirements is not None or group.filter_tolerations is not None
            ):
                group.eligible = {
                    value
                    for source in self._sources(group.key)
                    if group.counts_on(source.requirements, source.taints, source.allow_undefined)
                    for value in source.values
                }
            if group.kind != INVERSE:
                for pod, placement in chain(self._bound(), self.placements):
                    if group.selects(pod):
                        self._count(group, pod, placement, placement.topology_requirements(), None)
        return group

    def selecting(self, pod: PodInfo) -> list[TopologyGroup]:
        """Groups whose selector matches ``pod`` (cached per namespace and labels)."""
        key = (pod.namespace, tuple(sorted(pod.labels.items())))
        cached = self._selecting.get(key)
        if cached is None:
            cached = self._selecting[key] = [g for g in self.groups.values() if g.selects(pod)]
        return cached

    def place(self, pod: PodInfo, placement: Placement) -> None:
        """Count ``pod`` where this run placed it, in every group that selects it (pods already
        bound come from ``bound`` when a group is created)."""
        self.placements.append((pod, placement))
        if not self.groups:
            return
        groups = [g for g in self.selecting(pod) if g.kind != INVERSE]
        if groups:
            requirements = placement.topology_requirements()
            for group in groups:
                self._count(group, pod, placement, requirements, None)

    def record_owner(
        self, pod: PodInfo, owned: Sequence[TopologyGroup], placement: Placement
    ) -> None:
        """Count ``pod`` as an owner of its required anti-affinity terms where it was placed."""
        inverse = [g for g in owned if g.kind == INVERSE]
        if not inverse:
            return
        requirements = placement.topology_requirements()
        for group in inverse:
            group.record(self._possible(group.key, requirements), pod)

    def record_narrowed(
        self, pods: Sequence[PodInfo], placement: Placement, keys: frozenset[str]
    ) -> None:
        """A NodeClaim's ``keys`` became single domains: count its earlier pods there."""
        requirements = placement.topology_requirements()
        for pod in pods:
            for group in self.selecting(pod):
                if group.kind != INVERSE and group.key in keys:
                    self._count(group, pod, placement, requirements, keys)

    def _possible(self, key: str, requirements: Requirements) -> list[str] | frozenset[str]:
        domains = requirements.get_or_exists(key)
        if domains.complement:
            return [d for d in self.domains(key) if domains.has(d)]
        return domains.values

    def _count(
        self,
        group: TopologyGroup,
        pod: PodInfo,
        placement: Placement,
        requirements: Requirements,
        narrowed: frozenset[str] | None,
    ) -> None:
        """Spread and affinity count only a known domain; anti-affinity counts every domain the
        node may still end up in (once), so nothing that must stay apart can meet."""
        if group.kind == SPREAD and not group.counts_on(
            requirements, placement.taints, placement.allow_undefined
        ):
            return
        domains = requirements.get_or_exists(group.key)
        if group.kind == ANTI_AFFINITY:
            if narrowed is None:
                group.record(self._possible(group.key, requirements), pod)
        elif not domains.complement and len(domains.values) == 1:
            group.record(domains.values, pod)
