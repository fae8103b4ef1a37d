"""The controller survives what production throws at it: a crash at the worst moment (between
launch and status, in the middle of a disruption), a second replica, an apiserver restart."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable

import pytest
from kubernetes import client

from karpenter_conformance.waiting import wait_until
from karpenter_core.operator.crashpoints import CRASH_AFTER_LAUNCH
from tests.integration import controller_harness as harness

pytestmark = pytest.mark.integration


def test_crash_between_launch_and_status_launches_nothing_twice(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    harness.create_nodepool(kube_client, harness.nodepool(pool, pool))
    crashing = start_controller(env={"KARPENTER_TEST_CRASH_POINT": CRASH_AFTER_LAUNCH})
    crashing.wait_ready()
    harness.apply_deployment(kube_client, namespace, harness.deployment("crash", pool, 3, cpu="2"))
    try:
        wait_until(
            lambda: crashing.process.poll() is not None,
            "the controller killed at the crash point",
            timeout=30,
        )
        assert crashing.process.returncode == -signal.SIGKILL
        assert any(
            r.get("message") == f"test crash point {CRASH_AFTER_LAUNCH}: killing the process"
            for r in crashing.log_lines()
        ), crashing.log_tail()
        [claim] = harness.nodeclaims(kube_client, pool)
        assert not claim.get("status", {}).get("providerID"), (
            "status was not written before the kill"
        )
        [node] = harness.pool_nodes(kube_client, pool)
        provider_id = node.spec.provider_id
        assert provider_id, "the instance exists"

        restarted = start_controller()
        wait_until(
            lambda: (
                restarted.alive()
                and len(harness.running_on_pool(kube_client, namespace, pool)) == 3
            ),
            "3 pods Running after the restart",
            timeout=60,
        )
        claims = harness.nodeclaims(kube_client, pool)
        nodes = harness.pool_nodes(kube_client, pool)
        assert [c["metadata"]["name"] for c in claims] == [claim["metadata"]["name"]]
        assert claims[0]["status"]["providerID"] == provider_id, "the first instance was adopted"
        assert [n.spec.provider_id for n in nodes] == [provider_id], "nothing launched twice"
    finally:
        client.AppsV1Api(kube_client).delete_namespaced_deployment("crash", namespace)
        harness.cleanup_pool(kube_client, pool)
    assert not harness.pool_nodes(kube_client, pool), "nothing leaked"


def _lease_holder(api: client.ApiClient) -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(
            "karpenter-leader-election", harness.NAMESPACE
        )
    except client.ApiException:
        return None
    return lease.spec.holder_identity


def _acted(controller: harness.Controller) -> bool:
    return any(r.get("message") == "created nodeclaim" for r in controller.log_lines())


def _leading(controller: harness.Controller) -> bool:
    return any(r.get("message") == "became leader" for r in controller.log_lines())


def test_only_the_leader_acts_and_a_killed_leader_hands_over(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    harness.create_nodepool(kube_client, harness.nodepool(pool, pool))
    first = start_controller(name="replica-a")
    first.wait_ready()
    wait_until(lambda: _leading(first), "replica a leads", timeout=30)
    second = start_controller(name="replica-b")
    second.wait_ready()
    harness.apply_deployment(kube_client, namespace, harness.deployment("one", pool, 2, cpu="1"))
    try:
        wait_until(
            lambda: len(harness.running_on_pool(kube_client, namespace, pool, "app=one")) == 2,
            "2 pods Running",
            timeout=60,
        )
        assert _acted(first) and not _acted(second) and not _leading(second)
        first.kill()
        killed_at = time.monotonic()
        harness.apply_deployment(
            kube_client, namespace, harness.deployment("two", pool, 2, cpu="8")
        )
        wait_until(lambda: second.alive() and _leading(second), "replica b takes over", timeout=30)
        handover = time.monotonic() - killed_at
        assert handover <= 15, f"hand-over took {handover:.1f}s"
        wait_until(
            lambda: len(harness.running_on_pool(kube_client, namespace, pool, "app=two")) == 2,
            "the new leader launches for new pods",
            timeout=60,
        )
        assert _acted(second)
    finally:
        apps = client.AppsV1Api(kube_client)
        for name in ("one", "two"):
            apps.delete_namespaced_deployment(name, namespace)
        harness.cleanup_pool(kube_client, pool)


def test_apiserver_restart_mid_watch_misses_no_pending_pod(
    kube_cluster: object,
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    if kube_cluster.plane is None:  # type: ignore[attr-defined]
        kube_cluster.restart_apiserver()  # skips the test: only the binaries backend restarts
    harness.create_nodepool(kube_client, harness.nodepool(pool, pool))
    # A lease that outlives the restart: this test is about the watches, not leadership.
    lease = {
        "LEADER_ELECTION_LEASE_DURATION": "60s",
        "LEADER_ELECTION_RENEW_DEADLINE": "40s",
        "LEADER_ELECTION_RETRY_PERIOD": "2s",
    }
    controller = start_controller(env=lease)
    controller.wait_ready()
    wait_until(lambda: _leading(controller), "the controller leads", timeout=30)
    kube_cluster.restart_apiserver()  # type: ignore[attr-defined]
    harness.apply_deployment(kube_client, namespace, harness.deployment("after", pool, 4, cpu="2"))
    try:
        harness.wait_running(
            controller,
            kube_client,
            namespace,
            pool,
            4,
            "pods created right after the restart Running",
            timeout=90,
        )
    finally:
        client.AppsV1Api(kube_client).delete_namespaced_deployment("after", namespace)
        harness.cleanup_pool(kube_client, pool)


def _disrupted(node: client.V1Node) -> bool:
    return any(t.key == "karpenter.sh/disrupted" for t in node.spec.taints or ())


def test_a_controller_killed_mid_disruption_leaves_no_node_tainted(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    """SIGKILL while a consolidation waits for its replacement: the restarted controller takes
    the disrupted taint off the candidate (now do-not-disrupt, so nothing else may change)."""
    body = harness.nodepool(
        pool,
        pool,
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["c"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ],
    )
    body["spec"]["disruption"] = {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
    }
    harness.create_nodepool(kube_client, body)
    fast = {"DISRUPTION_POLL_PERIOD": "1s", "DISRUPTION_VALIDATION_DELAY": "1s"}
    controller = start_controller(env=fast)
    controller.wait_ready()
    apps = client.AppsV1Api(kube_client)
    harness.apply_deployment(kube_client, namespace, harness.deployment("big", pool, 1, cpu="6"))
    harness.apply_deployment(kube_client, namespace, harness.deployment("small", pool, 1, cpu="1"))
    custom = client.CustomObjectsApi(kube_client)
    try:
        harness.wait_running(controller, kube_client, namespace, pool, 2, "2 pods Running")
        [node] = harness.pool_nodes(kube_client, pool)
        [claim] = harness.nodeclaims(kube_client, pool)
        # Replacements now take minutes to register: the consolidation waits, tainted.
        custom.patch_cluster_custom_object(
            harness.KWOK_GROUP,
            harness.KWOK_VERSION,
            harness.KWOK_PLURAL,
            pool,
            {"spec": {"nodeRegistrationDelay": "3m"}},
        )
        apps.delete_namespaced_deployment("big", namespace)
        core = client.CoreV1Api(kube_client)
        wait_until(
            lambda: controller.alive() and _disrupted(core.read_node(node.metadata.name)),
            "the node tainted for its replacement",
            timeout=40,
        )
        controller.kill()
        core.patch_node(
            node.metadata.name,
            {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}},
        )
        assert _disrupted(core.read_node(node.metadata.name)), "the kill left the taint"

        restarted = start_controller(env=fast)
        restarted.wait_ready()
        wait_until(
            lambda: restarted.alive() and not _disrupted(core.read_node(node.metadata.name)),
            "the leftover taint removed",
            timeout=40,
        )
        current = core.read_node(node.metadata.name)
        assert current.metadata.deletion_timestamp is None
        claims = {c["metadata"]["name"]: c for c in harness.nodeclaims(kube_client, pool)}
        original = claims[claim["metadata"]["name"]]
        assert not original["metadata"].get("deletionTimestamp"), "the candidate was kept"
        running = harness.running_on_pool(kube_client, namespace, pool, "app=small")
        assert [p.spec.node_name for p in running] == [node.metadata.name]
        assert any(
            r.get("message") == "removing a disrupted taint no command holds"
            for r in restarted.log_lines()
        )
    finally:
        apps.delete_namespaced_deployment("small", namespace)
        with contextlib.suppress(client.ApiException):
            apps.delete_namespaced_deployment("big", namespace)
        harness.cleanup_pool(kube_client, pool)
