"""Operator building blocks that need no cluster: rate limit, event dedupe, logs, metrics, probes,
leader election's deadline, shutdown, cluster state snapshots."""

import copy
import io
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any, cast

import pytest

from karpenter_conformance.waiting import wait_until
from karpenter_core.operator import logs, metrics
from karpenter_core.operator.events import Deduper, reference
from karpenter_core.operator.health import Probes
from karpenter_core.operator.kube import (
    Conflict,
    Gone,
    KubeClient,
    NotFound,
    RequestTimeout,
    TokenBucket,
    TooManyRequests,
    Unavailable,
    _error,
)
from karpenter_core.operator.leader import LeaderElector
from karpenter_core.operator.operator import Operator
from karpenter_core.operator.settings import Settings
from karpenter_core.state.cluster import ClusterNode, ClusterPod, ClusterState


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now += 10  # refills, but never beyond the burst
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    assert bucket.reserve() > 0


def test_deduper_suppresses_repeats_for_the_window() -> None:
    clock = FakeClock()
    deduper = Deduper(window=120, clock=clock)
    key = ("Pod", "ns", "p", "", "Nominated", "m")
    assert deduper.admit(key)
    assert not deduper.admit(key)
    assert deduper.admit((*key[:-1], "other message"))
    clock.now += 119
    assert not deduper.admit(key)
    clock.now += 1
    assert deduper.admit(key)


def test_reference_of_decoded_objects_and_manifests() -> None:
    pod = ClusterPod.decode(
        {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"containers": []}}
    )
    assert reference(pod) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
    }
    node = ClusterNode.decode({"metadata": {"name": "n"}, "status": {}})
    assert reference(node)["kind"] == "Node"
    manifest = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "a"}}
    assert reference(manifest) == {**manifest, "metadata": {"name": "a"}}


def test_pending_pod_rule() -> None:
    def pod(**status: object) -> ClusterPod:
        base = {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": []},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
                **status,
            },
        }
        return ClusterPod.decode(base)

    assert pod().is_pending()
    assert not pod(nominatedNodeName="n1").is_pending()
    assert not pod(conditions=[]).is_pending()
    bound = ClusterPod.decode(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "nodeName": "n1"},
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ]
            },
        }
    )
    assert not bound.is_pending()
    daemon = pod()
    daemon.owner_kind = "DaemonSet"
    assert not daemon.is_pending()


def test_pods_awaiting_the_kube_scheduler_are_provisionable_but_not_pending() -> None:
    def pod(spec: dict[str, Any] | None = None, **status: Any) -> ClusterPod:
        body = {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], **(spec or {})},
            "status": {"phase": "Pending", **status},
        }
        return ClusterPod.decode(body)

    fresh = pod()
    assert fresh.is_provisionable() and not fresh.is_pending()
    assert pod({"schedulerName": "default-scheduler"}).is_provisionable()
    marked = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    assert pod(conditions=marked).is_provisionable()
    # Another scheduler's pods, gated pods and pods the kube-scheduler is done with wait.
    assert not pod({"schedulerName": "custom"}).is_provisionable()
    assert not pod({"schedulingGates": [{"name": "wait"}]}).is_provisionable()
    gated = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    assert not pod(conditions=gated).is_provisionable()
    assert not pod(nominatedNodeName="n1").is_provisionable()
    assert not pod({"nodeName": "n1"}).is_provisionable()


def test_events_have_a_rate_limit_of_their_own() -> None:
    from kubernetes import client as k8s

    kube = KubeClient(
        k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9")),
        Settings(kube_client_qps=10, kube_client_burst=3),
    )
    events = kube.with_own_rate_limit()
    assert (events.bucket.qps, events.bucket.burst) == (10, 3)
    for _ in range(50):
        events.bucket.reserve()
    assert kube.bucket.reserve() == 0, "a burst of events leaves the controllers' budget alone"


def test_leader_election_has_a_rate_limit_of_its_own() -> None:
    """Lease renewals never wait behind the controllers' requests (client-go's leader election
    has a clientset, so a token bucket, of its own): a busy controller does not lose its Lease."""
    from kubernetes import client as k8s

    from karpenter_core.cloudprovider.plugin import API_VERSION, ProviderRecord

    kube = KubeClient(
        k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9")),
        Settings(kube_client_qps=10, kube_client_burst=3),
    )
    settings = Settings(metrics_port=0, health_probe_port=0, kube_client_qps=10)
    operator = Operator(
        settings,
        ProviderRecord(name="none", factory=lambda _: _NoCloud(), api_version=API_VERSION),
        kube,
        controllers=lambda _: [],
    )
    assert operator.elector is not None
    for _ in range(50):
        kube.bucket.reserve()
    assert operator.elector.client.bucket.reserve() == 0, "the controllers' burst spares the Lease"


