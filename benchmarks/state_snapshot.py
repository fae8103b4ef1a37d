"""How long an informer event waits while ``ClusterState.snapshot()`` runs.

A ``ClusterState`` is filled without a cluster, through the informers' own ``inject`` (the path a
watch event takes: decode, then apply under the state lock): ``--nodes`` Karpenter nodes with
their NodeClaims and ``--pods`` pods bound to them, plus some pending pods. A thread then calls
``snapshot()`` in a loop while the main thread applies pod updates at a steady pace and times
each one. Printed per run: event latency (median, p99, max) with no snapshot running and while
snapshots run, and the median snapshot duration; the last line is the median of the runs.
Target: an event is applied within 50 ms while a snapshot of 1,000 nodes / 10,000 pods runs.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import TYPE_CHECKING, Any, cast

from karpenter_core.state.cluster import ClusterState

if TYPE_CHECKING:
    from karpenter_core.operator.kube import KubeClient

TARGET_MS = 50.0


def _node(index: int) -> dict[str, Any]:
    name = f"node-{index}"
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {
                "karpenter.sh/nodepool": "default",
                "karpenter.sh/initialized": "true",
                "node.kubernetes.io/instance-type": "c-16x",
                "topology.kubernetes.io/zone": f"zone-{index % 3}",
            },
        },
        "spec": {"providerID": f"kwok://{name}"},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _nodeclaim(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": f"claim-{index}",
            "resourceVersion": "1",
            "labels": {"karpenter.sh/nodepool": "default"},
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "d"},
            "requirements": [],
        },
        "status": {"providerID": f"kwok://node-{index}", "nodeName": f"node-{index}"},
    }


def _pod(index: int, node: str, version: int) -> dict[str, Any]:
    scheduled = {"type": "PodScheduled", "status": "True"}
    pending = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {
        "metadata": {
            "name": f"pod-{index}",
            "namespace": "default",
            "resourceVersion": str(version),
            "labels": {"app": f"app-{index % 50}", "version": str(version)},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
            ],
        },
        "status": {
            "phase": "Running" if node else "Pending",
            "conditions": [scheduled if node else pending],
        },
    }


def build_state(nodes: int, pods: int, pending: int) -> ClusterState:
    """A ClusterState holding ``nodes`` nodes (each with its NodeClaim), ``pods`` pods spread
    over them, and ``pending`` pending pods; no informer is started."""
    state = ClusterState(cast("KubeClient", None))  # no client: nothing is listed or watched
    for index in range(nodes):
        state.nodes_informer.inject(_node(index))
        state.nodeclaims_informer.inject(_nodeclaim(index))
    for index in range(pods):
        state.pods.inject(_pod(index, f"node-{index % nodes}", 1))
    for index in range(pods, pods + pending):
        state.pods.inject(_pod(index, "", 1))
    return state


def _events(state: ClusterState, nodes: int, pods: int, count: int, version: int) -> list[float]:
    """Apply ``count`` pod updates, one every millisecond; each one's latency in seconds."""
    latencies = []
    for event in range(count):
        index = event * 7919 % pods
        manifest = _pod(index, f"node-{index % nodes}", version + event)
        started = time.perf_counter()
        state.pods.inject(manifest)
        latencies.append(time.perf_counter() - started)
        time.sleep(0.001)
    return latencies


def _summary(latencies: list[float]) -> tuple[float, float, float]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1e3, p99 * 1e3, ordered[-1] * 1e3


def run(nodes: int, pods: int, events: int) -> tuple[float, float, float, float, float, int]:
    """One measurement: (idle median ms, median ms, p99 ms, max ms, snapshot median ms,
    snapshots taken)."""
    state = build_state(nodes, pods, pending=pods // 100)
    idle = _events(state, nodes, pods, events // 4, version=2)
    durations: list[float] = []
    stop = threading.Event()

    def snapshots() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            snapshot = state.snapshot({})
            durations.append(time.perf_counter() - started)
            assert len(snapshot.nodes) == nodes

    thread = threading.Thread(target=snapshots, name="snapshots")
    thread.start()
    while not durations:  # the first snapshot is under way once one has finished
        time.sleep(0.01)
    try:
        busy = _events(state, nodes, pods, events, version=10 * pods)
    finally:
        stop.set()
        thread.join()
    median, p99, worst = _summary(busy)
    return _summary(idle)[0], median, p99, worst, statistics.median(durations) * 1e3, len(durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--events", type=int, default=2000, help="pod updates timed per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the median is printed last")
    args = parser.parse_args()
    header = "idle ms | median ms | p99 ms | max ms | snapshot ms | snapshots"
    print(f"{args.nodes} nodes, {args.pods} pods; event latency while snapshots run")
    print(f"run | {header}")
    rows = []
    for number in range(1, args.repeat + 1):
        row = run(args.nodes, args.pods, args.events)
        rows.append(row)
        print(f"{number:>3} | " + " | ".join(f"{v:.2f}" for v in row[:5]) + f" | {row[5]}")
    medians = [statistics.median(column) for column in zip(*rows, strict=True)]
    verdict = "meets" if medians[3] <= TARGET_MS else "misses"
    print(
        "median | "
        + " | ".join(f"{v:.2f}" for v in medians[:5])
        + f" | {medians[5]:.0f}  ({verdict} the {TARGET_MS:.0f} ms target for the slowest event)"
    )


if __name__ == "__main__":
    main()
