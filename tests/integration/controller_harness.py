"""Running the real controller against the local cluster, as its least-privilege identity.

``controller_kubeconfig`` applies the shipped RBAC (``karpenter_core.rbac``: the core's
ClusterRole, Lease Role and bindings, plus the ClusterRole the KWOK provider's record ships) and
writes a kubeconfig holding a token for the ``karpenter`` ServiceAccount: a permission the
manifests lack fails the test that needs it. ``Controller`` runs
``karpenter controller --provider kwok`` in a subprocess with seconds-scale timers. Both are the
conformance kit's (``karpenter_conformance.controller``) with the tests' defaults.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client

from karpenter_conformance.controller import ControllerProcess, controller_identity
from karpenter_conformance.waiting import wait_until
from karpenter_core import rbac
from karpenter_core.cloudprovider.registry import discover

NAMESPACE = rbac.DEFAULT_NAMESPACE
KWOK_GROUP, KWOK_VERSION, KWOK_PLURAL = "karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses"
KARPENTER = ("karpenter.sh", "v1")
FAST_TIMERS = {
    "BATCH_IDLE_DURATION": "300ms",
    "BATCH_MAX_DURATION": "2s",
    "NODECLAIM_REQUEUE": "1s",
    "LEADER_ELECTION_LEASE_DURATION": "6s",
    "LEADER_ELECTION_RENEW_DEADLINE": "4s",
    "LEADER_ELECTION_RETRY_PERIOD": "1s",
    "LEADER_ELECTION_NAMESPACE": NAMESPACE,
    "LOG_LEVEL": "info",
}


def controller_kubeconfig(admin_kubeconfig: Path, out: Path) -> Path:
    """Apply the shipped RBAC (the core's and the kwok record's) and write a kubeconfig
    authenticating as the controller's ServiceAccount."""
    return controller_identity(admin_kubeconfig, discover().provider("kwok"), out)


class Controller(ControllerProcess):
    """``karpenter controller`` with the tests' timers, of the provider ``KARPENTER_TEST_PROVIDER``
    names (in ``env`` or this process's environment; kwok by default)."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        name: str = "controller",
    ) -> None:
        environment = {**FAST_TIMERS, **(env or {})}
        provider = environment.pop(
            "KARPENTER_TEST_PROVIDER", os.environ.get("KARPENTER_TEST_PROVIDER", "kwok")
        )
        super().__init__(provider, kubeconfig, log_dir, environment, name=name)


def wait_running(
    controller: Controller,
    api: client.ApiClient,
    namespace: str,
    pool: str,
    count: int,
    description: str,
    timeout: float = 60,
) -> None:
    """Wait until ``count`` pods of ``namespace`` run on the NodePool's nodes (and the controller
    is still alive)."""
    wait_until(
        lambda: controller.alive() and len(running_on_pool(api, namespace, pool)) == count,
        description,
        timeout=timeout,
    )


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


# -- objects ----------------------------------------------------------------------------------


def create_nodeclass(api: client.ApiClient, name: str) -> None:
    """A KWOKNodeClass without registration delay."""
    client.CustomObjectsApi(api).create_cluster_custom_object(
        KWOK_GROUP,
        KWOK_VERSION,
        KWOK_PLURAL,
        {
            "apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}",
            "kind": "KWOKNodeClass",
            "metadata": {"name": name},
            "spec": {},
        },
    )


def nodepool(
    name: str,
    nodeclass: str,
    *,
    requirements: list[dict[str, Any]] | None = None,
    limits: Mapping[str, str] | None = None,
    termination_grace_period: str | None = None,
) -> dict[str, Any]:
    """A NodePool whose nodes carry the label ``test-pool=<name>`` (pods select it)."""
    spec: dict[str, Any] = {
        "requirements": requirements
        or [
            {
                "key": "karpenter.sh/capacity-type",
                "operator": "In",
                "values": ["spot", "on-demand"],
            },
            {"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["c", "m"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ],
        "nodeClassRef": {"group": KWOK_GROUP, "kind": "KWOKNodeClass", "name": nodeclass},
    }
    if termination_grace_period:
        spec["terminationGracePeriod"] = termination_grace_period
    body: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"metadata": {"labels": {"test-pool": name}}, "spec": spec},
            "disruption": {"consolidateAfter": "Never"},
        },
    }
    if limits:
        body["spec"]["limits"] = dict(limits)
    return body


def create_nodepool(api: client.ApiClient, body: Mapping[str, Any]) -> None:
    """Create a NodePool."""
    client.CustomObjectsApi(api).create_cluster_custom_object(*KARPENTER, "nodepools", dict(body))


def deployment(
    name: str,
    pool: str,
    replicas: int,
    cpu: str = "2",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment whose pods request ``cpu`` and select the NodePool's nodes."""
    pod_labels = {"app": name, **(labels or {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": dict(annotations or {})},
                "spec": {
                    "nodeSelector": {"test-pool": pool},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {"name": "app", "image": "fake", "resources": {"requests": {"cpu": cpu}}}
                    ],
                },
            },
        },
    }


