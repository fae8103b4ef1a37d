"""The controller end to end: a burst of pending pods becomes Running on launched KWOK nodes."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kubernetes import client

from karpenter_conformance.waiting import wait_until
from tests.integration import controller_harness as harness

pytestmark = pytest.mark.integration


def test_burst_of_pending_pods_runs_on_launched_nodes(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    harness.create_nodepool(kube_client, harness.nodepool(pool, pool))
    controller = start_controller()
    controller.wait_ready()
    harness.apply_deployment(kube_client, namespace, harness.deployment("burst", pool, 50, cpu="2"))
    try:
        harness.wait_running(
            controller,
            kube_client,
            namespace,
            pool,
            50,
            "50 pods Running on the NodePool's nodes",
            timeout=60,
        )

        # Pods may run before the controller has written Initialized: wait for the conditions.
        def all_ready() -> list[dict] | None:
            found = harness.nodeclaims(kube_client, pool)
            for claim in found:
                conditions = (claim.get("status") or {}).get("conditions") or ()
                status = {c["type"]: c["status"] for c in conditions}
                wanted = ("Launched", "Registered", "Initialized", "Ready")
                if any(status.get(kind) != "True" for kind in wanted):
                    return None
            return found or None

        claims = wait_until(all_ready, "NodeClaims Launched, Registered, Initialized", timeout=30)
        for claim in claims:
            labels = claim["metadata"]["labels"]
            assert labels["karpenter.kwok.sh/instance-family"] in ("c", "m")
            assert labels["karpenter.sh/capacity-type"] in ("spot", "on-demand")
            assert claim["metadata"]["ownerReferences"][0]["name"] == pool
            assert claim["metadata"]["annotations"]["karpenter.sh/nodepool-hash"]
            assert "karpenter.sh/termination" in claim["metadata"]["finalizers"]
        nodes = client.CoreV1Api(kube_client).list_node(
            label_selector=f"karpenter.sh/nodepool={pool}"
        )
        assert len(nodes.items) == len(claims)
        for node in nodes.items:
            assert node.metadata.labels["karpenter.sh/registered"] == "true"
            assert node.metadata.labels["karpenter.sh/initialized"] == "true"
            assert "karpenter.sh/termination" in node.metadata.finalizers
            assert not any(t.key == "karpenter.sh/unregistered" for t in node.spec.taints or ())
        text = controller.metrics()
        assert harness.metric_value(
            text, "karpenter_nodeclaims_created_total", nodepool=pool
        ) == len(claims)
        assert harness.metric_value(text, "karpenter_nodes_created_total", nodepool=pool) == len(
            claims
        )
        assert harness.metric_value(
            text, "karpenter_cloudprovider_duration_seconds_count", method="Create"
        ) >= len(claims)
        # The pods went from Pending to Running while the controller watched them.
        wait_until(
            lambda: (
                harness.metric_value(
                    controller.metrics(), "karpenter_pods_startup_duration_seconds_count"
                )
                >= 50
            ),
            "the controller to record 50 pod startups",
            timeout=30,
        )
        assert len(harness.events(kube_client, namespace, "Nominated")) >= 50
        names = {c["metadata"]["name"] for c in claims}
        # Events are published by a background writer: wait for one Launched event per claim.
        wait_until(
            lambda: (
                {
                    e.involved_object.name
                    for e in harness.events(kube_client, "default", "Launched")
                    if e.involved_object.name in names
                }
                == names
            ),
            "a Launched event for every NodeClaim",
            timeout=30,
        )
    finally:
        client.AppsV1Api(kube_client).delete_namespaced_deployment("burst", namespace)
        harness.cleanup_pool(kube_client, pool)


def test_nodepool_limits_stop_launches_with_an_event(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    harness.create_nodepool(kube_client, harness.nodepool(pool, pool, limits={"cpu": "16"}))
    controller = start_controller()
    controller.wait_ready()
    harness.apply_deployment(
        kube_client, namespace, harness.deployment("capped", pool, 12, cpu="2")
    )
    try:
        wait_until(
            lambda: (
                controller.alive()
                and any(
                    "limit cpu=16" in (e.message or "")
                    for e in harness.events(kube_client, namespace, "FailedScheduling")
                )
            ),
            "a FailedScheduling event naming the limit",
            timeout=60,
        )
        wait_until(
            lambda: all(
                any(
                    c["type"] == "Initialized" and c["status"] == "True"
                    for c in claim.get("status", {}).get("conditions", ())
                )
                for claim in harness.nodeclaims(kube_client, pool)
            ),
            "the launched NodeClaims initialized",
            timeout=30,
        )
        time.sleep(3)  # further batches must not launch past the limit either
        claims = harness.nodeclaims(kube_client, pool)
        cpu = sum(int(c["status"]["capacity"]["cpu"]) for c in claims)
        assert 0 < cpu <= 16
        running = harness.running_on_pool(kube_client, namespace, pool)
        assert 0 < len(running) < 12
        pending = [p for p in harness.pods(kube_client, namespace) if not p.spec.node_name]
        assert len(pending) == 12 - len(running)
    finally:
        client.AppsV1Api(kube_client).delete_namespaced_deployment("capped", namespace)
        harness.cleanup_pool(kube_client, pool)
