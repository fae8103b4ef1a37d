"""The conformance suite's cluster level for the KWOK provider, on the session's cluster.

The suite runs in this process through its runner, pointed at the session's cluster
(``--cluster-backend external``), so one cluster serves every test of the session. The skips
are pinned: a skip list that grows fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_conformance.suite.pinned import run_pinned_cluster_level

pytestmark = pytest.mark.integration

SKIPS = {"drift-within-budget"}
"""Cluster checks KWOK may skip, with the profile's reason shown in the report."""


def test_kwok_passes_the_cluster_level(kube_cluster: Any) -> None:
    report = run_pinned_cluster_level("kwok", kube_cluster.kubeconfig, SKIPS)
    assert {r.name for r in report.results} >= {
        "least-privilege-identity",
        "burst-on-cheapest-offering",
        "scale-to-zero",
        "unmanaged-instance-collected",
        "deleted-nodeclaim-deletes-instance",
        "crash-between-launch-and-status",
    }
