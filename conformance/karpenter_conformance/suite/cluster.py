"""What the cluster-level checks act on: the real controller, on a local KWOK cluster, against
the profile's fake cloud.

``ClusterHarness`` installs the provider's NodeClass CRDs, the controller's least-privilege
identity (the core's RBAC plus the provider's) and the profile's NodeClass; it runs
``karpenter controller --provider NAME`` in a subprocess as that identity, with the profile's
settings and seconds-scale timers, and, for a profile whose nodes come via "registrar", the
suite's node registrar in a thread. Each check gets its own NodePool and namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from karpenter_conformance import invariants
from karpenter_conformance.controller import ControllerProcess, controller_identity
from karpenter_conformance.registrar import Registrar, RegistrarThread
from karpenter_conformance.waiting import wait_until
from karpenter_core import rbac
from karpenter_core.apis import labels as wk
from karpenter_core.apis.crdgen import generate_crd
from karpenter_core.cloudprovider.plugin import ProviderContext, ProviderRecord
from karpenter_core.cloudprovider.types import CloudProvider

__all__ = ["FAST_TIMERS", "GC_WINDOW", "POOL_LABEL", "ClusterHarness"]

NAMESPACE = rbac.DEFAULT_NAMESPACE
POOL_LABEL = "karpenter-conformance/pool"
FAST_TIMERS = {
    "BATCH_IDLE_DURATION": "300ms",
    "BATCH_MAX_DURATION": "2s",
    "NODECLAIM_REQUEUE": "1s",
    "DISRUPTION_POLL_PERIOD": "1s",
    "DISRUPTION_VALIDATION_DELAY": "1s",
    "DISABLE_LEADER_ELECTION": "true",
    "LOG_LEVEL": "info",
}
GC_WINDOW = 50.0
"""Seconds within which garbage collection removes an instance without a NodeClaim: the
collector's 30 s grace, its 10 s period, and slack for a slow machine."""
TAINT_WINDOW = 30.0
"""Seconds a node may keep the disrupted taint without going away."""
_KARPENTER = (wk.GROUP, "v1")


