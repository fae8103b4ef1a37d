"""Run the suite in this process through pytest and collect one result per check.

pytest's own terminal output is kept off the caller's stdout (``karpenter conformance`` prints
only its table or JSON there); progress goes to the stream the caller names, if any: a line per
check as it ends (and as a cluster check starts), and the cluster fixtures' lines (building and
starting the control plane).
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pytest

from karpenter_conformance.pytest_plugin import PROGRESS, say
from karpenter_conformance.suite.plugin import RECORD_KEY, check_name, is_core
from karpenter_conformance.suite.version import check_record_version
from karpenter_core.cloudprovider.plugin import ProviderRecord

__all__ = ["NOT_RUN", "OUTCOMES", "CheckResult", "Report", "as_dict", "run"]

SUITE = "karpenter_conformance.suite"
NOT_RUN = "not run"
OUTCOMES = ("passed", "failed", "skipped", NOT_RUN)
"""Every outcome a check can have, in the order a summary lists them."""


@dataclass
class CheckResult:
    """One check: its name and description, whether it is core, its outcome and why.

    The outcome is "passed", "failed", "skipped" or "not run" (the run ended before the check
    did, e.g. interrupted or stopped at a first failure)."""

    name: str
    description: str
    core: bool
    outcome: str = NOT_RUN
    seconds: float = 0.0
    message: str = ""


@dataclass
class Report:
    """The results of a run and pytest's exit code."""

    provider: str
    exit_code: int
    seconds: float
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether checks ran, none failed and none was left unrun."""
        return (
            self.exit_code == 0
            and bool(self.results)
            and all(r.outcome != NOT_RUN for r in self.results)
        )


class _Collector:
    """A pytest plugin that hands the record in and gathers results by check; with a
    ``progress`` stream, it says how each check ended (and when a cluster check starts)."""

    def __init__(self, record: ProviderRecord, progress: TextIO | None = None) -> None:
        self.record = record
        self.progress = progress
        self.results: dict[str, CheckResult] = {}
        self._cluster_checks: set[str] = set()
        self._config: pytest.Config | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[RECORD_KEY] = self.record
        if self.progress is not None:
            config.stash[PROGRESS] = self.progress
            self._config = config

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
            self.results[item.nodeid] = CheckResult(
                name=check_name(item),
                description=doc.strip().splitlines()[0] if doc.strip() else "",
                core=is_core(item),
            )
            marker = item.get_closest_marker("check")
            if marker is not None and marker.kwargs.get("cluster"):
                self._cluster_checks.add(item.nodeid)
        count = len(self.results)
        self._say(f"{self.record.name}: {count} check{'' if count == 1 else 's'}")

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if nodeid in self._cluster_checks:  # the ones that take a while
            self._say(f"{self._position(nodeid)} {self.results[nodeid].name} ...")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = self.results.get(report.nodeid)
        if result is None:
            return
        result.seconds += report.duration
        messages = [v for k, v in report.user_properties if k == "message"]
        if report.failed or (report.skipped and result.outcome != "failed"):
            result.outcome = "failed" if report.failed else "skipped"
            result.message = str(messages[-1]) if messages else result.message
        elif report.when == "call" and report.passed and result.outcome == NOT_RUN:
            result.outcome = "passed"
        if report.when == "teardown":
            note = f": {result.message}" if result.outcome != "passed" and result.message else ""
            self._say(
                f"{self._position(report.nodeid)} {result.name} {result.outcome} "
                f"({result.seconds:.1f}s){note}"
            )

    def _position(self, nodeid: str) -> str:
        return f"[{list(self.results).index(nodeid) + 1}/{len(self.results)}]"

    def _say(self, message: str) -> None:
        if self._config is not None:
            say(self._config, f"[conformance] {message}")


def run(
    record: ProviderRecord,
    select: str | None = None,
    *extra: str,
    progress: TextIO | None = None,
) -> Report:
    """Run the suite for ``record``; ``select`` is a check name or a pytest ``-k``
    expression over check names, ``progress`` the stream that shows the run as it goes (none:
    quiet). A record of an API version the suite does not check raises
    ``UnsupportedRecordVersion`` before anything runs."""
    check_record_version(record)
    collector = _Collector(record, progress)
    # The suite's own directory is the root, with no configuration file and no conftest.py
    # (the suite's fixtures come from its plugin): the project the command is run from plays
    # no part.
    here = str(Path(__file__).parent)
    args = [
        *("--pyargs", SUITE, "-c", os.devnull, "--rootdir", here, "--noconftest"),
        *("-p", "no:cacheprovider", "-qq", "--tb=no", *extra),
    ]
    if select:
        args += ["-k", select.replace("-", "_")]
    started = time.monotonic()
    # pytest's terminal report would land in the middle of the caller's output
    with contextlib.redirect_stdout(io.StringIO()):
        code = pytest.main(args, plugins=[collector])
    return Report(
        provider=record.name,
        exit_code=int(code),
        seconds=time.monotonic() - started,
        results=list(collector.results.values()),
    )


def as_dict(report: Report) -> dict[str, Any]:
    """The report as JSON-ready data."""
    return {
        "provider": report.provider,
        "ok": report.ok,
        "seconds": round(report.seconds, 3),
        "checks": [
            {
                "name": r.name,
                "description": r.description,
                "core": r.core,
                "result": r.outcome,
                "seconds": round(r.seconds, 3),
                "message": r.message,
            }
            for r in report.results
        ],
    }
