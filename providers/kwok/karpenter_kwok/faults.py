"""Injected faults of the fake cloud: offerings that have no capacity, and calls that fail.

The insufficient-capacity file (setting ``insufficient-capacity-file``) names offerings, one
``<instance-type> <zone> <capacity-type>`` per line; a launch the provider chooses on one of them
fails with InsufficientCapacity, as a cloud out of capacity would.

The cloud-errors file (setting ``cloud-errors-file``) names provider operations, one of
``create``, ``delete``, ``get``, ``list`` per line; every call of a named operation fails with a
CloudProviderError saying the request was throttled, as a cloud's API over its rate limit answers
(the NodeClaim is kept and the call retried, as for any error that is not about capacity).

Each file is read again whenever it changes, so another process (a test, the conformance suite,
the fault soak) can add and remove faults of a running provider.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Generic, TypeVar

from karpenter_core.sdk.types import CloudProviderError

__all__ = [
    "ERRORS_ENV",
    "ERRORS_OPTION",
    "FAULTS_ENV",
    "FAULTS_OPTION",
    "OPERATIONS",
    "CloudErrorsFile",
    "InsufficientCapacityFile",
    "Offering",
]

FAULTS_OPTION = "insufficient-capacity-file"
FAULTS_ENV = "KWOK_INSUFFICIENT_CAPACITY_FILE"
ERRORS_OPTION = "cloud-errors-file"
ERRORS_ENV = "KWOK_CLOUD_ERRORS_FILE"
OPERATIONS = ("create", "delete", "get", "list")
"""The provider operations the cloud-errors file can make fail."""

T = TypeVar("T")

Offering = tuple[str, str, str]
"""(instance type, zone, capacity type)."""


class _WatchedFile(Generic[T]):
    """A file's parsed lines, parsed again when its modification time or size changes (an
    empty set when there is no file)."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._entries: frozenset[T] = frozenset()

    def _current(self) -> frozenset[T]:
        if self.path is None:
            return frozenset()
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return frozenset()
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                self._entries = self._parse(self.path.read_text(encoding="utf-8"))
                self._stamp = stamp
            return self._entries

    def _parse(self, text: str) -> frozenset[T]:
        entries = set()
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split()
            if fields and not fields[0].startswith("#"):
                entries.add(self._entry(fields, f"{self.path}:{number}", line.strip()))
        return frozenset(entries)

    def _entry(self, fields: list[str], where: str, line: str) -> T:
        raise NotImplementedError


class InsufficientCapacityFile(_WatchedFile[Offering]):
    """The offerings the insufficient-capacity file names (none when there is no file)."""

    def refuses(self, offering: Offering) -> bool:
        """Whether the file names ``offering``."""
        return offering in self._current()

    def _entry(self, fields: list[str], where: str, line: str) -> Offering:
        if len(fields) != 3:
            raise CloudProviderError(
                f"{where}: expected '<instance-type> <zone> <capacity-type>', got {line!r}"
            )
        return (fields[0], fields[1], fields[2])


class CloudErrorsFile(_WatchedFile[str]):
    """The operations the cloud-errors file makes fail (none when there is no file)."""

    def check(self, operation: str) -> None:
        """Raise a throttling CloudProviderError if the file names ``operation``."""
        if operation in self._current():
            raise CloudProviderError(
                f"{operation}: RequestLimitExceeded: request rate exceeded, throttled "
                f"(listed in {self.path})"
            )

    def _entry(self, fields: list[str], where: str, line: str) -> str:
        if len(fields) != 1 or fields[0] not in OPERATIONS:
            raise CloudProviderError(
                f"{where}: expected one of {', '.join(OPERATIONS)}, got {line!r}"
            )
        return fields[0]
