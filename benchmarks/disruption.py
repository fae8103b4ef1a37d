"""One disruption decision pass on 1,000 nodes and 10,000 pods (KWOK catalog).

Two clusters, both seeded (``random.Random(42)``), one NodePool (families c and m, 2/4/8/16 CPU,
amd64 linux, on-demand), every node initialized and consolidatable, budget 100% (so every
candidate may be tried), no empty and no drifted node:

- ``command``: a mixed cluster. 60% of the nodes are well used (80-95% of their CPU, 13-14 pods),
  40% underused (10-35%, 3-6 pods); sizes 2/4/8/16 CPU, 70% family c, memory in proportion. The
  pass stops at the first command (here multi-node consolidation deletes 100 underused nodes).
- ``nothing``: every node a full 16-CPU node (10 pods, under 100m CPU left), so no pod fits on
  another node, no merge fits the allowed sizes and no replacement is cheaper: multi-node's binary
  search fails and single-node consolidation simulates every one of the 1,000 candidates.

Timed: ``planner._next_command`` (one full pass: candidates, emptiness, drift, multi-node,
single-node), and each scheduling simulation inside it (by wrapping ``planner._simulate``).
Target (issue 6): a pass under 10 s in both cases, about 10 ms per single-node simulation.

    .venv/bin/python benchmarks/disruption.py [--repeat 3] [--profile] [--scenario nothing]
                                              [--gc on|freeze|off]
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
PODS = 10_000
SIZES = (2, 4, 8, 16)
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")
GIB = 2**30
TARGET_PASS = 10.0
TARGET_SIMULATION_MS = 10.0
NOW = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
CREATED = NOW.timestamp() - 86_400
MEMORY_PER_CPU = {"c": 2.0, "m": 8.0}
"""GiB per CPU of each family (KWOK: c 2, s 4, m 8)."""


def nodepool() -> Any:
    return common.nodepool(
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


def _node(index: int, instance_type: Any, zone: str, pods: list[Any]) -> Any:
    from karpenter_core.scheduling.snapshot import NodeInfo

    name = f"node-{index:04d}"
    labels = {
        **instance_type.requirements.labels(),
        "karpenter.sh/nodepool": "default",
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


def _fill(
    rng: random.Random, serial: int, instance_type: Any, family: str, count: int, used: float
) -> list[Any]:
    """``count`` pods using about ``used`` of the type's CPU and as much of its memory share."""
    cpu = max(50, int(used * instance_type.allocatable["cpu"] / count) // 10 * 10)
    memory = int(cpu / 1000 * MEMORY_PER_CPU[family] * 0.9 * GIB)
    return [_pod(serial + i, rng.randrange(200), cpu, memory) for i in range(count)]


def cluster(scenario: str) -> Any:
    """The snapshot of ``scenario`` ("command" or "nothing")."""
    from karpenter_core.scheduling.snapshot import Snapshot
    from karpenter_kwok.cloudprovider import load_instance_types

    rng = random.Random(42)
    catalog = load_instance_types(None)
    types = {it.name: it for it in catalog}
    pool = nodepool()
    nodes = []
    serial = 0
    if scenario == "nothing":
        for index in range(NODES):
            family = "c" if rng.random() < 0.7 else "m"
            it = types[f"{family}-16x-amd64-linux"]
            left = rng.randint(20, 90)  # m of CPU left, below any pod's request
            cpu = (it.allocatable["cpu"] - left) // 10
            memory = int(cpu / 1000 * MEMORY_PER_CPU[family] * 0.95 * GIB)
            pods = [_pod(serial + i, rng.randrange(200), cpu, memory) for i in range(10)]
            serial += 10
            nodes.append(_node(index, it, ZONES[index % 4], pods))
    else:
        underused = set(rng.sample(range(NODES), int(NODES * 0.4)))
        counts = {i: rng.randint(3, 6) for i in underused}
        busy = [i for i in range(NODES) if i not in underused]
        share, extra = divmod(PODS - sum(counts.values()), len(busy))
        for k, i in enumerate(busy):
            counts[i] = share + (1 if k < extra else 0)
        for index in range(NODES):
            family = "c" if rng.random() < 0.7 else "m"
            size = rng.choice(SIZES)
            it = types[f"{family}-{size}x-amd64-linux"]
            used = rng.uniform(0.10, 0.35) if index in underused else rng.uniform(0.80, 0.95)
            pods = _fill(rng, serial, it, family, counts[index], used)
            serial += counts[index]
            nodes.append(_node(index, it, ZONES[index % 4], pods))
    return Snapshot(nodepools=[pool], instance_types={"default": catalog}, nodes=nodes)


@dataclass
class Pass:
    seconds: float
    command: Any
    simulations: list[tuple[int, float]] = field(default_factory=list)
    """(candidates removed, seconds) per simulation."""

    @property
    def single(self) -> list[float]:
        return [s for n, s in self.simulations if n == 1]


def run_pass(snapshot: Any, profile: cProfile.Profile | None = None) -> Pass:
    from karpenter_core.disruption import planner

    simulations: list[tuple[int, float]] = []
    original = planner._simulate

    def timed(snapshot_: Any, removed: Any, minimize: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(snapshot_, removed, minimize)
        finally:
            simulations.append((len(removed), time.perf_counter() - started))

    planner._simulate = timed
    if gc.isenabled():
        gc.collect()
    try:
        if profile is not None:
            profile.enable()
        started = time.perf_counter()
        command = planner._next_command(snapshot, NOW, planner.Options(), {})
        seconds = time.perf_counter() - started
        if profile is not None:
            profile.disable()
    finally:
        planner._simulate = original
    return Pass(seconds, command, simulations)


def sample_single(snapshot: Any, count: int = 30) -> list[float]:
    """Seconds of single-node consolidation attempts (simulation and decision) for ``count``
    candidates spread over the candidate list."""
    from karpenter_core.disruption import planner
    from karpenter_core.disruption.candidates import candidates

    found, _ = candidates(snapshot, NOW)
    step = max(len(found) // count, 1)
    out = []
    for candidate in found[::step][:count]:
        if gc.isenabled():
            gc.collect()
        started = time.perf_counter()
        planner._consolidate(snapshot, [candidate], "underutilized", planner.Options())
        out.append(time.perf_counter() - started)
    return out


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--repeat", type=int, default=1, help="passes per scenario; the median is shown"
    )
    parser.add_argument("--scenario", choices=("command", "nothing", "both"), default="both")
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
            "pass s",
            "sims",
            "single sims",
            "ms/single sim",
            "ms/sim sample",
            "multi s",
            "outside sims s",
            "target",
            "decision",
        ]
    ]
    profiles: dict[str, str] = {}
    for scenario in scenarios:
        snapshot = cluster(scenario)
        gc.collect()
        if args.gc == "freeze":
            gc.freeze()
        elif args.gc == "off":
            gc.disable()
        pods = sum(len(n.pods) for n in snapshot.nodes)
        passes = [run_pass(snapshot) for _ in range(max(args.repeat, 1))]
        median = sorted(passes, key=lambda p: p.seconds)[len(passes) // 2]
        single = median.single
        multi = sum(s for n, s in median.simulations if n > 1)
        outside = median.seconds - sum(s for _, s in median.simulations)
        per_sim = statistics.median(single) * 1000 if single else float("nan")
        sampled = statistics.median(sample_single(snapshot)) * 1000
        ok = median.seconds < TARGET_PASS and sampled <= TARGET_SIMULATION_MS
        rows.append(
            [
                scenario,
                str(len(snapshot.nodes)),
                str(pods),
                f"{median.seconds:.2f}",
                str(len(median.simulations)),
                str(len(single)),
                f"{per_sim:.1f}" if single else "-",
                f"{sampled:.1f}",
                f"{multi:.2f}",
                f"{outside:.2f}",
                ("ok" if ok else "MISSED") + f" (<{TARGET_PASS:g} s, ~{TARGET_SIMULATION_MS:g} ms)",
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
        f"\n(median of {max(args.repeat, 1)} pass(es); 'ms/single sim': median single-node "
        "simulation inside that pass; 'ms/sim sample': median of 30 single-node consolidation "
        f"attempts spread over the candidate list; 'outside sims': the pass less its simulations; "
        f"gc {args.gc})"
    )
    for scenario, text in profiles.items():
        print(f"\n--- cProfile, scenario {scenario!r}, by own time ---")
        print(text)


if __name__ == "__main__":
    main()
