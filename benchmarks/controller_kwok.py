"""The controller on the local KWOK cluster: N pending pods until every one is Running.

Usage (from the repository root, with a cluster from ``python -m karpenter_conformance.cluster up``
or any cluster whose kubeconfig is given):

    .venv/bin/python benchmarks/controller_kwok.py --kubeconfig ~/.cache/karpenter-py/cluster/run/kubeconfig

For each N (default 50 and 1000) and each repetition, a fresh NodePool and a Deployment of N
pods (2 CPU each for N <= 100, else 1 CPU) are created and the controller runs as a subprocess,
as its least-privilege ServiceAccount, with upstream's default timers (batch idle 1 s, max 10 s).
Phases, from the Deployment's creation (t0), using the controller's JSON log times (same host
clock):

- controller, pending -> NodeClaims: t0 to the last NodeClaim created (includes the kube-scheduler
  marking pods Unschedulable and the batch window);
- controller, NodeClaims -> Nodes registered: to the last node registered;
- cluster: to every pod Running (binding by the kube-scheduler, KWOK's pod stages).

Also the controller's peak RSS (VmHWM) and CPU seconds. Medians of the repetitions are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import common
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration import controller_harness as harness  # noqa: E402


def _log_time(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["time"]).timestamp()


def run_once(
    api: client.ApiClient, kubeconfig: Path, pods: int, work: Path, extra_env: dict[str, str]
) -> dict[str, float]:
    """One measurement of ``pods`` pending pods."""
    pool = harness.unique("bench")
    harness.create_nodeclass(api, pool)
    harness.create_nodepool(api, harness.nodepool(pool, pool))
    namespace = (
        client.CoreV1Api(api)
        .create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(generate_name="bench-")))
        .metadata.name
    )
    controller = harness.Controller(
        kubeconfig,
        work,
        env={
            "BATCH_IDLE_DURATION": "1s",
            "BATCH_MAX_DURATION": "10s",
            "LOG_LEVEL": "info",
            **extra_env,
        },
        name=f"bench-{pods}",
    )
    try:
        controller.wait_ready(60)
        controller.wait_leading(60)
        started_cpu = common.process_usage(controller.process.pid)[1]
        cpu = "2" if pods <= 100 else "1"
        t0 = time.time()
        harness.apply_deployment(api, namespace, harness.deployment("bench", pool, pods, cpu=cpu))
        core = client.CoreV1Api(api)
        while True:
            listed = core.list_namespaced_pod(namespace, _preload_content=False)
            items = json.loads(listed.data)["items"]
            running = sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running")
            if running == pods:
                break
            if time.time() - t0 > 300:
                raise TimeoutError(f"{running}/{pods} Running after 300s")
            controller.alive()
            time.sleep(0.05)
        t_running = time.time()
        peak, cpu_seconds = common.process_usage(controller.process.pid)
        records = controller.log_lines()
        created = [_log_time(r) for r in records if r.get("message") == "created nodeclaim"]
        registered = [_log_time(r) for r in records if r.get("message") == "registered node"]
        return {
            "nodeclaims": len(created),
            "pending_to_nodeclaims": max(created) - t0,
            "nodeclaims_to_registered": max(registered) - max(created),
            "cluster": t_running - max(registered),
            "total": t_running - t0,
            "peak_rss_mb": peak,
            "cpu_seconds": cpu_seconds - started_cpu,
        }
    finally:
        client.AppsV1Api(api).delete_namespaced_deployment("bench", namespace)
        harness.cleanup_pool(api, pool, timeout=300)
        controller.stop()
        client.CoreV1Api(api).delete_namespace(namespace)
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            harness.KWOK_GROUP, harness.KWOK_VERSION, harness.KWOK_PLURAL, pool
        )


def main() -> None:
    """Parse arguments, run every size ``--repeat`` times, print medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--pods", type=int, nargs="+", default=[50, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra controller setting, e.g. KUBE_CLIENT_QPS=1000 (repeatable)",
    )
    args = parser.parse_args()
    api = config.new_client_from_config(config_file=str(args.kubeconfig))
    work = Path(tempfile.mkdtemp(prefix="controller-bench-"))
    identity = harness.controller_kubeconfig(args.kubeconfig, work / "kubeconfig")
    keys = (
        "total",
        "pending_to_nodeclaims",
        "nodeclaims_to_registered",
        "cluster",
        "nodeclaims",
        "peak_rss_mb",
        "cpu_seconds",
    )
    print("pods  " + "  ".join(f"{k:>24}" for k in keys))
    for pods in args.pods:
        extra = dict(item.split("=", 1) for item in args.env)
        runs = [run_once(api, identity, pods, work, extra) for _ in range(args.repeat)]
        for run in runs:
            print(f"{pods:<5} " + "  ".join(f"{run[k]:>24.2f}" for k in keys), flush=True)
        medians = {k: statistics.median(r[k] for r in runs) for k in keys}
        print(f"{pods:<5} " + "  ".join(f"{medians[k]:>24.2f}" for k in keys) + "  (median)")
    print(f"controller logs in {work}")


if __name__ == "__main__":
    main()
