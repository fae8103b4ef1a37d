"""One disruption decision pass on 1,000 nodes and 10,000 pods (KWOK catalog), or more.

Two clusters, both seeded (``random.Random(42)``), ten pods per node on average, the nodes dealt
round-robin to one or more NodePools of the same template (families c and m, 2/4/8/16 CPU, amd64
linux, on-demand), every node initialized and consolidatable, budget 100% (so every candidate may
be tried), no empty and no drifted node:

- ``command``: a mixed cluster. 60% of the nodes are well used (80-95% of their CPU), 40%
  underused (10-35%, 3-6 pods); sizes 2/4/8/16 CPU, 70% family c, memory in proportion. The
  pass stops at the first command (here multi-node consolidation deletes 100 underused nodes).
- ``nothing``: every node a full 16-CPU node (10 pods, under 100m CPU left), so no pod fits on
  another node, no merge fits the allowed sizes and no replacement is cheaper: every candidate
  of multi-node and single-node consolidation is considered and none gives a command.

``--spread F`` gives the first pod of a share F of the nodes (every 1/F-th node) a required
hostname anti-affinity against its kind, as the scale-in benchmark's ``spread`` Deployment: pods
already bound with a required anti-affinity constrain every simulation.

Timed: ``planner._next_command`` (one full pass: candidates, emptiness, drift, multi-node,
single-node), and each scheduling simulation inside it (by wrapping ``Simulator.run``); counted:
simulations run and consolidations ruled out without one. Targets: a pass under 1 s at 1,000
nodes and under 5 s at 5,000 nodes, with one NodePool or 25.

    .venv/bin/python benchmarks/disruption.py [--repeat 3] [--nodes 5000] [--nodepools 25]
                                              [--scenario nothing] [--profile]
                                              [--gc on|freeze|off] [--spread 0.1]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import random
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import common

NODES = 1_000
SIZES = (2, 4, 8, 16)
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")
GIB = 2**30
TARGETS = ((1_000, 1.0), (5_000, 5.0))
"""Seconds a full pass must stay under, up to each cluster size (nodes)."""
NOW = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
CREATED = NOW.timestamp() - 86_400
MEMORY_PER_CPU = {"c": 2.0, "m": 8.0}
"""GiB per CPU of each family (KWOK: c 2, s 4, m 8)."""


def nodepool(name: str = "default") -> Any:
    pool = common.nodepool(
        [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["c", "m"]},
            {
                "key": "karpenter.kwok.sh/instance-cpu",
                "operator": "In",
                "values": [str(s) for s in SIZES],
            },
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ],
        disruption={
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "0s",
            "budgets": [{"nodes": "100%"}],
        },
    )
    if name == "default":
        return pool
    from karpenter_core.apis.v1.nodepool import NodePool

    manifest = pool.to_manifest()
    manifest["metadata"]["name"] = name
    return NodePool.from_manifest(manifest)


def _node(index: int, instance_type: Any, zone: str, pods: list[Any], pool: str) -> Any:
    from karpenter_core.scheduling.snapshot import NodeInfo

    name = f"node-{index:04d}"
    labels = {
        **instance_type.requirements.labels(),
        "karpenter.sh/nodepool": pool,
        "karpenter.sh/initialized": "true",
        "karpenter.sh/capacity-type": "on-demand",
        "topology.kubernetes.io/zone": zone,
        "node.kubernetes.io/instance-type": instance_type.name,
        "kubernetes.io/hostname": name,
    }
    for pod in pods:
        pod.node_name = name
    return NodeInfo(
        name,
        labels,
        instance_type.allocatable,
        capacity=instance_type.capacity,
        pods=pods,
        provider_id=f"kwok://{name}",
        created=CREATED,
    )


def _pod(serial: int, app: int, cpu_milli: int, memory_bytes: int) -> Any:
    from karpenter_core.scheduling.snapshot import PodInfo

    return PodInfo(
        "default",
        f"app-{app}-{serial}",
        {"cpu": cpu_milli, "memory": memory_bytes * 1000, "pods": 1000},
        labels={"app": f"app-{app}"},
        owner_kind="ReplicaSet",
        owner_name=f"app-{app}-rs",
        created=CREATED,
    )


SPREAD_LABELS = {"app": "spread"}
SPREAD_ANTI_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": SPREAD_LABELS}, "topologyKey": "kubernetes.io/hostname"}
    ]
}


def _spread(pod: Any) -> None:
    """Make ``pod`` one of a Deployment whose pods must not share a node."""
    pod.labels = dict(SPREAD_LABELS)
    pod.pod_anti_affinity = SPREAD_ANTI_AFFINITY


def _fill(
    rng: random.Random, serial: int, instance_type: Any, family: str, count: int, used: float
) -> list[Any]:
    """``count`` pods using about ``used`` of the type's CPU and as much of its memory share."""
    cpu = max(50, int(used * instance_type.allocatable["cpu"] / count) // 10 * 10)
    memory = int(cpu / 1000 * MEMORY_PER_CPU[family] * 0.9 * GIB)
    return [_pod(serial + i, rng.randrange(200), cpu, memory) for i in range(count)]


def cluster(scenario: str, nodes_: int = NODES, nodepools: int = 1, spread: float = 0.0) -> Any:
    """The snapshot of ``scenario`` ("command" or "nothing"): ``nodes_`` nodes with ten pods each
    on average, dealt round-robin to ``nodepools`` NodePools of the same template; the first pod
    of every ``1/spread``-th node with a required hostname anti-affinity."""
    from karpenter_core.scheduling.snapshot import Snapshot
    from karpenter_kwok.cloudprovider import load_instance_types

    rng = random.Random(42)
    catalog = load_instance_types(None)
    types = {it.name: it for it in catalog}
    names = ["default"] if nodepools == 1 else [f"pool-{i:02d}" for i in range(nodepools)]
    nodes = []
    serial = 0
    if scenario == "nothing":
        for index in range(nodes_):
            family = "c" if rng.random() < 0.7 else "m"
            it = types[f"{family}-16x-amd64-linux"]
            left = rng.randint(20, 90)  # m of CPU left, below any pod's request
            cpu = (it.allocatable["cpu"] - left) // 10
            memory = int(cpu / 1000 * MEMORY_PER_CPU[family] * 0.95 * GIB)
            pods = [_pod(serial + i, rng.randrange(200), cpu, memory) for i in range(10)]
            serial += 10
            nodes.append(_node(index, it, ZONES[index % 4], pods, names[index % nodepools]))
    else:
        underused = set(rng.sample(range(nodes_), int(nodes_ * 0.4)))
        counts = {i: rng.randint(3, 6) for i in underused}
        busy = [i for i in range(nodes_) if i not in underused]
        share, extra = divmod(nodes_ * 10 - sum(counts.values()), len(busy))
        for k, i in enumerate(busy):
            counts[i] = share + (1 if k < extra else 0)
        for index in range(nodes_):
            family = "c" if rng.random() < 0.7 else "m"
            size = rng.choice(SIZES)
            it = types[f"{family}-{size}x-amd64-linux"]
            used = rng.uniform(0.10, 0.35) if index in underused else rng.uniform(0.80, 0.95)
            pods = _fill(rng, serial, it, family, counts[index], used)
            serial += counts[index]
            nodes.append(_node(index, it, ZONES[index % 4], pods, names[index % nodepools]))
    if spread > 0:
        for node in nodes[:: max(round(1 / spread), 1)]:
            _spread(node.pods[0])
    return Snapshot(
        nodepools=[nodepool(name) for name in names],
        instance_types={name: catalog for name in names},
        nodes=nodes,
    )


@dataclass
class Pass:
    seconds: float
    cpu: float
    """CPU seconds of the pass (on a shared machine, what wall time would be on an idle one)."""
    command: Any
    simulations: list[tuple[int, float]] = field(default_factory=list)
    """(candidates removed, seconds) per simulation."""
    pruned: int = 0
    """Consolidations ruled out without a simulation."""

    @property
    def single(self) -> list[float]:
        return [s for n, s in self.simulations if n == 1]


def run_pass(snapshot: Any, profile: cProfile.Profile | None = None) -> Pass:
    from karpenter_core.disruption import planner, simulation

    simulations: list[tuple[int, float]] = []
    simulators: list[Any] = []
    original_run = simulation.Simulator.run
    original_init = simulation.Simulator.__init__

    def timed(self: Any, removed: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return original_run(self, removed, *args)
        finally:
            simulations.append((len(removed), time.perf_counter() - started))

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        simulators.append(self)

    simulation.Simulator.run = timed  # type: ignore[method-assign]
    simulation.Simulator.__init__ = counted  # type: ignore[method-assign]
    if gc.isenabled():
        gc.collect()
    try:
        if profile is not None:
            profile.enable()
        started, cpu = time.perf_counter(), time.process_time()
        command = planner._next_command(snapshot, NOW, planner.Options(), {})
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        if profile is not None:
            profile.disable()
    finally:
        simulation.Simulator.run = original_run  # type: ignore[method-assign]
        simulation.Simulator.__init__ = original_init  # type: ignore[method-assign]
    return Pass(seconds, cpu, command, simulations, sum(s.pruned for s in simulators))


def _describe(command: Any) -> str:
    if command is None:
        return "none"
    replaced = "+".join(r.instance_type.name for r in command.replacements) or "delete"
    return (
        f"{command.reason}: {len(command.candidates)} node(s) -> {replaced}, "
        f"saves {command.savings_per_hour:.4f}/h"
    )


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )


def target(nodes: int) -> float | None:
    """The pass time the cluster's size must stay under, None when no target is set."""
    return next((seconds for size, seconds in TARGETS if nodes <= size), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--repeat", type=int, default=3, help="passes per scenario; the median is shown"
    )
    parser.add_argument("--scenario", choices=("command", "nothing", "both"), default="both")
    parser.add_argument("--nodes", type=int, default=NODES, help="nodes (ten pods each)")
    parser.add_argument("--nodepools", type=int, default=1, help="NodePools the nodes share")
    parser.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="share of nodes whose first pod has a required hostname anti-affinity",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile one pass per scenario")
    parser.add_argument("--top", type=int, default=20, help="functions shown by --profile")
    parser.add_argument(
        "--gc",
        choices=("on", "freeze", "off"),
        default="on",
        help="Python's cyclic garbage collector during the passes: as is, frozen after building "
        "the cluster (gc.freeze), or disabled (to measure what collection costs)",
    )
    args = parser.parse_args()

    scenarios = ("command", "nothing") if args.scenario == "both" else (args.scenario,)
    rows = [
        [
            "scenario",
            "nodes",
            "pods",
            "nodepools",
            "spread",
            "pass s",
            "cpu s",
            "simulated",
            "pruned",
            "ms/sim",
            "outside sims s",
            "target",
            "decision",
        ]
    ]
    profiles: dict[str, str] = {}
    for scenario in scenarios:
        snapshot = cluster(scenario, args.nodes, args.nodepools, args.spread)
        gc.collect()
        if args.gc == "freeze":
            gc.freeze()
        elif args.gc == "off":
            gc.disable()
        pods = sum(len(n.pods) for n in snapshot.nodes)
        passes = [run_pass(snapshot) for _ in range(max(args.repeat, 1))]
        median = sorted(passes, key=lambda p: p.seconds)[len(passes) // 2]
        simulated = sum(s for _, s in median.simulations)
        per_sim = statistics.median([s for _, s in median.simulations] or [0.0]) * 1000
        limit = target(len(snapshot.nodes))
        verdict = "-" if limit is None else "ok" if median.seconds < limit else "MISSED"
        rows.append(
            [
                scenario,
                str(len(snapshot.nodes)),
                str(pods),
                str(args.nodepools),
                f"{args.spread:g}",
                f"{median.seconds:.2f}",
                f"{median.cpu:.2f}",
                str(len(median.simulations)),
                str(median.pruned),
                f"{per_sim:.1f}" if median.simulations else "-",
                f"{median.seconds - simulated:.2f}",
                verdict + ("" if limit is None else f" (<{limit:g} s)"),
                _describe(median.command),
            ]
        )
        if args.profile:
            profile = cProfile.Profile()
            run_pass(snapshot, profile)
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
            profiles[scenario] = out.getvalue()
        gc.enable()
        gc.unfreeze()
    print(_table(rows))
    print(
        f"\n(median of {max(args.repeat, 1)} pass(es) by wall time; 'cpu s': that pass's CPU "
        "time; 'simulated': scheduling simulations run, "
        "'pruned': consolidations ruled out without one; 'ms/sim': median simulation; "
        f"'outside sims': the pass less its simulations; gc {args.gc})"
    )
    for scenario, text in profiles.items():
        print(f"\n--- cProfile, scenario {scenario!r}, by own time ---")
        print(text)


if __name__ == "__main__":
    main()
