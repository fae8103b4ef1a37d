"""The conformance suite's cluster level for the in-tree providers, on the session's cluster.

The suite runs in this process through its runner, pointed at the session's cluster
(``--cluster-backend external``), so one cluster serves every test of the session. Each
provider's skips are pinned: a skip list that grows fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_conformance.suite.runner import Report, run
from karpenter_core.cloudprovider.registry import discover

pytestmark = pytest.mark.integration

SKIPS = {
    "kwok": {"drift-within-budget"},
}
"""Cluster checks each provider may skip, with the profile's reason shown in the report."""


def _cluster_level(provider: str, kube_cluster: Any) -> Report:
    report = run(
        discover().provider(provider),
        None,
        "--cluster",
        "--cluster-backend",
        "external",
        "--kubeconfig",
        str(kube_cluster.kubeconfig),
        "-m",
        "integration",
    )
    for result in report.results:
        print(
            f"{provider} {result.name:<40} {result.outcome:<8} {result.seconds:6.1f}s {result.message}"
        )
    print(f"{provider}: cluster level in {report.seconds:.1f}s")
    return report


@pytest.mark.parametrize("provider", sorted(SKIPS))
def test_cluster_level(provider: str, kube_cluster: Any) -> None:
    report = _cluster_level(provider, kube_cluster)
    failed = [f"{r.name}: {r.message}" for r in report.results if r.outcome == "failed"]
    assert not failed, "\n".join(failed)
    skipped = {r.name for r in report.results if r.outcome == "skipped"}
    assert skipped <= SKIPS[provider], f"new skips: {sorted(skipped - SKIPS[provider])}"
    assert report.ok
    assert {r.name for r in report.results} >= {
        "least-privilege-identity",
        "burst-on-cheapest-offering",
        "scale-to-zero",
        "unmanaged-instance-collected",
        "deleted-nodeclaim-deletes-instance",
        "crash-between-launch-and-status",
    }
