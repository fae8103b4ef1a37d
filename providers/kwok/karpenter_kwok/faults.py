"""Injected faults of the fake cloud: offerings that have no capacity.

The insufficient-capacity file (setting ``insufficient-capacity-file``) names offerings, one
``<instance-type> <zone> <capacity-type>`` per line; a launch the provider chooses on one of them
fails with InsufficientCapacity, as a cloud out of capacity would. The file is read again
whenever it changes, so another process (a test, the conformance suite) can add faults to a
running provider.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from karpenter_core.cloudprovider.types import CloudProviderError

__all__ = ["FAULTS_ENV", "FAULTS_OPTION", "InsufficientCapacityFile", "Offering"]

FAULTS_OPTION = "insufficient-capacity-file"
FAULTS_ENV = "KWOK_INSUFFICIENT_CAPACITY_FILE"

Offering = tuple[str, str, str]
"""(instance type, zone, capacity type)."""


class InsufficientCapacityFile:
    """The offerings the insufficient-capacity file names (none when there is no file)."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._offerings: frozenset[Offering] = frozenset()

    def refuses(self, offering: Offering) -> bool:
        """Whether the file names ``offering``."""
        return offering in self._current()

    def _current(self) -> frozenset[Offering]:
        if self.path is None:
            return frozenset()
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return frozenset()
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                self._offerings = self._parse(self.path.read_text(encoding="utf-8"))
                self._stamp = stamp
            return self._offerings

    def _parse(self, text: str) -> frozenset[Offering]:
        offerings = set()
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            if len(fields) != 3:
                raise CloudProviderError(
                    f"{self.path}:{number}: expected '<instance-type> <zone> <capacity-type>', "
                    f"got {line.strip()!r}"
                )
            offerings.add((fields[0], fields[1], fields[2]))
        return frozenset(offerings)
