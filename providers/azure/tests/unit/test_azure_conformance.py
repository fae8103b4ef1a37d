"""The conformance suite's contract level for the Azure provider, against the profile's fake ARM
server (Azure skips no check), and the profile's throttling for the fault soak."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError

from karpenter_azure.conformance import AzureProfile
from karpenter_azure.fake_arm import seed
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


def test_the_profile_throttles_chosen_operations_until_the_faults_are_cleared() -> None:
    profile = AzureProfile()
    profile.start()
    try:
        compute = profile._server.compute_client(retry_total=0)
        profile.cloud_errors(["virtualMachines.list"])
        with pytest.raises(HttpResponseError) as throttled:
            list(compute.virtual_machines.list(seed.NODE_RESOURCE_GROUP))
        assert throttled.value.status_code == 429
        assert throttled.value.response.headers["Retry-After"] == "1"
        profile.clear_faults()
        assert list(compute.virtual_machines.list(seed.NODE_RESOURCE_GROUP)) == []
        with pytest.raises(ValueError, match="unknown ARM operation 'ec2:CreateFleet'"):
            profile.cloud_errors(["ec2:CreateFleet"])
    finally:
        profile.stop()
