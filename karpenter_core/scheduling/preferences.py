"""A pending pod's constraints as the scheduler applies them, with preferences relaxed in order.

Preferences start out as requirements. When a pod cannot be placed, one is dropped at a time, in
upstream Karpenter's order: the first of several ORed required node-affinity terms, then the
heaviest preferred pod affinity, preferred pod anti-affinity, preferred node affinity, one
ScheduleAnyway spread constraint, and finally PreferNoSchedule taints are tolerated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.scheduling.snapshot import PodInfo
from karpenter_core.scheduling.taints import Toleration
from karpenter_core.scheduling.topology import (
    AFFINITY,
    ANTI_AFFINITY,
    INVERSE,
    SPREAD,
    LabelSelector,
    Topology,
    TopologyGroup,
)

__all__ = ["PodState", "affinity_terms", "inverse_groups"]

_TOLERATE_PREFER_NO_SCHEDULE = Toleration(operator="Exists", effect="PreferNoSchedule")


def _by_weight(items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(items, key=lambda item: -int(item.get("weight", 0)))


def affinity_terms(affinity: Mapping[str, Any] | None) -> tuple[list[Any], list[Any]]:
    """Required terms, and preferred terms heaviest first, of a podAffinity / podAntiAffinity."""
    if not affinity:
        return [], []
    required = list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or ())
    preferred = _by_weight(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ())
    return required, [p.get("podAffinityTerm") or {} for p in preferred]


def _namespaces(pod: PodInfo, term: Mapping[str, Any]) -> frozenset[str] | None:
    listed = term.get("namespaces") or ()
    selector = term.get("namespaceSelector")
    if (
        selector is not None
        and not selector.get("matchLabels")
        and not selector.get("matchExpressions")
    ):
        return None  # an empty namespaceSelector means every namespace
    if selector is not None:
        return None  # namespace labels are not in the snapshot: count every namespace
    return frozenset(listed) if listed else frozenset((pod.namespace,))


def _selector(pod: PodInfo, obj: Mapping[str, Any]) -> LabelSelector | None:
    selector = LabelSelector.from_manifest(obj.get("labelSelector"))
    keys = obj.get("matchLabelKeys") or ()
    if selector is not None and keys:
        selector = selector.with_labels({k: pod.labels[k] for k in keys if k in pod.labels})
    return selector


def _term_groups(
    topology: Topology, pod: PodInfo, kind: str, terms: Sequence[Mapping[str, Any]]
) -> list[TopologyGroup]:
    """The ``kind`` groups of ``pod``'s pod (anti-)affinity ``terms``."""
    out = []
    for term in terms:
        selector = _selector(pod, term)
        if selector is None:
            continue
        term_key = str(term["topologyKey"])
        namespaces = _namespaces(pod, term)
        out.append(
            topology.group(
                (kind, term_key, selector, namespaces),
                partial(TopologyGroup, kind, term_key, selector, namespaces),
            )
        )
    return out


def inverse_groups(pod: PodInfo, topology: Topology) -> list[TopologyGroup]:
    """The INVERSE groups of a bound pod's required anti-affinity: all a pod already on a node
    imposes on the pods placed after it. (Its other groups count the bound pods whenever a pod
    placed in the run first needs them.)"""
    required, _ = affinity_terms(pod.pod_anti_affinity)
    return _term_groups(topology, pod, INVERSE, required)


