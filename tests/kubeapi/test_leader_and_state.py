"""Leader election and the cluster state against the fake and the real apiserver."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from karpenter_conformance.waiting import wait_until
from karpenter_core.operator.kube import NotFound
from karpenter_core.operator.leader import LeaderElector
from karpenter_core.operator.settings import Settings
from karpenter_core.state.cluster import ClusterState
from tests.kubeapi.conftest import KubeAPI, unique

FAST_LEASE = Settings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.2)


class _Candidate:
    """A LeaderElector running in a thread, recording when it leads."""

    def __init__(self, kube_api: KubeAPI, namespace: str, identity: str) -> None:
        self.exits: list[int] = []
        self.elector = LeaderElector(
            kube_api.client, FAST_LEASE, identity, namespace=namespace, terminate=self.exits.append
        )
        self.leading = threading.Event()
        self.thread = threading.Thread(
            target=self.elector.run, args=(self.leading.set, self.leading.clear), daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.elector.stop()
        self.thread.join(5)


def test_leader_election_acquires_renews_and_hands_over_on_release(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    lease_path = (
        f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{FAST_LEASE.leader_election_name}"
    )
    first = _Candidate(kube_api, ns, "first")
    second: _Candidate | None = None
    try:
        assert first.leading.wait(10) and first.elector.is_leader()
        lease = kube_api.client.get(lease_path)
        assert lease["spec"]["holderIdentity"] == "first"
        second = _Candidate(kube_api, ns, "second")
        renewed = lease["spec"]["renewTime"]
        wait_until(
            lambda: kube_api.client.get(lease_path)["spec"]["renewTime"] != renewed,
            "a renewal",
            timeout=5,
        )
        assert not second.elector.is_leader(), "a renewed Lease is not taken"
        first.stop()
        assert not first.leading.is_set() and first.exits == []
        assert second.leading.wait(5), "the released Lease is taken at once"
        lease = kube_api.client.get(lease_path)
        assert lease["spec"]["holderIdentity"] == "second"
        assert lease["spec"]["leaseTransitions"] == 1
    finally:
        first.stop()
        if second is not None:
            second.stop()


def _nodepool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": name,
                    },
                }
            },
        },
    }


def test_the_cluster_state_follows_pools_and_pending_pods(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    pool = unique("state")
    pools = "/apis/karpenter.sh/v1/nodepools"
    pods = f"/api/v1/namespaces/{ns}/pods"
    state = ClusterState(kube_api.client, watch_timeout=30).start()
    pending: list[str] = []
    state.on_pending_pod(lambda pod: pending.append(pod.key))
    try:
        assert state.wait_for_sync(15) and state.running()
        kube_api.client.create(pools, _nodepool(pool))
        wait_until(lambda: state.nodepool(pool) is not None, "the NodePool seen", timeout=10)
        pod = {
            "metadata": {"name": "waiting"},
            "spec": {
                "schedulerName": "none",
                "containers": [
                    {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}
                ],
            },
        }
        kube_api.client.create(pods, pod)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        kube_api.client.patch(f"{pods}/waiting/status", {"status": {"conditions": [condition]}})
        key = f"{ns}/waiting"
        wait_until(lambda: key in pending, "the pending pod reported", timeout=10)
        assert [p.key for p in state.pending_pods() if p.namespace == ns] == [key]
        kube_api.client.delete(f"{pods}/waiting", grace_period=0)
        wait_until(lambda: state.pod(key) is None, "the pod gone", timeout=10)
        kube_api.client.delete(f"{pools}/{pool}")
        wait_until(lambda: state.nodepool(pool) is None, "the NodePool gone", timeout=10)
    finally:
        state.stop()
        with contextlib.suppress(NotFound):
            kube_api.client.delete(f"{pools}/{pool}")
