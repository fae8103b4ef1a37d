"""Disruption end to end: consolidation after a scale-down, drift after a template change, and
consolidateAfter across a controller restart."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from datetime import datetime

import pytest
from kubernetes import client

from karpenter_conformance.waiting import wait_until
from tests.integration import controller_harness as harness

pytestmark = pytest.mark.integration

FAST_DISRUPTION = {"DISRUPTION_POLL_PERIOD": "1s", "DISRUPTION_VALIDATION_DELAY": "1s"}


def _disrupted(node: client.V1Node) -> bool:
    return any(t.key == "karpenter.sh/disrupted" for t in node.spec.taints or ())


def _settled(api: client.ApiClient, pool: str) -> bool:
    """No NodeClaim being deleted and no Node tainted for disruption."""
    claims = harness.nodeclaims(api, pool)
    return not any(c["metadata"].get("deletionTimestamp") for c in claims) and not any(
        _disrupted(n) for n in harness.pool_nodes(api, pool)
    )


def test_scale_down_consolidates_to_fewer_nodes_within_the_pdb(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    body = harness.nodepool(pool, pool)
    body["spec"]["disruption"] = {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
    }
    harness.create_nodepool(kube_client, body)
    controller = start_controller(env=FAST_DISRUPTION)
    controller.wait_ready()
    client.PolicyV1Api(kube_client).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"maxUnavailable": "10%", "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    apps = client.AppsV1Api(kube_client)
    harness.apply_deployment(kube_client, namespace, harness.deployment("web", pool, 50, cpu="2"))
    desired = [50]

    def pdb_holds() -> str | None:
        wanted = desired[0]
        web = harness.pods(kube_client, namespace, "app=web")
        available = [
            p for p in web if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        ]
        minimum = wanted - math.ceil(wanted * 0.1)
        if len(available) < minimum and wanted == desired[0]:
            return f"{len(available)} available < {minimum} (desired {wanted})"
        return None

    watch = harness.Watch(pdb_holds)
    try:
        harness.wait_running(
            controller, kube_client, namespace, pool, 50, "50 pods Running", timeout=60
        )
        wait_until(lambda: _settled(kube_client, pool), "no disruption in flight", timeout=30)
        before = len(harness.pool_nodes(kube_client, pool))
        watch.start()
        apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 10}})
        desired[0] = 10

        def consolidated() -> bool:
            controller.alive()
            return (
                len(harness.pool_nodes(kube_client, pool)) < before
                and len(harness.running_on_pool(kube_client, namespace, pool)) == 10
                and len(harness.pods(kube_client, namespace, "app=web")) == 10
                and _settled(kube_client, pool)
            )

        wait_until(consolidated, f"fewer than {before} nodes, 10 pods Running", timeout=75)
        watch.stop()
        assert watch.samples > 10
        assert not watch.errors, watch.errors[:5]
        assert len(harness.nodeclaims(kube_client, pool)) < before
        web = harness.pods(kube_client, namespace, "app=web")
        assert all(p.status.phase == "Running" for p in web)
        text = controller.metrics()
        assert (
            harness.metric_value(
                text, "karpenter_voluntary_disruption_decisions_total", reason="underutilized"
            )
            + harness.metric_value(
                text, "karpenter_voluntary_disruption_decisions_total", reason="empty"
            )
            >= 1
        )
        assert harness.events(kube_client, "default", "DisruptionTerminating") or harness.events(
            kube_client, namespace, "DisruptionTerminating"
        )
    finally:
        watch.stop()
        apps.delete_namespaced_deployment("web", namespace)
        harness.cleanup_pool(kube_client, pool)


def test_template_change_replaces_drifted_nodes_one_by_one(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    body = harness.nodepool(pool, pool)
    body["spec"]["disruption"] = {"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}
    harness.create_nodepool(kube_client, body)
    controller = start_controller(env=FAST_DISRUPTION)
    controller.wait_ready()
    apps = client.AppsV1Api(kube_client)
    harness.apply_deployment(kube_client, namespace, harness.spread_deployment("spread", pool, 3))

    def one_at_a_time() -> str | None:
        disrupted = [
            n.metadata.name for n in harness.pool_nodes(kube_client, pool) if _disrupted(n)
        ]
        if len(disrupted) > 1:
            return f"{len(disrupted)} nodes disrupted at once: {disrupted}"
        return None

    watch = harness.Watch(one_at_a_time)
    try:
        harness.wait_running(
            controller, kube_client, namespace, pool, 3, "3 pods Running on 3 nodes", timeout=60
        )
        old = {n.metadata.name for n in harness.pool_nodes(kube_client, pool)}
        assert len(old) == 3
        watch.start()
        client.CustomObjectsApi(kube_client).patch_cluster_custom_object(
            *harness.KARPENTER,
            "nodepools",
            pool,
            {"spec": {"template": {"metadata": {"labels": {"test-pool": pool, "rev": "2"}}}}},
        )

        def replaced() -> bool:
            controller.alive()
            nodes = harness.pool_nodes(kube_client, pool)
            return (
                len(nodes) == 3
                and all(n.metadata.labels.get("rev") == "2" for n in nodes)
                and not ({n.metadata.name for n in nodes} & old)
                and len(harness.running_on_pool(kube_client, namespace, pool)) == 3
                and _settled(kube_client, pool)
            )

        wait_until(replaced, "every node replaced by one with rev=2", timeout=80)
        watch.stop()
        assert watch.samples > 10
        assert not watch.errors, watch.errors[:5]
        text = controller.metrics()
        assert (
            harness.metric_value(
                text, "karpenter_voluntary_disruption_decisions_total", reason="drifted"
            )
            == 3
        )
    finally:
        watch.stop()
        apps.delete_namespaced_deployment("spread", namespace)
        harness.cleanup_pool(kube_client, pool)


def _lonely_pod(pool: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lonely", "labels": {"app": "lonely"}},
        "spec": {
            "nodeSelector": {"test-pool": pool},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "app", "image": "fake", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
    }


def _timestamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_consolidate_after_counts_on_across_a_restart(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    """A node emptied at T with consolidateAfter 30s goes at T+30s although the controller
    restarts at T+10s: neither at once (counting from the node's creation) nor at T+40s."""
    body = harness.nodepool(pool, pool)
    body["spec"]["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}
    harness.create_nodepool(kube_client, body)
    controller = start_controller(env=FAST_DISRUPTION)
    controller.wait_ready()
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_pod(namespace, _lonely_pod(pool))
    try:
        harness.wait_running(controller, kube_client, namespace, pool, 1, "the pod Running")
        [node] = harness.pool_nodes(kube_client, pool)
        created = node.metadata.creation_timestamp.timestamp()
        # Empty the node well after its creation, so that counting from creation would differ.
        time.sleep(max(0.0, created + 12 - time.time()))
        emptied = time.time()
        core.delete_namespaced_pod("lonely", namespace)

        def persisted() -> float:
            [current] = harness.nodeclaims(kube_client, pool)
            value = current.get("status", {}).get("lastPodEventTime")
            return _timestamp(value) if value else 0.0

        wait_until(
            lambda: controller.alive() and persisted() >= emptied - 1,
            "lastPodEventTime of the emptying written",
            timeout=8,
        )
        time.sleep(max(0.0, emptied + 10 - time.time()))
        controller.stop()
        restarted = start_controller(env=FAST_DISRUPTION)
        restarted.wait_ready()
        gone_at: list[float] = []
        early: list[str] = []

        def consolidated() -> bool:
            restarted.alive()
            claims = harness.nodeclaims(kube_client, pool)
            if any(c["metadata"].get("deletionTimestamp") for c in claims) or not claims:
                gone_at.append(time.time())
                return True
            for condition in claims[0].get("status", {}).get("conditions", ()):
                if condition["type"] == "Consolidatable" and time.time() < emptied + 29:
                    early.append(f"{condition} at T+{time.time() - emptied:.1f}s")
            return False

        wait_until(consolidated, "the empty node consolidated", timeout=45)
        after = gone_at[0] - emptied
        assert 28 <= after <= 38, f"consolidated {after:.1f}s after the node was emptied"
        assert not early, early
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_pod("lonely", namespace)
        harness.cleanup_pool(kube_client, pool)
