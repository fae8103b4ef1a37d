"""Offerings a cloud recently refused (no capacity, no quota), kept out of launches for a while.

A provider maps its cloud's errors to marks (which offerings, for how long); this cache keeps
them, expires them and tells the catalog what is out. ``seq`` changes whenever the answer may
have, so instance types built from the marks can be cached against it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from karpenter_core.cloudprovider.types import InstanceType, Offering

__all__ = ["UNAVAILABLE_OFFERINGS_TTL", "Marks", "UnavailableOfferings", "without_unavailable"]

UNAVAILABLE_OFFERINGS_TTL = timedelta(minutes=3)
"""Upstream's default: how long an offering stays out after the cloud could not fulfil it."""

_ANY = ""
"""The instance type and zone of a mark that keeps a whole capacity type out."""

_log = logging.getLogger(__name__)


class Marks(dict[str, frozenset[tuple[str, str]]]):
    """The offerings out now: ``(capacity_type, zone)`` pairs by instance type, and the capacity
    types out altogether (``capacity_types``). Shared between callers: do not modify it."""

    __slots__ = ("capacity_types",)

    def __init__(
        self,
        by_type: Iterable[tuple[str, frozenset[tuple[str, str]]]] = (),
        capacity_types: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(by_type)
        self.capacity_types = capacity_types

    def excludes(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        """Whether the offering is out."""
        if capacity_type in self.capacity_types:
            return True
        pairs = self.get(instance_type)
        return pairs is not None and (capacity_type, zone) in pairs


class UnavailableOfferings:
    """A thread-safe cache of ``(capacity_type, instance_type, zone)`` marks, each expiring at
    its own time by ``clock`` (``ttl`` unless the mark names another)."""

    __slots__ = ("_clock", "_expiry", "_lock", "_next", "_seq", "_snapshot", "ttl")

    def __init__(
        self,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        ttl: timedelta = UNAVAILABLE_OFFERINGS_TTL,
    ) -> None:
        self.ttl = ttl
        self._clock = lambda: clock().timestamp()
        self._lock = threading.Lock()
        self._expiry: dict[tuple[str, str, str], float] = {}
        self._next = math.inf
        self._seq = 0
        self._snapshot: tuple[int, Marks] = (0, Marks())

    @property
    def seq(self) -> int:
        """A counter that changes whenever an offering's availability may have changed."""
        if self._clock() >= self._next:
            self._expire()
        return self._seq

    def mark(
        self,
        capacity_type: str,
        instance_type: str,
        zone: str,
        reason: str = "",
        ttl: timedelta | None = None,
    ) -> None:
        """Keep the offering out for ``ttl`` (default: the cache's) from now; a longer mark
        already there stays."""
        ttl = self.ttl if ttl is None else ttl
        self._mark((capacity_type, instance_type, zone), ttl)
        _log.info(
            "marked offering %s:%s:%s unavailable for %s: %s",
            capacity_type,
            instance_type,
            zone,
            ttl,
            reason or "unknown",
        )

    def mark_capacity_type(
        self, capacity_type: str, reason: str, ttl: timedelta | None = None
    ) -> None:
        """Keep every offering of ``capacity_type`` out for ``ttl`` (e.g. a spot quota is used)."""
        ttl = self.ttl if ttl is None else ttl
        self._mark((capacity_type, _ANY, _ANY), ttl)
        _log.info("marked every %s offering unavailable for %s: %s", capacity_type, ttl, reason)

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        """Whether the offering is out now."""
        return self.snapshot().excludes(capacity_type, instance_type, zone)

    def snapshot(self) -> Marks:
        """The offerings out now; the same object until ``seq`` changes."""
        seq = self.seq
        taken, marks = self._snapshot
        if taken == seq:
            return marks
        with self._lock:
            now = self._clock()
            grouped: dict[str, set[tuple[str, str]]] = {}
            whole: set[str] = set()
            for (capacity_type, instance_type, zone), expiry in self._expiry.items():
                if expiry <= now:
                    continue
                if instance_type == _ANY:
                    whole.add(capacity_type)
                else:
                    grouped.setdefault(instance_type, set()).add((capacity_type, zone))
            marks = Marks(
                ((name, frozenset(pairs)) for name, pairs in grouped.items()), frozenset(whole)
            )
            self._snapshot = (self._seq, marks)
            return marks

    def _mark(self, key: tuple[str, str, str], ttl: timedelta) -> None:
        with self._lock:
            expiry = self._clock() + ttl.total_seconds()
            if self._expiry.get(key, -math.inf) >= expiry:
                return
            self._expiry[key] = expiry
            self._next = min(self._next, expiry)
            self._seq += 1

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


def without_unavailable(instance_type: InstanceType, marks: Marks) -> InstanceType:
    """``instance_type`` with the offerings ``marks`` excludes made unavailable (itself when
    none is)."""
    name = instance_type.name
    if not any(marks.excludes(o.capacity_type, name, o.zone) for o in instance_type.offerings):
        return instance_type
    offerings = [
        Offering(
            o.requirements,
            o.price,
            o.available and not marks.excludes(o.capacity_type, name, o.zone),
            o.estimated,
        )
        for o in instance_type.offerings
    ]
    return InstanceType(
        name,
        instance_type.requirements,
        offerings,
        instance_type.capacity,
        instance_type.overhead,
    )
