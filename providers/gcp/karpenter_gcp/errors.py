"""Compute Engine errors: which to retry, and which say an offering has no capacity or quota.

A stockout or a used-up quota keeps offerings out of launches for a while (the SDK's cache) and
fails the create with ``InsufficientCapacity``, so the next create moves to another zone or
type. Throttling (429, ``rateLimitExceeded``), 500 and 503 are retried with backoff and never
mark an offering.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

from google.api_core import exceptions
from google.api_core.exceptions import InternalServerError, ServiceUnavailable, TooManyRequests
from google.api_core.retry import Retry

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.offerings import UNAVAILABLE_OFFERINGS_TTL, UnavailableOfferings
from karpenter_core.sdk.types import (
    CloudProviderError,
    CreateError,
    InstanceType,
    InsufficientCapacity,
    Offering,
)

__all__ = ["QUOTA_TTL", "RETRY", "calling", "error_codes", "launch_error", "retryable"]

STOCKOUTS = frozenset({"ZONE_RESOURCE_POOL_EXHAUSTED", "RESOURCE_POOL_EXHAUSTED", "STOCKOUT"})
"""A zone has no capacity for the type (each code also with ``_WITH_DETAILS``)."""
IP_SPACE = "IP_SPACE_EXHAUSTED"
IP_SPACE_TTL = timedelta(seconds=30)
"""The (regional) node subnetwork has no address left: nothing launches for a while."""
QUOTAS = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
QUOTA_TTL = timedelta(minutes=10)
"""A regional quota is used up for the type's family (or for spot); it may free up later."""
_THROTTLED = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
_TRANSIENT = (TooManyRequests, ServiceUnavailable, InternalServerError)


def error_codes(error: object) -> list[tuple[str, str]]:
    """The (code, message) pairs of an API error's ``errors[]`` (its own text when it lists
    none), or of a finished operation's ``error.errors[]``."""
    if isinstance(error, exceptions.GoogleAPICallError):
        listed = [(str(e.get("reason", "")), str(e.get("message", ""))) for e in error.errors]
        return listed or [(error.reason or "", error.message or str(error))]
    if isinstance(error, exceptions.GoogleAPIError):  # retries given up, a transport failure
        return [("", str(error))]
    errors = getattr(getattr(error, "error", None), "errors", None) or ()
    return [(str(e.code), str(e.message)) for e in errors]


def retryable(error: BaseException) -> bool:
    """Whether a call failed for a while only: throttled, or the service unavailable."""
    if isinstance(error, _TRANSIENT):
        return True
    is_api = isinstance(error, exceptions.GoogleAPICallError)
    return is_api and any(code in _THROTTLED for code, _ in error_codes(error))


@contextmanager
def calling(what: str) -> Iterator[None]:
    """A failed Compute call (its retries given up) raised as ``CloudProviderError`` on
    ``what``."""
    try:
        yield
    except exceptions.GoogleAPIError as error:
        raise CloudProviderError(f"{what}: {error}") from None


RETRY = Retry(predicate=retryable, initial=0.5, maximum=10.0, multiplier=2.0, timeout=60.0)
"""Backoff for every Compute call: 0.5 s doubling to 10 s, for at most a minute."""


def launch_error(
    unavailable: UnavailableOfferings,
    codes: Sequence[tuple[str, str]],
    name: str,
    instance_type: InstanceType,
    offering: Offering,
) -> CloudProviderError:
    """What launching instance ``name`` as ``offering`` raises after failing with ``codes``:
    ``InsufficientCapacity`` when they say there is no capacity or quota, after marking the
    offering (a stockout), every offering (no address left), the type in every zone (a regional
    quota) or every spot offering (the spot vCPU quota); else ``CreateError``."""
    capacity_type, zone, type_name = offering.capacity_type, offering.zone, instance_type.name
    for code, message in codes:
        if code.removesuffix("_WITH_DETAILS") in STOCKOUTS:
            unavailable.mark(capacity_type, type_name, zone, code, UNAVAILABLE_OFFERINGS_TTL)
            return InsufficientCapacity(f"{type_name} in {zone}: {code}: {message}")
        if code.removesuffix("_WITH_DETAILS") == IP_SPACE:
            for each in (wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT):
                unavailable.mark_capacity_type(each, code, IP_SPACE_TTL)
            return InsufficientCapacity(f"the node subnetwork has no address left: {message}")
        if code not in QUOTAS:
            continue
        if capacity_type == wk.CAPACITY_TYPE_SPOT and re.search(r"PREEMPTIBLE_\w*CPUS", message):
            unavailable.mark_capacity_type(capacity_type, code, QUOTA_TTL)
        else:
            zones = {o.zone for o in instance_type.offerings if o.capacity_type == capacity_type}
            for each in zones:
                unavailable.mark(capacity_type, type_name, each, code, QUOTA_TTL)
        return InsufficientCapacity(f"{capacity_type} quota for {type_name}: {message}")
    code, message = codes[0] if codes else ("LaunchFailed", "")
    return CreateError(
        code or "LaunchFailed",
        f"launching {name} ({type_name}, {capacity_type}, {zone}) failed: {message}",
    )
