"""The AWS provider: offline catalog, simulate end to end, and live calls against moto.

Three parts, each run ``--repeat`` times (medians printed); ``catalog`` and ``simulate`` start
a fresh Python process per run, ``live`` runs its passes in one process against one server:

- ``catalog``: ``InstanceTypeCatalog.offline`` for us-east-1 and ``instance_types(None)``:
  the first call (packaged data decompressed, parsed and built), a rebuild by a second catalog
  in the same process (packaged data already decoded), and a cached call; in a separate
  process, the tracemalloc peak of the first call and what stays allocated after it.
- ``simulate``: ``karpenter simulate --provider aws --region us-east-1`` on the provider's
  default scenario and on a generated workload (``--pods``, default 2,000, seed 42: 40
  Deployments, CPU per pod from {250m, 500m, 1, 2, 4, 8}, memory per pod = CPU x one of
  {1, 2, 4, 8} GiB, one NodePool of c/m/r generation > 4 amd64, spot or on-demand). In process:
  the provider's ``get_instance_types`` (timed inside ``build_snapshot``), the rest of
  ``build_snapshot``, and ``schedule``; then the CLI itself as a subprocess (wall time,
  interpreter start and imports included).
- ``live``: a moto ``ThreadedMotoServer`` in the worker process seeded by
  ``karpenter_aws.moto_account``; an EC2NodeClass resolved against it (``resolve_status``) and
  served to the provider in place of the apiserver; an ``AWSCloudProvider`` built from boto3
  clients for the server, in an isolated VPC (packaged on-demand prices), spot prices read
  before the clock starts. Timed: the
  first ``get_instance_types`` (DescribeInstanceTypes, DescribeInstanceTypeOfferings,
  DescribeAvailabilityZones over HTTP, then the build), a cached call, ``create`` of one
  NodeClaim on a fresh provider (launch templates, subnets and the EKS cluster read first), a
  second single ``create``, and ``--concurrent`` (default 20) NodeClaims created from as many
  threads (CreateFleet batched). One untimed warm-up pass runs first (moto's and botocore's
  lazy loading). The server shares the worker's interpreter (and GIL): the figures are the
  client's and moto's costs together, not EC2's latency.

    .venv/bin/python benchmarks/aws_provider.py [--repeat 3] [--part catalog|simulate|live]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import common

ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
CPU_CHOICES = ("250m", "500m", "1", "2", "4", "8")
CPU_MILLI = {"250m": 250, "500m": 500, "1": 1000, "2": 2000, "4": 4000, "8": 8000}
MEMORY_FACTORS = (1, 2, 4, 8)
DEPLOYMENTS = 40
NODEPOOL_REQUIREMENTS = [
    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
]
NODE_CLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


# -- part 1: the offline catalog ------------------------------------------------------------


def measure_catalog() -> dict[str, Any]:
    """First, rebuilt and cached ``instance_types(None)`` of the offline us-east-1 catalog."""
    from karpenter_aws.catalog import InstanceTypeCatalog
    from karpenter_aws.settings import AWSSettings

    settings = AWSSettings.from_mapping({"region": REGION})
    gc.collect()
    start = time.perf_counter()
    catalog = InstanceTypeCatalog.offline(settings)
    types = catalog.instance_types(None)
    first = time.perf_counter() - start
    start = time.perf_counter()
    again = catalog.instance_types(None)
    cached = time.perf_counter() - start
    assert again is types
    gc.collect()
    start = time.perf_counter()
    InstanceTypeCatalog.offline(settings).instance_types(None)
    rebuilt = time.perf_counter() - start
    return {
        "first": first,
        "rebuilt": rebuilt,
        "cached": cached,
        "types": len(types),
        "offerings": sum(len(t.offerings) for t in types),
        "zones": len(catalog.zones()),
    }


def measure_catalog_memory() -> dict[str, Any]:
    """tracemalloc's peak during the first offline build, and what stays allocated after it."""
    from karpenter_aws.catalog import InstanceTypeCatalog
    from karpenter_aws.settings import AWSSettings

    settings = AWSSettings.from_mapping({"region": REGION})
    gc.collect()
    tracemalloc.start()
    catalog = InstanceTypeCatalog.offline(settings)
    types = catalog.instance_types(None)
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"peak_mb": peak / 2**20, "retained_mb": retained / 2**20, "types": len(types)}


