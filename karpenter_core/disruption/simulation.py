"""Disruption simulations within one pass, pure: the work they share is done once.

A pass asks many questions of the same cluster ("what if these nodes were gone?"). The NodePools
are compiled for scheduling and the nodes' scheduling state built once per pass, when the first
question comes, not once per question (``Prepared``), and a quick test rules out
consolidations that cannot succeed before any scheduling runs: when a pod of the candidates fits
in no other node's free room, the pods with nowhere else to go must all land on one new node
strictly cheaper than the candidates, so if no instance type of any NodePool that holds them
all costs less, no simulation could find a command. The test only ever over-estimates room
(it ignores taints, affinities and the room other pods take), so it never rules out a
consolidation a simulation would find.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from karpenter_core.apis import labels as wk
from karpenter_core.scheduling.scheduler import Minimize, Prepared, Results, schedule

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.disruption.candidates import Candidate
    from karpenter_core.scheduling.snapshot import PodInfo, Snapshot
    from karpenter_core.scheduling.templates import NodePoolTemplate

__all__ = ["Simulator", "bound_to", "remaining"]


def bound_to(pod: PodInfo, node_name: str | None) -> PodInfo:
    """A copy of ``pod`` bound to ``node_name`` (None: pending again)."""
    clone = copy.copy(pod)
    clone.node_name = node_name
    return clone


def remaining(nodeclaims: Sequence[NodeClaim], removed: Sequence[Candidate]) -> list[NodeClaim]:
    """``nodeclaims`` without those of the nodes ``removed`` (by node name or providerID), which
    would otherwise pass for launches in flight once their nodes are gone."""
    gone = {c.name for c in removed} | {c.node.provider_id for c in removed if c.node.provider_id}
    return [
        claim
        for claim in nodeclaims
        if claim.status.node_name not in gone and claim.status.provider_id not in gone
    ]


def _fits(requests: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(amount <= free.get(name, 0) for name, amount in requests.items() if amount > 0)


class Simulator:
    """Scheduling simulations on one cluster with some of its nodes removed."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        ignore_preferences: bool = False,
        min_values_strict: bool = True,
        spot_to_spot: bool = False,
    ) -> None:
        self.snapshot = snapshot
        self.ignore_preferences = ignore_preferences
        self.min_values_strict = min_values_strict
        self.spot_to_spot = spot_to_spot
        self._prepared: Prepared | None = None
        self.simulated = 0
        """Simulations run."""
        self.pruned = 0
        """Consolidations ruled out without a simulation."""
        self._free: list[tuple[str, dict[str, int]]] | None = None
        self._homes: dict[str, str] = {}
        """A node with room for each pod found a home so far, by pod (rooms do not change within
        a pass, so it stays one while it is not among the candidates removed)."""
        self._cheapest: list[tuple[NodePoolTemplate, list[float]]] | None = None

    @property
    def prepared(self) -> Prepared:
        """The cluster made ready for the pass's simulations (on first use)."""
        if self._prepared is None:
            self._prepared = Prepared(self.snapshot)
        return self._prepared

    def run(self, removed: Sequence[Candidate], minimize: Minimize) -> Results:
        """Schedule the pending pods and the pods of ``removed`` on the cluster without them (and
        without their NodeClaims, which would otherwise pass for launches in flight)."""
        self.simulated += 1
        names = {c.name for c in removed}
        moved = [bound_to(p, None) for c in removed for p in c.pods]
        reduced = replace(
            self.snapshot,
            nodes=[n for n in self.snapshot.nodes if n.name not in names],
            nodeclaims=remaining(self.snapshot.nodeclaims, removed),
            pending=[*self.snapshot.pending, *moved],
        )
        return schedule(
            reduced,
            minimize,
            ignore_preferences=self.ignore_preferences,
            min_values_strict=self.min_values_strict,
            prepared=self.prepared,
            rescheduled={p.key for p in moved},
        )

    def cannot_consolidate(self, removed: Sequence[Candidate]) -> bool:
        """Whether consolidating ``removed`` (deleting them, or replacing them with one strictly
        cheaper node) is impossible whatever a simulation would do; counted as pruned."""
        homeless = self._homeless(removed)
        if not homeless:
            return False
        hopeless = self._no_cheaper_node(removed, homeless)
        if hopeless:
            self.pruned += 1
        return hopeless

    def _homeless(self, removed: Sequence[Candidate]) -> list[PodInfo]:
        """The pods of ``removed`` that fit in the free room of no node left."""
        if self._free is None:
            free = self.prepared.free_capacity()
            self._free = sorted(free.items(), key=lambda item: -item[1].get("cpu", 0))
        names = {c.name for c in removed}
        out = []
        for candidate in removed:
            for pod in candidate.pods:
                home = self._homes.get(pod.key)
                if home is None or home in names:
                    home = self._home(pod, names)
                    if not home:
                        out.append(pod)
                        continue
                    self._homes[pod.key] = home
        return out

    def _home(self, pod: PodInfo, names: Collection[str]) -> str:
        """The first node outside ``names`` with room for ``pod`` ("" when none has)."""
        cpu = pod.requests.get("cpu", 0)
        for name, room in self._free or ():
            if room.get("cpu", 0) < cpu:
                break
            if name not in names and _fits(pod.requests, room):
                return name
        return ""

    def _no_cheaper_node(self, removed: Sequence[Candidate], pods: Sequence[PodInfo]) -> bool:
        """Whether no instance type holding all of ``pods`` launches for less than
        ``removed`` cost together (no replacement at all when a price is unknown, or when
        spot nodes would need the SpotToSpotConsolidation gate)."""
        prices = [c.price for c in removed]
        if any(price is None for price in prices):
            return True
        if not self.spot_to_spot and all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in removed):
            return True
        total = sum(price for price in prices if price is not None)
        requests: dict[str, int] = {}
        for pod in pods:
            for name, amount in pod.requests.items():
                requests[name] = requests.get(name, 0) + amount
        for template, cheapest in self._cheapest_prices():
            fitting = template.index.fitting(requests)
            if fitting and cheapest[(fitting & -fitting).bit_length() - 1] < total:
                return False
        return True

    def _cheapest_prices(self) -> list[tuple[NodePoolTemplate, list[float]]]:
        """Each NodePool's instance types (cheapest first) with the lowest price each launches
        at within the NodePool's requirements."""
        if self._cheapest is None:
            self._cheapest = []
            for template in self.prepared.templates:
                _, offerings = template.compatible(template.requirements)
                prices = [
                    offerings[i].price if i in offerings else float("inf")
                    for i in range(len(template.index.types))
                ]
                self._cheapest.append((template, prices))
        return self._cheapest
