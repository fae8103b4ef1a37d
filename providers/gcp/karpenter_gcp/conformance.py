"""The GCP provider's conformance profile: the fake GCE server (``karpenter_gcp.testing``).

``start`` serves a ``FakeGCE`` over HTTP on a free local port; ``settings`` point the provider
at it (``--gcp-api-endpoint``: anonymous credentials), in this process and in a controller
started from it. Instance inserts and deletes take a second (their zone operations run that
long). ``insufficient_capacity`` makes inserts of the offering end in a
``ZONE_RESOURCE_POOL_EXHAUSTED`` operation error, as GCE reports a stockout; ``cloud_errors``
answers chosen calls 429 rateLimitExceeded. The NodeClass is a GCENodeClass with the status its
controller writes against the fake (GKE's COS node images of the cluster's version).

The fake publishes node images for a few GKE versions; beside a real Kubernetes API (the cluster
level: ``KUBECONFIG`` names it when the profile starts) it also publishes them for that API's
version, so the controller's GCENodeClass controller resolves images there as on GKE.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.profiles import condition, is_ready, respecified
from karpenter_gcp.clients import GCPClients
from karpenter_gcp.instances import provider_id
from karpenter_gcp.nodeclass import (
    CONDITION_SUBNETWORK_READY,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    GCENodeClass,
    nodeclass_hash,
)
from karpenter_gcp.nodeclass_controller import StatusResolver
from karpenter_gcp.testing import FakeGCE, fixtures

__all__ = ["OPERATION_DELAY", "GCPProfile"]

PROJECT = "test-project"
REGION = "us-central1"
OPERATION_DELAY = 1.0
"""Seconds an instance insert or delete runs in the profile's fake."""
NODE_CLASS = "default"
KUBERNETES_VERSION = f"v{fixtures.GKE_VERSIONS[1]}"
"""The cluster version the GCENodeClass status is resolved for without a Kubernetes API."""
UNMANAGED_TYPE = "n2-standard-2"
_THROTTLED = {
    "instances.insert/list": r"/instances$",
    "instances.get/delete": r"/instances/[^/]+$",
}
"""Calls ``cloud_errors`` can throttle (by path: both methods of a path) -> path pattern."""


