"""The suite's pytest plugin: ``--karpenter-provider``, the harness fixture, skips and results.

Installed as a ``pytest11`` entry point, so ``pytest --pyargs karpenter_conformance.suite
--karpenter-provider NAME`` runs the suite; ``karpenter conformance`` runs the same tests through
``run`` (runner module). A check is a test function marked ``check``; its name is the function's
without ``test_``, its description the first line of its docstring. A check that needs a profile
operation the profile leaves out is skipped with the profile's reason, unless it is a core check:
a core check cannot be skipped, and a skip becomes a failure. Checks marked ``cluster=True``
(the cluster level) run only with ``--cluster``; they use the ``kube_cluster`` fixture of
``karpenter_conformance.pytest_plugin``, so ``--cluster-backend``/``--kubeconfig`` choose the
cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from karpenter_conformance.suite.cluster import ClusterHarness
from karpenter_conformance.suite.harness import Harness, Violation
from karpenter_conformance.suite.profile import missing
from karpenter_conformance.suite.version import UnsupportedRecordVersion, check_record_version
from karpenter_core.cloudprovider.plugin import ProviderRecord
from karpenter_core.cloudprovider.registry import UnknownProviderError, discover

__all__ = ["RECORD_KEY", "check_name"]

RECORD_KEY = pytest.StashKey[ProviderRecord]()
"""A record handed in by ``run`` (a provider that is not installed, e.g. in tests)."""
_HARNESS_KEY = pytest.StashKey[Harness]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register --karpenter-provider."""
    parser.getgroup("karpenter-conformance", "Karpenter provider conformance suite").addoption(
        "--karpenter-provider",
        default=None,
        metavar="NAME",
        help="the installed provider the conformance suite checks",
    )
    parser.getgroup("karpenter-conformance").addoption(
        "--cluster",
        action="store_true",
        default=False,
        help="also run the cluster level (the controller on a local KWOK cluster)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``check`` marker; resolve ``--karpenter-provider`` and refuse a record of an
    API version the suite does not check."""
    config.addinivalue_line(
        "markers",
        "check(core=False, needs=(), cluster=False): a conformance check; core checks cannot be "
        "skipped; needs names the profile operations it uses; cluster checks need --cluster",
    )
    name = config.getoption("karpenter_provider")
    if name and RECORD_KEY not in config.stash:
        try:
            config.stash[RECORD_KEY] = discover().provider(name)
        except UnknownProviderError as error:
            raise pytest.UsageError(str(error)) from None
    if RECORD_KEY in config.stash:
        try:
            check_record_version(config.stash[RECORD_KEY])
        except UnsupportedRecordVersion as error:
            raise pytest.UsageError(str(error)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--cluster``, leave the cluster level out."""
    if config.getoption("cluster"):
        return
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("check")
        (left if marker and marker.kwargs.get("cluster") else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def check_name(item: pytest.Item) -> str:
    """The check's name: the test function's name without ``test_``, with dashes."""
    name = getattr(item, "originalname", None) or item.name
    return name.removeprefix("test_").replace("_", "-")


def is_core(item: pytest.Item) -> bool:
    """Whether the item is a core check (it cannot be skipped)."""
    marker = item.get_closest_marker("check")
    return bool(marker and marker.kwargs.get("core"))


def _record(config: pytest.Config) -> ProviderRecord:
    if RECORD_KEY not in config.stash:
        raise pytest.UsageError("the conformance suite needs --karpenter-provider NAME")
    return config.stash[RECORD_KEY]


@pytest.fixture(scope="session")
def conformance_harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """The session's harness: the profile's fake cloud started once."""
    record = _record(request.config)
    if record.conformance is None:
        raise Violation(
            f"{record.name!r} has no conformance profile (ProviderRecord.conformance)",
            "one (see docs/writing-a-provider.md)",
        )
    harness = Harness(record, record.conformance())
    harness.start()
    request.config.stash[_HARNESS_KEY] = harness
    try:
        yield harness
    finally:
        harness.stop()


@pytest.fixture
def harness(request: pytest.FixtureRequest, conformance_harness: Harness) -> Harness:
    """The harness, reset for this check; skips when the profile lacks an operation it needs."""
    marker = request.node.get_closest_marker("check")
    for operation in marker.kwargs.get("needs", ()) if marker else ():
        reason = missing(conformance_harness.profile, operation)
        if reason is not None:
            pytest.skip(f"profile has no {operation}: {reason}")
    conformance_harness.reset()
    return conformance_harness


@pytest.fixture(scope="session")
def cluster_harness(
    request: pytest.FixtureRequest,
    kube_cluster: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ClusterHarness]:
    """The cluster level's harness: the profile's cloud started, the identity, CRDs and
    NodeClass installed on the session's cluster (a controller starts on first use)."""
    record = _record(request.config)
    if record.conformance is None:
        raise Violation(
            f"{record.name!r} has no conformance profile (ProviderRecord.conformance)",
            "one (see docs/writing-a-provider.md)",
        )
    cluster = ClusterHarness(
        record,
        record.conformance(),
        Path(kube_cluster.kubeconfig),
        tmp_path_factory.mktemp(f"conformance-{record.name}"),
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> ClusterHarness:
    """The cluster harness; skips when the profile lacks an operation the check needs (asked
    of a fresh profile, so a skipped check starts no cluster)."""
    marker = request.node.get_closest_marker("check")
    record = _record(request.config)
    if record.conformance is not None:
        profile = record.conformance()
        for operation in marker.kwargs.get("needs", ()) if marker else ():
            reason = missing(profile, operation)
            if reason is not None:
                pytest.skip(f"profile has no {operation}: {reason}")
    harness: ClusterHarness = request.getfixturevalue("cluster_harness")
    return harness


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A skipped core check fails (the core set cannot be skipped); a failure's one-line
    message goes into the report's ``user_properties`` as ``message``."""
    report = yield
    if report.skipped and is_core(item):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        reason = str(reason).removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"core check {check_name(item)} cannot be skipped: {reason}"
        report.user_properties.append(("message", report.longrepr))
    elif report.failed and call.excinfo is not None:
        error = call.excinfo.value
        text = str(error) if isinstance(error, Violation) else f"{type(error).__name__}: {error}"
        report.user_properties.append(("message", text.strip().splitlines()[0] if text else ""))
    elif report.skipped and isinstance(report.longrepr, tuple):
        report.user_properties.append(("message", report.longrepr[2].removeprefix("Skipped: ")))
    return report
