"""The planner's shared work and pruning change no decision: on seeded random clusters, the plan
equals the plan of an exhaustive planner that compiles every simulation from scratch and rules
nothing out.

The exhaustive planner is the same method order with ``Exhaustive`` simulations in place of
``Simulator``: each one schedules the cluster less the removed nodes with plain ``schedule``
(NodePools compiled from that reduced cluster, limits included), and no consolidation is ruled
out before it is simulated.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.disruption import planner
from karpenter_core.disruption.candidates import Candidate
from karpenter_core.disruption.planner import Options, Plan, plan
from karpenter_core.disruption.simulation import Simulator, bound_to
from karpenter_core.scheduling.scheduler import Minimize, Results, schedule
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot
from tests.unit.disruption_fixtures import NOW, daemon_pod, node, pdb, pod, pool
from tests.unit.scheduling_fixtures import daemonset, in_flight, instance_type, make_pod

CATALOG = [
    instance_type(f"{family}-{cpu}", cpu, cpu * factor, round(cpu * (0.02 + 0.004 * factor), 4))
    for family, factor in (("c", 2), ("m", 4), ("r", 8))
    for cpu in (1, 2, 4, 8, 16)
] + [instance_type("g-4", 4, 16, 0.15, arch="arm64")]
TYPES = {it.name: it for it in CATALOG}
SEEDS = range(20)


class Exhaustive:
    """Plain simulations: everything built again for each, nothing ruled out."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        ignore_preferences: bool = False,
        min_values_strict: bool = True,
        spot_to_spot: bool = False,
    ) -> None:
        self.snapshot = snapshot
        self.ignore_preferences = ignore_preferences
        self.min_values_strict = min_values_strict

    def run(self, removed: Sequence[Candidate], minimize: Minimize) -> Results:
        names = {c.name for c in removed}
        reduced = replace(
            self.snapshot,
            nodes=[n for n in self.snapshot.nodes if n.name not in names],
            nodeclaims=[c for c in self.snapshot.nodeclaims if c.status.node_name not in names],
            pending=[*self.snapshot.pending, *(bound_to(p, None) for c in removed for p in c.pods)],
        )
        return schedule(
            reduced,
            minimize,
            ignore_preferences=self.ignore_preferences,
            min_values_strict=self.min_values_strict,
        )

    def cannot_consolidate(self, removed: Sequence[Candidate]) -> bool:
        return False


def _nodepool(rng: random.Random, name: str) -> NodePool:
    capacity_types = rng.choice((["on-demand"], ["on-demand", "spot"], ["spot"]))
    requirements: list[dict[str, Any]] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types}
    ]
    if rng.random() < 0.3:
        requirements.append({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]})
    manifest = pool(
        name,
        policy=rng.choice(("WhenEmptyOrUnderutilized",) * 4 + ("WhenEmpty", "Balanced")),
        budgets=[{"nodes": rng.choice(("100%", "50%", "3", "1"))}],
        requirements=requirements,
    ).to_manifest()
    if rng.random() < 0.3:
        manifest["spec"]["limits"] = {"cpu": str(rng.choice((40, 60, 100)))}
    if rng.random() < 0.3:
        manifest["spec"]["weight"] = rng.randint(1, 50)
    return NodePool.from_manifest(manifest)


def _pods(rng: random.Random, name: str, room_cpu: int, room_gi: int, fill: float) -> list[PodInfo]:
    """Pods bound to ``name`` using about ``fill`` of its room."""
    out = []
    cpu_left, memory_left = int(room_cpu * fill), int(room_gi * 1024 * fill)
    while len(out) < 20:
        cpu = rng.choice((100, 250, 500, 900, 1500))
        memory = rng.choice((128, 512, 1024, 2048, 4096))
        if cpu > cpu_left or memory > memory_left:
            break
        cpu_left, memory_left = cpu_left - cpu, memory_left - memory
        labels = {"app": f"app-{rng.randrange(4)}"}
        out.append(
            pod(f"{name}-p{len(out)}", name, cpu=f"{cpu}m", memory=f"{memory}Mi", labels=labels)
        )
    return out


