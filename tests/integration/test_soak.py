"""The fault soak for three minutes with a fixed seed, on the session's cluster: no invariant
violated, and every fault kind injected at least once."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import soak

pytestmark = pytest.mark.integration

SEED = 1


def test_a_three_minute_soak_keeps_every_invariant(kube_cluster: object, tmp_path: Path) -> None:
    if kube_cluster.plane is None:  # type: ignore[attr-defined]
        kube_cluster.restart_apiserver()  # skips: only the binaries backend restarts
    report = soak.run(
        Path(kube_cluster.kubeconfig),  # type: ignore[attr-defined]
        soak.Options(duration=180.0, seed=SEED),
        kube_cluster.restart_apiserver,  # type: ignore[attr-defined]
        tmp_path,
    )
    print(soak.render(report))
    assert report.violations == []
    assert set(soak.FAULT_KINDS) <= set(report.faults), report.faults
    assert report.snapshots > 0
