"""The SDK's status steps: a condition kept across a failed cloud call, and the apiserver's
gitVersion."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from karpenter_core.apis.v1.common import Condition
from karpenter_core.sdk.nodeclass import Verdict
from karpenter_core.sdk.status import git_version, kept_verdict
from karpenter_core.sdk.types import CloudProviderError


def test_a_failed_call_keeps_the_previous_verdict_or_is_unknown() -> None:
    previous = Condition(
        type="ImagesReady",
        status="True",
        reason="ImagesReady",
        message="",
        last_transition_time=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert kept_verdict(previous, "Failed", "boom") == Verdict("True", "ImagesReady", "", True)
    assert kept_verdict(None, "Failed", "boom") == Verdict("Unknown", "Failed", "boom", True)


def test_git_version() -> None:
    assert git_version({"gitVersion": "v1.31.2-gke.1000", "minor": "31"}) == "v1.31.2-gke.1000"
    with pytest.raises(CloudProviderError, match="has no gitVersion"):
        git_version({"major": "1"})
