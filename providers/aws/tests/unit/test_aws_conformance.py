"""The conformance suite's contract level for the AWS provider, against the profile's moto
server; AWS skips no check."""

from __future__ import annotations

import pytest

from karpenter_conformance.suite.runner import run
from karpenter_core.cloudprovider.registry import discover

# the suite runs its own pytest session in this process, with a moto server
pytestmark = pytest.mark.slow

SKIPS: set[str] = set()
"""The contract checks AWS may skip; the list must not grow."""


def test_aws_passes_the_contract_level_against_moto() -> None:
    report = run(discover().provider("aws"))
    failed = [f"{r.name}: {r.message}" for r in report.results if r.outcome == "failed"]
    assert not failed, "\n".join(failed)
    assert report.ok
    skipped = {r.name for r in report.results if r.outcome == "skipped"}
    assert skipped <= SKIPS, f"AWS's skip list grew: {sorted(skipped - SKIPS)}"
