"""This controller against upstream Karpenter's KWOK controller, side by side on the local cluster.

Usage (from the repository root; the local control plane's binaries must be built):

    .venv/bin/python benchmarks/versus_upstream.py --state-dir /tmp/kstate-versus
    .venv/bin/python benchmarks/versus_upstream.py --state-dir D --pods 50 1000 5000 --repeat 3
    .venv/bin/python benchmarks/versus_upstream.py --state-dir D --scheduling-counts --repeat 1

Upstream is the pinned release of ``sigs.k8s.io/karpenter`` (``upstream_karpenter.py`` builds it
from the Go module proxy on first use). Two measurements:

- Scheduling: upstream's own ``BenchmarkScheduling<N>`` (one iteration, a fresh process per run)
  against ``scheduling_upstream.py``'s reproduction of it (a fresh process per run), in pods/s.
- End to end: for each size and repetition, each controller on a fresh local cluster (the
  control plane started in ``--state-dir`` with that controller's CRDs: ours from
  ``karpenter crds``, upstream's from its module), in turns (the order alternates between
  repetitions). Both run as the same ServiceAccount (our shipped RBAC, plus the rules of
  upstream's chart when upstream runs), with the same settings (batch idle 1 s, max 10 s, every
  other setting at its default, which both share), one KWOKNodeClass (upstream's status set
  Ready by this script: nothing in upstream's binary sets it), the same NodePool and one
  Deployment of N pods (2 CPU each up to 100 pods, else 1 CPU). Measured: from the Deployment's
  creation until every pod is Running; then the NodeClaims with their instance types and cost
  per hour (priced from upstream's KWOK catalog, which ours reproduces), and the controller's
  peak resident set (VmHWM) and CPU seconds while the pods came up.

Results go to ``--json`` (``benchmarks/results/versus_upstream.json`` by default): per
measurement its date, the commit measured and the load average before and after (a measurement
skipped this time keeps its earlier figures there), and the machine. The end-to-end table is
printed as Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import common
import upstream_karpenter
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from karpenter_conformance.cluster import control_plane  # noqa: E402
from karpenter_conformance.controller import ControllerProcess, free_port  # noqa: E402
from karpenter_conformance.waiting import wait_until  # noqa: E402
from karpenter_core import rbac  # noqa: E402
from tests.integration import controller_harness as harness  # noqa: E402

DEFAULT_JSON = ROOT / "benchmarks" / "results" / "versus_upstream.json"
SETTINGS = {"BATCH_IDLE_DURATION": "1s", "BATCH_MAX_DURATION": "10s", "LOG_LEVEL": "info"}
LEASE = "karpenter-leader-election"
POOL = "bench"
NAMESPACE = "bench"
OURS, UPSTREAM = "ours", "upstream"
UPSTREAM_ROLE = "upstream-karpenter"


class Controller(Protocol):
    """What a run needs of either controller's process."""

    process: subprocess.Popen[bytes]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the process."""


class UpstreamController:
    """Upstream's ``kwok`` command in a subprocess of its own session, logging to a file."""

    def __init__(self, binary: Path, kubeconfig: Path, log_dir: Path) -> None:
        self.log_path = log_dir / f"upstream-{os.getpid()}-{time.time_ns()}.log"
        env = {
            **os.environ,
            **SETTINGS,
            "KUBECONFIG": str(kubeconfig),
            "LEADER_ELECTION_NAMESPACE": harness.NAMESPACE,
            "METRICS_PORT": str(free_port()),
            "HEALTH_PROBE_PORT": str(free_port()),
        }
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(binary)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


# -- one run ------------------------------------------------------------------------------------


def _grant_upstream_rules(api: client.ApiClient, rules: list[dict[str, Any]]) -> None:
    """Give the controller's ServiceAccount the rules of upstream's chart, cluster-wide."""
    roles = client.RbacAuthorizationV1Api(api)
    roles.create_cluster_role({"metadata": {"name": UPSTREAM_ROLE}, "rules": rules})
    roles.create_cluster_role_binding(
        {
            "metadata": {"name": UPSTREAM_ROLE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": UPSTREAM_ROLE,
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": rbac.SERVICE_ACCOUNT,
                    "namespace": harness.NAMESPACE,
                }
            ],
        }
    )


