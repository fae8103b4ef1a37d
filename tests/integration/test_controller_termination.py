"""Deleting a NodeClaim drains its node through the Eviction API and removes it."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kubernetes import client

from karpenter_conformance.waiting import wait_until
from tests.integration import controller_harness as harness

pytestmark = pytest.mark.integration

GRACE = 20


def test_drain_respects_pdbs_and_do_not_disrupt_until_the_grace_period(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
) -> None:
    core = client.CoreV1Api(kube_client)
    harness.create_nodepool(
        kube_client, harness.nodepool(pool, pool, termination_grace_period=f"{GRACE}s")
    )
    controller = start_controller()
    controller.wait_ready()
    client.PolicyV1Api(kube_client).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    harness.apply_deployment(kube_client, namespace, harness.deployment("web", pool, 4, cpu="1"))
    harness.apply_deployment(
        kube_client,
        namespace,
        harness.deployment(
            "keep", pool, 1, cpu="1", annotations={"karpenter.sh/do-not-disrupt": "true"}
        ),
    )
    try:
        harness.wait_running(
            controller, kube_client, namespace, pool, 5, "5 pods Running", timeout=60
        )
        [keep] = harness.pods(kube_client, namespace, "app=keep")
        node_name = keep.spec.node_name
        on_node = [
            p
            for p in harness.pods(kube_client, namespace, "app=web")
            if p.spec.node_name == node_name
        ]
        assert on_node, "the web pods share the do-not-disrupt pod's node"
        node = core.read_node(node_name)
        [claim] = [
            c
            for c in harness.nodeclaims(kube_client, pool)
            if c["status"].get("providerID") == node.spec.provider_id
        ]
        client.CustomObjectsApi(kube_client).delete_cluster_custom_object(
            *harness.KARPENTER, "nodeclaims", claim["metadata"]["name"]
        )
        deleted_at = time.time()
        lowest_available = 4
        while time.time() - deleted_at < 60:
            web = harness.pods(kube_client, namespace, "app=web")
            available = [
                p for p in web if p.status.phase == "Running" and not p.metadata.deletion_timestamp
            ]
            lowest_available = min(lowest_available, len(available))
            still_on_node = [p for p in web if p.spec.node_name == node_name]
            if not still_on_node:
                break
            time.sleep(0.1)
        drained_at = time.time()
        assert lowest_available >= 3, "the PDB (maxUnavailable 1) was respected"
        assert drained_at - deleted_at < GRACE, "the web pods left before the grace period"
        node = core.read_node(node_name)
        assert any(t.key == "karpenter.sh/disrupted" for t in node.spec.taints or ())
        [keep] = harness.pods(kube_client, namespace, "app=keep")
        assert keep.spec.node_name == node_name and not keep.metadata.deletion_timestamp
        if len(on_node) > 1:
            failed = harness.events(kube_client, "default", "FailedDraining")
            assert any(e.involved_object.name == node_name for e in failed)

        def node_gone() -> bool:
            try:
                core.read_node(node_name)
            except client.ApiException as error:
                return error.status == 404
            return False

        wait_until(node_gone, "the drained node removed", timeout=GRACE + 30)
        removed_at = time.time()
        assert removed_at - deleted_at >= GRACE - 2, "the do-not-disrupt pod held the node"
        # The Node's finalizer comes off first, then the NodeClaim's.
        wait_until(
            lambda: (
                not any(
                    c["metadata"]["name"] == claim["metadata"]["name"]
                    for c in harness.nodeclaims(kube_client, pool)
                )
            ),
            "the NodeClaim removed after its Node",
            timeout=15,
        )
        wait_until(
            lambda: len(harness.running_on_pool(kube_client, namespace, pool)) == 5,
            "every pod Running again on new nodes",
            timeout=60,
        )
    finally:
        apps = client.AppsV1Api(kube_client)
        for name in ("web", "keep"):
            apps.delete_namespaced_deployment(name, namespace)
        harness.cleanup_pool(kube_client, pool)
