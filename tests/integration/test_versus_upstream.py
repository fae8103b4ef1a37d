"""The side-by-side benchmark against upstream Karpenter, end to end on 10 pods.

``benchmarks/versus_upstream.py`` builds upstream's KWOK controller and scheduling benchmark from
the pinned Go module on first use (cached afterwards), then runs each controller once on a fresh
cluster of its own, in a private state directory.

The test runs where that build is cached (``.venv/bin/python benchmarks/upstream_karpenter.py`` builds it) and is
skipped, saying so, on a machine without it: the build takes 15 minutes or more of two cores,
which the test tier's budget on a fresh machine does not hold.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import upstream_karpenter

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not upstream_karpenter.is_built(),
        reason="upstream Karpenter is not built here: .venv/bin/python benchmarks/upstream_karpenter.py",
    ),
]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "versus_upstream.py"
PODS = 10


def test_both_controllers_bring_10_pods_to_running_and_the_results_are_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "result.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--state-dir",
            str(tmp_path / "state"),
            "--pods",
            str(PODS),
            "--repeat",
            "1",
            "--scheduling-counts",
            "50",
            "--scheduling-repeat",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())

    assert result["end_to_end"]["commit"] and result["end_to_end"]["date"]
    (size,) = result["end_to_end"]["sizes"]
    assert size["pods"] == PODS
    assert sorted(run["controller"] for run in size["runs"]) == ["ours", "upstream"]
    for run in size["runs"]:
        # 10 pods of 2 CPU need at least one node; each NodeClaim is priced from the catalog.
        assert run["seconds"] > 0, run
        assert run["nodeclaims"] >= 1, run
        assert sum(run["types"].values()) == run["nodeclaims"], run
        assert math.isfinite(run["cost"]) and run["cost"] > 0, run
        assert run["peak_rss_mb"] > 0 and run["cpu_seconds"] > 0, run
    for key in ("seconds", "nodeclaims", "cost", "peak_rss_mb", "cpu_seconds"):
        assert size["summary"]["ratio"][key] > 0, key

    (row,) = result["scheduling"]["rows"]
    assert row["pods"] == 50
    assert row["upstream_pods_per_second"][0] > 0 and row["ours_pods_per_second"][0] > 0
    assert row["ratio"] > 0
    assert result["upstream"] == "sigs.k8s.io/karpenter@v1.15.0"
    assert "| 10 | **ours / upstream** |" in done.stdout
