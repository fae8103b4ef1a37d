"""Run the suite in this process through pytest and collect one result per check."""

from __future__ import annotations

import contextlib
import io
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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
    """A pytest plugin that hands the record in and gathers results by check."""

    def __init__(self, record: ProviderRecord) -> None:
        self.record = record
        self.results: dict[str, CheckResult] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[RECORD_KEY] = self.record

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
            self.results[item.nodeid] = CheckResult(
                name=check_name(item),
                description=doc.strip().splitlines()[0] if doc.strip() else "",
                core=is_core(item),
            )

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


def run(record: ProviderRecord, select: str | None = None, *extra: str) -> Report:
    """Run the suite for ``record``; ``select`` is a check name or a pytest ``-k``
    expression over check names. A record of an API version the suite does not check raises
    ``UnsupportedRecordVersion`` before anything runs."""
    check_record_version(record)
    collector = _Collector(record)
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
