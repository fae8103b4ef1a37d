"""What a provider's instance-type catalog is built on: cloud data refreshed on a TTL (with the
data read before kept when a read fails), in the caller or in the background, packaged data for
offline use, and the instance types built per NodeClass inputs, cached until the data, the
prices or the unavailable offerings change.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import logging
import operator
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Generic, TypeVar

from karpenter_core.cloudprovider.types import CloudProviderError, InstanceType
from karpenter_core.sdk.offerings import Marks, UnavailableOfferings

__all__ = [
    "REFRESH_INTERVAL",
    "RETRY_INTERVAL",
    "InstanceTypeCache",
    "RefreshedData",
    "packaged_json",
]

REFRESH_INTERVAL = timedelta(hours=12)
"""How old a cloud's instance type data may get before it is read again."""
RETRY_INTERVAL = timedelta(minutes=1)
"""How soon a failed read is retried (the data read before is kept meanwhile)."""

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

_log = logging.getLogger(__name__)


@functools.cache
def packaged_json(package: str, path: str) -> dict[str, Any]:
    """The gzip-compressed JSON file ``path`` of ``package`` (read once per process)."""
    raw = resources.files(package).joinpath(path).read_bytes()
    data: dict[str, Any] = json.loads(gzip.decompress(raw))
    return data


