"""The HTTP plumbing of a fake cloud API: a request handler that answers JSON from a function,
a thread-safe log of the requests it served (with the check that clients honour Retry-After),
counted faults that answer the next requests with an error, and the fake's life on a server
thread or as a process.

Test support, like ``sdk.testing`` (whose loopback servers it runs): only fakes and tests import
it (an import-linter contract keeps runtime modules from it).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Self
from urllib.parse import urlsplit

from karpenter_core.sdk.testing import SHUTDOWN_POLL, serve_in_background

__all__ = [
    "RETRY_AFTER_TOLERANCE",
    "Answer",
    "CountedFault",
    "RequestLog",
    "RequestRecord",
    "Responder",
    "ServedFake",
    "Violation",
    "json_handler",
    "serve_until_signalled",
]

logger = logging.getLogger(__name__)

Answer = tuple[int, Any, Mapping[str, str]]
"""An answer: HTTP status, JSON body (None for none) and extra headers."""
RETRY_AFTER_TOLERANCE = 0.02
"""Seconds a follow-up may come before its Retry-After ran out and still count as honouring it
(the two timestamps are taken on different threads)."""
Responder = Callable[
    [str, str, str, Mapping[str, str], bytes], tuple[Answer, "RequestRecord | None"]
]
"""Answers ``(method, path, query, headers, body)``; with the request's record when it is logged."""


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


class RequestLog:
    """Thread-safe list of ``RequestRecord``s in arrival order."""

    def __init__(self) -> None:
        self._records: list[RequestRecord] = []
        self._lock = threading.Lock()

    def add(self, record: RequestRecord) -> None:
        """Append a record (its answer fields are filled in when the answer is sent)."""
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


@dataclass(frozen=True, slots=True)
class Violation:
    """A request that came before the Retry-After of the answer it follows ran out."""

    request: RequestRecord
    previous: RequestRecord
    early_by: float


@dataclass(slots=True)
class CountedFault:
    """Fail the next ``times`` requests whose path matches ``path`` (a regular expression,
    searched) and whose method is ``method`` (any when None) with ``status``."""

    status: int
    times: int = 1
    path: str = ""
    method: str | None = None
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.times < 1:
            raise ValueError(f"fault: times {self.times} is not a positive count")
        self._pattern = re.compile(self.path)

    def take(self, method: str, path: str) -> bool:
        """Whether this fault fails ``method path``, counting the use (not thread-safe: the
        fake's lock is held)."""
        if self.times < 1 or (self.method not in (None, method)) or not self._pattern.search(path):
            return False
        self.times -= 1
        return True


def json_handler(
    respond: Responder,
    failure: Callable[[Exception], Any],
    *,
    base: type[BaseHTTPRequestHandler] = BaseHTTPRequestHandler,
    name: str = "fake server",
    headers: Callable[[], Mapping[str, str]] = dict,
) -> type[BaseHTTPRequestHandler]:
    """A request handler class (HTTP/1.1, keep-alive) that answers every method with
    ``respond``'s JSON (and ``headers()`` on every answer) and fills in the record's answer; a
    bug in ``respond`` is logged and answers 500 with ``failure(error)`` as the body.
    ``base``: ``sdk.testing.TLSRequestHandler`` for HTTPS."""
    every = headers

    class Handler(base):  # type: ignore[valid-type,misc]
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            try:
                (status, body, headers), record = respond(
                    method, parts.path, parts.query, dict(self.headers.items()), raw
                )
            except Exception as error:  # a bug in the fake: answer, and say where
                logger.exception("%s failed on %s %s", name, method, self.path)
                (status, body, headers), record = (500, failure(error), {}), None
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if data:
                self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            for key, value in {**every(), **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            if record is not None:
                record.status = status
                retry_after = headers.get("Retry-After")
                record.retry_after = float(retry_after) if retry_after is not None else None
                record.answered = time.monotonic()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            return

    return Handler


class ServedFake:
    """The life of a fake served by ``_server`` (set by the subclass): on a daemon thread named
    ``thread_name`` (``start``, or ``with fake:``) or on the calling thread (``serve_forever``),
    until ``stop``."""

    thread_name = "fake server"
    _server: ThreadingHTTPServer
    _thread: threading.Thread | None = None

    def start(self) -> Self:
        """Serve on a daemon thread; returns self."""
        if self._thread is None:
            self._thread = serve_in_background(self._server, self.thread_name)
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until ``stop`` (from another thread) or an interrupt."""
        self._server.serve_forever(poll_interval=SHUTDOWN_POLL)

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def serve_until_signalled(fake: ServedFake) -> None:
    """Serve ``fake`` on the calling thread until SIGINT or SIGTERM, then stop it (a fake's
    ``python -m`` entry)."""

    def shut_down(_signum: int, _frame: FrameType | None) -> None:
        threading.Thread(target=fake._server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shut_down)
    signal.signal(signal.SIGINT, shut_down)
    try:
        fake.serve_forever()
    finally:
        fake.stop()
