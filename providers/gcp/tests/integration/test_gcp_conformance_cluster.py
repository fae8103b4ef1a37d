"""The conformance suite's cluster level for the GCP provider, on the session's cluster: the
profile's fake GCE server in this process (publishing GKE node images of the cluster's version),
the controller in a subprocess reaching it over HTTP, the suite's node registrar creating the
Nodes of the instances it lists (with the providerID the GCE cloud controller writes). The skips
are pinned: a skip list that grows fails here."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_conformance.suite.pinned import run_pinned_cluster_level

pytestmark = pytest.mark.integration

SKIPS: set[str] = set()
"""Cluster checks GCP may skip; the list must not grow."""
CLUSTER_CHECKS = {
    "least-privilege-identity",
    "burst-on-cheapest-offering",
    "scale-to-zero",
    "drift-within-budget",
    "unmanaged-instance-collected",
    "deleted-nodeclaim-deletes-instance",
    "crash-between-launch-and-status",
}


def test_gcp_passes_the_cluster_level(kube_cluster: Any) -> None:
    report = run_pinned_cluster_level("gcp", kube_cluster.kubeconfig, SKIPS)
    assert {r.name for r in report.results} == CLUSTER_CHECKS
