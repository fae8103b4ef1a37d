"""Provisioning without waiting for the kube-scheduler's Unschedulable verdict launches nothing
for pods that existing room takes, and what it launches costs no more than one pass over them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from karpenter_conformance.waiting import wait_until
from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import parse_quantity
from karpenter_kwok.catalog import generic_catalog, parse_catalog
from tests.integration import controller_harness as harness

pytestmark = pytest.mark.integration


def _room(api: client.ApiClient, namespace: str, pool: str) -> int:
    """How many more 1-CPU pods the NodePool's nodes hold: per node, the whole CPUs left of its
    allocatable after the requests of the pods bound to it."""
    used: dict[str, Fraction] = {}
    for pod in harness.pods(api, namespace):
        for container in pod.spec.containers if pod.spec.node_name else ():
            cpu = parse_quantity(container.resources.requests["cpu"])
            used[pod.spec.node_name] = used.get(pod.spec.node_name, Fraction(0)) + cpu
    return sum(
        math.floor(parse_quantity(node.status.allocatable["cpu"]) - used.get(node.metadata.name, 0))
        for node in harness.pool_nodes(api, pool)
    )


def _cost(claims: list[dict[str, Any]]) -> float:
    """Cost per hour of NodeClaims, priced from the KWOK catalog by the offering they launched."""
    catalog = {it.name: it for it in parse_catalog(generic_catalog(), "generic")}
    total = 0.0
    for claim in claims:
        labels = claim["metadata"]["labels"]
        [offering] = [
            o
            for o in catalog[labels[wk.INSTANCE_TYPE]].offerings
            if o.capacity_type == labels[wk.CAPACITY_TYPE] and o.zone == labels[wk.TOPOLOGY_ZONE]
        ]
        total += offering.price
    return total


def _one_pass_cost(tmp_path: Path, pool: str, deployment: dict[str, Any]) -> float:
    """What ``karpenter simulate`` launches for the Deployment's pods in one pass, per hour."""
    nodeclass = {
        "apiVersion": f"{harness.KWOK_GROUP}/{harness.KWOK_VERSION}",
        "kind": "KWOKNodeClass",
        "metadata": {"name": pool},
        "spec": {},
    }
    manifests = tmp_path / "workload.yaml"
    manifests.write_text(yaml.safe_dump_all([harness.nodepool(pool, pool), nodeclass, deployment]))
    karpenter = Path(sys.executable).parent / "karpenter"
    out = subprocess.run(
        [str(karpenter), "simulate", "--provider", "kwok", "-f", str(manifests), "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    summary = json.loads(out)["summary"]
    assert summary["pods"] == deployment["spec"]["replicas"]
    return float(summary["cost_per_hour"])


def test_existing_room_is_used_before_launching_and_launches_cost_one_pass(
    kube_client: client.ApiClient,
    namespace: str,
    pool: str,
    start_controller: Callable[..., harness.Controller],
    tmp_path: Path,
) -> None:
    harness.create_nodepool(kube_client, harness.nodepool(pool, pool))
    # Upstream's batch windows: a burst's pods arrive within one batch, as users see it. One
    # replica, so no leader election (a loaded machine can delay a renewal past its deadline).
    controller = start_controller(
        env={
            "BATCH_IDLE_DURATION": "1s",
            "BATCH_MAX_DURATION": "10s",
            "DISABLE_LEADER_ELECTION": "true",
        }
    )
    controller.wait_ready()
    try:
        # Nodes partly freed: eight 1-CPU pods, then five of them gone.
        harness.apply_deployment(
            kube_client, namespace, harness.deployment("first", pool, 8, cpu="1")
        )
        harness.wait_running(controller, kube_client, namespace, pool, 8, "8 pods Running")
        client.AppsV1Api(kube_client).patch_namespaced_deployment_scale(
            "first", namespace, {"spec": {"replicas": 3}}
        )
        wait_until(
            lambda: len(harness.pods(kube_client, namespace)) == 3, "5 pods gone", timeout=60
        )
        first = {c["metadata"]["name"] for c in harness.nodeclaims(kube_client, pool)}
        free = _room(kube_client, namespace, pool)
        assert free >= 5, "the first nodes have room for the pods that went"

        # One burst: as many 1-CPU pods as that room holds and 20 more. Only the 20 may get new
        # nodes, at no more than one simulated pass over 20 pods costs.
        burst = harness.deployment("burst", pool, free + 20, cpu="1")
        harness.apply_deployment(kube_client, namespace, burst)
        harness.wait_running(
            controller, kube_client, namespace, pool, 23 + free, f"{free + 20} more pods Running"
        )
        launched = [
            c for c in harness.nodeclaims(kube_client, pool) if c["metadata"]["name"] not in first
        ]
        assert launched, "the pods beyond the room got nodes"
        beyond = harness.deployment("burst", pool, 20, cpu="1")
        reference = _one_pass_cost(tmp_path, pool, beyond)
        assert _cost(launched) <= reference * 1.02, (launched, reference)
    finally:
        apps = client.AppsV1Api(kube_client)
        for name in ("first", "burst"):
            try:
                apps.delete_namespaced_deployment(name, namespace)
            except client.ApiException as error:
                if error.status != 404:
                    raise
        harness.cleanup_pool(kube_client, pool)