class ClusterHarness:
    """The cluster, the controller's identity, the provider's NodeClass, and the controller."""

    def __init__(
        self, record: ProviderRecord, profile: Any, admin_kubeconfig: Path, workdir: Path
    ) -> None:
        self.record = record
        self.profile = profile
        self.admin_kubeconfig = admin_kubeconfig
        self.workdir = workdir
        info = record.node_classes[0]
        self.node_class_info = info
        self.api = k8s_config.new_client_from_config(config_file=str(admin_kubeconfig))
        self.controller: ControllerProcess | None = None
        self._registrar: RegistrarThread | None = None
        self._provider: CloudProvider | None = None
        self._saved_kubeconfig: str | None = None

    # -- session ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the fake cloud; install CRDs, identity and NodeClass; start the registrar."""
        self._saved_kubeconfig = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(self.admin_kubeconfig)  # where a cloud of Nodes lives
        self.profile.start()
        self._install_crds()
        self.identity = controller_identity(
            self.admin_kubeconfig, self.record, self.workdir / "kubeconfig"
        )
        self.put_node_class(self.profile.node_class(ready=True))
        if self.profile.nodes_via == "registrar":
            self._registrar = Registrar(self.provider, self.api, interval=0.3).start()

    def stop(self) -> None:
        """Stop the controller and the registrar, remove the NodeClass, stop the cloud."""
        try:
            self.ensure_controller()
            with contextlib.suppress(k8s.ApiException):
                self._custom().delete_cluster_custom_object(
                    self.node_class_info.group,
                    self.node_class_info.version,
                    self.node_class_info.plural,
                    self.node_class_name,
                )
            wait_until(lambda: not self._node_class_exists(), "the NodeClass deleted", 60)
        finally:
            if self.controller is not None:
                self.controller.stop()
            if self._registrar is not None:
                self._registrar.stop()
            self.profile.stop()
            self.api.close()
            if self._saved_kubeconfig is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = self._saved_kubeconfig

    def _install_crds(self) -> None:
        extensions = k8s.ApiextensionsV1Api(self.api)
        for info in self.record.node_classes:
            crd = generate_crd(
                info.model,
                group=info.group,
                kind=info.kind,
                plural=info.plural,
                version=info.version,
            )
            try:
                extensions.create_custom_resource_definition(crd)
            except k8s.ApiException as error:
                if error.status != 409:
                    raise
            name = crd["metadata"]["name"]

            def established(name: str = name) -> bool:
                status = extensions.read_custom_resource_definition(name).status
                return any(
                    c.type == "Established" and c.status == "True" for c in status.conditions or ()
                )

            wait_until(established, f"CRD {name} established", 30)

    # -- the provider and the controller ---------------------------------------------------

    @property
    def provider(self) -> CloudProvider:
        """A provider in this process, on the profile's cloud (for ``list()``)."""
        if self._provider is None:
            values = {k.replace("-", "_"): v for k, v in self.profile.settings().items()}
            context = ProviderContext(settings=self.record.settings(values), kube_client=self.api)
            self._provider = self.record.factory(context)
        return self._provider

    def start_controller(self, env: Mapping[str, str] | None = None) -> ControllerProcess:
        """Start a controller (stopping a running one) as the least-privilege identity."""
        if self.controller is not None:
            self.controller.stop()
        self.controller = ControllerProcess(
            self.record.name,
            self.identity,
            self.workdir,
            {**FAST_TIMERS, **(env or {})},
            self.profile.settings(),
        )
        return self.controller

    def ensure_controller(self) -> ControllerProcess:
        """The running controller, started and ready if there is none."""
        if self.controller is None or self.controller.process.poll() is not None:
            self.start_controller().wait_ready()
        assert self.controller is not None
        return self.controller

    # -- objects ---------------------------------------------------------------------------

    @property
    def node_class_name(self) -> str:
        """The profile's NodeClass name."""
        return str(self.profile.node_class(ready=True)["metadata"]["name"])

    def put_node_class(self, manifest: Mapping[str, Any]) -> None:
        """Create or replace the NodeClass, then write the profile's status."""
        info = self.node_class_info
        custom = self._custom()
        body = {k: v for k, v in manifest.items() if k != "status"}
        body["metadata"] = {
            k: v for k, v in manifest["metadata"].items() if k not in ("generation", "uid")
        }
        try:
            current = custom.get_cluster_custom_object(
                info.group, info.version, info.plural, body["metadata"]["name"]
            )
        except k8s.ApiException as error:
            if error.status != 404:
                raise
            current = custom.create_cluster_custom_object(
                info.group, info.version, info.plural, body
            )
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            body["metadata"]["finalizers"] = current["metadata"].get("finalizers") or []
            current = custom.replace_cluster_custom_object(
                info.group, info.version, info.plural, body["metadata"]["name"], body
            )
        if manifest.get("status"):
            status = json.loads(json.dumps(manifest["status"]))
            for condition in status.get("conditions") or ():
                if "observedGeneration" in condition:
                    condition["observedGeneration"] = current["metadata"].get("generation", 1)
            with contextlib.suppress(k8s.ApiException):
                custom.patch_cluster_custom_object_status(
                    info.group,
                    info.version,
                    info.plural,
                    body["metadata"]["name"],
                    {"status": status},
                )

    def node_class(self) -> dict[str, Any]:
        """The NodeClass as the cluster holds it."""
        info = self.node_class_info
        return dict(
            self._custom().get_cluster_custom_object(
                info.group, info.version, info.plural, self.node_class_name
            )
        )

    def _node_class_exists(self) -> bool:
        try:
            self.node_class()
        except k8s.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def create_nodepool(self, name: str, budget: str = "100%", consolidate: bool = True) -> None:
        """A NodePool of the profile's NodeClass; its nodes carry ``POOL_LABEL=<name>``."""
        info = self.node_class_info
        disruption: dict[str, Any] = {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "0s" if consolidate else "Never",
            "budgets": [{"nodes": budget}],
        }
        body = {
            "apiVersion": f"{wk.GROUP}/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "metadata": {"labels": {POOL_LABEL: name}},
                    "spec": {
                        "requirements": [
                            {"key": wk.OS, "operator": "In", "values": ["linux"]},
                        ],
                        "nodeClassRef": {
                            "group": info.group,
                            "kind": info.kind,
                            "name": self.node_class_name,
                        },
                    },
                },
                "disruption": disruption,
            },
        }
        self._custom().create_cluster_custom_object(*_KARPENTER, "nodepools", body)

    def deploy(self, namespace: str, name: str, pool: str, replicas: int, cpu: str) -> None:
        """A Deployment whose pods request ``cpu`` and select the NodePool's nodes."""
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {POOL_LABEL: pool},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "app",
                                "image": "fake",
                                "resources": {"requests": {"cpu": cpu}},
                            }
                        ],
                    },
                },
            },
        }
        k8s.AppsV1Api(self.api).create_namespaced_deployment(namespace, body)

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Set a Deployment's replicas."""
        k8s.AppsV1Api(self.api).patch_namespaced_deployment_scale(
            name, namespace, {"spec": {"replicas": replicas}}
        )

    def nodeclaims(self, pool: str) -> list[dict[str, Any]]:
        """The NodePool's NodeClaims."""
        result = self._custom().list_cluster_custom_object(
            *_KARPENTER, "nodeclaims", label_selector=f"{wk.NODEPOOL}={pool}"
        )
        return list(result["items"])

    def delete_nodeclaim(self, name: str) -> None:
        """Delete a NodeClaim (gone already is fine)."""
        try:
            self._custom().delete_cluster_custom_object(*_KARPENTER, "nodeclaims", name)
        except k8s.ApiException as error:
            if error.status != 404:
                raise

    def running(self, namespace: str) -> list[k8s.V1Pod]:
        """Running pods of the namespace that are bound to a node."""
        pods = k8s.CoreV1Api(self.api).list_namespaced_pod(namespace).items
        return [
            p
            for p in pods
            if p.status.phase == "Running"
            and p.spec.node_name
            and not p.metadata.deletion_timestamp
        ]

    def instances(self, pool: str | None = None) -> set[str]:
        """providerIDs of what the provider lists (of NodePool ``pool``, if given)."""
        return {
            c.status.provider_id
            for c in self.provider.list()
            if c.status.provider_id and (pool is None or c.metadata.labels.get(wk.NODEPOOL) == pool)
        }

    def record_invariants(self, pool: str) -> invariants.Recorder:
        """A recorder of the NodePool's instances, NodeClaims and Nodes and of the pods and
        PDBs of its namespace (same name), started."""
        return invariants.Recorder(
            lambda: invariants.observe(self.api, self.provider, [pool], nodepool=pool),
            interval=0.5,
        ).start()

    @contextlib.contextmanager
    def nodepool(self, budget: str = "100%", consolidate: bool = True) -> Iterator[str]:
        """A NodePool for one check, and a namespace of the same name; both removed afterwards
        with every NodeClaim of the pool (a controller runs for the finalizers)."""
        name = f"conformance-{uuid.uuid4().hex[:6]}"
        core = k8s.CoreV1Api(self.api)
        core.create_namespace({"metadata": {"name": name}})
        self.create_nodepool(name, budget, consolidate)
        try:
            yield name
        finally:
            self._remove_pool(name)

    def _remove_pool(self, name: str) -> None:
        self.ensure_controller()
        with contextlib.suppress(k8s.ApiException):
            self._custom().delete_cluster_custom_object(*_KARPENTER, "nodepools", name)
        for claim in self.nodeclaims(name):
            self.delete_nodeclaim(claim["metadata"]["name"])
        wait_until(lambda: not self.nodeclaims(name), f"NodePool {name}'s NodeClaims gone", 90)
        with contextlib.suppress(k8s.ApiException):
            k8s.CoreV1Api(self.api).delete_namespace(name)

    def _custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)
