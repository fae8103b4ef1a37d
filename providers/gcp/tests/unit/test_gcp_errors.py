"""Compute Engine errors: stockouts and quota mark offerings and raise InsufficientCapacity;
throttling and 503 are retried and mark nothing."""

from __future__ import annotations

from google.api_core import exceptions

from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_core.sdk.types import InsufficientCapacity
from karpenter_gcp.errors import QUOTA_TTL, capacity_error, error_codes, retryable

ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


def api_error(
    kind: type[exceptions.GoogleAPICallError], reason: str
) -> exceptions.GoogleAPICallError:
    return kind("failed", errors=[{"reason": reason, "message": f"{reason} here"}])


def test_a_stockout_marks_only_that_offering() -> None:
    cache = UnavailableOfferings()
    codes = [("ZONE_RESOURCE_POOL_EXHAUSTED", "no n2 in a")]
    error = capacity_error(cache, codes, "n2-standard-4", ZONES[0], "spot", ZONES)
    assert isinstance(error, InsufficientCapacity)
    assert cache.snapshot() == {"n2-standard-4": frozenset({("spot", ZONES[0])})}


def test_a_quota_marks_the_type_in_every_zone_or_all_spot() -> None:
    cache = UnavailableOfferings()
    codes = [("QUOTA_EXCEEDED", "Quota 'N2_CPUS' exceeded. Limit: 24.0 in region us-central1.")]
    assert capacity_error(cache, codes, "n2-standard-4", ZONES[0], "on-demand", ZONES)
    assert cache.snapshot() == {"n2-standard-4": frozenset(("on-demand", z) for z in ZONES)}
    assert cache.ttl < QUOTA_TTL
    spot = [("QUOTA_EXCEEDED", "Quota 'PREEMPTIBLE_CPUS' exceeded. Limit: 8.0")]
    assert capacity_error(cache, spot, "e2-small", ZONES[1], "spot", ZONES)
    assert cache.is_unavailable("spot", "c3-standard-8", ZONES[2])


def test_other_errors_mark_nothing() -> None:
    cache = UnavailableOfferings()
    codes = [("INVALID_FIELD_VALUE", "bad image")]
    assert capacity_error(cache, codes, "e2-small", ZONES[0], "spot", ZONES) is None
    assert cache.seq == 0


def test_codes_are_read_from_api_errors_and_operations() -> None:
    error = api_error(exceptions.Forbidden, "quotaExceeded")
    assert error_codes(error) == [("quotaExceeded", "quotaExceeded here")]

    class Operation:
        class error:
            errors = [type("E", (), {"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "m"})]

    assert error_codes(Operation()) == [("ZONE_RESOURCE_POOL_EXHAUSTED", "m")]


def test_throttling_and_unavailability_are_retried_the_rest_is_not() -> None:
    assert retryable(api_error(exceptions.TooManyRequests, "rateLimitExceeded"))
    assert retryable(api_error(exceptions.Forbidden, "rateLimitExceeded"))
    assert retryable(exceptions.ServiceUnavailable("down"))
    assert not retryable(api_error(exceptions.Forbidden, "quotaExceeded"))
    assert not retryable(api_error(exceptions.BadRequest, "invalid"))
    assert not retryable(ValueError("x"))
