"""sdk.fakehttp: the JSON request handler of a fake cloud API, its request log with the
Retry-After check, counted faults, and a fake served on a thread."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from karpenter_core.sdk.fakehttp import (
    Answer,
    CountedFault,
    RequestLog,
    RequestRecord,
    ServedFake,
    json_handler,
)
from karpenter_core.sdk.testing import LoopbackServer


def test_a_counted_fault_takes_the_next_matching_requests() -> None:
    fault = CountedFault(503, times=2, path="/instances", method="GET")
    assert not fault.take("POST", "/zones/a/instances")
    assert not fault.take("GET", "/zones")
    assert fault.take("GET", "/zones/a/instances")
    assert fault.take("GET", "/zones/a/instances/x")
    assert not fault.take("GET", "/zones/a/instances")
    with pytest.raises(ValueError, match="times 0"):
        CountedFault(429, times=0)


def _record(method: str, path: str, arrived: float, **answer: Any) -> RequestRecord:
    return RequestRecord(method, path, "", arrived, answered=arrived + 0.001, **answer)


def test_a_retry_before_its_retry_after_is_a_violation() -> None:
    log = RequestLog()
    log.add(_record("GET", "/x", 0.0, status=429, retry_after=1.0, follow_up="req:GET /x"))
    log.add(_record("GET", "/x", 0.5, status=200))
    log.add(_record("GET", "/y", 0.6, status=200))
    [violation] = log.retry_after_violations()
    assert (violation.request.arrived, violation.early_by) == (0.5, pytest.approx(0.501))
    assert len(log) == 3
    log.clear()
    assert log.records() == []


@pytest.fixture
def served() -> Iterator[tuple[str, RequestLog]]:
    log = RequestLog()

    def respond(
        method: str, path: str, query: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Answer, RequestRecord | None]:
        if path == "/boom":
            raise RuntimeError("bug")
        record = RequestRecord(method, path, query, 0.0)
        log.add(record)
        body = {"method": method, "query": query, "sent": json.loads(raw) if raw else None}
        return (201, body, {"Retry-After": "2"}), record

    handler = json_handler(
        respond, lambda error: {"failed": repr(error)}, headers=lambda: {"X-Fake": "yes"}
    )

    class Fake(ServedFake):
        def __init__(self) -> None:
            self._server = LoopbackServer(("127.0.0.1", 0), handler)

    with Fake() as fake:
        assert fake.start() is fake  # started once
        yield f"http://127.0.0.1:{fake._server.server_port}", log
    assert fake._thread is None


def test_the_json_handler_answers_and_records(served: tuple[str, RequestLog]) -> None:
    url, log = served
    request = urllib.request.Request(f"{url}/things?a=1", data=b'{"x": 1}', method="PUT")
    with urllib.request.urlopen(request) as response:
        assert response.status == 201
        assert response.headers["X-Fake"] == "yes"
        assert json.loads(response.read()) == {"method": "PUT", "query": "a=1", "sent": {"x": 1}}
    [record] = log.records()
    assert (record.status, record.retry_after) == (201, 2.0)
    assert record.answered > 0
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(f"{url}/boom")
    assert failed.value.code == 500
    assert json.loads(failed.value.read()) == {"failed": "RuntimeError('bug')"}