class GCPProfile:
    """A fake GCE server; faults are stockouts on inserts and throttled calls."""

    nodes_via: Literal["registrar", "native"] = "registrar"
    unsupported: Mapping[str, str] = {}

    def __init__(self) -> None:
        self._fake: FakeGCE | None = None
        self._version = KUBERNETES_VERSION

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Serve the fake on a free port, with node images of the Kubernetes API beside it."""
        self._fake = FakeGCE(PROJECT, REGION, operation_delay=OPERATION_DELAY).start()
        version = _cluster_version()
        if version:
            self._fake.publish_node_images(version)
            self._version = version

    def reset(self) -> None:
        """Drop every instance, operation and fault."""
        self._server.reset()

    def stop(self) -> None:
        """Stop the server."""
        if self._fake is not None:
            self._fake.stop()
            self._fake = None

    @property
    def _server(self) -> FakeGCE:
        if self._fake is None:
            raise RuntimeError("the GCP conformance profile is not started (call start())")
        return self._fake

    def clients(self) -> GCPClients:
        """Google clients of the fake (anonymous credentials)."""
        return GCPClients.create(PROJECT, endpoint=self._server.endpoint)

    # -- what the suite asks for -----------------------------------------------------------

    def settings(self) -> Mapping[str, str]:
        """The fake's endpoint, project and region, and its GKE cluster and node pool."""
        return {
            "project-id": PROJECT,
            "region": REGION,
            "cluster-name": fixtures.CLUSTER,
            "node-pool": fixtures.NODE_POOL,
            "api-endpoint": self._server.endpoint,
        }

    def node_class(self, ready: bool = True) -> dict[str, Any]:
        """The default GCENodeClass (COS images) with the status its controller would write."""
        manifest: dict[str, Any] = {
            "apiVersion": "karpenter.k8s.gcp/v1alpha1",
            "kind": "GCENodeClass",
            "metadata": {"name": NODE_CLASS, "generation": 1},
            "spec": {"imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}]},
        }
        return self._with_status(manifest, ready)

    def drifted(self, node_class: dict[str, Any]) -> dict[str, Any]:
        """``node_class`` with another network tag: its hash changes."""
        changed = respecified(node_class)
        changed["spec"]["networkTags"] = [*changed["spec"].get("networkTags", ()), "drifted"]
        return self._with_status(changed, is_ready(node_class))

    def insufficient_capacity(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """Inserts of this offering end in ``ZONE_RESOURCE_POOL_EXHAUSTED``."""
        self._server.faults.stockout(
            instance_type, zone, spot=capacity_type == wk.CAPACITY_TYPE_SPOT
        )

    def launch_unmanaged(self, tags: Mapping[str, str]) -> str:
        """An instance made behind the controller's back, labelled with ``tags`` (as GCE
        labels) and the cluster's name, so the provider's ``list()`` reports it; its
        providerID."""
        zone, name = f"{REGION}-a", "gke-conformance-unmanaged"
        labels = {_label(k): _label(v) for k, v in tags.items()}
        labels["goog-k8s-cluster-name"] = fixtures.CLUSTER
        body = {
            "name": name,
            "machineType": f"zones/{zone}/machineTypes/{UNMANAGED_TYPE}",
            "labels": labels,
            "disks": [{"boot": True, "autoDelete": True, "initializeParams": {}}],
        }
        from google.cloud import compute_v1

        compute = self.clients()
        operation = compute.instances.insert_unary(
            project=PROJECT,
            zone=zone,
            instance_resource=compute_v1.Instance.from_json(json.dumps(body)),
        )
        compute.zone_operations.wait(project=PROJECT, zone=zone, operation=operation.name)
        return provider_id(PROJECT, zone, name)

    def cloud_errors(self, actions: Iterable[str], count: int = 1000) -> None:
        """The fake answers these calls (``instances.insert/list``, ``instances.get/delete``)
        with 429 rateLimitExceeded, ``count`` times each or until ``clear_faults``."""
        for action in actions:
            if action not in _THROTTLED:
                raise ValueError(
                    f"unknown Compute call {action!r}; known: {', '.join(sorted(_THROTTLED))}"
                )
            self._server.faults.throttle(count, _THROTTLED[action])

    def clear_faults(self) -> None:
        """No stockouts and no throttling; instances stay."""
        self._server.faults.clear()

    # -- helpers ---------------------------------------------------------------------------

    def _with_status(self, manifest: dict[str, Any], ready: bool) -> dict[str, Any]:
        node_class = GCENodeClass.model_validate(manifest)
        clients = self.clients()
        resolve = StatusResolver(clients.images, clients.subnetworks, PROJECT, REGION)
        status, _ = resolve(node_class, self._version, datetime.now(UTC))
        if not ready:
            generation = manifest["metadata"].get("generation", 1)
            message = "the subnetwork is not found (conformance)"
            status["conditions"] = [
                condition(
                    CONDITION_SUBNETWORK_READY, False, "SubnetworkNotFound", message, generation
                ),
                condition("Ready", False, "SubnetworkReadyFalse", message, generation),
            ]
        manifest["status"] = status
        manifest["metadata"]["annotations"] = {
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
        }
        return manifest


def _label(text: str) -> str:
    """``text`` as a GCE label key or value: lower case, ``[a-z0-9_-]``."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]


def _cluster_version() -> str:
    """The version of the Kubernetes API ``KUBECONFIG`` names (``v1.36.3``); "" without one."""
    if not os.environ.get("KUBECONFIG"):
        return ""
    try:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
        with api:
            info = client.VersionApi(api).get_code(_request_timeout=5)
    except Exception:  # no reachable API: the fixture's versions serve
        return ""
    return str(info.git_version)
