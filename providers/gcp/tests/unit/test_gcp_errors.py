"""Compute Engine errors: stockouts and quota mark offerings and raise InsufficientCapacity;
throttling and 503 are retried and mark nothing."""

from __future__ import annotations

import pytest
from google.api_core import exceptions

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_core.sdk.types import (
    CloudProviderError,
    CreateError,
    InstanceType,
    InsufficientCapacity,
    Offering,
)
from karpenter_gcp.errors import QUOTA_TTL, calling, error_codes, launch_error, retryable

ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]


def offering(zone: str, capacity_type: str) -> Offering:
    labels = {wk.TOPOLOGY_ZONE: zone, wk.CAPACITY_TYPE: capacity_type}
    return Offering(Requirements.from_labels(labels), 0.1)


TYPE = InstanceType(
    "n2-standard-4",
    Requirements.from_labels({wk.INSTANCE_TYPE: "n2-standard-4"}),
    [offering(z, c) for z in ZONES for c in ("spot", "on-demand")],
    {"cpu": 4000},
)


def fail(cache: UnavailableOfferings, code: str, message: str, capacity_type: str) -> Exception:
    return launch_error(
        cache, [(code, message)], "karpenter-a", TYPE, offering(ZONES[0], capacity_type)
    )


def api_error(
    kind: type[exceptions.GoogleAPICallError], reason: str
) -> exceptions.GoogleAPICallError:
    return kind("failed", errors=[{"reason": reason, "message": f"{reason} here"}])


def test_a_stockout_marks_only_that_offering() -> None:
    cache = UnavailableOfferings()
    error = fail(cache, "ZONE_RESOURCE_POOL_EXHAUSTED", "no n2 in a", "spot")
    assert isinstance(error, InsufficientCapacity)
    assert cache.snapshot() == {"n2-standard-4": frozenset({("spot", ZONES[0])})}


def test_a_subnetwork_without_addresses_keeps_every_offering_out_for_a_while() -> None:
    cache = UnavailableOfferings()
    error = fail(cache, "IP_SPACE_EXHAUSTED_WITH_DETAILS", "no address in default", "spot")
    assert isinstance(error, InsufficientCapacity)
    assert cache.snapshot().capacity_types == {"spot", "on-demand"}


def test_a_quota_marks_the_type_in_every_zone_or_all_spot() -> None:
    cache = UnavailableOfferings()
    quota = "Quota 'N2_CPUS' exceeded. Limit: 24.0 in region us-central1."
    assert isinstance(fail(cache, "QUOTA_EXCEEDED", quota, "on-demand"), InsufficientCapacity)
    assert cache.snapshot() == {"n2-standard-4": frozenset(("on-demand", z) for z in ZONES)}
    assert cache.ttl < QUOTA_TTL
    spot = "Quota 'PREEMPTIBLE_CPUS' exceeded. Limit: 8.0"
    assert isinstance(fail(cache, "quotaExceeded", spot, "spot"), InsufficientCapacity)
    assert cache.is_unavailable("spot", "c3-standard-8", ZONES[2])


def test_other_errors_are_create_errors_and_mark_nothing() -> None:
    cache = UnavailableOfferings()
    error = fail(cache, "INVALID_FIELD_VALUE", "bad image", "spot")
    assert isinstance(error, CreateError)
    assert "karpenter-a (n2-standard-4, spot, us-central1-a) failed: bad image" in str(error)
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


def test_a_call_that_failed_for_good_is_a_provider_error_naming_it() -> None:
    raised = pytest.raises(CloudProviderError, match=r"^listing instances: 403 denied$")
    with raised, calling("listing instances"):
        raise exceptions.Forbidden("denied")
    gave_up = exceptions.RetryError("Timeout of 60.0s exceeded", cause=None)
    error = fail_with(gave_up)
    assert isinstance(error, CreateError) and "Timeout of 60.0s exceeded" in str(error)


def fail_with(error: exceptions.GoogleAPIError) -> Exception:
    return launch_error(
        UnavailableOfferings(), error_codes(error), "karpenter-a", TYPE, offering(ZONES[0], "spot")
    )
