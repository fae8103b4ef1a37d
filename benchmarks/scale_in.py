"""The scale-in benchmark: a mixed workload scaled up to N nodes, then down to 75%, 50% and 25%
of its pods in steps, each time until consolidation has nothing left to do.

Usage (from the repository root):

    .venv/bin/python benchmarks/scale_in.py --state-dir /tmp/kstate-scale --nodes 1000
    .venv/bin/python benchmarks/scale_in.py --kubeconfig K --nodes 100 --timers fast -o json

``karpenter controller --provider kwok`` runs as its least-privilege ServiceAccount on the local
cluster (started here with ``--state-dir``, or the one of ``--kubeconfig``). Two NodePools of
c-2x and c-4x KWOK types, ``spot`` and ``on-demand`` (consolidationPolicy
WhenEmptyOrUnderutilized, consolidateAfter 0s, the default budget of 10%), and the
SpotToSpotConsolidation gate off (upstream's default): spot nodes are only deleted, on-demand
nodes are deleted or replaced by cheaper ones (a c-4x holding one pod by a c-2x). KWOK prices
are linear in CPU, so a c-4x holding three 1-CPU pods is the cheapest packing. Workloads, for N
nodes (3 N pods of 1 CPU, three to a c-4x):

- ``web``: 1.2 N pods on on-demand, PDB minAvailable 90%;
- ``spread``: 0.1 N pods of 0.5 CPU on on-demand, no two on one node (required hostname
  anti-affinity), PDB maxUnavailable 1;
- ``api``: 1.2 N pods on spot, PDB maxUnavailable 5;
- ``batch``: 0.6 N pods on spot, no PDB.

Each phase (the scale-up, then each step) waits until every desired pod is Running and Ready,
no NodeClaim is launching or being deleted, no node carries the disrupted taint, and the nodes
have not changed for a quiet window longer than a disruption pass and its validation; the time
to converge is from the scale change to the last change of the nodes. Per step: nodes and cost
per hour before and after, the reference (the provisioning scheduler packing the remaining pods
onto empty capacity of the same NodePools) and how far above it the cluster ends, pods evicted
(pods that survived the scale change but were gone at the end), the most nodes disrupting
(tainted or deleting) at once against the budget, and ``karpenter_conformance.invariants``
checked over the snapshots (PDB violations, budgets, instances launched twice or orphaned,
stale taints). The controller's peak RSS (VmHWM) comes last.

``--timers upstream`` (default) runs upstream's disruption timers (poll 10 s, validation 15 s);
``--timers fast`` runs the conformance suite's (1 s and 1 s), as the CI test does.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kubernetes import client as k8s

from karpenter_conformance import invariants
from karpenter_conformance.controller import ControllerProcess
from karpenter_conformance.suite.cluster import FAST_TIMERS, GC_WINDOW, ClusterHarness
from karpenter_conformance.waiting import wait_until
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.registry import discover
from karpenter_core.scheduling.scheduler import Minimize, schedule
from karpenter_core.scheduling.snapshot import PodInfo, Snapshot

__all__ = ["Options", "Report", "main", "run"]

STEPS = (0.75, 0.5, 0.25)
INSTANCE_TYPES = ("c-2x-amd64-linux", "c-4x-amd64-linux")
POOLS = {"spot": wk.CAPACITY_TYPE_SPOT, "on-demand": "on-demand"}
WORKLOADS: dict[str, tuple[str, float, str, bool, dict[str, Any] | None]] = {
    # name: (pool, replicas per node at full size, CPU, hostname anti-affinity, PDB spec)
    "web": ("on-demand", 1.2, "1", False, {"minAvailable": "90%"}),
    "spread": ("on-demand", 0.1, "500m", True, {"maxUnavailable": 1}),
    "api": ("spot", 1.2, "1", False, {"maxUnavailable": 5}),
    "batch": ("spot", 0.6, "1", False, None),
}
TIMERS = {
    "upstream": {"DISRUPTION_POLL_PERIOD": "10s", "DISRUPTION_VALIDATION_DELAY": "15s"},
    "fast": {"DISRUPTION_POLL_PERIOD": "1s", "DISRUPTION_VALIDATION_DELAY": "1s"},
}
QUIET = {"upstream": 40.0, "fast": 8.0}
"""Seconds without a change of the nodes after which a phase has converged: longer than a
disruption pass and its validation."""
TAINT_WINDOW = 120.0
"""Seconds a node may keep the disrupted taint without going away (a command waits for its
replacements)."""


@dataclass(frozen=True, slots=True)
class Options:
    """What to run: N nodes, the timers, how long a step may take (seconds; the scale-up
    twice as long)."""

    nodes: int = 1000
    timers: str = "upstream"
    phase_timeout: float = 900.0
    interval: float = 1.0
    """Seconds between the invariant recorder's looks."""
    log: Path | None = None
    """Where to copy the controller's JSON log at the end (kept nowhere without it)."""


