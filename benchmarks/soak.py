"""The fault soak: the controller scaling workloads up and down on the local cluster while faults
are injected, checked against the shared invariants.

Usage (from the repository root):

    .venv/bin/python benchmarks/soak.py --state-dir /tmp/kstate-soak      # starts its cluster
    .venv/bin/python benchmarks/soak.py --kubeconfig K --duration 3m --seed 7 -o json
    .venv/bin/python benchmarks/soak.py --state-dir /tmp/kstate-soak --provider aws
    .venv/bin/python benchmarks/soak.py --state-dir /tmp/kstate-soak --provider gcp

Two replicas of ``karpenter controller --provider kwok`` (or ``aws``: the AWS conformance profile's
moto server in this process, nodes made by the suite's registrar; or ``gcp``: the GCP profile's
fake GCE server, likewise) run with leader election, as the
controller's least-privilege ServiceAccount; a replica that exits is started again at once (as
its Deployment would be). A NodePool (WhenEmptyOrUnderutilized, consolidateAfter 5s, budget 20%)
holds three Deployments of 1-CPU pods (half a CPU on AWS and GCP, whose pools have 2-vCPU
types): ``steady`` (4 pods, PDB maxUnavailable 1), ``web``
(scaled between 2 and 20, PDB minAvailable 1) and ``batch`` (scaled between 0 and 12, no PDB).
Each iteration injects one fault, sets new replica counts (up and down alternately) after a
short seeded delay, and waits until the cluster has recovered:

- ``controller-kill``: SIGKILL of the leading replica;
- ``leader-handover``: SIGTERM of the leading replica (it releases the Lease, the other takes
  over);
- ``apiserver-restart``: kube-apiserver stopped and started again (only on a cluster the soak
  or the test fixture runs; with ``--kubeconfig`` alone it is left out);
- ``insufficient-capacity``: the cheapest offerings of the pool refused for a window;
- ``cloud-errors``: create and delete failing as throttled for a window (AWS: the moto server
  answers CreateFleet and TerminateInstances with ``RequestLimitExceeded``; GCP: the fake GCE
  server answers instance inserts, lists, reads and deletes 429 ``rateLimitExceeded``);
- ``none``: no fault, the baseline.

The fault comes first and the scale change follows it after the delay, so the work lands on a
controller, apiserver or cloud that is failing. Recovered: every pod of the Deployments' desired
replicas exists, is Running and Ready and not terminating, and every NodeClaim of the NodePool
that is not being deleted is Initialized. Time to recover is from the fault's injection to the
first look (every 0.5 s) that sees this. An iteration
that does not recover within ``--recovery-timeout`` is a violation (a pod never Running).

While it runs, ``karpenter_conformance.invariants`` records snapshots of the pool; at the end
the invariants are checked over them: no instance launched twice for one NodeClaim, none without
a NodeClaim after the GC window, no PDB violated, no NodePool over its budget, every pod
Running, no stale disruption taint. The schedule (a function of the seed) is printed first.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from kubernetes import client as k8s

from karpenter_conformance import invariants
from karpenter_conformance.controller import ControllerProcess
from karpenter_conformance.suite.cluster import (
    FAST_TIMERS,
    GC_WINDOW,
    POOL_LABEL,
    ClusterHarness,
)
from karpenter_conformance.waiting import wait_until
from karpenter_core import rbac
from karpenter_core.apis import labels as wk
from karpenter_core.cloudprovider.registry import discover

__all__ = ["FAULT_KINDS", "Options", "Report", "main", "run", "schedule"]

FAULT_KINDS = (
    "controller-kill",
    "leader-handover",
    "apiserver-restart",
    "insufficient-capacity",
    "cloud-errors",
)
BASELINE = "none"
TAINT_WINDOW = 60.0
"""Seconds a node may keep the disrupted taint without going away (a replacement launched
under cloud faults can hold a command longer than the suite's 30 s)."""
LEADER_ELECTION = {
    "DISABLE_LEADER_ELECTION": "false",
    "LEADER_ELECTION_LEASE_DURATION": "6s",
    "LEADER_ELECTION_RENEW_DEADLINE": "4s",
    "LEADER_ELECTION_RETRY_PERIOD": "1s",
    "LEADER_ELECTION_NAMESPACE": rbac.DEFAULT_NAMESPACE,
}
LEASE = "karpenter-leader-election"
INSTANCE_TYPES = ("c-4x-amd64-linux", "c-8x-amd64-linux", "m-4x-amd64-linux", "m-8x-amd64-linux")
"""The KWOK instance types of the soak's NodePool: small, so a scale-up needs several nodes."""
POD_CPU = {"kwok": "1", "aws": "500m", "gcp": "500m"}
"""The CPU request of the soak's pods per provider (the AWS and GCP pools have 2-vCPU types)."""
AWS_THROTTLED = ("CreateFleet", "TerminateInstances")
"""The EC2 actions the AWS cloud-errors fault throttles: create and delete."""
GCP_INSTANCE_TYPES = ("e2-standard-2", "e2-standard-4", "n2-standard-2", "n2-standard-4")
"""The machine types of the soak's NodePool on GCP."""
GCP_THROTTLED = ("instances.insert/list", "instances.get/delete")
"""The Compute calls the GCP cloud-errors fault throttles: create, list, read and delete."""
ERRORS_OPTION = "cloud-errors-file"
WORKLOADS = {"steady": (4, 4), "web": (2, 20), "batch": (0, 12)}
"""Deployment -> (fewest, most) replicas; ``steady`` is never scaled."""
PDBS = {"steady": {"maxUnavailable": 1}, "web": {"minAvailable": 1}}


@dataclass(frozen=True, slots=True)
class Options:
    """What to run: how long (seconds), the seed, the provider, how long recovery may take."""

    duration: float = 600.0
    seed: int = 1
    provider: str = "kwok"
    recovery_timeout: float = 180.0


@dataclass(frozen=True, slots=True)
class Step:
    """One iteration of the schedule: replica counts, the delay before the fault, the fault,
    and how long a windowed fault lasts (and, for insufficient capacity, how many offerings)."""

    replicas: Mapping[str, int]
    delay: float
    fault: str
    window: float
    refused: int

    def describe(self) -> str:
        """One line: replicas, delay, fault."""
        counts = " ".join(f"{k}={v}" for k, v in self.replicas.items())
        extra = ""
        if self.fault == "insufficient-capacity":
            extra = f" ({self.refused} cheapest offerings, {self.window:.0f}s)"
        elif self.fault == "cloud-errors":
            extra = f" ({self.window:.0f}s)"
        return f"{counts} +{self.delay:.1f}s {self.fault}{extra}"


def schedule(seed: int, count: int, kinds: Sequence[str] = FAULT_KINDS) -> list[Step]:
    """The first ``count`` steps for ``seed``: rounds of every fault kind and the baseline in a
    seeded order, so each kind comes once in every ``len(kinds) + 1`` steps; replica counts go
    up and down alternately."""
    rng = random.Random(seed)
    steps: list[Step] = []
    round_: list[str] = []
    while len(steps) < count:
        if not round_:
            round_ = [*kinds, BASELINE]
            rng.shuffle(round_)
        up = len(steps) % 2 == 0
        replicas = {}
        for name, (low, high) in WORKLOADS.items():
            if low == high:
                continue
            middle = (low + high) // 2
            replicas[name] = rng.randint(middle, high) if up else rng.randint(low, middle)
        steps.append(
            Step(
                replicas=replicas,
                delay=round(rng.uniform(0.0, 3.0), 1),
                fault=round_.pop(0),
                window=round(rng.uniform(8.0, 20.0)),
                refused=rng.randint(1, 4),
            )
        )
    return steps


@dataclass
class Report:
    """What the soak saw."""

    seed: int
    duration: float
    provider: str
    iterations: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    recovery: dict[str, list[float]] = field(default_factory=dict)
    unrecovered: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    snapshots: int = 0
    failed_looks: int = 0
    violations: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    def summary(self) -> dict[str, Any]:
        """The report as JSON-ready data, with recovery median and max per kind."""
        data = asdict(self)
        data["recovery"] = {
            kind: {
                "count": len(times),
                "median_s": round(statistics.median(times), 1),
                "max_s": round(max(times), 1),
            }
            for kind, times in sorted(self.recovery.items())
            if times
        }
        data["recovered_means"] = RECOVERED
        return data


RECOVERED = (
    "every pod of the Deployments' desired replicas Running and Ready (none terminating) and "
    "every NodeClaim of the NodePool not being deleted Initialized; measured from the fault's "
    "injection (the scale change follows it by 0-3 s)"
)


# -- the controller's replicas --------------------------------------------------------------------


class Replicas:
    """Two controller replicas with leader election; one that exits is started again."""

    def __init__(self, start: Callable[[], ControllerProcess], api: k8s.ApiClient) -> None:
        self._start = start
        self._api = api
        self._lock = threading.Lock()
        self.replicas = [start(), start()]
        self.restarts = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="replicas", daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        while not self._halt.wait(0.5):
            with self._lock:
                for index, replica in enumerate(self.replicas):
                    if replica.process.poll() is not None:
                        self.replicas[index] = self._start()
                        self.restarts += 1

    def leader(self, timeout: float = 60.0) -> ControllerProcess:
        """The replica that holds the Lease (waiting for one to take it)."""

        def find() -> ControllerProcess | None:
            holder = _lease_holder(self._api)
            with self._lock:
                for replica in self.replicas:
                    if holder and replica.process.poll() is None and _identity(replica) == holder:
                        return replica
            return None

        return wait_until(find, "a replica holding the Lease", timeout=timeout, interval=0.3)

    def signal_leader(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the leading replica."""
        self.leader().process.send_signal(sig)

    def stop(self) -> None:
        """Stop supervising and stop both replicas."""
        self._halt.set()
        self._thread.join(10)
        for replica in self.replicas:
            replica.stop()


def _identity(replica: ControllerProcess) -> str | None:
    for record in replica.log_lines():
        if record.get("message") == "operator started":
            return str(record.get("identity"))
    return None


def _lease_holder(api: k8s.ApiClient) -> str | None:
    try:
        lease = k8s.CoordinationV1Api(api).read_namespaced_lease(LEASE, rbac.DEFAULT_NAMESPACE)
    except Exception:  # the apiserver restarting, or no Lease yet
        return None
    return lease.spec.holder_identity


# -- the workloads ----------------------------------------------------------------------------


class Workloads:
    """The soak's namespace and NodePool (same name) of ``instance_types``, its Deployments of
    pods requesting ``cpu`` and its PDBs."""

    def __init__(self, harness: ClusterHarness, instance_types: Sequence[str], cpu: str) -> None:
        self.harness = harness
        self.api = harness.api
        self.name = f"soak-{uuid.uuid4().hex[:6]}"
        self.instance_types = list(instance_types)
        self.cpu = cpu

    def create(self) -> None:
        """The namespace, the NodePool, the Deployments (at their fewest) and the PDBs."""
        k8s.CoreV1Api(self.api).create_namespace({"metadata": {"name": self.name}})
        info = self.harness.node_class_info
        pool = {
            "apiVersion": f"{wk.GROUP}/v1",
            "kind": "NodePool",
            "metadata": {"name": self.name},
            "spec": {
                "template": {
                    "metadata": {"labels": {POOL_LABEL: self.name}},
                    "spec": {
                        "requirements": [
                            {
                                "key": wk.INSTANCE_TYPE,
                                "operator": "In",
                                "values": self.instance_types,
                            }
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
                    "consolidateAfter": "5s",
                    "budgets": [{"nodes": "20%"}],
                },
            },
        }
        k8s.CustomObjectsApi(self.api).create_cluster_custom_object(
            wk.GROUP, "v1", "nodepools", pool
        )
        policy = k8s.PolicyV1Api(self.api)
        for name, (low, _) in WORKLOADS.items():
            self.harness.deploy(self.name, name, self.name, low, cpu=self.cpu)
        for name, spec in PDBS.items():
            body = {
                "metadata": {"name": name},
                "spec": {**spec, "selector": {"matchLabels": {"app": name}}},
            }
            policy.create_namespaced_pod_disruption_budget(self.name, body)

    def scale(self, replicas: Mapping[str, int]) -> None:
        """Set the Deployments' replica counts."""
        for name, count in replicas.items():
            with_retries(functools.partial(self.harness.scale, self.name, name, count))

    def recovered(self) -> bool:
        """Whether every desired pod is Running and Ready and every live NodeClaim Initialized
        (False while the apiserver cannot answer)."""
        try:
            deployments = k8s.AppsV1Api(self.api).list_namespaced_deployment(self.name).items
            pods = k8s.CoreV1Api(self.api).list_namespaced_pod(self.name).items
            claims = self.harness.nodeclaims(self.name)
        except Exception:  # the apiserver restarting
            return False
        desired = sum(d.spec.replicas or 0 for d in deployments)
        live = [p for p in pods if not p.metadata.deletion_timestamp]
        ready = [
            p
            for p in live
            if p.status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
        ]
        initialized = all(
            c["metadata"].get("deletionTimestamp")
            or any(
                x.get("type") == "Initialized" and x.get("status") == "True"
                for x in (c.get("status") or {}).get("conditions") or ()
            )
            for c in claims
        )
        return len(live) == desired and len(ready) == desired and initialized

    def remove(self) -> None:
        """Delete the Deployments, the NodeClaims, the NodePool and the namespace (a replica
        must run for the finalizers)."""
        apps = k8s.AppsV1Api(self.api)
        for name in WORKLOADS:
            with contextlib.suppress(k8s.ApiException):
                apps.delete_namespaced_deployment(name, self.name)
        custom = k8s.CustomObjectsApi(self.api)
        with contextlib.suppress(k8s.ApiException):
            custom.delete_cluster_custom_object(wk.GROUP, "v1", "nodepools", self.name)
        for claim in self.harness.nodeclaims(self.name):
            self.harness.delete_nodeclaim(claim["metadata"]["name"])
        wait_until(
            lambda: not self.harness.nodeclaims(self.name),
            f"NodePool {self.name}'s NodeClaims gone",
        )
        with contextlib.suppress(k8s.ApiException):
            k8s.CoreV1Api(self.api).delete_namespace(self.name)


def with_retries(call: Callable[[], object], timeout: float = 60.0) -> None:
    """``call`` until it does not raise (the apiserver may be restarting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# -- cloud faults ----------------------------------------------------------------------------


class CloudFaults(Protocol):
    """A provider's cloud faults, and the NodePool's instance types they know."""

    @property
    def instance_types(self) -> Sequence[str]:
        """The instance types of the soak's NodePool."""
        ...

    def controller_options(self) -> dict[str, str]:
        """The controller's options (the profile's settings and what the faults need)."""
        ...

    def insufficient_capacity(self, count: int) -> None:
        """Refuse the ``count`` cheapest offerings of the pool."""
        ...

    def cloud_errors(self) -> None:
        """Make create and delete fail as throttled."""
        ...

    def clear(self) -> None:
        """No cloud faults."""
        ...


class KWOKCloudFaults:
    """Cloud faults of the KWOK provider: its insufficient-capacity and cloud-errors files."""

    instance_types = INSTANCE_TYPES

    def __init__(self, profile: Any, errors_file: Path) -> None:
        self.profile = profile
        self.errors_file = errors_file
        errors_file.write_text("", encoding="utf-8")
        from karpenter_kwok.cloudprovider import load_instance_types

        offerings = [
            (offering.price, offering.zone, it.name, offering.capacity_type)
            for it in load_instance_types(None)
            if it.name in INSTANCE_TYPES
            for offering in it.offerings
        ]
        self.cheapest = [(name, zone, ct) for _, zone, name, ct in sorted(offerings)]

    def controller_options(self) -> dict[str, str]:
        """The options that point a controller at the fault files."""
        return {**self.profile.settings(), ERRORS_OPTION: str(self.errors_file)}

    def insufficient_capacity(self, count: int) -> None:
        """Refuse the ``count`` cheapest offerings of the pool."""
        for name, zone, capacity_type in self.cheapest[:count]:
            self.profile.insufficient_capacity(name, zone, capacity_type)

    def cloud_errors(self) -> None:
        """Make create and delete fail as throttled."""
        self.errors_file.write_text("create\ndelete\n", encoding="utf-8")

    def clear(self) -> None:
        """No cloud faults."""
        self.profile.reset()
        self.errors_file.write_text("", encoding="utf-8")


class ProfileCloudFaults:
    """Cloud faults injected in a provider's conformance profile (in this process, not in the
    controller): refused offerings, cheapest first, and throttled calls."""

    def __init__(
        self,
        profile: Any,
        instance_types: Sequence[str],
        prices: Mapping[tuple[str, str, str], float],
        throttled: Sequence[str],
    ) -> None:
        self.profile = profile
        self.instance_types = instance_types
        self.throttled = throttled
        ordered = sorted((price, zone, name, ct) for (name, zone, ct), price in prices.items())
        self.cheapest = [(name, zone, ct) for _, zone, name, ct in ordered]

    @classmethod
    def aws(cls, profile: Any) -> ProfileCloudFaults:
        """The AWS profile's moto server: its instance types at their static on-demand and the
        profile's spot prices; CreateFleet and TerminateInstances throttled."""
        from karpenter_aws import conformance, moto_account, pricing

        on_demand = pricing.static_prices(conformance.REGION).prices
        prices = {
            (name, zone, capacity_type): price
            for name in conformance.INSTANCE_TYPES
            for capacity_type, price in (
                ("on-demand", on_demand[name]),
                ("spot", float(conformance.SPOT_PRICES[name])),
            )
            for zone in moto_account.ZONES
        }
        return cls(profile, conformance.INSTANCE_TYPES, prices, AWS_THROTTLED)

    @classmethod
    def gcp(cls, profile: Any) -> ProfileCloudFaults:
        """The GCP profile's fake GCE server: small machine types at their packaged prices;
        instance inserts, lists, reads and deletes throttled."""
        from karpenter_gcp import catalog, conformance

        prices = {
            (name, zone, capacity_type): price
            for (capacity_type, name, zone), price in catalog.packaged_prices(
                conformance.REGION
            ).items()
            if name in GCP_INSTANCE_TYPES
        }
        return cls(profile, GCP_INSTANCE_TYPES, prices, GCP_THROTTLED)

    def controller_options(self) -> dict[str, str]:
        """The profile's settings."""
        return dict(self.profile.settings())

    def insufficient_capacity(self, count: int) -> None:
        """Refuse the ``count`` cheapest offerings of the pool."""
        for name, zone, capacity_type in self.cheapest[:count]:
            self.profile.insufficient_capacity(name, zone, capacity_type)

    def cloud_errors(self) -> None:
        """Throttle the creates and deletes."""
        self.profile.cloud_errors(self.throttled)

    def clear(self) -> None:
        """No cloud faults (the cloud keeps its instances)."""
        self.profile.clear_faults()


# -- the run ---------------------------------------------------------------------------------


def run(
    kubeconfig: Path,
    options: Options,
    restart_apiserver: Callable[[], None] | None,
    workdir: Path,
    out: TextIO = sys.stderr,
) -> Report:
    """Soak the controller on the cluster of ``kubeconfig`` (the admin's); without
    ``restart_apiserver`` the apiserver-restart fault is left out."""
    if options.provider not in POD_CPU:
        raise SystemExit(f"--provider {options.provider}: the soak runs kwok, aws or gcp")
    kinds = [k for k in FAULT_KINDS if k != "apiserver-restart" or restart_apiserver]
    steps = schedule(options.seed, max(12, int(options.duration / 8)), kinds)
    report = Report(seed=options.seed, duration=options.duration, provider=options.provider)
    report.left_out = [k for k in FAULT_KINDS if k not in kinds]
    print(
        f"soak: seed {options.seed}, {options.duration:.0f}s, provider {options.provider}", file=out
    )
    print("schedule (iterations run until the time is up):", file=out)
    for number, step in enumerate(steps, 1):
        print(f"  {number:3d} {step.describe()}", file=out)
    record = discover().provider(options.provider)
    assert record.conformance is not None  # each of them has a profile
    harness = ClusterHarness(record, record.conformance(), kubeconfig, workdir)
    harness.start()
    faults: CloudFaults = (
        ProfileCloudFaults.aws(harness.profile)
        if options.provider == "aws"
        else ProfileCloudFaults.gcp(harness.profile)
        if options.provider == "gcp"
        else KWOKCloudFaults(harness.profile, workdir / "cloud-errors")
    )
    env = {**FAST_TIMERS, **LEADER_ELECTION, "LOG_LEVEL": "info"}

    def start_replica() -> ControllerProcess:
        return ControllerProcess(
            record.name, harness.identity, workdir, env, faults.controller_options()
        )

    workloads = Workloads(harness, faults.instance_types, POD_CPU[options.provider])
    replicas = Replicas(start_replica, harness.api)
    recorder: invariants.Recorder | None = None
    started = time.monotonic()
    try:
        replicas.leader()
        workloads.create()
        recorder = invariants.Recorder(
            lambda: invariants.observe(
                harness.api, harness.provider, [workloads.name], nodepool=workloads.name
            ),
            interval=1.0,
        ).start()
        deadline = started + options.duration
        for number, step in enumerate(steps, 1):
            if time.monotonic() >= deadline:
                break
            took = _iterate(step, workloads, replicas, faults, restart_apiserver, options)
            report.iterations += 1
            report.faults[step.fault] = report.faults.get(step.fault, 0) + 1
            if took is None:
                report.unrecovered[step.fault] = report.unrecovered.get(step.fault, 0) + 1
                report.violations.append(
                    f"not-recovered: iteration {number} ({step.fault}) did not recover within "
                    f"{options.recovery_timeout:.0f}s"
                )
            else:
                report.recovery.setdefault(step.fault, []).append(took)
            shown = "not recovered" if took is None else f"recovered in {took:.1f}s"
            print(f"  iteration {number}: {step.fault}, {shown}", file=out)
    finally:
        faults.clear()
        try:
            if recorder is not None:
                if _wait(workloads.recovered, 120.0) is None:
                    report.violations.append(
                        "not-recovered: the cluster did not recover within 120s after the last "
                        "iteration"
                    )
                snapshots = recorder.stop()
                report.snapshots, report.failed_looks = len(snapshots), recorder.failures
                if not snapshots:
                    report.violations.append(
                        f"no-snapshots: every look failed: {recorder.last_error}"
                    )
                report.violations += [
                    str(b) for b in invariants.check_all(snapshots, GC_WINDOW, TAINT_WINDOW)
                ]
            report.restarts = replicas.restarts
            report.elapsed = time.monotonic() - started
            workloads.remove()
        finally:
            replicas.stop()
            harness.stop()
    return report


def _iterate(
    step: Step,
    workloads: Workloads,
    replicas: Replicas,
    faults: CloudFaults,
    restart_apiserver: Callable[[], None] | None,
    options: Options,
) -> float | None:
    """One iteration; the seconds from the fault to recovery, or None if it did not recover."""
    injected = time.monotonic()
    with _fault(step, replicas, faults, restart_apiserver):
        time.sleep(step.delay)
        workloads.scale(step.replicas)
        recovered = _wait(workloads.recovered, options.recovery_timeout)
    return None if recovered is None else recovered - injected


@contextlib.contextmanager
def _fault(
    step: Step,
    replicas: Replicas,
    faults: CloudFaults,
    restart_apiserver: Callable[[], None] | None,
) -> Iterator[None]:
    """Inject the step's fault; a windowed fault lasts its window (recovery may come earlier,
    so the window is waited out after the body)."""
    if step.fault == "controller-kill":
        replicas.signal_leader(signal.SIGKILL)
    elif step.fault == "leader-handover":
        replicas.signal_leader(signal.SIGTERM)
    elif step.fault == "apiserver-restart":
        assert restart_apiserver is not None
        restart_apiserver()
    elif step.fault == "insufficient-capacity":
        faults.insufficient_capacity(step.refused)
    elif step.fault == "cloud-errors":
        faults.cloud_errors()
    windowed = step.fault in ("insufficient-capacity", "cloud-errors")
    timer = threading.Timer(step.window, faults.clear) if windowed else None
    if timer is not None:
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.join()


def _wait(condition: Callable[[], bool], timeout: float) -> float | None:
    """The monotonic time ``condition`` first held, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return time.monotonic()
        if time.monotonic() > deadline:
            return None
        time.sleep(0.5)


# -- the command -----------------------------------------------------------------------------


def _seconds(text: str) -> float:
    """``600``, ``600s``, ``10m`` or ``1h`` as seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 600, 10m)") from None


def render(report: Report) -> str:
    """The report as text."""
    data = report.summary()
    lines = [
        f"seed {report.seed}, provider {report.provider}, {report.elapsed:.0f}s "
        f"(asked {report.duration:.0f}s)",
        f"iterations: {report.iterations}",
        "faults: " + ", ".join(f"{k} {v}" for k, v in sorted(report.faults.items())),
        f"controller restarts (replicas that exited and were started again): {report.restarts}",
        f"snapshots: {report.snapshots} ({report.failed_looks} looks failed)",
        f"violations: {len(report.violations)}",
        *(f"  {v}" for v in report.violations),
        f"recovered means: {RECOVERED}",
        f"{'fault':<24}{'count':>6}{'median s':>10}{'max s':>8}{'unrecovered':>13}",
    ]
    for kind, figures in data["recovery"].items():
        lines.append(
            f"{kind:<24}{figures['count']:>6}{figures['median_s']:>10.1f}"
            f"{figures['max_s']:>8.1f}{report.unrecovered.get(kind, 0):>13}"
        )
    if report.left_out:
        lines.append("left out (no control plane to restart): " + ", ".join(report.left_out))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak; exit status 1 when an invariant was violated."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", type=Path, help="a running cluster (no apiserver restart)")
    where.add_argument(
        "--state-dir",
        type=Path,
        help="start the local control plane here (default: a temporary directory), stop it after",
    )
    parser.add_argument("--duration", type=_seconds, default=600.0, help="e.g. 10m (default)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--provider", choices=sorted(POD_CPU), default="kwok")
    parser.add_argument("--recovery-timeout", type=_seconds, default=180.0)
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = parser.parse_args(argv)
    options = Options(args.duration, args.seed, args.provider, args.recovery_timeout)
    with tempfile.TemporaryDirectory(prefix="karpenter-soak-") as work:
        workdir = Path(work)
        if args.kubeconfig:
            report = run(args.kubeconfig, options, None, workdir)
        else:
            from karpenter_conformance.cluster import control_plane

            plane = control_plane.ControlPlane(args.state_dir or workdir / "cluster")
            plane.start(control_plane.installed_crds())
            try:
                report = run(plane.kubeconfig, options, plane.restart_apiserver, workdir)
            finally:
                plane.stop()
    if args.output == "json":
        print(json.dumps(report.summary(), indent=2))
    else:
        print(render(report))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
