"""The cluster level as a provider's own tests run it: on a cluster they already have, failing
on any failed check and on any skip outside the provider's pinned list, so the list cannot grow
unnoticed."""

from __future__ import annotations

from pathlib import Path

from karpenter_conformance.suite.runner import Report, run
from karpenter_core.cloudprovider.registry import discover

__all__ = ["run_pinned_cluster_level"]


def run_pinned_cluster_level(provider: str, kubeconfig: Path, skips: set[str]) -> Report:
    """Run the installed ``provider``'s cluster level against the cluster at ``kubeconfig`` and
    print one line per check; raise AssertionError if a check failed, was left unrun or was
    skipped without being in ``skips``. Returns the report for further checks."""
    report = run(
        discover().provider(provider),
        None,
        "--cluster",
        "--cluster-backend",
        "external",
        "--kubeconfig",
        str(kubeconfig),
        "-m",
        "integration",
    )
    for result in report.results:
        print(f"{result.name:<40} {result.outcome:<8} {result.seconds:6.1f}s {result.message}")
    print(f"{provider}: cluster level in {report.seconds:.1f}s")
    failed = [f"{r.name}: {r.message}" for r in report.results if r.outcome == "failed"]
    if failed:
        raise AssertionError("\n".join(failed))
    grown = sorted({r.name for r in report.results if r.outcome == "skipped"} - skips)
    if grown:
        raise AssertionError(f"{provider}'s skip list grew: {grown}")
    if not report.ok:
        raise AssertionError(
            f"{provider}: the cluster level did not finish (exit code {report.exit_code})"
        )
    return report
