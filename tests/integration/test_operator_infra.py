"""The operator's Kubernetes plumbing against the local cluster: client errors, informers
(watch resume across an apiserver restart, re-list on 410), cluster state, leader election (and a
leader cut off from a frozen apiserver), RBAC."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from karpenter_conformance.identity import service_account_kubeconfig
from karpenter_conformance.waiting import wait_until
from karpenter_core import rbac
from karpenter_core.cloudprovider.registry import discover
from karpenter_core.operator.kube import (
    Conflict,
    Forbidden,
    KubeClient,
    NotFound,
    TooManyRequests,
    retry_on_conflict,
)
from karpenter_core.operator.leader import LeaderElector
from karpenter_core.operator.operator import Operator
from karpenter_core.operator.settings import Settings
from karpenter_core.state.cluster import ClusterState
from karpenter_core.state.informer import Informer
from tests.integration import controller_harness as harness

pytestmark = pytest.mark.integration

FAST = Settings(lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)


@pytest.fixture(scope="module")
def kube(kube_cluster) -> Iterator[KubeClient]:  # type: ignore[no-untyped-def]
    client = KubeClient.from_config(str(kube_cluster.kubeconfig))
    yield client
    client.close()


def _configmap(namespace: str, name: str, data: str = "x") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"k": data},
    }


def _configmaps(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


def test_client_errors_and_writes(kube: KubeClient, namespace: str) -> None:
    path = _configmaps(namespace)
    with pytest.raises(NotFound):
        kube.get(f"{path}/missing")
    created = kube.create(path, _configmap(namespace, "a"))
    with pytest.raises(Conflict) as exists:
        kube.create(path, _configmap(namespace, "a"))
    assert exists.value.reason == "AlreadyExists"
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    kube.patch(f"{path}/a", {"data": {"k": "y"}})
    with pytest.raises(Conflict):
        kube.patch(f"{path}/a", {**stale, "data": {"k": "z"}})
    applied = kube.patch(f"{path}/a", _configmap(namespace, "a", "applied"), "apply")
    assert applied["data"] == {"k": "applied"}
    assert any(m["manager"] == "karpenter" for m in applied["metadata"]["managedFields"])
    patched = kube.patch(
        f"{path}/a",
        [
            {"op": "test", "path": "/data/k", "value": "applied"},
            {"op": "replace", "path": "/data/k", "value": "j"},
        ],
        "json",
    )
    assert patched["data"] == {"k": "j"}

    attempts = []

    def bump() -> dict:
        current = kube.get(f"{path}/a")
        if not attempts:  # someone else writes in between, once
            kube.patch(f"{path}/a", {"data": {"k": "other"}})
        attempts.append(1)
        current["data"]["k"] = "mine"
        return kube.replace(f"{path}/a", current)

    assert retry_on_conflict(bump)["data"] == {"k": "mine"}
    assert len(attempts) == 2
    with pytest.raises(Conflict):
        kube.delete(f"{path}/a", preconditions={"uid": "not-the-uid"})
    kube.delete(f"{path}/a", preconditions={"uid": created["metadata"]["uid"]})
    with pytest.raises(NotFound):
        kube.delete(f"{path}/a")
    items, version = kube.list(path, page_size=1)
    assert items == [] and version


def test_evict_a_pod_unless_a_budget_forbids(kube: KubeClient, namespace: str) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    node = f"{namespace}-kwok"[:63]
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    kube.create(
        "/api/v1/nodes",
        {
            "metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"capacity": resources, "allocatable": resources},
        },
    )
    try:
        for name in ("free", "guarded"):
            kube.create(
                pods,
                {
                    "metadata": {"name": name, "labels": {"app": name}},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                },
            )
        wait_until(
            lambda: kube.get(f"{pods}/guarded")["status"].get("phase") == "Running",
            "KWOK runs the pod",
            timeout=30,
        )
        kube.create(
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
            {
                "metadata": {"name": "guard"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
            },
        )
        started = time.monotonic()
        with pytest.raises(TooManyRequests):
            kube.evict(namespace, "guarded")
        assert time.monotonic() - started < 2, "a PDB refusal is not retried by the client"
        kube.evict(namespace, "free")
        wait_until(lambda: _gone(kube, f"{pods}/free"), "the evicted pod is gone", timeout=30)
        with pytest.raises(NotFound):
            kube.evict(namespace, "free")
    finally:
        kube.delete(f"/api/v1/nodes/{node}")


def _gone(kube: KubeClient, path: str) -> bool:
    try:
        kube.get(path)
    except NotFound:
        return True
    return False


def _cm_informer(kube: KubeClient, namespace: str, **kw: object) -> Informer[str]:
    return Informer(kube, _configmaps(namespace), lambda obj: obj["data"]["k"], **kw)  # type: ignore[arg-type]


def test_informer_lists_watches_and_reports_changes(kube: KubeClient, namespace: str) -> None:
    path = _configmaps(namespace)
    kube.create(path, _configmap(namespace, "before"))
    informer = _cm_informer(kube, namespace)
    seen: list[tuple[str, str, object, object]] = []
    informer.add_handler(lambda *event: seen.append(event))
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        assert informer.cache == {f"{namespace}/before": "x"}
        kube.create(path, _configmap(namespace, "after", "1"))
        kube.patch(f"{path}/before", {"data": {"k": "2"}})
        kube.delete(f"{path}/after")
        wait_until(lambda: len(seen) == 4, "four events", timeout=10)
        assert [(e[0], e[1].split("/")[1], e[2], e[3]) for e in seen] == [
            ("ADDED", "before", None, "x"),
            ("ADDED", "after", None, "1"),
            ("MODIFIED", "before", "x", "2"),
            ("DELETED", "after", "1", None),
        ]
    finally:
        informer.stop()


def test_informer_relists_when_its_version_is_gone(
    kube_cluster,
    kube: KubeClient,
    namespace: str,  # type: ignore[no-untyped-def]
) -> None:
    path = _configmaps(namespace)
    kube.create(path, _configmap(namespace, "a"))
    informer = _cm_informer(kube, namespace)
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        informer.stop()  # away for a while: changes happen and history is compacted
        kube.create(path, _configmap(namespace, "b"))
        kube.delete(f"{path}/a")
        kube_cluster.restart_apiserver()  # a fresh watch cache, without the old history
        kube_cluster.compact_etcd()
        seen: list[tuple[str, str]] = []
        informer.add_handler(lambda kind, key, old, new: seen.append((kind, key)))
        informer.start()
        wait_until(lambda: informer.lists == 2, "a re-list after 410 Gone", timeout=15)
        assert informer.cache == {f"{namespace}/b": "x"}
        assert sorted(seen) == [("ADDED", f"{namespace}/b"), ("DELETED", f"{namespace}/a")]
    finally:
        informer.stop()


def test_informer_resumes_after_an_apiserver_restart(
    kube_cluster,
    kube: KubeClient,
    namespace: str,  # type: ignore[no-untyped-def]
) -> None:
    path = _configmaps(namespace)
    informer = _cm_informer(kube, namespace, backoff_base=0.05, backoff_max=1.0)
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        for i in range(5):
            kube.create(path, _configmap(namespace, f"before-{i}"))
        wait_until(lambda: len(informer.cache) == 5, "five configmaps", timeout=10)
        kube_cluster.restart_apiserver()
        for i in range(5):
            wait_until(
                lambda i=i: _created(kube, path, _configmap(namespace, f"after-{i}")),
                "the apiserver accepts writes again",
                timeout=60,
            )
        kube.delete(f"{path}/before-0")
        expected = {f"{namespace}/before-{i}" for i in range(1, 5)}
        expected |= {f"{namespace}/after-{i}" for i in range(5)}
        wait_until(lambda: set(informer.cache) == expected, "every change seen", timeout=60)
        assert informer.running()
    finally:
        informer.stop()


def _created(kube: KubeClient, path: str, body: dict) -> bool:
    try:
        kube.create(path, body)
    except Conflict:
        return True
    except Exception:
        return False
    return True


def test_cluster_state_tracks_pending_pods_and_own_writes(kube: KubeClient, namespace: str) -> None:
    state = ClusterState(kube).start()
    triggered: list[str] = []
    state.on_pending_pod(lambda pod: triggered.append(pod.key))
    try:
        assert state.wait_for_sync(15)
        assert state.synced() and state.running()
        pods = f"/api/v1/namespaces/{namespace}/pods"
        kube.create(
            pods,
            {
                "metadata": {"name": "big"},
                "spec": {
                    "schedulerName": "nobody",  # the condition below is ours alone
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1000"}}}
                    ],
                },
            },
        )
        unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        kube.patch(f"{pods}/big/status", {"status": {"conditions": [unschedulable]}}, "strategic")
        key = f"{namespace}/big"
        wait_until(
            lambda: key in {p.key for p in state.pending_pods()},
            "the pod is pending",
            timeout=10,
        )
        assert key in triggered
        since = state.generation()
        node = kube.create(
            "/api/v1/nodes",
            {
                "metadata": {"name": f"{namespace}-node", "labels": {"a": "b"}},
                "spec": {"providerID": f"test://{namespace}"},
            },
        )
        try:
            assert state.update_node(node) is not None  # visible before the watch delivers it
            assert state.generation() > since
            assert state.node(f"{namespace}-node").labels["a"] == "b"
            snapshot = state.snapshot({})
            assert any(n.name == f"{namespace}-node" for n in snapshot.nodes)
            assert key in {p.key for p in snapshot.pending}
            state.mark_for_deletion([f"{namespace}-node"])
            marked = [n for n in state.snapshot({}).nodes if n.name == f"{namespace}-node"]
            assert marked[0].deleting
            state.nominate(key, f"{namespace}-node", time.time() + 60)
            assert state.nominated(f"{namespace}-node")
        finally:
            kube.delete(f"/api/v1/nodes/{namespace}-node")
    finally:
        state.stop()


def _lost(code: int) -> None:
    """Leadership lost in an in-process elector: fail the test instead of ending pytest."""
    raise AssertionError(f"the Lease was lost (exit status {code})")


def _elector(
    kube: KubeClient, namespace: str, identity: str
) -> tuple[LeaderElector, threading.Thread, threading.Event]:
    elector = LeaderElector(kube, FAST, identity, namespace=namespace, terminate=_lost)
    working = threading.Event()
    thread = threading.Thread(target=elector.run, args=(working.set, working.clear), daemon=True)
    thread.start()
    return elector, thread, working


@pytest.mark.parametrize("release", [True, False], ids=["released", "crashed"])
def test_one_leader_and_handover(kube: KubeClient, namespace: str, release: bool) -> None:
    first, first_thread, first_working = _elector(kube, namespace, "first")
    assert first_working.wait(10) and first.is_leader()
    second, second_thread, second_working = _elector(kube, namespace, "second")
    try:
        time.sleep(FAST.lease_duration * 1.5)
        assert not second.is_leader() and not second_working.is_set()
        stopped = time.monotonic()
        first.stop(release=release)
        first_thread.join(5)
        assert not first.is_leader() and not first_working.is_set()
        assert second_working.wait(10)
        handover = time.monotonic() - stopped
        limit = FAST.retry_period * 3 if release else FAST.lease_duration + FAST.retry_period * 3
        assert handover < limit, handover
        lease = kube.get(second.path)
        assert lease["spec"]["holderIdentity"] == "second"
        assert lease["spec"]["leaseTransitions"] >= 1
    finally:
        second.stop()
        second_thread.join(5)


def test_the_controller_identity_can_watch_everything_and_hold_its_lease(
    kube_cluster,
    kube: KubeClient,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    kubeconfig = service_account_kubeconfig(
        kube_cluster.kubeconfig, "karpenter", rbac.SERVICE_ACCOUNT, tmp_path / "kubeconfig"
    )
    rbac.apply(kube, rbac.manifests(provider="kwok"))
    controller = KubeClient.from_config(str(kubeconfig))
    state = ClusterState(controller).start()
    elector = LeaderElector(controller, FAST, "rbac-test", namespace="karpenter", terminate=_lost)
    thread = threading.Thread(target=elector.run, args=(lambda: None, lambda: None), daemon=True)
    thread.start()
    try:
        assert state.wait_for_sync(15), [i.path for i in state.informers() if not i.synced.is_set()]
        wait_until(elector.is_leader, "the controller identity holds its Lease", timeout=10)
        with pytest.raises(Forbidden):
            controller.create("/api/v1/namespaces", {"metadata": {"name": "not-allowed"}})
        with pytest.raises(Forbidden):
            controller.get("/api/v1/namespaces/kube-system/secrets")
    finally:
        elector.stop()
        thread.join(5)
        state.stop()
        controller.close()


class _Recorder:
    """A controller that records that it ran, until stopped."""

    name = "recorder"

    def __init__(self) -> None:
        self.running = threading.Event()
        self.stopped = threading.Event()

    def run(self, stop: threading.Event) -> None:
        self.running.set()
        stop.wait()
        self.stopped.set()


def _http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except OSError:
        return 0, ""


def test_operator_leads_serves_probes_and_shuts_down_cleanly(
    kube: KubeClient, namespace: str
) -> None:
    settings = FAST.replace(
        metrics_port=0, health_probe_port=0, leader_election_namespace=namespace
    )
    recorder = _Recorder()
    operator = Operator(
        settings,
        discover().provider("kwok"),
        kube,
        controllers=lambda _: [recorder],
        terminate=_lost,
    )
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(operator.run()), daemon=True)
    thread.start()
    try:
        assert recorder.running.wait(15), "the controller started once leading"
        assert operator.is_leader()
        probes = operator.probes
        assert probes is not None
        wait_until(lambda: _http(probes.health_port, "/readyz")[0] == 200, "ready", timeout=15)
        assert _http(probes.health_port, "/healthz")[0] == 200
        status, body = _http(probes.metrics_port, "/metrics")
        assert status == 200
        assert "karpenter_cluster_state_synced 1.0" in body
        assert operator.provider.name == "kwok"
    finally:
        operator.shutdown()
        thread.join(30)
    assert result == [0]
    assert recorder.stopped.is_set()
    lease = kube.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{settings.leader_election_name}"
    )
    assert lease["spec"]["holderIdentity"] == "", "the Lease is released on shutdown"


def _renew_time(kube: KubeClient) -> datetime | None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{harness.NAMESPACE}/leases/"
    try:
        lease = kube.get(path + Settings().leader_election_name)
    except NotFound:
        return None
    renewed = (lease.get("spec") or {}).get("renewTime")
    return datetime.fromisoformat(renewed.replace("Z", "+00:00")) if renewed else None


def _apiserver_ready(kube: KubeClient) -> bool:
    api = kube.api_client
    try:
        response = api.rest_client.pool_manager.request(
            "GET", f"{api.configuration.host}/readyz", timeout=2
        )
    except Exception:
        return False
    return response.status == 200


def test_a_leader_cut_off_from_the_apiserver_exits_before_its_lease_expires(
    kube_cluster,  # type: ignore[no-untyped-def]
    kube: KubeClient,
    start_controller: Callable[..., harness.Controller],
) -> None:
    """The apiserver freezes (SIGSTOP) right after a renewal, so the next renewal hangs in a
    socket read: the leader must be gone before another replica could take the Lease."""
    plane = kube_cluster.plane
    if plane is None:
        pytest.skip("needs the binaries backend: the test stops the kube-apiserver process")
    apiserver = plane.describe()["kube-apiserver"][0]
    lease_duration = float(harness.FAST_TIMERS["LEADER_ELECTION_LEASE_DURATION"].rstrip("s"))
    leader = start_controller(name="cut-off")
    leader.wait_leading()
    before = _renew_time(kube)
    wait_until(lambda: _renew_time(kube) != before, "a renewal", timeout=10, interval=0.05)
    exited_at = None
    os.kill(apiserver, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 3 * lease_duration
        while exited_at is None and time.monotonic() < deadline:
            if leader.process.poll() is not None:
                exited_at = datetime.now().astimezone()
            time.sleep(0.05)
    finally:
        os.kill(apiserver, signal.SIGCONT)
        wait_until(lambda: _apiserver_ready(kube), "the apiserver is ready", timeout=60)
    assert exited_at is not None, f"the leader kept running:\n{leader.log_tail()}"
    assert leader.process.returncode == 1
    last_renewal = _renew_time(kube)
    assert last_renewal is not None
    held_for = (exited_at - last_renewal).total_seconds()
    assert held_for < lease_duration, (
        f"exited {held_for:.1f}s after its last renewal; the Lease lasts {lease_duration}s"
    )
    assert any(r.get("message", "").startswith("leadership lost") for r in leader.log_lines())
