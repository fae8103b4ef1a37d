"""`karpenter simulate --disrupt` on a NodePool with consolidationPolicy Balanced, end to end
through the installed console script (KWOK catalog: every c-4x node costs the same)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.unit.test_simulate_disrupt import KARPENTER, kwok_node, nodepool, simulate

pytestmark = pytest.mark.slow  # every test runs the karpenter command in a subprocess

POD = """---
apiVersion: v1
kind: Pod
metadata:
  name: %(name)s
  namespace: shop
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-rs, uid: u1, controller: true}]
spec:
  nodeName: %(node)s
  containers:
  - name: app
    image: registry.k8s.io/pause:3.9
    resources: {requests: {cpu: "%(cpu)s", memory: 256Mi}}
"""


def busy(name: str, count: int, cpu: str) -> str:
    """A c-4x node and ``count`` pods of ``cpu`` bound to it."""
    pods = "".join(POD % {"name": f"{name}-{i}", "node": name, "cpu": cpu} for i in range(count))
    return kwok_node(name, 4) + pods


def marginal(policy: str) -> str:
    """Four c-4x nodes: eight 100m pods on "small" fit a c-1x; the others' two 1950m pods
    each leave no room (disruption costs 9 and 3 x 3)."""
    return (
        nodepool(policy=policy)
        + busy("small", 8, "100m")
        + "".join(busy(name, 2, "1950m") for name in ("a", "b", "c"))
    )


def test_balanced_leaves_a_marginal_replace_and_says_why(tmp_path: Path) -> None:
    default = simulate(tmp_path, marginal("WhenEmptyOrUnderutilized"), "--disrupt")
    [command] = default["disruption"]
    assert command["nodes"] == ["small"]
    assert [r["instance_type"] for r in command["replacements"]] == ["c-1x-amd64-linux"]
    assert command["balanced_scores"] == []

    balanced = simulate(tmp_path, marginal("Balanced"), "--disrupt")
    assert balanced["disruption"] == []
    # the c-1x costs a quarter of a c-4x: 3/16 of the NodePool's cost saved, for 9 of 18
    assert balanced["disruption_blocked"]["small"] == (
        "NodePool default has consolidationPolicy Balanced: score 0.38 < 0.50 "
        "(saves 18.8% of its cost for 50.0% of its disruption cost)"
    )


def test_balanced_shows_the_score_of_the_move_it_makes(tmp_path: Path) -> None:
    # light's pod moves to roomy: 1/4 of the cost saved for 2 of 2 + 4 + 3 + 3 (1/6): 1.5
    manifests = (
        nodepool(policy="Balanced")
        + busy("light", 1, "500m")
        + busy("roomy", 3, "1")
        + busy("a", 2, "1950m")
        + busy("b", 2, "1950m")
    )
    report = simulate(tmp_path, manifests, "--disrupt")
    [command] = report["disruption"]
    assert (command["nodes"], command["replacements"]) == (["light"], [])
    [score] = command["balanced_scores"]
    assert score["nodepool"] == "default"
    assert score["score"] == pytest.approx(1.5)
    assert score["savings_fraction"] == pytest.approx(0.25)
    assert score["disruption_fraction"] == pytest.approx(1 / 6, abs=1e-6)

    path = tmp_path / "cluster.yaml"
    path.write_text(manifests)
    text = subprocess.run(
        [KARPENTER, "simulate", "-f", str(path), "--disrupt"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert (
        "    NodePool default has consolidationPolicy Balanced: score 1.50 >= 0.50 "
        "(saves 25.0% of its cost for 16.7% of its disruption cost)"
    ) in text
