"""The fake GCE server's list filters, pages and faults, without a server."""

from __future__ import annotations

import pytest

from karpenter_gcp.testing.faults import Faults
from karpenter_gcp.testing.listing import FilterError, matches, page

INSTANCE = {
    "name": "karpenter-abc",
    "status": "RUNNING",
    "labels": {"cluster": "c1", "nodepool": "default"},
    "scheduling": {"provisioningModel": "SPOT", "automaticRestart": False},
    "zone": "https://compute.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("labels.cluster=c1", True),
        ("labels.cluster=c2", False),
        ("labels.cluster:*", True),
        ("labels.missing:*", False),
        ("labels.missing!=x", True),
        ("(labels.cluster:* AND labels.nodepool:* AND labels.cluster:c1)", True),
        ("(labels.cluster=c1) (labels.nodepool=other)", False),
        ("name eq karpenter-.*", True),
        ("name ne karpenter-.*", False),
        ("name eq karpenter", False),
        ("name=karpenter-*", True),
        ('status="RUNNING"', True),
        ("status!=RUNNING", False),
        ("scheduling.provisioningModel=SPOT AND scheduling.automaticRestart=false", True),
        ("zone=us-central1-a", True),
    ],
)
def test_filters(expression: str, expected: bool) -> None:
    assert matches(INSTANCE, expression) is expected


def test_a_filter_it_cannot_read_is_refused() -> None:
    with pytest.raises(FilterError, match="Invalid list filter expression"):
        matches(INSTANCE, "labels.cluster")


def test_pages_carry_a_token_until_the_last() -> None:
    items = list(range(7))
    first, token = page(items, {"maxResults": "3"})
    second, token2 = page(items, {"maxResults": "3", "pageToken": token})
    third, last = page(items, {"maxResults": "3", "pageToken": token2})
    assert (first, second, third, last) == ([0, 1, 2], [3, 4, 5], [6], "")


def test_capacity_faults_match_and_lapse() -> None:
    faults = Faults()
    faults.stockout("n2-standard-2", "us-central1-a", times=1)
    faults.quota(spot=True)
    assert faults.capacity("n2-standard-4", "us-central1-a", False) is None
    hit = faults.capacity("n2-standard-2", "us-central1-a", False)
    assert hit is not None and hit.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert faults.capacity("n2-standard-2", "us-central1-a", False) is None
    quota = faults.capacity("e2-medium", "us-central1-b", True)
    assert quota is not None
    error = quota.operation_error("p", "us-central1-b", "us-central1", True)
    assert error["error"]["errors"][0]["code"] == "QUOTA_EXCEEDED"
    assert error["httpErrorStatusCode"] == 403
    with pytest.raises(ValueError, match="stockout: code"):
        faults.stockout(code="NOPE")
    with pytest.raises(ValueError, match="times 0"):
        faults.quota(times=0)


def test_request_faults_answer_the_next_calls_in_google_error_format() -> None:
    faults = Faults()
    faults.throttle(1, path="/instances")
    assert faults.request("GET", "/zones") is None
    answer = faults.request("GET", "/zones/a/instances")
    assert answer is not None
    status, body = answer
    assert status == 429
    assert body["error"]["errors"][0]["reason"] == "rateLimitExceeded"
    assert faults.request("GET", "/zones/a/instances") is None