def _set_nodeclass_ready(api: client.ApiClient) -> None:
    """Upstream's KWOKNodeClass is Ready only when its status says so."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": now,
        "observedGeneration": 1,
    }
    client.CustomObjectsApi(api).patch_cluster_custom_object_status(
        harness.KWOK_GROUP,
        harness.KWOK_VERSION,
        harness.KWOK_PLURAL,
        POOL,
        {"status": {"conditions": [condition]}},
    )


def _lease_held(api: client.ApiClient) -> bool:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(LEASE, harness.NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return bool(lease.spec.holder_identity)


def _alive(controller: Controller, log: Path) -> bool:
    if controller.process.poll() is not None:
        lines = log.read_text(errors="replace").splitlines()
        last = ""
        with contextlib.suppress(ValueError, IndexError, AttributeError):
            last = f" after logging {json.loads(lines[-1])['message']!r}"
        tail = "\n".join(lines[-30:])
        raise RuntimeError(
            f"the controller exited with {controller.process.returncode}{last}\n{tail}"
        )
    return True


@contextlib.contextmanager
def _cluster(state_dir: Path, documents: list[dict[str, Any]]) -> Iterator[Path]:
    cluster = control_plane.ControlPlane(state_dir)
    cluster.start(documents)
    try:
        yield cluster.kubeconfig
    finally:
        cluster.stop()


def _running(api: client.ApiClient) -> int:
    listed = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, _preload_content=False)
    items = json.loads(listed.data)["items"]
    return sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running")


def _nodeclaims(api: client.ApiClient, prices: dict[tuple[str, str, str], float]) -> dict[str, Any]:
    types: Counter[str] = Counter()
    cost = 0.0
    for claim in harness.nodeclaims(api, POOL):
        labels = claim["metadata"].get("labels") or {}
        name = labels.get("node.kubernetes.io/instance-type", "?")
        zone = labels.get("topology.kubernetes.io/zone", "?")
        capacity = labels.get("karpenter.sh/capacity-type", "?")
        types[f"{name} {capacity}"] += 1
        cost += prices.get((name, zone, capacity), float("nan"))
    return {"nodeclaims": sum(types.values()), "types": dict(sorted(types.items())), "cost": cost}


def run_once(
    which: str, pods: int, state_dir: Path, work: Path, upstream: upstream_karpenter.Upstream
) -> dict[str, Any]:
    """One controller on a fresh cluster: ``pods`` pending pods until all are Running."""
    documents = control_plane.installed_crds() if which == OURS else upstream.crd_documents()
    with _cluster(state_dir, documents) as admin:
        api = config.new_client_from_config(config_file=str(admin))
        identity = harness.controller_kubeconfig(admin, work / "kubeconfig")
        if which == UPSTREAM:
            _grant_upstream_rules(api, upstream.rbac_rules())
        harness.create_nodeclass(api, POOL)
        if which == UPSTREAM:
            _set_nodeclass_ready(api)
        harness.create_nodepool(api, harness.nodepool(POOL, POOL))
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        controller: Controller
        if which == OURS:
            ours = ControllerProcess(
                "kwok",
                identity,
                work,
                {**SETTINGS, "LEADER_ELECTION_NAMESPACE": harness.NAMESPACE},
                name="ours",
            )
            controller, log = ours, ours.log_path
        else:
            theirs = UpstreamController(upstream.controller, identity, work)
            controller, log = theirs, theirs.log_path
        try:
            wait_until(
                lambda: _alive(controller, log) and _lease_held(api),
                f"the {which} controller holding the Lease (log {log})",
                timeout=120,
            )
            # Both start their controllers once they lead; give that the same short moment.
            time.sleep(2)
            pid = controller.process.pid
            cpu_before = common.process_usage(pid)[1]
            load = os.getloadavg()[0]
            cpu = "2" if pods <= 100 else "1"
            t0 = time.monotonic()
            harness.apply_deployment(api, NAMESPACE, harness.deployment("bench", POOL, pods, cpu))
            timeout = 120 + 0.3 * pods
            while (running := _running(api)) < pods:
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"{which}: {running}/{pods} pods Running after {timeout}s")
                _alive(controller, log)
                time.sleep(0.1)
            seconds = time.monotonic() - t0
            peak, cpu_after = common.process_usage(pid)
            return {
                "controller": which,
                "pods": pods,
                "seconds": round(seconds, 2),
                **_nodeclaims(api, upstream.prices()),
                "peak_rss_mb": round(peak, 1),
                "cpu_seconds": round(cpu_after - cpu_before, 2),
                "load_average": round(load, 1),
                "log": str(log),
            }
        finally:
            controller.stop()
            api.close()


# -- scheduling benchmark -----------------------------------------------------------------------


def scheduling(upstream: upstream_karpenter.Upstream, counts: list[int], repeat: int) -> list[Any]:
    """Pods/s of upstream's BenchmarkScheduling<N> and of our reproduction, interleaved."""
    import scheduling_upstream

    rows = []
    for count in counts:
        theirs, ours = [], []
        for _ in range(repeat):
            theirs.append(upstream_karpenter.run_scheduling_benchmark(upstream, count))
            mine = scheduling_upstream.run_in_child(count)
            ours.append({"pods_per_second": count / mine["seconds"], "nodes": mine["nodes"]})
        upstream_rate = statistics.median(r["pods_per_second"] for r in theirs)
        our_rate = statistics.median(r["pods_per_second"] for r in ours)
        rows.append(
            {
                "pods": count,
                "upstream_pods_per_second": [round(r["pods_per_second"]) for r in theirs],
                "ours_pods_per_second": [round(r["pods_per_second"]) for r in ours],
                "upstream_nodes": theirs[-1]["nodes"],
                "ours_nodes": ours[-1]["nodes"],
                "ratio": round(our_rate / upstream_rate, 2),
            }
        )
        print(
            f"scheduling {count:>6} pods: upstream {upstream_rate:>8.0f} pods/s, ours "
            f"{our_rate:>8.0f} pods/s, ours/upstream {our_rate / upstream_rate:.2f}",
            flush=True,
        )
    return rows


