"""The conformance suite's runner and its record version: checks an interrupted run never reached
are reported as not run, and a record of an API version the suite does not check is refused."""

from __future__ import annotations

import dataclasses

import pytest

from karpenter_conformance.suite.runner import SUITE, Report, _Collector, as_dict, run
from karpenter_conformance.suite.version import RECORD_API_VERSIONS, UnsupportedRecordVersion
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.plugin import API_VERSION, ProviderRecord
from karpenter_core.cloudprovider.registry import discover
from karpenter_kwok.cloudprovider import KWOKCloudProvider

# the conformance suite runs in this process through pytest
pytestmark = pytest.mark.slow


class InterruptedOnCreate(KWOKCloudProvider):
    """Interrupts the run (as Ctrl-C would) on the first create."""

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        raise KeyboardInterrupt


def kwok_with(**changes: object) -> ProviderRecord:
    return dataclasses.replace(discover().provider("kwok"), **changes)  # type: ignore[arg-type]


def test_checks_an_interrupted_run_never_reached_are_not_run() -> None:
    report: Report = run(
        kwok_with(factory=InterruptedOnCreate.from_context),
        "record or create_is_idempotent or get_and_list",
    )
    outcomes = {r.name: (r.outcome, r.seconds) for r in report.results}
    assert outcomes["record"][0] == "passed"
    assert outcomes["record"][1] > 0
    assert outcomes["get-and-list"] == ("not run", 0.0)
    assert not report.ok
    checks = {c["name"]: c["result"] for c in as_dict(report)["checks"]}
    assert checks["get-and-list"] == "not run"
    assert as_dict(report)["ok"] is False


def test_the_suite_checks_the_core_record_version() -> None:
    assert API_VERSION in RECORD_API_VERSIONS


def test_a_record_of_another_api_version_is_refused_by_the_runner() -> None:
    record = kwok_with(api_version=max(RECORD_API_VERSIONS) + 1)
    with pytest.raises(UnsupportedRecordVersion) as error:
        run(record)
    assert str(error.value) == (
        f"provider 'kwok' has a record of api_version {record.api_version}; this "
        "karpenter-conformance checks records of api_version 2 (install the "
        "karpenter-conformance release that matches the provider's karpenter-core)"
    )


def test_a_record_of_another_api_version_is_refused_by_the_pytest_plugin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    record = kwok_with(api_version=max(RECORD_API_VERSIONS) + 1)
    collector = _Collector(record)
    code = pytest.main(["--pyargs", SUITE, "-p", "no:cacheprovider", "-qq"], plugins=[collector])
    assert code == pytest.ExitCode.USAGE_ERROR
    assert collector.results == {}
    assert f"provider 'kwok' has a record of api_version {record.api_version};" in (
        capsys.readouterr().err
    )