def test_api_errors_map_to_types() -> None:
    assert isinstance(_error(409, b'{"reason":"AlreadyExists","message":"x"}', {}), Conflict)
    assert isinstance(_error(410, b"{}", {}), Gone)
    throttled = _error(429, b"{}", {"Retry-After": "3"})
    assert isinstance(throttled, TooManyRequests) and throttled.retry_after == 3


def test_json_logs_carry_bound_context() -> None:
    stream = io.StringIO()
    logs.configure("debug", stream)
    log = logging.getLogger("karpenter.test")
    with logs.bind(controller="provisioner", nodepool="default"):
        log.info("launched", extra={"nodeclaim": "default-abc"})
    log.debug("outside")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "launched"
    assert first["level"] == "info"
    assert (first["controller"], first["nodepool"], first["nodeclaim"]) == (
        "provisioner",
        "default",
        "default-abc",
    )
    assert "nodepool" not in second
    logging.getLogger().handlers.clear()


class _Provider:
    name = "fake"

    def get(self, provider_id: str) -> str:
        raise KeyError(provider_id)

    def list(self) -> list[str]:
        return ["a"]


def _sample(name: str, labels: dict[str, str]) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_instrument_times_calls_and_counts_errors() -> None:
    provider = metrics.instrument(_Provider())
    labels = {"controller": "gc", "method": "Get", "provider": "fake"}
    before = _sample("karpenter_cloudprovider_errors_total", {**labels, "error": ""})
    with logs.bind(controller="gc"):
        assert provider.list() == ["a"]
        with pytest.raises(KeyError):
            provider.get("x")
    after = _sample("karpenter_cloudprovider_errors_total", {**labels, "error": ""})
    assert after == before + 1
    list_labels = {**labels, "method": "List"}
    assert _sample("karpenter_cloudprovider_duration_seconds_count", list_labels) >= 1
    assert provider.name == "fake"


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_probes_serve_health_readiness_and_metrics() -> None:
    ready = {"value": False}
    probes = Probes(0, 0, ready=lambda: ready["value"]).start()
    try:
        assert probes.metrics_port != probes.health_port
        assert _get(probes.health_port, "/healthz")[0] == 200
        assert _get(probes.health_port, "/readyz")[0] == 503
        ready["value"] = True
        assert _get(probes.health_port, "/readyz")[0] == 200
        status, body = _get(probes.metrics_port, "/metrics")
        assert status == 200 and "karpenter_nodeclaims_created_total" in body
        assert _get(probes.metrics_port, "/nope")[0] == 404
    finally:
        probes.stop()


def test_a_client_hanging_up_on_a_probe_prints_no_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket
    import struct

    probes = Probes(0, 0, ready=lambda: True).start()
    try:
        client = socket.create_connection(("127.0.0.1", probes.health_port), timeout=5)
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers not finished
        # Close with a reset (linger 0), as a probe that timed out may.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        time.sleep(0.5)
        assert _get(probes.health_port, "/healthz")[0] == 200, "the server still serves"
    finally:
        probes.stop()
    assert "Traceback" not in capsys.readouterr().err


def test_a_launching_node_is_capacity_on_its_way() -> None:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.scheduling.cluster import as_launching

    claim = NodeClaim.from_manifest(
        {
            "metadata": {"name": "c"},
            "spec": {
                "nodeClassRef": {"group": "g.sh", "kind": "K", "name": "n"},
                "requirements": [],
                "startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}],
            },
            "status": {"allocatable": {"cpu": "4"}},
        }
    )
    taints = [
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "example.com/agent", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    ]
    node = ClusterNode.decode({"metadata": {"name": "n"}, "spec": {"taints": taints}})
    as_launching(node, claim)
    assert not node.initialized
    assert [t.key for t in node.taints] == ["dedicated"]
    assert node.allocatable == {"cpu": 4000}
    ready = ClusterNode.decode(
        {
            "metadata": {"name": "n", "labels": {"karpenter.sh/initialized": "true"}},
            "spec": {"taints": taints},
        }
    )
    as_launching(ready, claim)
    assert ready.initialized and len(ready.taints) == 4