def spread_deployment(name: str, pool: str, replicas: int) -> dict[str, Any]:
    """A Deployment with one pod per node (required pod anti-affinity on the hostname)."""
    body = deployment(name, pool, replicas, cpu="1")
    body["spec"]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": name}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    return body


def nodeclaims(api: client.ApiClient, pool: str) -> list[dict[str, Any]]:
    """The NodePool's NodeClaims."""
    result = client.CustomObjectsApi(api).list_cluster_custom_object(
        *KARPENTER, "nodeclaims", label_selector=f"karpenter.sh/nodepool={pool}"
    )
    return list(result["items"])


def pods(api: client.ApiClient, namespace: str, selector: str = "") -> list[client.V1Pod]:
    """The namespace's pods."""
    return list(client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items)


def pool_nodes(api: client.ApiClient, pool: str) -> list[client.V1Node]:
    """The NodePool's Nodes."""
    return list(
        client.CoreV1Api(api).list_node(label_selector=f"karpenter.sh/nodepool={pool}").items
    )


def running_on_pool(
    api: client.ApiClient, namespace: str, pool: str, selector: str = ""
) -> list[client.V1Pod]:
    """Running pods bound to nodes of the NodePool."""
    nodes = {n.metadata.name for n in pool_nodes(api, pool)}
    return [
        p
        for p in pods(api, namespace, selector)
        if p.status.phase == "Running"
        and p.spec.node_name in nodes
        and not p.metadata.deletion_timestamp
    ]


def _leftovers(api: client.ApiClient, pool: str) -> str:
    """What keeps a NodePool's cleanup waiting: its NodeClaims and Nodes with their deletion
    times and finalizers, and the pods still bound to those Nodes."""
    left = [
        f"NodeClaim {c['metadata']['name']} (deleting since "
        f"{c['metadata'].get('deletionTimestamp')}, finalizers "
        f"{c['metadata'].get('finalizers')}, conditions "
        f"{[(k.get('type'), k.get('status')) for k in c.get('status', {}).get('conditions', [])]})"
        for c in nodeclaims(api, pool)
    ]
    for node in pool_nodes(api, pool):
        bound = client.CoreV1Api(api).list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node.metadata.name}"
        )
        left.append(
            f"Node {node.metadata.name} (deleting since {node.metadata.deletion_timestamp}, "
            f"finalizers {node.metadata.finalizers}, taints "
            f"{[t.key for t in node.spec.taints or []]}, pods "
            f"{[(p.metadata.namespace, p.metadata.name, p.metadata.deletion_timestamp) for p in bound.items]})"
        )
    return "; ".join(left) or "nothing"


def cleanup_pool(api: client.ApiClient, pool: str, timeout: float = 60.0) -> None:
    """Delete the NodePool's NodeClaims and the NodePool, and wait until the Nodes are gone
    (the controller must still run: it holds the finalizers)."""
    custom = client.CustomObjectsApi(api)
    for claim in nodeclaims(api, pool):
        try:
            custom.delete_cluster_custom_object(*KARPENTER, "nodeclaims", claim["metadata"]["name"])
        except client.ApiException as error:
            if error.status != 404:
                raise
    try:
        wait_until(
            lambda: not nodeclaims(api, pool) and not pool_nodes(api, pool),
            f"NodePool {pool}'s NodeClaims and Nodes gone",
            timeout=timeout,
        )
    except TimeoutError as error:
        raise TimeoutError(f"{error}; left: {_leftovers(api, pool)}") from None
    try:
        custom.delete_cluster_custom_object(*KARPENTER, "nodepools", pool)
    except client.ApiException as error:
        if error.status != 404:
            raise


def events(api: client.ApiClient, namespace: str, reason: str) -> list[client.CoreV1Event]:
    """Events with ``reason`` in the namespace."""
    return [
        e
        for e in client.CoreV1Api(api).list_namespaced_event(namespace).items
        if e.reason == reason
    ]


def apply_deployment(api: client.ApiClient, namespace: str, body: Mapping[str, Any]) -> None:
    """Create a Deployment."""
    client.AppsV1Api(api).create_namespaced_deployment(namespace, dict(body))


def unique(prefix: str) -> str:
    """A short unique name."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def poll(seconds: float) -> Iterator[None]:
    """Yield every 0.2 s for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        yield
        time.sleep(0.2)


class Watch(threading.Thread):
    """Samples the cluster every 0.1 s until stopped; ``check`` returns an error or None."""

    def __init__(self, check: Callable[[], str | None]) -> None:
        super().__init__(daemon=True)
        self.check = check
        self.errors: list[str] = []
        self.samples = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                error = self.check()
            except client.ApiException:
                error = None
            if error:
                self.errors.append(error)
            self.samples += 1
            self.halt.wait(0.1)

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(10)
