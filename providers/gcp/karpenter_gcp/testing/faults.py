"""Faults the fake GCE server injects, in GCE's own shapes: stockouts and quota errors on
instance inserts (reported in the insert's zone operation, ``error.errors[].code``
``ZONE_RESOURCE_POOL_EXHAUSTED`` / ``QUOTA_EXCEEDED``, or a quota error as the insert's own 403
``quotaExceeded``), and throttling (429 ``rateLimitExceeded``) or unavailability (503
``backendError``) of the next requests."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from karpenter_core.sdk.fakehttp import CountedFault

STOCKOUT_CODES = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
_REQUEST_ERRORS = {
    429: ("RESOURCE_EXHAUSTED", "usageLimits", "rateLimitExceeded", "Rate Limit Exceeded"),
    503: ("UNAVAILABLE", "global", "backendError", "The service is currently unavailable."),
}


def google_error(
    status: int, reason: str, message: str, domain: str = "global", rpc_status: str = ""
) -> dict[str, Any]:
    """Google's JSON error body (google-api-core reads ``message`` and ``errors``)."""
    error: dict[str, Any] = {
        "code": status,
        "message": message,
        "errors": [{"message": message, "domain": domain, "reason": reason}],
    }
    if rpc_status:
        error["status"] = rpc_status
    return {"error": error}


@dataclass(slots=True)
class CapacityFault:
    """Fail inserts of ``machine_type`` (any when None) in ``zone`` (any when None), spot or
    not (either when None) with ``code``, ``times`` times (None: until cleared)."""

    code: str
    machine_type: str | None = None
    zone: str | None = None
    spot: bool | None = None
    times: int | None = None
    immediate: bool = False
    metric: str = ""

    def matches(self, machine_type: str, zone: str, spot: bool) -> bool:
        """Whether an insert of ``machine_type`` in ``zone`` fails with this fault."""
        return (
            self.machine_type in (None, machine_type)
            and self.zone in (None, zone)
            and self.spot in (None, spot)
        )

    def operation_error(self, project: str, zone: str, region: str, spot: bool) -> dict[str, Any]:
        """The operation's ``error``, ``httpErrorStatusCode`` and ``httpErrorMessage``."""
        if self.code == "QUOTA_EXCEEDED":
            message = self.quota_message(region, spot)
            status, text = 403, "FORBIDDEN"
        else:
            message = (
                f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
                "available to fulfill the request.  Try a different zone, or try again later."
            )
            status, text = 503, "SERVICE UNAVAILABLE"
        return {
            "error": {"errors": [{"code": self.code, "message": message}]},
            "httpErrorStatusCode": status,
            "httpErrorMessage": text,
        }

    def quota_message(self, region: str, spot: bool) -> str:
        """GCE's message for an exhausted quota."""
        metric = self.metric or ("PREEMPTIBLE_CPUS" if spot else "CPUS")
        return f"Quota '{metric}' exceeded.  Limit: 24.0 in region {region}."


class Faults:
    """The faults of one fake server (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._capacity: list[CapacityFault] = []
        self._requests: list[CountedFault] = []

    def stockout(
        self,
        machine_type: str | None = None,
        zone: str | None = None,
        *,
        spot: bool | None = None,
        times: int | None = None,
        code: str = STOCKOUT_CODES[0],
    ) -> CapacityFault:
        """Inserts that match end in an operation error ``code`` (a zone stockout)."""
        if code not in STOCKOUT_CODES:
            raise ValueError(f"stockout: code {code!r} is not one of {STOCKOUT_CODES}")
        return self._add(CapacityFault(code, machine_type, zone, spot, times))

    def quota(
        self,
        machine_type: str | None = None,
        zone: str | None = None,
        *,
        spot: bool | None = None,
        times: int | None = None,
        immediate: bool = False,
        metric: str = "",
    ) -> CapacityFault:
        """Inserts that match fail with QUOTA_EXCEEDED: in the operation, or as the insert's own
        403 when ``immediate``. ``metric``: the quota named (CPUS, PREEMPTIBLE_CPUS by default)."""
        return self._add(
            CapacityFault("QUOTA_EXCEEDED", machine_type, zone, spot, times, immediate, metric)
        )

    def throttle(self, count: int = 1, path: str = "") -> None:
        """Answer the next ``count`` requests (whose path matches ``path``) 429 rateLimitExceeded."""
        with self._lock:
            self._requests.append(CountedFault(429, count, path))

    def unavailable(self, count: int = 1, path: str = "") -> None:
        """Answer the next ``count`` requests (whose path matches ``path``) 503 backendError."""
        with self._lock:
            self._requests.append(CountedFault(503, count, path))

    def clear(self) -> None:
        """Drop every fault."""
        with self._lock:
            self._capacity.clear()
            self._requests.clear()

    def capacity(self, machine_type: str, zone: str, spot: bool) -> CapacityFault | None:
        """The capacity fault an insert of ``machine_type`` in ``zone`` meets (one use taken)."""
        with self._lock:
            fault = next((f for f in self._capacity if f.matches(machine_type, zone, spot)), None)
            if fault is not None and fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self._capacity.remove(fault)
            return fault

    def request(self, method: str, path: str) -> tuple[int, dict[str, Any]] | None:
        """The error answer of a request fault that takes ``method path``, if any."""
        with self._lock:
            fault = next((f for f in self._requests if f.take(method, path)), None)
            self._requests = [f for f in self._requests if f.times > 0]
        if fault is None:
            return None
        rpc, domain, reason, message = _REQUEST_ERRORS[fault.status]
        return fault.status, google_error(fault.status, reason, message, domain, rpc)

    def _add(self, fault: CapacityFault) -> CapacityFault:
        if fault.times is not None and fault.times < 1:
            raise ValueError(f"capacity fault: times {fault.times} is not a positive count")
        with self._lock:
            self._capacity.append(fault)
        return fault
