"""The conformance suite's cluster level for the KWOK provider, on the session's cluster.

The suite runs in this process through its runner, pointed at the session's cluster
(``--cluster-backend external``), so one cluster serves every test of the session. The skips
are pinned: a skip list that grows fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_conformance.suite.runner import run
from karpenter_core.cloudprovider.registry import discover

pytestmark = pytest.mark.integration

SKIPS = {"drift-within-budget"}
"""Cluster checks KWOK may skip, with the profile's reason shown in the report."""


def test_kwok_passes_the_cluster_level(kube_cluster: Any) -> None:
    report = run(
        discover().provider("kwok"),
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
    print(f"kwok: cluster level in {report.seconds:.1f}s")
    failed = [f"{r.name}: {r.message}" for r in report.results if r.outcome == "failed"]
    assert not failed, "\n".join(failed)
    skipped = {r.name for r in report.results if r.outcome == "skipped"}
    assert skipped <= SKIPS, f"KWOK's skip list grew: {sorted(skipped - SKIPS)}"
    assert report.ok
    assert {r.name for r in report.results} >= {
        "least-privilege-identity",
        "burst-on-cheapest-offering",
        "scale-to-zero",
        "unmanaged-instance-collected",
        "deleted-nodeclaim-deletes-instance",
        "crash-between-launch-and-status",
    }