class PodState:
    """The constraints one pod is scheduled with now; ``relax`` drops the next preference."""

    __slots__ = (
        "node_terms",
        "pod",
        "preferred_affinity",
        "preferred_anti_affinity",
        "preferred_node",
        "relaxations",
        "required_affinity",
        "required_anti_affinity",
        "soft_spread",
        "spread",
        "tolerations",
        "volume_requirements",
    )

    def __init__(
        self,
        pod: PodInfo,
        volume_requirements: Sequence[Requirements] = (),
        ignore_preferences: bool = False,
    ) -> None:
        self.pod = pod
        self.volume_requirements = tuple(volume_requirements)
        """The ORed alternatives the pod's volumes allow (none: volumes constrain nothing). They
        restrict the node only: the pod's own domains, which a spread counts, ignore them."""
        self.node_terms = [
            Requirements.from_node_selector(term) for term in pod.node_affinity_required
        ] or [Requirements()]
        preferred = sorted(pod.node_affinity_preferred, key=lambda p: -p[0])
        self.preferred_node = [Requirements.from_node_selector(term) for _, term in preferred]
        self.required_affinity, self.preferred_affinity = affinity_terms(pod.pod_affinity)
        self.required_anti_affinity, self.preferred_anti_affinity = affinity_terms(
            pod.pod_anti_affinity
        )
        self.spread = [
            c for c in pod.topology_spread if c.get("whenUnsatisfiable") != "ScheduleAnyway"
        ]
        self.soft_spread = [
            c for c in pod.topology_spread if c.get("whenUnsatisfiable") == "ScheduleAnyway"
        ]
        self.tolerations = pod.tolerations
        self.relaxations = 0
        if ignore_preferences:
            self.preferred_node, self.preferred_affinity = [], []
            self.preferred_anti_affinity, self.soft_spread = [], []

    def required(self) -> Requirements:
        """Node selector and the current required node-affinity term: no preferences, no
        volumes (the pod's own domains)."""
        requirements = Requirements.from_labels(self.pod.node_selector)
        requirements.add(*self.node_terms[0].values())
        return requirements

    def requirements(self) -> Requirements:
        """Node selector, the current required term and the heaviest preferred term."""
        requirements = Requirements.from_labels(self.pod.node_selector)
        requirements.add(*self.node_terms[0].values())
        if self.preferred_node:
            requirements.add(*self.preferred_node[0].values())
        return requirements

    def node_options(self) -> list[Requirements] | str:
        """What the pod's node must satisfy: ``requirements()`` joined with each volume
        alternative it intersects, in order (a node takes the first that fits); or, when no
        alternative can be met, the last conflict (naming requirements only, not the pod's
        claims, so pods with equal requirements share it; ``volume_conflict`` explains it)."""
        requirements = self.requirements()
        if not self.volume_requirements:
            return [requirements]
        options, conflict = [], ""
        for alternative in self.volume_requirements:
            conflict = requirements.intersects(alternative) or ""
            if not conflict:
                joined = requirements.copy()
                joined.add(*alternative.values())
                options.append(joined)
        return options or conflict

    def volume_conflict(self, conflict: str) -> str:
        """Why the pod cannot run: ``conflict`` (from ``node_options``) with its own claims."""
        pod = self.pod
        claims = [
            *pod.volume_claims,
            *(f"{pod.name}-{volume}" for volume, _ in pod.ephemeral_claims),
        ]
        return (
            f"the topology of its PersistentVolumeClaims ({', '.join(claims)}) conflicts with "
            f"its node requirements: {conflict}"
        )

    def relax(self) -> str | None:
        """Drop the next preference; return what was dropped, or None when nothing is left."""
        dropped = self._relax()
        if dropped is not None:
            self.relaxations += 1
        return dropped

    def _relax(self) -> str | None:
        if len(self.node_terms) > 1:
            self.node_terms.pop(0)
            return "a required node-affinity term"
        if self.preferred_affinity:
            self.preferred_affinity.pop(0)
            return "a preferred pod affinity"
        if self.preferred_anti_affinity:
            self.preferred_anti_affinity.pop(0)
            return "a preferred pod anti-affinity"
        if self.preferred_node:
            self.preferred_node.pop(0)
            return "a preferred node affinity"
        if self.soft_spread:
            self.soft_spread.pop(0)
            return "a ScheduleAnyway topology spread"
        if _TOLERATE_PREFER_NO_SCHEDULE not in self.tolerations:
            self.tolerations = (*self.tolerations, _TOLERATE_PREFER_NO_SCHEDULE)
            return "PreferNoSchedule taints"
        return None

    def groups(self, topology: Topology, requirements: Requirements) -> list[TopologyGroup]:
        """The topology groups this pod declares now (INVERSE ones for its anti-affinity)."""
        pod = self.pod
        out: list[TopologyGroup] = []
        for constraint in (*self.spread, *self.soft_spread):
            selector = _selector(pod, constraint)
            if selector is None:
                continue
            key = str(constraint["topologyKey"])
            honor_affinity = constraint.get("nodeAffinityPolicy", "Honor") == "Honor"
            honor_taints = constraint.get("nodeTaintsPolicy", "Ignore") == "Honor"
            filter_requirements = requirements if honor_affinity else None
            filter_tolerations = self.tolerations if honor_taints else None
            max_skew = int(constraint.get("maxSkew", 1))
            min_domains = constraint.get("minDomains")
            identity = (
                SPREAD, key, selector, pod.namespace, max_skew, min_domains,
                filter_requirements, filter_tolerations,
            )  # fmt: skip
            spread = partial(
                TopologyGroup, SPREAD, key, selector, frozenset((pod.namespace,)), max_skew,
                min_domains, filter_requirements, filter_tolerations,
            )  # fmt: skip
            out.append(topology.group(identity, spread))
        for kind, terms in (
            (AFFINITY, (*self.required_affinity, *self.preferred_affinity)),
            (ANTI_AFFINITY, (*self.required_anti_affinity, *self.preferred_anti_affinity)),
            (INVERSE, self.required_anti_affinity),
        ):
            out.extend(_term_groups(topology, pod, kind, terms))
        return out

    def limited_per_node(self, groups: Sequence[TopologyGroup]) -> bool:
        """Whether a hostname constraint on itself caps how many pods like this share a node."""
        return any(
            group.key == wk.HOSTNAME
            and group.kind in (ANTI_AFFINITY, SPREAD)
            and group.selects(self.pod)
            for group in groups
        )
