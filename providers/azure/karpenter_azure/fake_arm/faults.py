"""Faults the fake ARM server injects: capacity errors on VM creates (per size, zone and
priority) and failed requests (authorization denials, throttling, server errors) on any path.

Error codes and message shapes are ARM's: ``SkuNotAvailable`` and the quota errors
(``OperationNotAllowed``) answer the VM PUT itself with 409; allocation failures
(``AllocationFailed``, ``ZonalAllocationFailed`` and the ``Overconstrained...`` pair) are
reported by the create's asynchronous operation, which ends ``Failed`` and leaves the VM in
provisioningState ``Failed``, as Azure does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

CapacityError = Literal[
    "ZonalAllocationFailed",
    "AllocationFailed",
    "OverconstrainedZonalAllocationRequest",
    "OverconstrainedAllocationRequest",
    "SkuNotAvailable",
    "FamilyQuota",
    "LowPriorityQuota",
    "RegionalQuota",
]
CAPACITY_ERRORS: tuple[str, ...] = CapacityError.__args__  # type: ignore[attr-defined]
ASYNC_ERRORS = frozenset(
    {
        "ZonalAllocationFailed",
        "AllocationFailed",
        "OverconstrainedZonalAllocationRequest",
        "OverconstrainedAllocationRequest",
    }
)
"""Capacity errors reported through the asynchronous operation instead of the PUT's answer."""
ALLOCATION_GUIDANCE = "Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"


class FaultError(ValueError):
    """A fault definition that cannot be used (names the field)."""


def arm_error(code: str, message: str, target: str | None = None) -> dict[str, Any]:
    """ARM's error body: ``{"error": {"code", "message"[, "target"]}}``."""
    error: dict[str, Any] = {"code": code, "message": message}
    if target:
        error["target"] = target
    return {"error": error}


def _zone_number(zone: str | None) -> str | None:
    """``"eastus-2"`` and ``"2"`` are both zone ``"2"``."""
    if zone is None:
        return None
    return zone.rsplit("-", 1)[-1]


@dataclass(slots=True)
class CapacityFault:
    """Fail VM creates that match: ``sku`` (a VM size, any when None), ``zone`` (``"2"`` or
    ``"eastus-2"``; any when None, and a regional create matches only a fault without zone),
    ``priority`` (``"Spot"`` or ``"Regular"``, any when None). ``times``: how many creates it
    fails before it lapses (None: until cleared). ``limit``: the quota's Current Limit in a
    quota error's message."""

    error: str
    sku: str | None = None
    zone: str | None = None
    priority: str | None = None
    times: int | None = None
    limit: int = 0

    def __post_init__(self) -> None:
        if self.error not in CAPACITY_ERRORS:
            raise FaultError(
                f"capacity fault: error {self.error!r} is not one of {CAPACITY_ERRORS}"
            )
        if self.priority not in (None, "Spot", "Regular"):
            raise FaultError(f"capacity fault: priority {self.priority!r} is not Spot or Regular")
        if self.times is not None and self.times < 1:
            raise FaultError(f"capacity fault: times {self.times} is not a positive count")
        self.zone = _zone_number(self.zone)

    def matches(self, sku: str, zone: str | None, priority: str) -> bool:
        """Whether a create of ``sku`` in ``zone`` (a number or None) at ``priority`` fails."""
        return (
            (self.sku is None or self.sku.lower() == sku.lower())
            and (self.zone is None or self.zone == zone)
            and (self.priority is None or self.priority == priority)
        )

    def body(self, sku: str, location: str, zone: str | None, family: str, cores: int) -> dict:
        """The error this fault answers a create of ``sku`` with."""
        where = f"location '{location}'" + (f" zone '{zone}'" if zone else "")
        quota = (
            "Operation could not be completed as it results in exceeding approved {what} quota. "
            f"Additional details - Deployment Model: Resource Manager, Location: {location}, "
            f"Current Limit: {self.limit}, Current Usage: {self.limit}, "
            f"Additional Required: {cores}, (Minimum) New Limit Required: {self.limit + cores}. "
            "Submit a request for Quota increase at https://aka.ms/ProdportalCRP."
        )
        messages = {
            "ZonalAllocationFailed": "Allocation failed. We do not have sufficient capacity for "
            f"the requested VM size in this zone. {ALLOCATION_GUIDANCE}",
            "AllocationFailed": "Allocation failed. We do not have sufficient capacity for the "
            f"requested VM size in this region. {ALLOCATION_GUIDANCE}",
            "OverconstrainedZonalAllocationRequest": "Allocation failed. VM(s) with the following "
            "constraints cannot be allocated, because the condition is too restrictive. Please "
            "remove some constraints and try again. Constraints applied are: Availability Zone, "
            f"VM Size {sku}. {ALLOCATION_GUIDANCE}",
            "OverconstrainedAllocationRequest": "Allocation failed. VM(s) with the following "
            "constraints cannot be allocated, because the condition is too restrictive. Please "
            f"remove some constraints and try again. Constraints applied are: VM Size {sku}. "
            f"{ALLOCATION_GUIDANCE}",
            "SkuNotAvailable": "The requested VM size for resource 'Following SKUs have failed "
            f"for Capacity Restrictions: {sku}' is currently not available in {where}. Please "
            "try another size or deploy to a different location or different zone. See "
            "https://aka.ms/azureskunotavailable for details.",
            "FamilyQuota": quota.format(what=f"{family} Family Cores"),
            "LowPriorityQuota": quota.format(what="LowPriorityCores"),
            "RegionalQuota": quota.format(what="Total Regional Cores"),
        }
        code = "OperationNotAllowed" if self.error.endswith("Quota") else self.error
        return arm_error(
            code, messages[self.error], "sku.name" if code == "SkuNotAvailable" else None
        )

    def to_dict(self) -> dict[str, Any]:
        """The fault as the admin API shows it."""
        return {
            "error": self.error,
            "sku": self.sku,
            "zone": self.zone,
            "priority": self.priority,
            "times": self.times,
            "limit": self.limit,
        }