def test_a_node_not_registered_yet_carries_its_nodeclaims_labels() -> None:
    """Between a Node's creation and its registration the pass sees the NodeClaim's labels (its
    NodePool, instance type, zone), so a pod meant for the NodeClaim still fits it; once
    registered, the node's own labels are the truth."""
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.scheduling.cluster import as_launching

    claim = NodeClaim.from_manifest(
        {
            "metadata": {
                "name": "c",
                "labels": {"karpenter.sh/nodepool": "web", "node.kubernetes.io/instance-type": "m"},
            },
            "spec": {
                "nodeClassRef": {"group": "g.sh", "kind": "K", "name": "n"},
                "requirements": [],
            },
            "status": {"allocatable": {"cpu": "4"}},
        }
    )
    fresh = ClusterNode.decode({"metadata": {"name": "n", "labels": {"zone": "a"}}})
    assert "karpenter.sh/nodepool" not in fresh.label_requirements().labels()  # cached now
    assert "karpenter.sh/nodepool" not in fresh.requirement_labels()
    as_launching(fresh, claim)
    assert fresh.nodepool == "web"
    assert fresh.labels["node.kubernetes.io/instance-type"] == "m"
    assert fresh.labels["zone"] == "a" and fresh.labels["kubernetes.io/hostname"] == "n"
    assert fresh.label_requirements().labels()["karpenter.sh/nodepool"] == "web"
    assert fresh.requirement_labels()["karpenter.sh/nodepool"] == "web"

    registered = ClusterNode.decode(
        {"metadata": {"name": "n", "labels": {"karpenter.sh/registered": "true"}}}
    )
    as_launching(registered, claim)
    assert (
        registered.nodepool is None and "node.kubernetes.io/instance-type" not in registered.labels
    )


class _LeaseEndpoint:
    """An in-memory Lease behind the KubeClient verbs the elector uses. Once ``hang`` is set,
    every request hangs: for its timeout (then fails, as a socket read timeout does) or, with
    ``honour_timeout`` False, until ``unblock`` is set (a read no timeout interrupts)."""

    def __init__(self, honour_timeout: bool) -> None:
        self.honour_timeout = honour_timeout
        self.lease: dict[str, Any] | None = None
        self.hang = threading.Event()
        self.unblock = threading.Event()
        self.hung_timeouts: list[float] = []
        self.writes: list[float] = []
        """Monotonic time of each successful create or replace."""

    def _request(self, timeout: RequestTimeout) -> None:
        if not self.hang.is_set():
            return
        assert isinstance(timeout, float), timeout
        self.hung_timeouts.append(timeout)
        self.unblock.wait(timeout if self.honour_timeout else None)
        raise Unavailable("read timed out")

    def get(self, path: str, params: object = None, timeout: RequestTimeout = (10.0, 60.0)) -> Any:
        self._request(timeout)
        if self.lease is None:
            raise NotFound(404, "NotFound", path)
        return copy.deepcopy(self.lease)

    def create(
        self, path: str, body: Any, params: object = None, timeout: RequestTimeout = (10.0, 60.0)
    ) -> Any:
        return self.replace(path, body, timeout)

    def replace(self, path: str, body: Any, timeout: RequestTimeout = (10.0, 60.0)) -> Any:
        self._request(timeout)
        self.lease = copy.deepcopy(body)
        self.writes.append(time.monotonic())
        return copy.deepcopy(body)


LEASE = Settings(lease_duration=1.5, renew_deadline=0.75, retry_period=0.1)


def _elect(
    endpoint: _LeaseEndpoint,
) -> tuple[LeaderElector, threading.Thread, threading.Event, list[tuple[int, float]]]:
    exits: list[tuple[int, float]] = []
    elector = LeaderElector(
        endpoint,  # type: ignore[arg-type]
        LEASE,
        "me",
        namespace="ns",
        terminate=lambda code: exits.append((code, time.monotonic())),
    )
    working = threading.Event()
    thread = threading.Thread(target=elector.run, args=(working.set, working.clear), daemon=True)
    thread.start()
    assert working.wait(5) and elector.is_leader()
    return elector, thread, working, exits


@pytest.mark.parametrize("honour_timeout", [True, False], ids=["timeouts", "stuck-read"])
def test_a_leader_that_cannot_renew_exits_before_its_lease_expires(honour_timeout: bool) -> None:
    endpoint = _LeaseEndpoint(honour_timeout)
    elector, thread, working, exits = _elect(endpoint)
    try:
        wait_until(lambda: len(endpoint.writes) >= 3, "a few renewals", timeout=5)
        endpoint.hang.set()
        last_write = endpoint.writes[-1]
        wait_until(lambda: bool(exits), "the elector gave up the Lease", timeout=10)
        [(code, exited_at)] = exits
        assert code == 1
        assert exited_at < last_write + LEASE.lease_duration, "exit before the Lease can expire"
        assert not elector.is_leader()
        assert endpoint.hung_timeouts, "a renewal was attempted while the apiserver hung"
        assert max(endpoint.hung_timeouts) <= LEASE.renew_deadline, endpoint.hung_timeouts
    finally:
        endpoint.unblock.set()
        elector.stop()
        thread.join(5)
    assert not thread.is_alive() and not working.is_set()
    assert exits == [(code, exited_at)], "one exit only"
    assert endpoint.lease is not None and endpoint.lease["spec"]["holderIdentity"] == "me", (
        "a lost Lease is not released (another replica may hold it by now)"
    )


