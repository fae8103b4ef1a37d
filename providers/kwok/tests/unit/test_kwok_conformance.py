"""The conformance suite's contract level for the KWOK provider; its skips are pinned."""

from __future__ import annotations

import pytest

from karpenter_conformance.suite.runner import run
from karpenter_core.cloudprovider.registry import discover

# the suite runs its own pytest session in this process
pytestmark = pytest.mark.slow

SKIPS = {"drift", "drift-capability-is-shown"}
"""The contract checks KWOK may skip; the list must not grow."""


def test_kwok_passes_the_contract_level() -> None:
    report = run(discover().provider("kwok"))
    failed = [f"{r.name}: {r.message}" for r in report.results if r.outcome == "failed"]
    assert not failed, "\n".join(failed)
    assert report.ok
    skipped = {r.name: r.message for r in report.results if r.outcome == "skipped"}
    assert set(skipped) <= SKIPS, f"KWOK's skip list grew: {sorted(set(skipped) - SKIPS)}"
    assert skipped["drift"] == "profile has no drifted: KWOK nodes have nothing that can drift"
