"""The conformance suite's runner and its record version: checks an interrupted run never reached
are reported as not run, and a record of an API version the suite does not check is refused."""

from __future__ import annotations

import dataclasses
import io
import sys
import types

import pytest

from karpenter_conformance.pytest_plugin import say
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


def test_progress_shows_each_check_and_the_fixtures_lines_while_pytest_captures_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plugin's progress line said during a check's setup (output captured, as the cluster
    fixtures' are while they build and start the control plane) reaches the progress stream,
    between the run's lines; pytest's own report does not."""
    plugin = types.ModuleType("fake_progress_plugin")

    def pytest_runtest_setup(item: pytest.Item) -> None:
        print("printed, so captured")
        say(item.config, "[cluster] control plane up in 1.0s")

    plugin.pytest_runtest_setup = pytest_runtest_setup  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, plugin.__name__, plugin)
    stream = io.StringIO()
    report = run(kwok_with(), "record or get_and_list", "-p", plugin.__name__, progress=stream)
    assert report.ok
    assert stream.getvalue().splitlines() == [
        "[conformance] kwok: 2 checks",
        "[cluster] control plane up in 1.0s",
        f"[conformance] [1/2] record passed ({report.results[0].seconds:.1f}s)",
        "[cluster] control plane up in 1.0s",
        f"[conformance] [2/2] get-and-list passed ({report.results[1].seconds:.1f}s)",
    ]


def test_without_a_progress_stream_the_run_is_quiet(capfd: pytest.CaptureFixture[str]) -> None:
    report = run(kwok_with(), "record")
    assert report.ok
    assert capfd.readouterr() == ("", "")


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