# -- summary ------------------------------------------------------------------------------------

_KEYS = ("seconds", "nodeclaims", "cost", "peak_rss_mb", "cpu_seconds")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per controller (of the runs that finished) and the ratios ours/upstream."""
    medians: dict[str, dict[str, float]] = {}
    for which in (OURS, UPSTREAM):
        mine = [r for r in runs if r["controller"] == which and "error" not in r]
        medians[which] = {
            k: round(statistics.median(r[k] for r in mine), 3) if mine else float("nan")
            for k in _KEYS
        }
    ratios = {
        k: round(medians[OURS][k] / medians[UPSTREAM][k], 2) if medians[UPSTREAM][k] else None
        for k in _KEYS
    }
    return {"median": medians, "ratio": ratios}


def markdown(sizes: list[dict[str, Any]]) -> str:
    """The end-to-end table: one row per run, then the medians and the ratios per size."""
    lines = [
        "| pods | controller | pending -> Running | NodeClaims | instance types | $/h "
        "| peak RSS | CPU | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        for run in size["runs"]:
            if "error" in run:
                reason = run["error"].splitlines()[0]
                lines.append(f"| {run['pods']:,} | {run['controller']} | failed: {reason} |")
                continue
            types = ", ".join(f"{n} x {t}" for t, n in run["types"].items())
            lines.append(
                f"| {run['pods']:,} | {run['controller']} | {run['seconds']:.2f} s "
                f"| {run['nodeclaims']} | {types} | {run['cost']:.3f} "
                f"| {run['peak_rss_mb']:.0f} MB | {run['cpu_seconds']:.1f} s "
                f"| {run['load_average']:.1f} |"
            )
        for which in (OURS, UPSTREAM):
            m = size["summary"]["median"][which]
            lines.append(
                f"| {size['pods']:,} | **{which}, median** | **{m['seconds']:.2f} s** "
                f"| {m['nodeclaims']:g} | | {m['cost']:.3f} | {m['peak_rss_mb']:.0f} MB "
                f"| {m['cpu_seconds']:.1f} s | |"
            )
        r = size["summary"]["ratio"]
        lines.append(
            f"| {size['pods']:,} | **ours / upstream** | **{r['seconds']}** | {r['nodeclaims']} "
            f"| | {r['cost']} | {r['peak_rss_mb']} | {r['cpu_seconds']} | |"
        )
    return "\n".join(lines)


def _commit() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        [
            "git",
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "karpenter_core",
            "providers",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head}{' (with uncommitted changes)' if dirty else ''}"


def _machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version()}


@contextlib.contextmanager
def _section(result: dict[str, Any], name: str) -> Iterator[dict[str, Any]]:
    """A fresh section of the results, stamped with the date, the commit and the load average
    before and after (a section not measured this time keeps its earlier figures)."""
    section: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "load_average_before": [round(x, 1) for x in os.getloadavg()],
    }
    yield section
    section["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    result[name] = section


def end_to_end(
    pods: int, repeat: int, state_dir: Path, work: Path, upstream: upstream_karpenter.Upstream
) -> dict[str, Any]:
    """``repeat`` runs of each controller at ``pods`` pods, in turns, and their summary."""
    runs = []
    for repetition in range(repeat):
        order = (OURS, UPSTREAM) if repetition % 2 == 0 else (UPSTREAM, OURS)
        for which in order:
            try:
                run = run_once(which, pods, state_dir, work, upstream)
            except (RuntimeError, TimeoutError) as error:
                # A controller that exits or stalls is a result too: kept, left out of medians.
                runs.append({"controller": which, "pods": pods, "error": str(error)[:2000]})
                print(f"{pods:>5} pods  {which:<8} failed: {str(error)[:300]}", flush=True)
                continue
            runs.append(run)
            print(
                f"{pods:>5} pods  {which:<8} {run['seconds']:>7.2f} s  "
                f"{run['nodeclaims']:>3} NodeClaims  ${run['cost']:.3f}/h  "
                f"{run['peak_rss_mb']:>6.1f} MB  {run['cpu_seconds']:>6.2f} CPU s  "
                f"load {run['load_average']:.1f}",
                flush=True,
            )
    return {"pods": pods, "runs": runs, "summary": summarize(runs)}


def main() -> None:
    """Parse arguments, measure, print the tables and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--state-dir", type=Path, required=True, help="private state directory for the clusters"
    )
    parser.add_argument(
        "--pods", type=int, nargs="*", default=[50, 1000], help="sizes (none: skip end to end)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per size and controller")
    parser.add_argument(
        "--scheduling-counts",
        type=int,
        nargs="*",
        default=[1000, 5000],
        help="sizes of the scheduling benchmark (none: skip it)",
    )
    parser.add_argument("--scheduling-repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()

    upstream = upstream_karpenter.prepare(benchmark=bool(args.scheduling_counts))
    result: dict[str, Any] = json.loads(args.json.read_text()) if args.json.is_file() else {}
    result["upstream"] = f"{upstream_karpenter.MODULE}@{upstream_karpenter.VERSION}"
    result["machine"] = _machine()
    if args.scheduling_counts:
        with _section(result, "scheduling") as section:
            section["rows"] = scheduling(upstream, args.scheduling_counts, args.scheduling_repeat)
    work = Path(tempfile.mkdtemp(prefix="versus-upstream-"))
    if args.pods:
        with _section(result, "end_to_end") as section:
            section["settings"] = SETTINGS
            section["sizes"] = [
                end_to_end(pods, args.repeat, args.state_dir, work, upstream) for pods in args.pods
            ]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.pods:
        print()
        print(markdown(result["end_to_end"]["sizes"]))
    print(f"\nresults in {args.json}; controller logs in {work}")


if __name__ == "__main__":
    main()