# -- part 2: simulate -----------------------------------------------------------------------


def generated_workload(pods: int, seed: int = 42) -> list[dict[str, Any]]:
    """A NodePool (no limits), its EC2NodeClass and ``DEPLOYMENTS`` Deployments of mixed shapes
    holding ``pods`` replicas in all."""
    rng = random.Random(seed)
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": NODE_CLASS_REF,
                        "requirements": NODEPOOL_REQUIREMENTS,
                    }
                }
            },
        },
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole-my-cluster",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
            },
        },
    ]
    for d in range(DEPLOYMENTS):
        replicas = pods // DEPLOYMENTS + (1 if d < pods % DEPLOYMENTS else 0)
        cpu = rng.choice(CPU_CHOICES)
        memory_mi = CPU_MILLI[cpu] * rng.choice(MEMORY_FACTORS) * 1024 // 1000
        name = f"deploy-{d:02d}"
        documents.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {
                            "containers": [
                                {
                                    "name": "app",
                                    "image": "registry.k8s.io/pause:3.9",
                                    "resources": {
                                        "requests": {"cpu": cpu, "memory": f"{memory_mi}Mi"}
                                    },
                                }
                            ]
                        },
                    },
                },
            }
        )
    return documents


def _write_workload(pods: int, directory: Path) -> Path:
    import yaml

    path = directory / f"aws-workload-{pods}.yaml"
    path.write_text(yaml.safe_dump_all(generated_workload(pods), sort_keys=False))
    return path


def measure_simulate(path: str | None) -> dict[str, Any]:
    """``simulate``'s steps in this process: provider, snapshot (instance types), schedule."""
    from karpenter_core.cloudprovider.plugin import ProviderContext
    from karpenter_core.cloudprovider.registry import discover
    from karpenter_core.manifests import build_snapshot, load_default_scenario, load_documents
    from karpenter_core.scheduling.scheduler import schedulable, schedule

    record = discover().provider("aws")
    settings = {option.name: option.default for option in record.options}
    settings["region"] = REGION
    start = time.perf_counter()
    importlib.import_module("karpenter_aws.cloudprovider")
    imports = time.perf_counter() - start
    gc.collect()
    start = time.perf_counter()
    cloud = record.factory(ProviderContext(settings=settings))
    factory = time.perf_counter() - start
    if path is None:
        assert record.default_scenario is not None
        documents = load_default_scenario(record.default_scenario())
    else:
        documents = load_documents([path])
    spent = [0.0]
    types_seen = [0]
    get_instance_types = cloud.get_instance_types

    def timed(nodepool: Any) -> Any:
        begin = time.perf_counter()
        types = get_instance_types(nodepool)
        spent[0] += time.perf_counter() - begin
        types_seen[0] += len(types)
        return types

    cloud.get_instance_types = timed  # type: ignore[method-assign]
    start = time.perf_counter()
    snapshot = build_snapshot(documents, cloud).snapshot
    snapshot_seconds = time.perf_counter() - start
    pods = len(schedulable(snapshot.pending))
    gc.collect()
    start = time.perf_counter()
    results = schedule(snapshot)
    schedule_seconds = time.perf_counter() - start
    shapes = Counter(
        f"{claim.instance_type.name} {claim.offering.capacity_type}"
        for claim in results.new_nodeclaims
    )
    return {
        "imports": imports,
        "factory": factory,
        "instance_types": spent[0],
        "snapshot_rest": snapshot_seconds - spent[0],
        "schedule": schedule_seconds,
        "types": types_seen[0],
        "pods": pods,
        "nodes": len(results.new_nodeclaims),
        "unschedulable": len(results.unschedulable),
        "cost": results.cost_per_hour,
        "shapes": shapes.most_common(4),
    }


def run_cli(path: str | None) -> dict[str, Any]:
    """``karpenter simulate --provider aws --region us-east-1 -o json``: wall time and summary."""
    command = [
        str(Path(sys.executable).with_name("karpenter")),
        "simulate",
        "--provider",
        "aws",
        "--region",
        REGION,
        "-o",
        "json",
    ]
    if path is not None:
        command += ["-f", path]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    summary = json.loads(done.stdout)["summary"]
    return {
        "wall": wall,
        "schedule": summary["scheduling_seconds"],
        "nodes": summary["nodeclaims"],
        "cost": summary["cost_per_hour"],
    }


