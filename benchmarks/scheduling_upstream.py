"""Upstream Karpenter's scheduling benchmark (scheduling_benchmark_test.go), reproduced.

One NodePool with huge limits; 400 instance types, type i with cpu i+1, memory 2(i+1) GiB and
pods 10(i+1), 100m CPU and 10Mi memory kube-reserved, each with upstream's 5 offerings (spot in
test-zone-1 and test-zone-2, on-demand in test-zone-1, -2 and -3), all at upstream's price
0.1 x CPU + 0.1 x memory in GB (1e9 bytes). No existing nodes, no DaemonSets.

Pods in fifths, as upstream builds them (seed 42, Python's ``random``): generic; zonal topology
spread (maxSkew 1, DoNotSchedule); hostname topology spread (the same); zonal pod affinity to
themselves; hostname pod anti-affinity to themselves (so one per node); the remainder generic.
Generic and spread pods carry ``my-label`` drawn from a..g, and a spread constraint selects a
``my-label`` drawn independently (as upstream does); affinity pods select their own
``my-affininity`` label (upstream's spelling); anti-affinity pods are all ``app=nginx``. CPU is
drawn from {100, 250, 500, 1000, 1500}m and memory from {100, 256, 512, 1024, 2048, 4096}Mi.

Each measurement runs in a fresh process: pods are decoded first (not timed), then
``schedule(snapshot)`` is timed. Peak memory is the process's peak resident set (VmHWM, reset
through /proc/self/clear_refs just before scheduling) while scheduling, and its growth over the
resident set before scheduling; where the reset is not possible, ru_maxrss is used instead.

    .venv/bin/python benchmarks/scheduling_upstream.py [--max 5000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

COUNTS = (1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000)
CPU_CHOICES = (100, 250, 500, 1000, 1500)
MEMORY_CHOICES = (100, 256, 512, 1024, 2048, 4096)
LABEL_VALUES = "abcdefg"
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"

# Upstream's published run (PR #1938): pods -> (seconds, nodes); None where not published.
UPSTREAM = {2000: (1.625, 400), 5000: (5.086, 1000), 10000: (12.07, None), 20000: (35.74, None)}
# The targets: pods/s at these counts, and memory at 20,000 pods.
TARGET_RATE = {2000: 2500, 5000: 1500, 20000: 800}
TARGET_MEMORY_MB = {20000: 500}


def catalog() -> list[Any]:
    """Upstream's fake.InstanceTypes(400)."""
    from karpenter_core.apis.requirements import Requirements
    from karpenter_core.cloudprovider.types import InstanceType, Offering, Overhead

    offerings_spec = [
        ("spot", "test-zone-1"),
        ("spot", "test-zone-2"),
        ("on-demand", "test-zone-1"),
        ("on-demand", "test-zone-2"),
        ("on-demand", "test-zone-3"),
    ]
    gib = 2**30
    out = []
    for i in range(400):
        cpu, memory_bytes, pods = i + 1, 2 * (i + 1) * gib, 10 * (i + 1)
        price = 0.1 * cpu + 0.1 * memory_bytes / 1e9
        offerings = [
            Offering(
                Requirements.from_labels({ZONE: zone, "karpenter.sh/capacity-type": ct}), price
            )
            for ct, zone in offerings_spec
        ]
        requirements = Requirements.from_labels(
            {"node.kubernetes.io/instance-type": f"fake-it-{i}", "kubernetes.io/arch": "amd64"}
        )
        requirements.add(
            *Requirements.from_node_selector(
                [
                    {
                        "key": "kubernetes.io/os",
                        "operator": "In",
                        "values": ["darwin", "linux", "windows"],
                    },
                    {
                        "key": ZONE,
                        "operator": "In",
                        "values": ["test-zone-1", "test-zone-2", "test-zone-3"],
                    },
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["spot", "on-demand"],
                    },
                ]
            ).values()
        )
        out.append(
            InstanceType(
                f"fake-it-{i}",
                requirements,
                offerings,
                {"cpu": cpu * 1000, "memory": memory_bytes * 1000, "pods": pods * 1000},
                Overhead(kube_reserved={"cpu": 100, "memory": 10 * 2**20 * 1000}),
            )
        )
    return out