class RefreshedData(Generic[T]):
    """Data read from the cloud by ``read`` on first use and again once ``interval`` old.

    One read runs at a time; meanwhile other callers get the data read before (only the very
    first read makes them wait). When ``read`` raises ``CloudProviderError`` the data read before
    is kept (and the read retried after ``retry``); without any, the error reaches the caller.
    ``version`` grows whenever a read returns data that is not ``same`` as before.

    ``current`` reads in the caller (``refresh``/``try_refresh`` now, whether stale or not);
    ``refresh_in_background`` reads on a thread of its own
    while callers go on with ``latest`` (e.g. prices, which start from a packaged table).
    A failure is logged as a warning once while it repeats.

    Without ``read`` the data is ``initial`` for good (a packaged, offline catalog).
    """

    def __init__(
        self,
        read: Callable[[], T] | None,
        *,
        what: str,
        interval: timedelta = REFRESH_INTERVAL,
        retry: timedelta = RETRY_INTERVAL,
        initial: T | None = None,
        same: Callable[[T, T], bool] = operator.eq,
        on_change: Callable[[T], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.what = what
        self._read = read
        self._interval = interval
        self._retry = retry
        self._same = same
        self._on_change = on_change
        self._clock = clock
        self._refreshed = threading.Condition(threading.Lock())
        self._refreshing = False
        self._data = initial
        self._version = 0 if initial is None else 1
        self._due: datetime | None = None
        self._failure = ""

    @property
    def live(self) -> bool:
        """Whether the data is read from the cloud."""
        return self._read is not None

    @property
    def version(self) -> int:
        """Grows whenever the data changes (0: none yet)."""
        return self._version

    @property
    def latest(self) -> T | None:
        """The data as it is now, never read first (None before the first read)."""
        return self._data

    def current(self) -> T:
        """The data, read first when stale (see the class)."""
        if self._stale():
            with self._refreshed:
                while self._refreshing and self._data is None:
                    self._refreshed.wait()
                claimed = not self._refreshing and self._stale()
                if claimed:
                    self._refreshing = True
            if claimed:
                try:
                    self._read_and_install()
                except CloudProviderError as error:
                    if self._data is None:
                        raise
                    self._report(error)
        data = self._data
        if data is None:
            raise CloudProviderError(f"no {self.what} known")
        return data

    def refresh(self) -> None:
        """Read now (after any read under way); a failure raises, the data read before kept."""
        if self._read is None:
            return
        with self._refreshed:
            while self._refreshing:
                self._refreshed.wait()
            self._refreshing = True
        self._read_and_install()

    def try_refresh(self) -> bool:
        """Read now, as ``refresh`` does; True when read. A failure is logged (once while it
        repeats) instead of raised, the data read before kept."""
        try:
            self.refresh()
        except CloudProviderError as error:
            self._report(error)
            return False
        return self.live

    def refresh_in_background(self) -> threading.Thread | None:
        """When the data is stale and no read is under way, start one on a daemon thread and
        return it (join it to wait for the read); else None. Returns at once either way."""
        if not self._stale():
            return None
        with self._refreshed:
            if self._refreshing or not self._stale():
                return None
            self._refreshing = True
        thread = threading.Thread(
            target=self._read_quietly, name=f"refresh {self.what}", daemon=True
        )
        thread.start()
        return thread

    def _read_quietly(self) -> None:
        """A background read: a failure is logged, the data read before kept."""
        try:
            self._read_and_install()
        except CloudProviderError as error:
            self._report(error)

    def _report(self, error: CloudProviderError) -> None:
        """Log a failed read: a warning, or at debug level while the same failure repeats."""
        message = str(error)
        level = logging.DEBUG if message == self._failure else logging.WARNING
        self._failure = message
        kept = (
            f"keeping the {self.what} read before"
            if self._data is not None
            else f"no {self.what} yet"
        )
        _log.log(level, "%s; %s", message, kept)

    def _stale(self) -> bool:
        return self._read is not None and (self._due is None or self._clock() >= self._due)

    def _read_and_install(self) -> None:
        """Read without holding the lock and install the result; the caller has set
        ``_refreshing``, which this clears."""
        assert self._read is not None
        try:
            try:
                data = self._read()
            except Exception:
                self._due = self._clock() + self._retry
                raise
            self._due = self._clock() + self._interval
            self._failure = ""
            previous = self._data
            if previous is None or not self._same(previous, data):
                self._data = data
                self._version += 1
                if self._on_change is not None:
                    self._on_change(data)
        finally:
            with self._refreshed:
                self._refreshing = False
                self._refreshed.notify_all()


@dataclass(slots=True)
class _Built:
    """Instance types built for one set of inputs, what they were built from, and when they
    were last used (a tick of the cache)."""

    stamp: tuple[int, ...]
    unavailable_seq: int
    marks: Marks
    types: list[InstanceType]
    used: int = 0


class InstanceTypeCache(Generic[K]):
    """Instance types per set of NodeClass inputs ``K``, the ``size`` most recently used kept.

    An entry is current while its ``stamp`` (the provider's data version and price sequence)
    and ``unavailable.seq`` are; when only the unavailable offerings changed, just the instance
    types whose marks changed are rebuilt.
    """

    def __init__(self, unavailable: UnavailableOfferings, size: int) -> None:
        self.unavailable = unavailable
        self.size = size
        self._lock = threading.Lock()
        self._entries: dict[K, _Built] = {}
        self._ticks = itertools.count(1)

    def __len__(self) -> int:
        return len(self._entries)

    def get(
        self,
        key: K,
        stamp: tuple[int, ...],
        build: Callable[[Marks], list[InstanceType]],
        rebuild: Callable[[str, Marks], InstanceType | None],
    ) -> list[InstanceType]:
        """The instance types for ``key``: cached, or ``build(marks)`` (all of them), or the
        cached ones with ``rebuild(name, marks)`` in place of those whose marks changed (None
        drops the type). The list is shared between callers: do not modify it."""
        useq = self.unavailable.seq
        entry = self._entries.get(key)
        if entry is not None and (entry.stamp, entry.unavailable_seq) == (stamp, useq):
            entry.used = next(self._ticks)
            return entry.types
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (entry.stamp, entry.unavailable_seq) != (stamp, useq):
                entry = self._built(entry, stamp, useq, build, rebuild)
            entry.used = next(self._ticks)
            entries = self._entries
            entries[key] = entry
            if len(entries) > self.size:
                del entries[min(entries, key=lambda k: entries[k].used)]
            return entry.types

    def _built(
        self,
        entry: _Built | None,
        stamp: tuple[int, ...],
        useq: int,
        build: Callable[[Marks], list[InstanceType]],
        rebuild: Callable[[str, Marks], InstanceType | None],
    ) -> _Built:
        marks = self.unavailable.snapshot()
        if (
            entry is None
            or entry.stamp != stamp
            or entry.marks.capacity_types != marks.capacity_types
        ):
            return _Built(stamp, useq, marks, build(marks))
        old = entry.marks
        changed = {name for name in old.keys() | marks.keys() if old.get(name) != marks.get(name)}
        types: list[InstanceType] = []
        for instance_type in entry.types:
            updated = (
                rebuild(instance_type.name, marks)
                if instance_type.name in changed
                else instance_type
            )
            if updated is not None:
                types.append(updated)
        return _Built(stamp, useq, marks, types)
