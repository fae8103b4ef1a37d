"""The conformance suite's contract level for the Azure provider, against the profile's fake ARM
server; Azure skips no check."""

from __future__ import annotations

import pytest

from karpenter_conformance.suite.runner import run
from karpenter_core.cloudprovider.registry import discover

# the suite runs its own pytest session in this process, with a fake ARM server
pytestmark = pytest.mark.slow

SKIPS: set[str] = set()
"""The contract checks Azure may skip; the list must not grow."""


def test_azure_passes_the_contract_level_against_the_fake_arm_server() -> None:
    report = run(discover().provider("azure"))
    failed = [f"{r.name}: {r.message}" for r in report.results if r.outcome == "failed"]
    assert not failed, "\n".join(failed)
    assert report.ok
    skipped = {r.name for r in report.results if r.outcome == "skipped"}
    assert skipped <= SKIPS, f"Azure's skip list grew: {sorted(skipped - SKIPS)}"