def nodepool() -> Any:
    return common.nodepool(
        [],
        {"group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "default"},
        limits={"cpu": "10000000", "memory": "10000000Gi"},
    )


class PodMaker:
    """Pod manifests drawn in upstream's order from one seeded generator."""

    def __init__(self, seed: int = 42) -> None:
        self.rng = random.Random(seed)
        self.serial = 0

    def _value(self) -> str:
        return self.rng.choice(LABEL_VALUES)

    def _pod(self, labels: dict[str, str], extra: dict[str, Any]) -> dict[str, Any]:
        cpu = self.rng.choice(CPU_CHOICES)
        memory = self.rng.choice(MEMORY_CHOICES)
        self.serial += 1
        name = f"pod-{self.serial:05d}"
        spec = {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}},
                }
            ],
            **extra,
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"00000000-0000-0000-0000-{self.serial:012d}",
                "labels": labels,
            },
            "spec": spec,
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            },
        }

    def generic(self, count: int) -> list[dict[str, Any]]:
        return [self._pod({"my-label": self._value()}, {}) for _ in range(count)]

    def spread(self, count: int, key: str) -> list[dict[str, Any]]:
        out = []
        for _ in range(count):
            labels = {"my-label": self._value()}
            selected = {"my-label": self._value()}
            constraint = {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": selected},
            }
            out.append(self._pod(labels, {"topologySpreadConstraints": [constraint]}))
        return out

    def affinity(self, count: int, key: str) -> list[dict[str, Any]]:
        out = []
        for _ in range(count):
            labels = {"my-affininity": self._value()}
            term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": key}
            extra = {
                "affinity": {
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
                }
            }
            out.append(self._pod(labels, extra))
        return out

    def anti_affinity(self, count: int, key: str) -> list[dict[str, Any]]:
        labels = {"app": "nginx"}
        term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": key}
        extra = {
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            }
        }
        return [self._pod(dict(labels), extra) for _ in range(count)]

    def diverse(self, count: int) -> list[dict[str, Any]]:
        """upstream's makeDiversePods."""
        fifth = count // 5
        pods = self.generic(fifth)
        pods += self.spread(fifth, ZONE)
        pods += self.spread(fifth, HOSTNAME)
        pods += self.affinity(fifth, ZONE)
        pods += self.anti_affinity(fifth, HOSTNAME)
        pods += self.generic(count - len(pods))
        return pods


def _rss_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def measure(count: int) -> dict[str, Any]:
    """One timed scheduling run of ``count`` pods (in this process)."""
    from karpenter_core.scheduling.scheduler import schedule
    from karpenter_core.scheduling.snapshot import PodInfo, Snapshot

    pool = nodepool()
    pods = [PodInfo.from_manifest(p) for p in PodMaker(42).diverse(count)]
    snapshot = Snapshot(nodepools=[pool], instance_types={"default": catalog()}, pending=pods)
    gc.collect()
    baseline = _rss_kib("VmRSS") or 0
    reset = _reset_peak()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    results = schedule(snapshot)
    seconds = time.perf_counter() - start
    if reset:
        peak = _rss_kib("VmHWM") or 0
        method = "VmHWM"
    else:
        peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, maxrss_before)
        method = "ru_maxrss"
    placed = sum(len(c.pods) for c in results.new_nodeclaims)
    return {
        "pods": count,
        "seconds": seconds,
        "nodes": len(results.new_nodeclaims),
        "placed": placed,
        "cost": results.cost_per_hour,
        "unschedulable": len(results.unschedulable),
        "peak_mb": peak / 1024,
        "growth_mb": max(peak - baseline, 0) / 1024,
        "memory_method": method,
        "reasons": sorted(set(results.unschedulable.values()))[:3],
    }


def run_in_child(count: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", str(count)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"worker for {count} pods failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fmt_target(count: int, rate: float, nodes: int, memory: float) -> str:
    notes = []
    if count in TARGET_RATE:
        ok = rate >= TARGET_RATE[count]
        notes.append(f">={TARGET_RATE[count]} pods/s {'ok' if ok else 'MISSED'}")
    if count in UPSTREAM:
        seconds, upstream_nodes = UPSTREAM[count]
        notes.append(f"upstream {count / seconds:.0f} pods/s")
        if upstream_nodes is not None:
            ok = nodes <= upstream_nodes
            notes.append(f"nodes <= {upstream_nodes} {'ok' if ok else 'MISSED'}")
    if count in TARGET_MEMORY_MB:
        ok = memory < TARGET_MEMORY_MB[count]
        notes.append(f"peak < {TARGET_MEMORY_MB[count]} MB {'ok' if ok else 'MISSED'}")
    return "; ".join(notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=COUNTS[-1], help="largest pod count to run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per count; the median is shown")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(measure(args.worker)))
        return

    counts = [c for c in COUNTS if c <= args.max]
    print(
        f"upstream scheduling benchmark: 400 instance types, seed 42, median of {args.repeat} "
        "run(s), each in a fresh process"
    )
    header = (
        f"{'pods':>6} {'seconds':>8} {'pods/s':>8} {'nodes':>6} {'cost/h':>10} "
        f"{'peak MB':>8} {'+MB':>6} {'unsched':>7}  targets"
    )
    print(header)
    print("-" * len(header))
    method = ""
    for count in counts:
        runs = [run_in_child(count) for _ in range(args.repeat)]
        seconds = statistics.median(r["seconds"] for r in runs)
        peak = statistics.median(r["peak_mb"] for r in runs)
        growth = statistics.median(r["growth_mb"] for r in runs)
        last = runs[-1]
        method = last["memory_method"]
        rate = count / seconds if seconds > 0 else float("inf")
        print(
            f"{count:>6} {seconds:>8.3f} {rate:>8.0f} {last['nodes']:>6} {last['cost']:>10.2f} "
            f"{peak:>8.1f} {growth:>6.1f} {last['unschedulable']:>7}  "
            f"{_fmt_target(count, rate, last['nodes'], peak)}",
            flush=True,
        )
        for reason in last["reasons"]:
            print(f"{'':>8}unschedulable: {reason}")
    print(
        f"peak MB: the process's peak resident set while scheduling ({method}); +MB: its growth "
        "over the resident set before scheduling (pods already decoded)"
    )


if __name__ == "__main__":
    main()