REQUEST_ERRORS: dict[int, tuple[str, str]] = {
    403: (
        "AuthorizationFailed",
        "The client does not have authorization to perform this action over scope '{scope}' or "
        "the scope is invalid. If access was recently granted, please refresh your credentials.",
    ),
    429: (
        "TooManyRequests",
        "The request is being throttled as the limit has been reached for operation group "
        "'{group}'. Please retry after the time in the Retry-After header.",
    ),
    500: (
        "InternalServerError",
        "An internal server error occurred while processing the request. Please retry.",
    ),
    503: ("ServiceUnavailable", "The service is temporarily unavailable. Please retry."),
}


@dataclass(slots=True)
class RequestFault:
    """Answer matching requests with ``status`` (403, 429, 500 or 503) instead of serving them:
    ``method`` (any when None) and ``path``, a regular expression searched in the request's
    path (case-insensitive). ``retry_after``: seconds in the answer's Retry-After header (429
    and 503). ``times``: how many requests it fails (None: until cleared)."""

    status: int
    method: str | None = None
    path: str = ""
    retry_after: float = 1.0
    times: int | None = None
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.status not in REQUEST_ERRORS:
            raise FaultError(
                f"request fault: status {self.status} is not one of {sorted(REQUEST_ERRORS)}"
            )
        if self.times is not None and self.times < 1:
            raise FaultError(f"request fault: times {self.times} is not a positive count")
        if self.retry_after < 0:
            raise FaultError(f"request fault: retry_after {self.retry_after} is negative")
        try:
            self._pattern = re.compile(self.path, re.IGNORECASE)
        except re.error as error:
            raise FaultError(
                f"request fault: path {self.path!r} is not a pattern: {error}"
            ) from None
        if self.method is not None:
            self.method = self.method.upper()

    def matches(self, method: str, path: str) -> bool:
        """Whether ``method`` on ``path`` is failed by this fault."""
        return (self.method is None or self.method == method) and bool(self._pattern.search(path))

    def answer(self, path: str = "") -> tuple[int, dict[str, Any], dict[str, str]]:
        """Status, ARM error body and headers of the failed answer to a request of ``path``
        (the scope a 403 names)."""
        code, message = REQUEST_ERRORS[self.status]
        headers = {}
        if self.status in (429, 503):
            headers["Retry-After"] = f"{self.retry_after:g}"
        if self.status == 429:
            headers["x-ms-ratelimit-remaining-resource"] = "Microsoft.Compute/HighCostGet3Min;0"
        return (
            self.status,
            arm_error(code, message.format(group="HighCostGet3Min", scope=path)),
            headers,
        )

    def to_dict(self) -> dict[str, Any]:
        """The fault as the admin API shows it."""
        return {
            "status": self.status,
            "method": self.method,
            "path": self.path,
            "retry_after": self.retry_after,
            "times": self.times,
        }


def consume(fault: CapacityFault | RequestFault) -> bool:
    """Count one use of ``fault``; True when it has lapsed and should be dropped."""
    if fault.times is None:
        return False
    fault.times -= 1
    return fault.times <= 0