@dataclass
class Step:
    """One phase's figures."""

    fraction: float
    converged_s: float | None = None
    unsettled: str = ""
    """What kept the cluster from rest when the step did not converge."""
    nodes_before: int = 0
    nodes_after: int = 0
    cost_before: float = 0.0
    cost_after: float = 0.0
    reference_nodes: int = 0
    reference_cost: float = 0.0
    pods_evicted: int = 0
    most_disrupting: int = 0
    budget: int = 0
    pdb_violations: list[str] = field(default_factory=list)

    @property
    def over_reference(self) -> float:
        """How far above the reference the cluster ends (0.05: 5%)."""
        if not self.reference_cost:
            return 0.0
        return self.cost_after / self.reference_cost - 1


@dataclass
class Report:
    """What the benchmark saw."""

    nodes: int
    timers: str
    scale_up_s: float | None = None
    scale_up_nodes: int = 0
    steps: list[Step] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    violations: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    def summary(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        data = asdict(self)
        for step, shown in zip(self.steps, data["steps"], strict=True):
            shown["over_reference"] = round(step.over_reference, 4)
        return data


# -- the cluster ---------------------------------------------------------------------------------


def _list(api: k8s.ApiClient, path: str) -> list[dict[str, Any]]:
    """Every item of a collection, as JSON (fast for thousands of pods)."""
    method, url, headers, _, _ = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers)
    data = response.read()
    if response.status >= 300:
        raise RuntimeError(f"GET {path}: {response.status} {data[:200]!r}")
    return list(json.loads(data)["items"])


def _prices() -> dict[tuple[str, str, str], float]:
    from karpenter_kwok.cloudprovider import load_instance_types

    return {
        (it.name, o.zone, o.capacity_type): o.price
        for it in load_instance_types(None)
        for o in it.offerings
    }


