"""Disruption commands in flight.

A command whose replacements are launching waits in the ``CommandQueue`` (upstream's
orchestration queue) while the disruption controller goes on deciding: several commands that
share no node run at once, each bounded by the NodePools' budgets (its candidates are marked for
deletion, so they count as disrupting) and by the PodDisruptionBudgets (the next decisions see
the cluster as the commands in flight will leave it: ``karpenter_core.disruption.projection``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from karpenter_core.disruption.planner import Command

__all__ = ["CommandQueue", "InFlight"]


@dataclass(slots=True)
class InFlight:
    """A command whose candidates are tainted and marked and whose replacements exist."""

    command: Command
    claim_names: list[str]
    """The candidates' NodeClaims."""
    created: list[str]
    """The replacement NodeClaims, waited for until Initialized."""
    deadline: float
    """``time.monotonic()`` after which the command is rolled back."""
    announced: bool = field(default=False)
    """A DisruptionWaitingReadiness event was published."""

    def nodes(self) -> set[str]:
        """The candidates' Node names."""
        return {c.name for c in self.command.candidates}


class CommandQueue:
    """The commands in flight (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[InFlight] = []

    def add(self, item: InFlight) -> None:
        """Start waiting for ``item``'s replacements."""
        with self._lock:
            self._items.append(item)

    def remove(self, item: InFlight) -> None:
        """Stop tracking ``item`` (finished or rolled back)."""
        with self._lock:
            self._items = [i for i in self._items if i is not item]

    def items(self) -> list[InFlight]:
        """The commands in flight, oldest first (a copy)."""
        with self._lock:
            return list(self._items)

    def held(self) -> set[str]:
        """The Nodes of every command in flight (their disrupted taints are not stale)."""
        with self._lock:
            return {name for item in self._items for name in item.nodes()}

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
