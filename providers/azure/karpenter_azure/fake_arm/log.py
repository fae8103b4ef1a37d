"""The fake ARM server's record of every request, and the checks a benchmark makes on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

RETRY_AFTER_TOLERANCE = 0.02
"""Seconds a follow-up may come before its Retry-After ran out and still count as honouring it
(the two timestamps are taken on different threads)."""


@dataclass(slots=True)
class RequestRecord:
    """One request: when it arrived (``time.monotonic()``), what it asked, what it got.

    ``follow_up`` names what the answer's ``retry_after`` applies to: ``op:<id>`` for an
    asynchronous operation (its start and its status polls), ``req:<METHOD> <path>`` for a
    throttled or failed request (its retry is the same method on the same path)."""

    method: str
    path: str
    query: str
    arrived: float
    status: int = 0
    answered: float = 0.0
    retry_after: float | None = None
    follow_up: str = ""
    api_version: str = ""

    @property
    def is_arm(self) -> bool:
        """Whether this is an ARM call (not a token, discovery or price-list request)."""
        return self.path.lower().startswith("/subscriptions/")

    @property
    def is_poll(self) -> bool:
        """Whether this is a status poll of an asynchronous operation."""
        return self.method == "GET" and "/operations/" in self.path.lower()


@dataclass(frozen=True, slots=True)
class Violation:
    """A request that came before the Retry-After of the answer it follows ran out."""

    request: RequestRecord
    previous: RequestRecord
    early_by: float


class RequestLog:
    """Thread-safe list of ``RequestRecord``s in arrival order."""

    def __init__(self) -> None:
        self._records: list[RequestRecord] = []
        self._lock = threading.Lock()

    def add(self, record: RequestRecord) -> None:
        """Append a record (its answer fields are filled in later by the server)."""
        with self._lock:
            self._records.append(record)

    def clear(self) -> None:
        """Forget every request."""
        with self._lock:
            self._records.clear()

    def records(self) -> list[RequestRecord]:
        """A copy of the records so far."""
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.records())

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def retry_after_violations(self, tolerance: float = RETRY_AFTER_TOLERANCE) -> list[Violation]:
        """Requests that followed an answer carrying Retry-After sooner than it asked."""
        violations = []
        last: dict[str, RequestRecord] = {}
        for record in sorted(self.records(), key=lambda r: r.arrived):
            keys = {f"req:{record.method} {record.path}"}
            if record.follow_up.startswith("op:"):
                keys.add(record.follow_up)
            for key in keys:
                previous = last.get(key)
                if previous is None or previous.retry_after is None or not previous.answered:
                    continue
                due = previous.answered + previous.retry_after
                if record.arrived + tolerance < due:
                    violations.append(Violation(record, previous, due - record.arrived))
            if record.follow_up:
                last[record.follow_up] = record
        return violations
