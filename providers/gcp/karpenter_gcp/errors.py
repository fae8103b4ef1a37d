"""Compute Engine errors: which to retry, and which say an offering has no capacity or quota.

A stockout (``ZONE_RESOURCE_POOL_EXHAUSTED`` and its kin) or a used-up quota keeps the offering
out of launches for a while, in the SDK's cache (``karpenter_core.sdk.offerings``), and the create
fails with ``InsufficientCapacity``, so the next one moves to another zone or type. Throttling
(429, ``rateLimitExceeded``) and 503 are retried with backoff and never mark an offering.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import timedelta

from google.api_core import exceptions
from google.api_core.retry import Retry

from karpenter_core.sdk.offerings import UNAVAILABLE_OFFERINGS_TTL, UnavailableOfferings
from karpenter_core.sdk.types import InsufficientCapacity

__all__ = ["QUOTA_TTL", "RETRY", "STOCKOUT_TTL", "capacity_error", "error_codes", "retryable"]

STOCKOUT_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "RESOURCE_POOL_EXHAUSTED",
        "STOCKOUT",
        "IP_SPACE_EXHAUSTED",
        "IP_SPACE_EXHAUSTED_WITH_DETAILS",
    }
)
"""Codes of a zone with no capacity for the type (or no addresses left in the subnetwork)."""
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
STOCKOUT_TTL = UNAVAILABLE_OFFERINGS_TTL
QUOTA_TTL = timedelta(minutes=10)
"""A regional quota is used up for the type's family (or for spot): it may free up later."""
_THROTTLED = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
_SPOT_QUOTA = re.compile(r"PREEMPTIBLE_\w*CPUS")


def error_codes(error: object) -> list[tuple[str, str]]:
    """The (code, message) pairs of an API error (its ``errors[]`` reasons) or of a finished
    operation's ``error.errors[]``; the error's own text when it lists none."""
    if isinstance(error, exceptions.GoogleAPICallError):
        listed = [(str(e.get("reason", "")), str(e.get("message", ""))) for e in error.errors]
        return listed or [(error.reason or "", error.message or str(error))]
    errors = getattr(getattr(error, "error", None), "errors", None) or ()
    return [(str(e.code), str(e.message)) for e in errors]


def retryable(error: BaseException) -> bool:
    """Whether a call failed for a while only: throttled (429 or ``rateLimitExceeded``), or the
    service unavailable (503) or failing inside (500)."""
    if isinstance(error, exceptions.TooManyRequests | exceptions.ServiceUnavailable):
        return True
    if isinstance(error, exceptions.InternalServerError):
        return True
    codes = error_codes(error) if isinstance(error, exceptions.GoogleAPICallError) else ()
    return any(code in _THROTTLED for code, _ in codes)


RETRY = Retry(predicate=retryable, initial=0.5, maximum=10.0, multiplier=2.0, timeout=60.0)
"""Backoff for every Compute call: 0.5 s doubling to 10 s, for at most a minute."""


def capacity_error(
    unavailable: UnavailableOfferings,
    codes: Iterable[tuple[str, str]],
    instance_type: str,
    zone: str,
    capacity_type: str,
    zones: Sequence[str],
) -> InsufficientCapacity | None:
    """When ``codes`` (from launching ``instance_type`` in ``zone`` as ``capacity_type``) say
    there is no capacity or quota: mark what they rule out and return the error to raise; None
    for any other error. A stockout marks the offering; a quota (regional) marks the type in
    all ``zones``, or every spot offering when it is the spot vCPU quota."""
    for code, message in codes:
        if code in STOCKOUT_CODES:
            unavailable.mark(capacity_type, instance_type, zone, code, STOCKOUT_TTL)
            return InsufficientCapacity(f"{instance_type} in {zone}: {code}: {message}")
        if code in QUOTA_CODES:
            if capacity_type == "spot" and _SPOT_QUOTA.search(message):
                unavailable.mark_capacity_type(capacity_type, code, QUOTA_TTL)
            else:
                for each in zones:
                    unavailable.mark(capacity_type, instance_type, each, code, QUOTA_TTL)
            return InsufficientCapacity(f"{capacity_type} quota for {instance_type}: {message}")
    return None
