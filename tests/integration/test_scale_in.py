"""The scale-in benchmark at N = 100 with the conformance suite's short timers, on the session's
cluster: every step converges, within 10% of the reference packing, with no PDB violated and no
NodePool over its budget, all within 5 minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scale_in

pytestmark = pytest.mark.integration

NODES = 100
LIMIT = 300.0
"""Seconds the whole run may take (the scale-up, three steps and the cleanup)."""


def test_a_scale_in_of_100_nodes_converges_within_budgets(
    kube_cluster: object, tmp_path: Path
) -> None:
    options = scale_in.Options(nodes=NODES, timers="fast", phase_timeout=100.0, interval=0.5)
    report = scale_in.run(Path(kube_cluster.kubeconfig), options, tmp_path)  # type: ignore[attr-defined]
    print(scale_in.render(report))
    assert report.violations == []
    assert report.scale_up_nodes >= NODES * 0.9
    assert [step.fraction for step in report.steps] == list(scale_in.STEPS)
    for step in report.steps:
        assert step.converged_s is not None
        assert step.pdb_violations == []
        assert step.most_disrupting <= step.budget
        assert step.over_reference <= 0.10, scale_in.render(report)
        assert step.nodes_after < step.nodes_before
    assert report.elapsed < LIMIT