# -- part 3: live against moto --------------------------------------------------------------


class _Calls:
    """EC2 API calls made through a boto3 client: count and seconds, by operation name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._started = threading.local()

    def hook(self, client: Any) -> None:
        client.meta.events.register("before-call.ec2", self._before)
        client.meta.events.register("after-call.ec2", self._after)

    def _before(self, model: Any, **_: Any) -> None:
        self._started.at = time.perf_counter()

    def _after(self, model: Any, **_: Any) -> None:
        spent = time.perf_counter() - self._started.at
        with self._lock:
            self.counts[model.name] += 1
            self.seconds[model.name] += spent

    def take(self) -> dict[str, tuple[int, float]]:
        with self._lock:
            out = {name: (n, self.seconds[name]) for name, n in self.counts.items()}
            self.counts.clear()
            self.seconds.clear()
        return out


def _node_class(env: Any) -> Any:
    """The default EC2NodeClass for the seeded cluster, its status resolved against moto."""
    from karpenter_aws.amis import AMIResolver
    from karpenter_aws.instanceprofile import InstanceProfiles
    from karpenter_aws.nodeclass import EC2NodeClass
    from karpenter_aws.nodeclass_controller import resolve_status

    discovery = {"tags": {"karpenter.sh/discovery": env.cluster_name}}
    node_class = EC2NodeClass.from_manifest(
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default", "uid": "bench-uid", "generation": 1},
            "spec": {
                "role": env.node_role,
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [discovery],
                "securityGroupSelectorTerms": [discovery],
            },
        }
    )
    status, failed = resolve_status(
        node_class,
        ec2=env.client("ec2"),
        amis=AMIResolver(env.client("ec2"), env.client("ssm")),
        profiles=InstanceProfiles(env.client("iam"), env.cluster_name, env.region),
        kubernetes_version=env.kubernetes_version,
        now=datetime.now(UTC),
    )
    resolved = EC2NodeClass.from_manifest({**node_class.to_manifest(), "status": status})
    if failed or resolved.not_ready_reason() is not None:
        raise SystemExit(f"EC2NodeClass did not resolve against moto: {status}")
    return resolved


def _nodepool() -> Any:
    return common.nodepool(NODEPOOL_REQUIREMENTS, NODE_CLASS_REF)


def _nodeclaim(name: str) -> Any:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim

    return NodeClaim.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": NODE_CLASS_REF,
                "requirements": NODEPOOL_REQUIREMENTS,
                "resources": {"requests": {"cpu": "2", "memory": "4Gi", "pods": "5"}},
            },
        }
    )


def _provider(env: Any, calls: _Calls, node_class: Any = None) -> Any:
    """A live provider whose EC2NodeClass read view serves ``node_class``."""
    from karpenter_aws.cloudprovider import AWSCloudProvider
    from karpenter_core.cloudprovider.plugin import ProviderContext

    def view(kind: str, name: str) -> Any:
        return node_class if node_class is not None and name == node_class.metadata.name else None

    clients = env.clients("ec2", "ssm", "iam", "eks", "pricing")
    calls.hook(clients["ec2"])
    settings = {
        "cluster-name": env.cluster_name,
        "region": env.region,
        "isolated-vpc": "true",
    }
    context = ProviderContext(settings=settings, clients=clients, node_classes=view)
    return AWSCloudProvider.from_context(context)


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def _create_many(provider: Any, names: Sequence[str]) -> tuple[float, list[float], list[Any]]:
    """Create NodeClaims from one thread each, released together; wall time, each latency."""
    barrier = threading.Barrier(len(names) + 1)
    latencies: list[float] = [0.0] * len(names)
    created: list[Any] = [None] * len(names)
    errors: list[Exception] = []

    def one(index: int, name: str) -> None:
        claim = _nodeclaim(name)
        barrier.wait()
        start = time.perf_counter()
        try:
            created[index] = provider.create(claim)
        except Exception as error:
            errors.append(error)
        latencies[index] = time.perf_counter() - start

    threads = [threading.Thread(target=one, args=(i, n)) for i, n in enumerate(names)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if errors:
        raise SystemExit(f"create failed: {errors[0]!r}")
    return wall, latencies, created


def live_pass(endpoint_url: str, concurrent: int) -> dict[str, Any]:
    """One pass on a freshly seeded server with a fresh provider."""
    from karpenter_aws.moto_account import seed

    env = seed(endpoint_url)
    resolve, node_class = _timed(lambda: _node_class(env))
    calls = _Calls()
    provider = _provider(env, calls, node_class)
    prices, _ = _timed(provider.refresh_prices)
    prices_calls = calls.take()
    pool = _nodepool()
    gc.collect()
    first, types = _timed(lambda: provider.get_instance_types(pool))
    first_calls = calls.take()
    cached, again = _timed(lambda: provider.get_instance_types(pool))
    assert len(again) == len(types)
    create_first, _ = _timed(lambda: provider.create(_nodeclaim("bench-first")))
    create_first_calls = calls.take()
    create_warm, _ = _timed(lambda: provider.create(_nodeclaim("bench-second")))
    create_warm_calls = calls.take()
    names = [f"bench-batch-{i:02d}" for i in range(concurrent)]
    wall, latencies, created = _create_many(provider, names)
    batch_calls = calls.take()
    instances = {c.status.provider_id for c in created}
    return {
        "resolve": resolve,
        "prices": prices,
        "prices_calls": prices_calls,
        "first": first,
        "cached": cached,
        "types": len(types),
        "offerings": sum(len(t.offerings) for t in types),
        "first_calls": first_calls,
        "create_first": create_first,
        "create_first_calls": create_first_calls,
        "create_warm": create_warm,
        "create_warm_calls": create_warm_calls,
        "batch_wall": wall,
        "batch_median": statistics.median(latencies),
        "batch_max": max(latencies),
        "batch_calls": batch_calls,
        "batch_instances": len(instances),
    }


def measure_live(repeat: int, concurrent: int) -> list[dict[str, Any]]:
    """A warm-up pass, then ``repeat`` timed passes, all against one moto server."""
    from karpenter_aws.moto_account import FAKE_ENV, start_server

    os.environ.update(FAKE_ENV)
    logging.getLogger("karpenter").setLevel(logging.WARNING)
    server, endpoint_url = start_server()
    try:
        live_pass(endpoint_url, concurrent)
        return [live_pass(endpoint_url, concurrent) for _ in range(repeat)]
    finally:
        server.stop()


# -- driver ---------------------------------------------------------------------------------


def run_worker(*args: str) -> Any:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"worker {' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    return statistics.median(float(row[key]) for row in rows)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:9.1f} ms"


def _calls(calls: Mapping[str, Sequence[float]]) -> str:
    """``Operation xN (ms)``, ms summed over the calls (overlapping when concurrent)."""
    return (
        ", ".join(f"{name} x{n:.0f} ({t * 1000:.0f} ms)" for name, (n, t) in sorted(calls.items()))
        or "none"
    )


def report_catalog(repeat: int) -> None:
    rows = [run_worker("catalog") for _ in range(repeat)]
    memory = [run_worker("catalog-memory") for _ in range(repeat)]
    last = rows[-1]
    print(
        f"\n[1] offline catalog, {REGION}: {last['types']} instance types, "
        f"{last['offerings']} offerings, {last['zones']} zones "
        f"(median of {repeat}, each in a fresh process)"
    )
    print(f"  first call (decode + build)   {_ms(_median(rows, 'first'))}")
    print(f"  rebuild (data decoded)        {_ms(_median(rows, 'rebuilt'))}")
    print(f"  cached call                   {_median(rows, 'cached') * 1e6:9.1f} us")
    print(f"  tracemalloc peak, first call  {_median(memory, 'peak_mb'):9.1f} MB")
    print(f"  retained after it             {_median(memory, 'retained_mb'):9.1f} MB")


def report_simulate(repeat: int, pods: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        generated = str(_write_workload(pods, Path(directory)))
        for label, path in (("default scenario", None), (f"generated, {pods} pods", generated)):
            args = ("simulate",) if path is None else ("simulate", path)
            rows = [run_worker(*args) for _ in range(repeat)]
            cli = [run_cli(path) for _ in range(repeat)]
            last = rows[-1]
            total = _median([{"t": r["instance_types"] + r["schedule"]} for r in rows], "t")
            print(
                f"\n[2] simulate --provider aws --region {REGION}, {label}: {last['pods']} pods, "
                f"{last['types']} instance types (median of {repeat}, fresh processes)"
            )
            print(f"  provider modules imported     {_ms(_median(rows, 'imports'))}")
            print(f"  provider factory (data read)  {_ms(_median(rows, 'factory'))}")
            print(f"  get_instance_types (cold)     {_ms(_median(rows, 'instance_types'))}")
            print(f"  rest of build_snapshot        {_ms(_median(rows, 'snapshot_rest'))}")
            print(f"  schedule                      {_ms(_median(rows, 'schedule'))}")
            print(f"  get_instance_types + schedule {_ms(total)}")
            print(
                f"  nodes {last['nodes']}, unschedulable {last['unschedulable']}, "
                f"cost {last['cost']:.4f} /h"
            )
            print("  node shapes   " + ", ".join(f"{n} x {s}" for s, n in last["shapes"]))
            print(
                f"  CLI wall time {_median(cli, 'wall'):.2f} s (schedule "
                f"{_median(cli, 'schedule') * 1000:.0f} ms; nodes {cli[-1]['nodes']}, "
                f"cost {cli[-1]['cost']:.4f} /h)"
            )


def report_live(repeat: int, concurrent: int) -> None:
    rows = run_worker("live", str(repeat), str(concurrent))
    last = rows[-1]
    print(
        f"\n[3] live against moto (ThreadedMotoServer in process, {REGION}): "
        f"{last['types']} instance types, {last['offerings']} offerings in the NodeClass's "
        f"zones (median of {repeat} after a warm-up pass)"
    )
    print(f"  EC2NodeClass resolution       {_ms(_median(rows, 'resolve'))}")
    print(f"  refresh_prices (spot history) {_ms(_median(rows, 'prices'))}")
    print(f"      EC2 calls, last pass: {_calls(last['prices_calls'])}")
    print(f"  get_instance_types, first     {_ms(_median(rows, 'first'))}")
    print(f"      EC2 calls, last pass: {_calls(last['first_calls'])}")
    print(f"  get_instance_types, cached    {_median(rows, 'cached') * 1e6:9.1f} us")
    print(f"  create, 1 NodeClaim (cold)    {_ms(_median(rows, 'create_first'))}")
    print(f"      EC2 calls, last pass: {_calls(last['create_first_calls'])}")
    print(f"  create, 1 NodeClaim (warm)    {_ms(_median(rows, 'create_warm'))}")
    print(f"      EC2 calls, last pass: {_calls(last['create_warm_calls'])}")
    print(
        f"  create, {concurrent} concurrent         {_ms(_median(rows, 'batch_wall'))} wall; "
        f"per NodeClaim median {_median(rows, 'batch_median') * 1000:.1f} ms, "
        f"max {_median(rows, 'batch_max') * 1000:.1f} ms; "
        f"{last['batch_instances']} instances"
    )
    print(f"      EC2 calls, last pass: {_calls(last['batch_calls'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs; medians are shown")
    parser.add_argument(
        "--part", choices=("catalog", "simulate", "live"), action="append", help="repeatable"
    )
    parser.add_argument("--pods", type=int, default=2000, help="pods of the generated workload")
    parser.add_argument("--concurrent", type=int, default=20, help="NodeClaims created at once")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "catalog":
            result: Any = measure_catalog()
        elif kind == "catalog-memory":
            result = measure_catalog_memory()
        elif kind == "simulate":
            result = measure_simulate(rest[0] if rest else None)
        else:
            result = measure_live(int(rest[0]), int(rest[1]))
        print(json.dumps(result))
        return
    parts = args.part or ["catalog", "simulate", "live"]
    print(f"AWS provider benchmark, median of {args.repeat} run(s)")
    if "catalog" in parts:
        report_catalog(args.repeat)
    if "simulate" in parts:
        report_simulate(args.repeat, args.pods)
    if "live" in parts:
        report_live(args.repeat, args.concurrent)


if __name__ == "__main__":
    main()
