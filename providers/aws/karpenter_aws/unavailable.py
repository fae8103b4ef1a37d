"""Offerings EC2 recently could not fulfil (insufficient capacity), remembered for a while."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

__all__ = ["UNAVAILABLE_OFFERINGS_TTL", "UnavailableOfferings"]

UNAVAILABLE_OFFERINGS_TTL = timedelta(minutes=3)
"""How long an offering stays unavailable after EC2 reported it could not be fulfilled."""

_log = logging.getLogger(__name__)


class UnavailableOfferings:
    """A thread-safe cache of ``capacity_type:instance_type:zone`` keys that expire ``ttl`` after
    they were marked (by ``clock``).

    ``seq`` grows on every mark and whenever marks expire, so anything derived from availability
    (the catalog's offerings) can be cached against it.
    """

    __slots__ = ("_clock", "_expiry", "_lock", "_next", "_seq", "_snapshot", "ttl")

    def __init__(
        self,
        ttl: timedelta = UNAVAILABLE_OFFERINGS_TTL,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.ttl = ttl
        self._clock = lambda: clock().timestamp()
        self._lock = threading.Lock()
        self._expiry: dict[tuple[str, str, str], float] = {}
        self._next = math.inf
        self._seq = 0
        self._snapshot: tuple[int, dict[str, frozenset[tuple[str, str]]]] = (0, {})

    @property
    def seq(self) -> int:
        """A counter that changes whenever an offering's availability may have changed."""
        if self._clock() >= self._next:
            self._expire()
        return self._seq

    def mark(self, capacity_type: str, instance_type: str, zone: str, reason: str = "") -> None:
        """Remember the offering as unavailable for ``ttl`` from now."""
        key = (capacity_type, instance_type, zone)
        with self._lock:
            expiry = self._clock() + self.ttl.total_seconds()
            self._expiry[key] = expiry
            self._next = min(self._next, expiry)
            self._seq += 1
        _log.info(
            "marked offering %s:%s:%s unavailable for %s: %s",
            capacity_type,
            instance_type,
            zone,
            self.ttl,
            reason or "unknown",
        )

    def snapshot(self) -> dict[str, frozenset[tuple[str, str]]]:
        """The offerings unavailable now, by instance type: ``(capacity_type, zone)`` pairs.
        The same dict is returned until ``seq`` changes; do not modify it."""
        seq = self.seq
        taken, marks = self._snapshot
        if taken == seq:
            return marks
        with self._lock:
            now = self._clock()
            grouped: dict[str, set[tuple[str, str]]] = {}
            for (capacity_type, instance_type, zone), expiry in self._expiry.items():
                if expiry > now:
                    grouped.setdefault(instance_type, set()).add((capacity_type, zone))
            marks = {name: frozenset(pairs) for name, pairs in grouped.items()}
            self._snapshot = (self._seq, marks)
            return marks

    def _expire(self) -> None:
        with self._lock:
            now = self._clock()
            if now < self._next:
                return
            kept = {k: e for k, e in self._expiry.items() if e > now}
            if len(kept) != len(self._expiry):
                self._seq += 1
            self._expiry = kept
            self._next = min(kept.values(), default=math.inf)
