"""The conformance suite's cluster level for the AWS provider, on the session's cluster: the
profile's moto server in this process, the controller in a subprocess reaching it, the suite's
node registrar creating the Nodes of the instances it lists. The skips are pinned: a skip list
that grows fails here."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_conformance.suite.runner import run
from karpenter_core.cloudprovider.registry import discover

pytestmark = pytest.mark.integration

SKIPS: set[str] = set()
"""Cluster checks AWS may skip; the list must not grow."""
CLUSTER_CHECKS = {
    "least-privilege-identity",
    "burst-on-cheapest-offering",
    "scale-to-zero",
    "drift-within-budget",
    "unmanaged-instance-collected",
    "deleted-nodeclaim-deletes-instance",
    "crash-between-launch-and-status",
}


def test_aws_passes_the_cluster_level(kube_cluster: Any) -> None:
    report = run(
        discover().provider("aws"),
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
        print(f"{result.name:<40} {result.outcome:<8} {result.seconds:6.1f}s {result.message}")
    print(f"aws: cluster level in {report.seconds:.1f}s")
    failed = [f"{r.name}: {r.message}" for r in report.results if r.outcome == "failed"]
    assert not failed, "\n".join(failed)
    skipped = {r.name for r in report.results if r.outcome == "skipped"}
    assert skipped <= SKIPS, f"AWS's skip list grew: {sorted(skipped - SKIPS)}"
    assert report.ok
    assert {r.name for r in report.results} == CLUSTER_CHECKS