def cluster(seed: int) -> tuple[Snapshot, Options]:
    """A random cluster: 1-3 NodePools, 3-16 nodes from empty to full, maybe pending pods, the
    nodes' NodeClaims, a NodeClaim still launching, a DaemonSet and a PodDisruptionBudget."""
    rng = random.Random(seed)
    pools = [_nodepool(rng, f"pool-{i}") for i in range(rng.randint(1, 3))]
    nodes: list[NodeInfo] = []
    for index in range(rng.randint(3, 16)):
        nodepool = rng.choice(pools)
        allowed = nodepool.spec.template.spec.requirements[0].values
        name = f"node-{index:02d}"
        it = rng.choice(CATALOG)
        fill = rng.choice((0.0, 0.2, 0.4, 0.6, 0.9, 1.0, 1.0))
        pods = _pods(rng, name, it.allocatable["cpu"], it.capacity["memory"] // 2**30 // 1000, fill)
        if rng.random() < 0.2:
            pods.append(daemon_pod(f"ds-{index}", name))
        nodes.append(
            node(
                name,
                it.name,
                zone=rng.choice(("zone-a", "zone-b", "zone-c")),
                capacity_type=rng.choice(list(allowed)),
                nodepool=nodepool.metadata.name,
                pods=pods,
                catalog=CATALOG,
            )
        )
    pending = [
        make_pod(f"pending-{i}", cpu=rng.choice(("250m", "1", "3")), memory="1Gi")
        for i in range(rng.choice((0, 0, 1, 3)))
    ]
    claims = []
    if rng.random() < 0.3:
        for n in nodes:
            claim = in_flight(
                n.name, cpu=f"{n.allocatable['cpu']}m", nodepool_name=n.nodepool or ""
            )
            claim.status.node_name = n.name
            claims.append(claim)
    if rng.random() < 0.3:
        launching = rng.choice(pools).metadata.name or ""
        claims.append(in_flight("launching", cpu=rng.choice(("2", "4")), nodepool_name=launching))
    snapshot = Snapshot(
        nodepools=pools,
        nodeclaims=claims,
        instance_types={p.metadata.name or "": list(CATALOG) for p in pools},
        nodes=nodes,
        pending=pending,
        daemonsets=[daemonset("ds", cpu="100m", memory="64Mi")] if rng.random() < 0.3 else [],
        pdbs=[pdb("app-0", {"app": "app-0"}, max_unavailable=1)] if rng.random() < 0.3 else [],
    )
    return snapshot, Options(spot_to_spot=rng.random() < 0.5)


def decisions(result: Plan) -> list[tuple[object, ...]]:
    """Each command as its reason, candidates and new capacity (type, zone, capacity type)."""
    return [
        (
            command.reason,
            [c.name for c in command.candidates],
            [
                (r.instance_type.name, r.offering.zone, r.offering.capacity_type)
                for r in [*command.replacements, *command.provisioned]
            ],
        )
        for command in result.commands
    ]


@pytest.fixture
def pruned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Consolidations the fast planner rules out without a simulation, one entry per pass."""
    counts: list[int] = []
    original = Simulator.cannot_consolidate

    def counted(self: Simulator, removed: Sequence[Candidate]) -> bool:
        result = original(self, removed)
        counts.append(int(result))
        return result

    monkeypatch.setattr(Simulator, "cannot_consolidate", counted)
    return counts


def test_fast_and_exhaustive_planners_decide_the_same(
    monkeypatch: pytest.MonkeyPatch, pruned: list[int]
) -> None:
    commands = 0
    for seed in SEEDS:
        snapshot, options = cluster(seed)
        fast = plan(snapshot, NOW, options, rounds=8)
        with monkeypatch.context() as patch:
            patch.setattr(planner, "Simulator", Exhaustive)
            exhaustive = plan(snapshot, NOW, options, rounds=8)
        assert decisions(fast) == decisions(exhaustive), f"seed {seed}"
        assert fast.blocked == exhaustive.blocked, f"seed {seed}"
        commands += len(fast.commands)
    # The clusters exercise both sides: commands found, and consolidations ruled out unsimulated.
    assert commands >= len(SEEDS)
    assert sum(pruned) >= len(SEEDS)
