"""A realistic workload on the KWOK catalog, priced against a lower bound.

The KWOK provider's generated catalog (144 types: c, s and m families, amd64 and arm64, linux and
windows, zones test-zone-a..d, spot and on-demand). Seed 42 (Python's ``random``): 100 Deployments
with replicas uniform in 20..180, CPU per pod from {250m, 500m, 1, 2, 4} and memory per pod = CPU x
one of {1, 2, 4, 8} GiB; 10 DaemonSets of 50m CPU / 64Mi; one NodePool allowing every instance
type, spot and on-demand.

The lower bound is max over resources r (CPU, memory) of (sum of the pods' requests of r,
DaemonSets excluded) x (lowest price per allocatable unit of r over every available offering the
NodePool allows): no set of nodes holding the pods can cost less. Targets: cost / bound <= 1.10,
scheduling in under 1 s. Pods are decoded before the clock starts; ``schedule(snapshot)`` is timed.

    .venv/bin/python benchmarks/scheduling_realistic.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections import Counter
from typing import Any

import common

CPU_CHOICES = ("250m", "500m", "1", "2", "4")
CPU_MILLI = {"250m": 250, "500m": 500, "1": 1000, "2": 2000, "4": 4000}
MEMORY_FACTORS = (1, 2, 4, 8)
TARGET_RATIO = 1.10
TARGET_SECONDS = 1.0


def nodepool() -> Any:
    return common.nodepool(
        [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]
    )


def _template(name: str, cpu: str, memory_mi: int, owner_kind: str, namespace: str) -> Any:
    from karpenter_core.scheduling.snapshot import PodInfo

    return PodInfo.from_manifest(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app": name},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": owner_kind,
                        "name": name,
                        "uid": f"uid-{name}",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.k8s.io/pause:3.9",
                        "resources": {"requests": {"cpu": cpu, "memory": f"{memory_mi}Mi"}},
                    }
                ]
            },
            "status": {"phase": "Pending"},
        }
    )


def workload(seed: int = 42) -> tuple[list[Any], list[Any], list[tuple[str, int, str, int]]]:
    """Pending pods, DaemonSet templates, and the Deployments drawn (name, replicas, cpu, GiB)."""
    rng = random.Random(seed)
    deployments = []
    pods = []
    for d in range(100):
        replicas = rng.randint(20, 180)
        cpu = rng.choice(CPU_CHOICES)
        factor = rng.choice(MEMORY_FACTORS)
        memory_mi = CPU_MILLI[cpu] * factor * 1024 // 1000
        name = f"deploy-{d:03d}"
        deployments.append((name, replicas, cpu, factor))
        template = _template(name, cpu, memory_mi, "ReplicaSet", "default")
        pods += [template.renamed(f"{name}-{i:03d}") for i in range(replicas)]
    daemonsets = [
        _template(f"daemon-{i}", "50m", 64, "DaemonSet", "kube-system") for i in range(10)
    ]
    return pods, daemonsets, deployments


def lower_bound(pods: list[Any], instance_types: list[Any], pool: Any) -> tuple[float, str]:
    """max over CPU and memory of (requests) x (cheapest price per allocatable unit)."""
    from karpenter_core.apis.requirements import Requirements

    spec = pool.to_manifest()["spec"]["template"]["spec"]
    allowed = Requirements.from_node_selector(spec.get("requirements") or ())
    best: dict[str, float] = {}
    for it in instance_types:
        if allowed.intersects(it.requirements) is not None:
            continue
        for offering in it.offerings:
            if not offering.available or allowed.intersects(offering.requirements) is not None:
                continue
            for resource in ("cpu", "memory"):
                amount = it.allocatable.get(resource, 0)
                if amount > 0:
                    unit = offering.price / amount
                    best[resource] = min(best.get(resource, float("inf")), unit)
    totals = Counter()
    for pod in pods:
        for resource in ("cpu", "memory"):
            totals[resource] += pod.requests.get(resource, 0)
    bounds = {r: totals[r] * best[r] for r in ("cpu", "memory")}
    binding = max(bounds, key=bounds.__getitem__)
    return bounds[binding], binding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs; the median time is shown")
    args = parser.parse_args()

    from karpenter_core.scheduling.scheduler import schedule
    from karpenter_core.scheduling.snapshot import Snapshot
    from karpenter_kwok.cloudprovider import load_instance_types

    instance_types = load_instance_types(None)
    pool = nodepool()
    pods, daemonsets, deployments = workload(42)
    bound, binding = lower_bound(pods, instance_types, pool)

    times = []
    results = None
    for _ in range(args.repeat):
        snapshot = Snapshot(
            nodepools=[pool],
            instance_types={"default": instance_types},
            pending=list(pods),
            daemonsets=list(daemonsets),
        )
        gc.collect()
        start = time.perf_counter()
        results = schedule(snapshot)
        times.append(time.perf_counter() - start)
    assert results is not None
    seconds = statistics.median(times)
    cost = results.cost_per_hour
    ratio = cost / bound
    cpu = sum(CPU_MILLI[c] * r for _, r, c, _ in deployments) / 1000
    memory = sum(CPU_MILLI[c] * f * r for _, r, c, f in deployments) / 1000
    shapes = Counter(
        (claim.instance_type.name, claim.offering.capacity_type) for claim in results.new_nodeclaims
    )

    print(
        f"realistic workload on the KWOK catalog ({len(instance_types)} types), seed 42, "
        f"median of {args.repeat} run(s)"
    )
    print(
        f"  {len(deployments)} Deployments, {len(pods)} pods ({cpu:.1f} CPU, {memory:.1f} GiB "
        f"requested), {len(daemonsets)} DaemonSets of 50m / 64Mi"
    )
    print(
        f"  time          {seconds:.3f} s   (target < {TARGET_SECONDS:.0f} s: "
        f"{'ok' if seconds < TARGET_SECONDS else 'MISSED'})"
    )
    print(f"  nodes         {len(results.new_nodeclaims)}")
    print(f"  unschedulable {len(results.unschedulable)}")
    print(f"  cost          {cost:.4f} /h")
    print(f"  lower bound   {bound:.4f} /h   (bound by {binding})")
    print(
        f"  cost / bound  {ratio:.3f}     (target <= {TARGET_RATIO:.2f}: "
        f"{'ok' if ratio <= TARGET_RATIO else 'MISSED'})"
    )
    print("  node shapes   " + ", ".join(f"{n} x {t} {ct}" for (t, ct), n in shapes.most_common(8)))
    for reason in sorted(set(results.unschedulable.values()))[:3]:
        print(f"  unschedulable: {reason}")


if __name__ == "__main__":
    main()
