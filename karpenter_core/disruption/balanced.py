"""The Balanced consolidation policy, pure: a move only when what it saves justifies what it
disrupts.

Upstream v1.14's rule, per source NodePool whose policy is Balanced::

    savings_fraction    = savings / the NodePool's cost per hour (every node of it)
    disruption_fraction = disruption / the NodePool's disruption cost (every node of it)
    score               = savings_fraction / disruption_fraction, approved when >= 1/K (K = 2)

A node's disruption cost is 1 (the node itself) plus the eviction cost of each pod that would
move, negative costs counted as 0. A move's disruption is that of the nodes it removes; its
savings are the candidates' prices less the replacement's. When a move takes nodes of several
NodePools, each Balanced one is scored on the share of the savings its nodes' prices make up,
and all of them must approve. Other policies are not scored. Only consolidation of nodes with
pods to move is scored (emptiness and drift are not), as upstream.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from karpenter_core.disruption.candidates import eviction_cost, node_offering, reschedulable

if TYPE_CHECKING:
    from karpenter_core.disruption.candidates import Candidate
    from karpenter_core.scheduling.snapshot import PodInfo, Snapshot

__all__ = ["BALANCED", "K", "Score", "Scorer", "Totals", "disruption_cost"]

BALANCED = "Balanced"
K = 2
"""Upstream's fixed scoring parameter: a move passes with a score of at least 1/K."""


def disruption_cost(pods: Iterable[PodInfo]) -> float:
    """A node's disruption cost: 1 for the node, plus each pod's eviction cost (at least 0)."""
    return 1.0 + sum(max(0.0, eviction_cost(p)) for p in pods)


@dataclass(frozen=True, slots=True)
class Totals:
    """A NodePool's cost per hour (nodes of unknown price count 0) and disruption cost."""

    cost: float
    disruption: float


@dataclass(frozen=True, slots=True)
class Score:
    """One NodePool's score for a move."""

    nodepool: str
    savings_fraction: float
    """The part of the move's savings attributed to the NodePool, over its cost per hour."""
    disruption_fraction: float
    """The disruption cost of the NodePool's nodes the move removes, over its total."""

    @property
    def value(self) -> float:
        """savings_fraction / disruption_fraction: 0 when nothing is saved."""
        if self.savings_fraction <= 0:
            return 0.0
        if self.disruption_fraction <= 0:
            return math.inf
        return self.savings_fraction / self.disruption_fraction

    @property
    def approved(self) -> bool:
        """Whether the score reaches the threshold 1/K."""
        return self.value >= 1 / K

    def __str__(self) -> str:
        relation = ">=" if self.approved else "<"
        return (
            f"NodePool {self.nodepool} has consolidationPolicy Balanced: score "
            f"{self.value:.2f} {relation} {1 / K:.2f} (saves {self.savings_fraction:.1%} of its "
            f"cost for {self.disruption_fraction:.1%} of its disruption cost)"
        )


class Scorer:
    """Scores moves against the NodePool totals of one snapshot (summed once, on first use)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._balanced = {
            np.metadata.name or ""
            for np in snapshot.nodepools
            if np.spec.disruption.consolidation_policy == BALANCED
        }
        self._totals: dict[str, Totals] | None = None
        self._node_costs: dict[str, float] = {}
        self.refused: dict[str, str] = {}
        """Why a move of a single node was last refused, by node name."""

    def totals(self) -> dict[str, Totals]:
        """Cost and disruption cost of every Balanced NodePool, over all of its nodes."""
        if self._totals is None:
            cost = dict.fromkeys(self._balanced, 0.0)
            disruption = dict.fromkeys(self._balanced, 0.0)
            for node in self._snapshot.nodes:
                name = node.nodepool
                if name not in cost or node.unclaimed:
                    continue
                types = self._snapshot.instance_types.get(name, ())
                _, offering = node_offering(node, types)
                cost[name] += offering.price if offering is not None else 0.0
                self._node_costs[node.name] = disruption_cost(reschedulable(node))
                disruption[name] += self._node_costs[node.name]
            self._totals = {name: Totals(cost[name], disruption[name]) for name in cost}
        return self._totals

    def scores(self, candidates: Sequence[Candidate], savings: float) -> list[Score]:
        """A score per Balanced NodePool among the candidates' (none for other policies)."""
        pools: dict[str, list[Candidate]] = {}
        for candidate in candidates:
            name = candidate.nodepool.metadata.name or ""
            if name in self._balanced:
                pools.setdefault(name, []).append(candidate)
        if not pools:
            return []
        source = sum(c.price or 0.0 for c in candidates)
        several = len({c.nodepool.metadata.name for c in candidates}) > 1
        out = []
        for name, members in sorted(pools.items()):
            share = savings
            if several and source > 0:
                share = savings * sum(c.price or 0.0 for c in members) / source
            totals = self.totals()[name]
            if totals.cost <= 0 or totals.disruption <= 0:
                out.append(Score(name, 0.0, 0.0))  # nothing to weigh against: refused
                continue
            moved = sum(self._node_costs[c.name] for c in members)
            out.append(Score(name, share / totals.cost, moved / totals.disruption))
        return out

    def refusal(self, candidates: Sequence[Candidate], savings: float) -> str:
        """Why a Balanced NodePool refuses the move ("" when none does); a refused move of a
        single node is remembered in ``refused``."""
        why = "; ".join(str(s) for s in self.scores(candidates, savings) if not s.approved)
        if why and len(candidates) == 1:
            self.refused[candidates[0].name] = why
        return why

    def hopeless(self, candidates: Sequence[Candidate]) -> str:
        """Why even deleting the candidates outright, the most a move of them can save, would be
        refused ("" when it would not): no simulation can make such a move pass."""
        return self.refusal(candidates, sum(c.price or 0.0 for c in candidates))