class Workload:
    """The benchmark's namespace, NodePools and Deployments (named after the run)."""

    def __init__(self, harness: ClusterHarness, nodes: int) -> None:
        self.harness = harness
        self.api = harness.api
        self.name = f"scale-{uuid.uuid4().hex[:6]}"
        self.replicas = {name: max(1, round(spec[1] * nodes)) for name, spec in WORKLOADS.items()}
        self.prices = _prices()

    def pool(self, key: str) -> str:
        """The NodePool's name."""
        return f"{self.name}-{key}"

    def pools(self) -> set[str]:
        """The names of both NodePools."""
        return {self.pool(key) for key in POOLS}

    def nodepool(self, key: str) -> dict[str, Any]:
        """The NodePool manifest for ``spot`` or ``on-demand``."""
        info = self.harness.node_class_info
        return {
            "apiVersion": f"{wk.GROUP}/v1",
            "kind": "NodePool",
            "metadata": {"name": self.pool(key)},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [
                            {
                                "key": wk.INSTANCE_TYPE,
                                "operator": "In",
                                "values": [*INSTANCE_TYPES],
                            },
                            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": [POOLS[key]]},
                        ],
                        "nodeClassRef": {
                            "group": info.group,
                            "kind": info.kind,
                            "name": self.harness.node_class_name,
                        },
                    },
                },
                "disruption": {
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": "0s",
                },
            },
        }

    def deployment(self, name: str) -> dict[str, Any]:
        """The Deployment manifest of workload ``name``, at its full size."""
        pool, _, cpu, spread, _ = WORKLOADS[name]
        spec: dict[str, Any] = {
            "nodeSelector": {wk.NODEPOOL: self.pool(pool)},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "app", "image": "fake", "resources": {"requests": {"cpu": cpu}}}
            ],
        }
        if spread:
            term = {
                "labelSelector": {"matchLabels": {"app": name}},
                "topologyKey": wk.HOSTNAME,
            }
            spec["affinity"] = {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            }
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": self.replicas[name],
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            },
        }

    def create(self) -> None:
        """The namespace, the NodePools, the PDBs and the Deployments at full size."""
        k8s.CoreV1Api(self.api).create_namespace({"metadata": {"name": self.name}})
        custom = k8s.CustomObjectsApi(self.api)
        for key in POOLS:
            custom.create_cluster_custom_object(wk.GROUP, "v1", "nodepools", self.nodepool(key))
        policy = k8s.PolicyV1Api(self.api)
        for name, (_, _, _, _, pdb) in WORKLOADS.items():
            if pdb is not None:
                body = {
                    "metadata": {"name": name},
                    "spec": {**pdb, "selector": {"matchLabels": {"app": name}}},
                }
                policy.create_namespaced_pod_disruption_budget(self.name, body)
        apps = k8s.AppsV1Api(self.api)
        for name in WORKLOADS:
            apps.create_namespaced_deployment(self.name, self.deployment(name))

    def scale(self, fraction: float) -> dict[str, int]:
        """Every Deployment to ``fraction`` of its full size; the new replica counts."""
        apps = k8s.AppsV1Api(self.api)
        desired = {}
        for name, full in self.replicas.items():
            desired[name] = max(1, round(full * fraction))
            apps.patch_namespaced_deployment_scale(
                name, self.name, {"spec": {"replicas": desired[name]}}
            )
        return desired

    def pods(self) -> list[dict[str, Any]]:
        """The namespace's pods."""
        return _list(self.api, f"/api/v1/namespaces/{self.name}/pods")

    def nodes(self) -> list[dict[str, Any]]:
        """The nodes of the benchmark's NodePools."""
        pools = self.pools()
        return [
            n
            for n in _list(self.api, "/api/v1/nodes")
            if (n["metadata"].get("labels") or {}).get(wk.NODEPOOL) in pools
        ]

    def nodeclaims(self) -> list[dict[str, Any]]:
        """The NodeClaims of the benchmark's NodePools."""
        pools = self.pools()
        return [
            c
            for c in _list(self.api, f"/apis/{wk.GROUP}/v1/nodeclaims")
            if (c["metadata"].get("labels") or {}).get(wk.NODEPOOL) in pools
        ]

    def cost(self, nodes: Sequence[Mapping[str, Any]]) -> float:
        """Price per hour of ``nodes``, from the KWOK catalog."""
        total = 0.0
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            key = (
                labels.get(wk.INSTANCE_TYPE, ""),
                labels.get(wk.TOPOLOGY_ZONE, ""),
                labels.get(wk.CAPACITY_TYPE, ""),
            )
            total += self.prices.get(key, 0.0)
        return total

    def reference(self, pods: Sequence[Mapping[str, Any]]) -> tuple[int, float]:
        """Nodes and cost per hour of the provisioning scheduler packing ``pods`` onto empty
        capacity of the benchmark's NodePools."""
        from karpenter_kwok.cloudprovider import load_instance_types

        pools = [NodePool.from_manifest(self.nodepool(key)) for key in POOLS]
        catalog = load_instance_types(None)
        pending = []
        for pod in pods:
            manifest = copy.deepcopy(dict(pod))
            manifest.get("spec", {}).pop("nodeName", None)
            pending.append(PodInfo.from_manifest(manifest))
        snapshot = Snapshot(
            nodepools=pools,
            instance_types={p.metadata.name or "": list(catalog) for p in pools},
            pending=pending,
        )
        results = schedule(snapshot, Minimize.PRICE)
        if results.unschedulable:
            raise RuntimeError(f"the reference packing left {len(results.unschedulable)} pods")
        return len(results.new_nodeclaims), results.cost_per_hour

    def unsettled(self, desired: Mapping[str, int]) -> tuple[list[str], frozenset[str]]:
        """What keeps the cluster from rest (desired pods Running and Ready, none terminating, no
        NodeClaim launching or deleting, no disrupted taint; nothing when at rest), and its node
        names."""
        pods = self.pods()
        nodes = self.nodes()
        claims = self.nodeclaims()
        names = frozenset(n["metadata"]["name"] for n in nodes)
        reasons = []
        unhealthy = [p for p in pods if not _healthy(p)]
        healthy = len(pods) - len(unhealthy)
        if healthy != sum(desired.values()):
            reasons.append(f"{healthy} of {sum(desired.values())} pods Running and Ready")
        if unhealthy:
            reasons.append(
                f"{len(unhealthy)} pods not Running and Ready, e.g. {_pod_state(unhealthy[0])}"
            )
        launching = [c for c in claims if not _initialized(c)]
        if launching:
            reasons.append(f"{len(launching)} NodeClaims not Initialized")
        deleting = [c for c in claims if c["metadata"].get("deletionTimestamp")]
        if deleting:
            reasons.append(f"{len(deleting)} NodeClaims deleting")
        tainted = [n for n in nodes if _tainted(n)]
        if tainted:
            reasons.append(f"{len(tainted)} nodes disrupted or deleting")
        if len(claims) != len(nodes):
            reasons.append(f"{len(claims)} NodeClaims for {len(nodes)} nodes")
        return reasons, names

    def remove(self) -> None:
        """Delete the Deployments, the NodePools (their NodeClaims with them) and the namespace
        (the controller must run for the finalizers)."""
        apps = k8s.AppsV1Api(self.api)
        for name in WORKLOADS:
            with contextlib.suppress(k8s.ApiException):
                apps.delete_namespaced_deployment(name, self.name)
        custom = k8s.CustomObjectsApi(self.api)
        for key in POOLS:
            with contextlib.suppress(k8s.ApiException):
                custom.delete_cluster_custom_object(wk.GROUP, "v1", "nodepools", self.pool(key))
        for claim in self.nodeclaims():
            self.harness.delete_nodeclaim(claim["metadata"]["name"])
        wait_until(lambda: not self.nodeclaims(), "the NodeClaims gone", timeout=600)
        with contextlib.suppress(k8s.ApiException):
            k8s.CoreV1Api(self.api).delete_namespace(self.name)