def test_a_clean_stop_releases_the_lease_and_does_not_exit() -> None:
    endpoint = _LeaseEndpoint(honour_timeout=True)
    elector, thread, working, exits = _elect(endpoint)
    elector.stop()
    thread.join(5)
    assert not thread.is_alive() and not working.is_set()
    assert exits == []
    assert endpoint.lease is not None and endpoint.lease["spec"]["holderIdentity"] == ""


class _Lingering:
    """A controller that takes ``linger`` seconds to stop once asked."""

    def __init__(self, name: str, linger: float, done: threading.Event) -> None:
        self.name = name
        self.linger = linger
        self.done = done
        self.running = threading.Event()

    def run(self, stop: threading.Event) -> None:
        self.running.set()
        stop.wait()
        self.done.wait(self.linger)


class _NoCloud:
    """A cloud provider the test never calls."""

    name = "none"


def test_controllers_stop_together_within_one_grace_period() -> None:
    from kubernetes import client as k8s

    from karpenter_core.cloudprovider.plugin import API_VERSION, ProviderRecord

    grace = 1.0
    done = threading.Event()
    controllers = [_Lingering(f"slow-{i}", 30.0, done) for i in range(4)]
    kube = KubeClient(k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9")))
    settings = Settings(disable_leader_election=True, metrics_port=0, health_probe_port=0)
    operator = Operator(
        settings,
        ProviderRecord(name="none", factory=lambda _: _NoCloud(), api_version=API_VERSION),
        kube,
        controllers=lambda _: controllers,
        controller_stop_timeout=grace,
    )
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(operator.run()), daemon=True)
    thread.start()
    try:
        for controller in controllers:
            assert controller.running.wait(10), controller.name
        started = time.monotonic()
        operator.shutdown()
        thread.join(len(controllers) * grace + 10)
        took = time.monotonic() - started
    finally:
        done.set()
        operator.shutdown()
    assert result == [0]
    assert grace <= took < 2 * grace, f"shutdown took {took:.2f}s for a {grace}s grace period"


def _bound_pod(name: str, node: str, version: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "resourceVersion": str(version),
            "labels": {"version": str(version)},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }


def test_a_snapshot_builds_its_copies_without_holding_the_state_lock() -> None:
    """While the snapshot is being built (here: when it checks which pods are pending), the
    state lock is free and a pod event from another thread is applied; the snapshot still
    shows the state as of its start."""
    state = ClusterState(cast("KubeClient", None))
    armed = threading.Event()
    seen: dict[str, bool] = {}

    def apply_event() -> None:
        seen["lock free"] = state.lock.acquire(blocking=False)
        if seen["lock free"]:
            state.lock.release()
        state.pods.inject(_bound_pod("p-0", "n-0", 2))

    class ProbePod(ClusterPod):
        __slots__ = ()

        def is_pending(self) -> bool:
            if armed.is_set() and not seen:
                armed.clear()
                event = threading.Thread(target=apply_event)
                event.start()
                event.join(30)
                seen["event applied"] = not event.is_alive()
            return super().is_pending()

    state.pods.decode = ProbePod.decode
    for n in range(20):
        state.nodes_informer.inject({"metadata": {"name": f"n-{n}", "resourceVersion": "1"}})
    for p in range(200):
        state.pods.inject(_bound_pod(f"p-{p}", f"n-{p % 20}", 1))

    armed.set()
    snapshot = state.snapshot({})

    assert seen == {"lock free": True, "event applied": True}
    assert state.pod("default/p-0").labels["version"] == "2"  # type: ignore[union-attr]
    [node] = [n for n in snapshot.nodes if n.name == "n-0"]
    assert len(node.pods) == 10
    [pod] = [p for p in node.pods if p.name == "p-0"]
    assert pod.labels["version"] == "1", "the snapshot is of one moment"


def test_a_node_stays_nominated_for_the_window_after_its_pod_binds_elsewhere() -> None:
    """As upstream's nomination window: the node a pending pod was nominated to is left alone by
    disruption until the nomination ends, even once the pod has bound to another node (the
    kube-scheduler may yet bind other pending pods to it); the pod itself is no longer
    nominated."""
    clock = [1000.0]
    state = ClusterState(cast("KubeClient", None), clock=lambda: clock[0])
    assert state.nominate("default/p-0", "fresh", clock[0] + 20)
    state.pods.inject(_bound_pod("p-0", "other", 1))
    assert state.nomination("default/p-0") is None
    assert state.nominated("fresh")
    assert not state.nominated("other")
    clock[0] += 21
    assert not state.nominated("fresh")