def _healthy(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return (
        status.get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
    )


def _pod_state(pod: Mapping[str, Any]) -> str:
    """A pod's name, node, phase, Ready condition and whether it is terminating."""
    status = pod.get("status") or {}
    ready = next(
        (c.get("status") for c in status.get("conditions") or () if c.get("type") == "Ready"),
        "absent",
    )
    node = (pod.get("spec") or {}).get("nodeName") or "no node"
    terminating = ", terminating" if pod["metadata"].get("deletionTimestamp") else ""
    return f"{pod['metadata']['name']} on {node}: {status.get('phase')}, Ready {ready}{terminating}"


def _initialized(claim: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Initialized" and c.get("status") == "True"
        for c in (claim.get("status") or {}).get("conditions") or ()
    )


def _tainted(node: Mapping[str, Any]) -> bool:
    return bool(node["metadata"].get("deletionTimestamp")) or any(
        t.get("key") == wk.DISRUPTED_TAINT_KEY for t in (node.get("spec") or {}).get("taints") or ()
    )


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- the run -------------------------------------------------------------------------------------


def _converge(
    workload: Workload,
    desired: Mapping[str, int],
    started: float,
    quiet: float,
    timeout: float,
    alive: Callable[[], object],
) -> tuple[float | None, str]:
    """Seconds from ``started`` to the last change of the nodes once the cluster is at rest
    and stays unchanged for ``quiet`` seconds; None after ``timeout``, with what kept the
    cluster from rest in the last look."""
    last: frozenset[str] | None = None
    changed = started
    why = ["no look at the cluster yet"]
    while time.monotonic() - started < timeout:
        alive()
        try:
            why, names = workload.unsettled(desired)
        except Exception as error:  # the apiserver busy; look again
            why, names = [f"the look failed: {error}"], last or frozenset()
        now = time.monotonic()
        if names != last:
            last, changed = names, now
        if not why and now - changed >= quiet:
            return changed - started, ""
        time.sleep(1.0)
    return None, "; ".join(why) or f"the nodes changed {time.monotonic() - changed:.0f}s ago"


def _disrupting(snapshots: Sequence[invariants.Snapshot], pools: set[str]) -> tuple[int, int]:
    """The most nodes of ``pools`` disrupting at once in any one look, and the budget (summed
    over the pools) in that look."""
    most, budget = 0, 0
    for snapshot in snapshots:
        count = sum(
            1
            for n in snapshot.nodes.values()
            if n.nodepool in pools and (n.disrupted_taint or n.deleting)
        )
        if count > most:
            most = count
            budget = sum(v for k, v in snapshot.budgets.items() if k in pools)
    return most, budget


def run(kubeconfig: Path, options: Options, workdir: Path, out: TextIO = sys.stderr) -> Report:
    """Run the benchmark on the cluster of ``kubeconfig`` (the admin's)."""
    report = Report(nodes=options.nodes, timers=options.timers)
    record = discover().provider("kwok")
    assert record.conformance is not None
    harness = ClusterHarness(record, record.conformance(), kubeconfig, workdir)
    harness.start()
    env = {**FAST_TIMERS, **TIMERS[options.timers], "LOG_LEVEL": "info"}
    controller = ControllerProcess(
        record.name, harness.identity, workdir, env, harness.profile.settings(), name="scale-in"
    )
    harness.controller = controller
    workload = Workload(harness, options.nodes)
    quiet = QUIET[options.timers]
    begun = time.monotonic()
    recorder: invariants.Recorder | None = None
    scale_changes: list[tuple[int, int]] = []
    try:
        controller.wait_ready(120)
        controller.wait_leading(120)
        recorder = invariants.Recorder(
            lambda: invariants.observe(harness.api, harness.provider, [workload.name]),
            interval=options.interval,
        ).start()
        started = time.monotonic()
        workload.create()
        desired = dict(workload.replicas)
        report.scale_up_s, why = _converge(
            workload, desired, started, quiet, 2 * options.phase_timeout, controller.alive
        )
        _look_after(recorder, time.monotonic())
        report.scale_up_nodes = len(workload.nodes())
        print(
            f"scale-up: {sum(desired.values())} pods on {report.scale_up_nodes} nodes "
            f"in {_seconds(report.scale_up_s)}",
            file=out,
            flush=True,
        )
        if report.scale_up_s is None:
            report.violations.append(f"the scale-up did not converge: {why}")
            return report
        for fraction in STEPS:
            step, window = _step(workload, fraction, recorder, quiet, options, controller.alive)
            scale_changes.append(window)
            report.steps.append(step)
            print(_render_step(step), file=out, flush=True)
            if step.converged_s is None:
                report.violations.append(f"step {fraction:.0%} did not converge: {step.unsettled}")
                break
        report.peak_rss_mb = _peak_rss_mb(controller.process.pid)
    finally:
        try:
            if recorder is not None:
                snapshots = recorder.stop()
                for phase in _phases(snapshots, scale_changes):
                    report.violations += [
                        str(b) for b in invariants.check_all(phase, GC_WINDOW, TAINT_WINDOW)
                    ]
            report.elapsed = time.monotonic() - begun
            workload.remove()
        finally:
            harness.stop()
            if options.log is not None:
                shutil.copyfile(controller.log_path, options.log)
    return report


def _look_after(recorder: invariants.Recorder, moment: float, timeout: float = 60.0) -> None:
    """Wait until the recorder holds two looks that ended after ``moment`` (the second began
    after it): a phase's last look then shows the cluster as the phase left it, not a look
    begun before it came to rest (a look of the whole cluster can take seconds under load)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for look in recorder.snapshots[-2:] if look.at > moment) == 2:
            return
        time.sleep(0.1)


def _step(
    workload: Workload,
    fraction: float,
    recorder: invariants.Recorder,
    quiet: float,
    options: Options,
    alive: Callable[[], object],
) -> tuple[Step, tuple[int, int]]:
    """Run one step; the step and the recorder's looks from the scale change to the ReplicaSets
    scaled down (their indices: the first look of each, or past the end)."""
    step = Step(fraction)
    nodes = workload.nodes()
    step.nodes_before, step.cost_before = len(nodes), workload.cost(nodes)
    first = len(recorder.snapshots)
    started = time.monotonic()
    desired = workload.scale(fraction)
    wait_until(
        lambda: (
            len([p for p in workload.pods() if not p["metadata"].get("deletionTimestamp")])
            == sum(desired.values())
        ),
        "the ReplicaSets scaled down",
        timeout=120,
    )
    scaled = len(recorder.snapshots) + 1  # the look under way may predate the scale-down
    survivors = {
        p["metadata"]["uid"] for p in workload.pods() if not p["metadata"].get("deletionTimestamp")
    }
    step.converged_s, step.unsettled = _converge(
        workload, desired, started, quiet, options.phase_timeout, alive
    )
    _look_after(recorder, time.monotonic())
    pods = [p for p in workload.pods() if _healthy(p)]
    step.pods_evicted = len(survivors - {p["metadata"]["uid"] for p in pods})
    nodes = workload.nodes()
    step.nodes_after, step.cost_after = len(nodes), workload.cost(nodes)
    step.reference_nodes, step.reference_cost = workload.reference(pods)
    step.most_disrupting, step.budget = _disrupting(
        recorder.snapshots[max(first - 1, 0) :], workload.pools()
    )
    step.pdb_violations = [str(b) for b in invariants.pdb_violations(recorder.snapshots[scaled:])]
    return step, (first, scaled)


def _phases(
    snapshots: Sequence[invariants.Snapshot], scale_changes: Sequence[tuple[int, int]]
) -> list[Sequence[invariants.Snapshot]]:
    """The looks of each phase, for the invariants: the looks while the ReplicaSets scale down
    are left out, and no look before a scale change is compared with one after it (the
    Deployments' own scale-down removes healthy pods, which the PodDisruptionBudget check would
    count as disrupted when a node they were on is tainted by the next look)."""
    phases = []
    start = 0
    for first, scaled in scale_changes:
        phases.append(snapshots[start:first])
        start = scaled
    phases.append(snapshots[start:])
    return [phase for phase in phases if phase]


# -- the command ---------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    """Whole seconds, or "not converged" for None."""
    return "not converged" if value is None else f"{value:.0f}s"


def _render_step(step: Step) -> str:
    converged = _seconds(step.converged_s)
    return (
        f"{step.fraction:>4.0%}  {converged:>13}  nodes {step.nodes_before:>5} -> "
        f"{step.nodes_after:<5}  $/h {step.cost_before:>8.3f} -> {step.cost_after:<8.3f} "
        f"ref {step.reference_cost:>8.3f} ({step.reference_nodes} nodes, "
        f"{step.over_reference:+.1%})  evicted {step.pods_evicted:>5}  "
        f"disrupting at once {step.most_disrupting} (budget {step.budget})  "
        f"PDB violations {len(step.pdb_violations)}"
    )


def render(report: Report) -> str:
    """The report as text."""
    lines = [
        f"N = {report.nodes} ({report.timers} timers), {report.elapsed:.0f}s in all",
        f"scale-up: {report.scale_up_nodes} nodes in {_seconds(report.scale_up_s)}",
        *(_render_step(step) for step in report.steps),
        f"controller peak RSS: {report.peak_rss_mb:.0f} MB",
        f"violations: {len(report.violations)}",
        *(f"  {v}" for v in report.violations),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit status 1 when an invariant was violated or a phase did not
    converge."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", type=Path, help="a running cluster")
    where.add_argument(
        "--state-dir",
        type=Path,
        help="start the local control plane here (default: a temporary directory), stop it after",
    )
    parser.add_argument("--nodes", type=int, default=1000, help="N, the nodes at full size")
    parser.add_argument("--timers", choices=sorted(TIMERS), default="upstream")
    parser.add_argument("--phase-timeout", type=float, default=900.0, help="seconds")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between looks")
    parser.add_argument("--log", type=Path, help="copy the controller's JSON log here at the end")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = parser.parse_args(argv)
    options = Options(args.nodes, args.timers, args.phase_timeout, args.interval, args.log)
    with tempfile.TemporaryDirectory(prefix="karpenter-scale-in-") as work:
        workdir = Path(work)
        if args.kubeconfig:
            report = run(args.kubeconfig, options, workdir)
        else:
            from karpenter_conformance.cluster import control_plane

            plane = control_plane.ControlPlane(args.state_dir or workdir / "cluster")
            plane.start(control_plane.installed_crds())
            try:
                report = run(plane.kubeconfig, options, workdir)
            finally:
                plane.stop()
    if args.output == "json":
        print(json.dumps(report.summary(), indent=2))
    else:
        print(render(report))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
