"""The KWOK cloud provider: "instances" are Node objects that the KWOK controller keeps alive.

``kube_client`` in the ProviderContext is a ``kubernetes.client.ApiClient``. Without one the
provider still serves its catalog (for ``karpenter simulate``) but cannot launch. All I/O of the
provider lives here: reading the catalog file and talking to the apiserver.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import format_quantity, parse_quantity
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.nodeclass import NodeClassBinding
from karpenter_core.sdk.offerings import UnavailableOfferings, without_unavailable
from karpenter_core.sdk.record import ProviderContext
from karpenter_core.sdk.types import (
    CloudProviderError,
    InstanceType,
    InsufficientCapacity,
    NodeClaimNotFound,
    NodeClassReadiness,
    Offering,
    RepairPolicy,
    launch_request,
)
from karpenter_kwok.catalog import (
    CATALOG_ENV,
    CATALOG_OPTION,
    CatalogError,
    generic_catalog,
    parse_catalog,
)
from karpenter_kwok.faults import (
    ERRORS_ENV,
    ERRORS_OPTION,
    FAULTS_ENV,
    FAULTS_OPTION,
    CloudErrorsFile,
    InsufficientCapacityFile,
)
from karpenter_kwok.labels import GROUP, KWOK_NODE, KWOK_NODE_VALUE, PROVIDER_ID_PREFIX
from karpenter_kwok.nodeclass import KIND, NODE_CLASS, KWOKNodeClass

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.apis.v1.nodepool import NodePool

__all__ = [
    "KWOKCloudProvider",
    "choose",
    "load_instance_types",
    "node_manifest",
    "node_name",
]

NODE_CLASS_LABEL = wk.node_class_label_key(GROUP, KIND)
_MAX_NAME = 63
_CREATE_ATTEMPTS = 5
_RETRIED = frozenset({429, 500, 502, 503, 504})


def load_instance_types(path: str | None) -> list[InstanceType]:
    """The generated matrix, or the catalog in the JSON file at ``path``."""
    if not path:
        return parse_catalog(generic_catalog(), "generated catalog")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise CatalogError(
            f"{path}: cannot read the instance-types file: {error.strerror}"
        ) from None
    except UnicodeDecodeError as error:
        raise CatalogError(f"{path}: not valid JSON: not UTF-8 text (byte {error.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise CatalogError(
            f"{path}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    return parse_catalog(data, path)


def node_name(nodeclaim: NodeClaim) -> str:
    """The Node name for a NodeClaim: stable across calls, unique per NodeClaim object."""
    name = nodeclaim.metadata.name or ""
    identity = nodeclaim.metadata.uid or name
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    prefix = f"kwok-{name}"[: _MAX_NAME - len(digest) - 1].rstrip("-.")
    return f"{prefix}-{digest}"


def choose(
    instance_types: Iterable[InstanceType], nodeclaim: NodeClaim
) -> tuple[InstanceType, Offering]:
    """The cheapest available offering the NodeClaim allows (ties: zone, then type name).

    An instance type qualifies when its labels meet the NodeClaim's requirements and its
    allocatable resources cover the NodeClaim's requests.
    """
    requirements, requests = launch_request(nodeclaim)
    best: tuple[float, str, str, InstanceType, Offering] | None = None
    for instance_type in instance_types:
        offering = instance_type.offering_for(requirements, requests)
        if offering is None:
            continue
        key = (offering.price, offering.zone, instance_type.name)
        if best is None or key < best[:3]:
            best = (*key, instance_type, offering)
    if best is None:
        raise InsufficientCapacity(
            f"no available offering meets the requirements and requests of NodeClaim "
            f"{nodeclaim.metadata.name!r}"
        )
    return best[3], best[4]


def node_manifest(
    nodeclaim: NodeClaim, name: str, instance_type: InstanceType, offering: Offering
) -> dict[str, Any]:
    """The Node that stands for the instance; the KWOK controller manages it (annotation)."""
    node_labels = dict(nodeclaim.metadata.labels)
    for requirement in nodeclaim.spec.requirements:
        if requirement.operator == "In" and len(requirement.values) == 1:
            node_labels[requirement.key] = requirement.values[0]
    node_labels.update(instance_type.requirements.labels())
    node_labels.update(offering.requirements.labels())
    node_labels[NODE_CLASS_LABEL] = nodeclaim.spec.node_class_ref.name
    node_labels[wk.HOSTNAME] = name
    node_labels[KWOK_NODE] = KWOK_NODE_VALUE
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {**nodeclaim.metadata.annotations, KWOK_NODE: KWOK_NODE_VALUE},
        },
        "spec": {
            "providerID": PROVIDER_ID_PREFIX + name,
            "taints": [{"key": wk.UNREGISTERED_TAINT_KEY, "effect": wk.UNREGISTERED_TAINT_EFFECT}],
        },
        "status": {
            "capacity": _quantities(instance_type.capacity),
            "allocatable": _quantities(instance_type.allocatable),
            "phase": "Pending",
        },
    }


class KWOKCloudProvider:
    """Launches fake nodes for a KWOK cluster from a fixed instance-type catalog."""

    name = "kwok"

    def __init__(
        self,
        instance_types: list[InstanceType],
        context: ProviderContext,
        faults: InsufficientCapacityFile | None = None,
        errors: CloudErrorsFile | None = None,
    ) -> None:
        self._instance_types = instance_types
        self._context = context
        self.node_classes = NodeClassBinding[KWOKNodeClass]("kwok", NODE_CLASS, context)
        self._faults = faults or InsufficientCapacityFile(None)
        self._errors = errors or CloudErrorsFile(None)
        self._unavailable = UnavailableOfferings(context.clock)
        self._pending: dict[str, tuple[threading.Timer, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_context(cls, context: ProviderContext) -> KWOKCloudProvider:
        """The factory: the catalog and the injected faults come from the file settings."""
        path = _setting(context, CATALOG_OPTION, CATALOG_ENV)
        faults = InsufficientCapacityFile(_setting(context, FAULTS_OPTION, FAULTS_ENV))
        errors = CloudErrorsFile(_setting(context, ERRORS_OPTION, ERRORS_ENV))
        return cls(load_instance_types(path), context, faults, errors)

    def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
        """The whole catalog for a NodePool of a KWOKNodeClass, none for another provider's
        NodeClass (the same objects on every call while no offering has run out of capacity in
        the last few minutes; those are marked unavailable)."""
        if not self.node_classes.owns(nodepool.spec.template.spec.node_class_ref):
            return []
        return self._catalog()

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Create the Node (after the NodeClass's registration delay) and hydrate the NodeClaim."""
        self._errors.check("create")
        api = self._core()
        name = node_name(nodeclaim)
        existing = self._read_node(api, name)
        if existing is not None:
            return _hydrate(nodeclaim, existing)
        with self._lock:
            pending = self._pending.get(name)
        if pending is not None:
            return _hydrate(nodeclaim, pending[1])
        delay = self.node_classes.launchable(nodeclaim).spec.registration_delay()
        instance_type, offering = choose(self._catalog(), nodeclaim)
        chosen = (instance_type.name, offering.zone, offering.capacity_type)
        if self._faults.refuses(chosen):
            self._unavailable.mark(
                offering.capacity_type, instance_type.name, offering.zone, "no capacity"
            )
            raise InsufficientCapacity(
                f"{chosen[0]} {chosen[2]} in {chosen[1]} has no capacity "
                f"(listed in {self._faults.path})"
            )
        manifest = node_manifest(nodeclaim, name, instance_type, offering)
        if delay <= timedelta(0):
            return _hydrate(nodeclaim, self._create_node(api, manifest))
        timer = threading.Timer(delay.total_seconds(), self._create_later, (api, manifest))
        timer.daemon = True
        with self._lock:
            self._pending[name] = (timer, manifest)
        timer.start()
        return _hydrate(nodeclaim, manifest)

    def delete(self, nodeclaim: NodeClaim) -> None:
        """Delete the Node; the fake instance is gone at once, so this raises NodeClaimNotFound."""
        self._errors.check("delete")
        name = _node_name_of(nodeclaim.status.provider_id)
        with self._lock:
            pending = self._pending.pop(name, None)
        if pending is not None:
            pending[0].cancel()
        try:
            self._core().delete_node(name)
        except k8s.ApiException as error:
            if error.status == 404:
                raise NodeClaimNotFound(f"node {name} not found") from None
            raise _api_error(f"deleting node {name}", error) from None
        raise NodeClaimNotFound(f"instance {name} terminated")

    def get(self, provider_id: str) -> NodeClaim:
        """The NodeClaim view of the Node behind ``provider_id``."""
        self._errors.check("get")
        name = _node_name_of(provider_id)
        node = self._read_node(self._core(), name)
        if node is None or node["metadata"].get("deletionTimestamp"):
            raise NodeClaimNotFound(f"node {name} not found")
        return _to_nodeclaim(node)

    def list(self) -> list[NodeClaim]:
        """Every Node with a ``kwok://`` providerID, as NodeClaims."""
        self._errors.check("list")
        try:
            response = self._core().list_node()
        except k8s.ApiException as error:
            raise _api_error("listing nodes", error) from None
        nodes = json.loads(response.data)["items"]
        return [
            _to_nodeclaim(node)
            for node in nodes
            if node.get("spec", {}).get("providerID", "").startswith(PROVIDER_ID_PREFIX)
        ]

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """Never: fake instances have nothing that can drift."""
        return ""

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        """Replace nodes whose Ready condition is False or Unknown for 10 minutes."""
        return [
            RepairPolicy("Ready", "False", timedelta(minutes=10)),
            RepairPolicy("Ready", "Unknown", timedelta(minutes=10)),
        ]

    def supported_node_classes(self) -> builtins.list[type[BaseModel]]:
        """KWOKNodeClass only."""
        return self.node_classes.supported()

    def node_class_readiness(self, nodepool: NodePool) -> NodeClassReadiness:
        """Ready unless the KWOKNodeClass reports a Ready condition that is not True (offline,
        always ready); a missing one is not ready."""
        return self.node_classes.readiness(nodepool, live=self._context.kube_client is not None)

    def _catalog(self) -> builtins.list[InstanceType]:
        """The catalog with offerings that recently ran out of capacity marked unavailable."""
        marks = self._unavailable.snapshot()
        if not marks:
            return list(self._instance_types)
        return [without_unavailable(it, marks) for it in self._instance_types]

    def _core(self) -> _Nodes:
        if self._context.kube_client is None:
            raise CloudProviderError(
                "the kwok provider launches nodes in a Kubernetes cluster running KWOK, and no "
                "cluster is configured; offline, only the catalog is available (karpenter simulate)"
            )
        return _Nodes(self._context.kube_client)

    def _read_node(self, api: _Nodes, name: str) -> dict[str, Any] | None:
        try:
            response = api.read_node(name)
        except k8s.ApiException as error:
            if error.status == 404:
                return None
            raise _api_error(f"reading node {name}", error) from None
        return json.loads(response.data)

    def _create_node(self, api: _Nodes, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the Node (an existing one is kept); retried, as the apiserver may blink."""
        name = manifest["metadata"]["name"]
        attempt = 0
        while True:
            try:
                response = api.create_node(manifest)
                return json.loads(response.data)
            except k8s.ApiException as error:
                if error.status == 409:
                    return self._read_node(api, name) or manifest
                attempt += 1
                if error.status not in _RETRIED or attempt == _CREATE_ATTEMPTS:
                    raise _api_error(f"creating node {name}", error) from None
            time.sleep(0.1 * 2**attempt)

    def _create_later(self, api: _Nodes, manifest: dict[str, Any]) -> None:
        """Timer body: create the Node once the registration delay is over."""
        name = manifest["metadata"]["name"]
        try:
            self._create_node(api, manifest)
        except CloudProviderError as error:
            self._context.logger.error("kwok: %s", error)
        finally:
            with self._lock:
                self._pending.pop(name, None)


class _Nodes:
    """The Node calls the provider makes (named as ``CoreV1Api``'s), as raw JSON over the
    controller's ``ApiClient``: a process's first ``CoreV1Api`` takes seconds and about 20 MB
    to build, which the first launch would wait for."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._api = api_client

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        _, url, sent, serialized, _ = self._api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self._api.call_api(method, url, header_params=sent, body=serialized)
        response.read()
        if not 200 <= response.status < 300:
            raise k8s.ApiException(http_resp=response)
        return response

    def read_node(self, name: str) -> Any:
        """GET the Node."""
        return self._call("GET", f"/api/v1/nodes/{name}")

    def create_node(self, body: Mapping[str, Any]) -> Any:
        """POST a Node."""
        return self._call("POST", "/api/v1/nodes", dict(body))

    def delete_node(self, name: str) -> Any:
        """DELETE the Node."""
        return self._call("DELETE", f"/api/v1/nodes/{name}")

    def list_node(self) -> Any:
        """LIST Nodes."""
        return self._call("GET", "/api/v1/nodes")


def _setting(context: ProviderContext, option: str, env: str) -> str | None:
    if option in context.settings:
        return context.settings[option]
    return os.environ.get(env)


def _hydrate(nodeclaim: NodeClaim, node: Mapping[str, Any]) -> NodeClaim:
    """The NodeClaim with the Node's labels, providerID, capacity and allocatable."""
    claim = nodeclaim.model_copy(deep=True)
    claim.metadata.labels = dict(node["metadata"]["labels"])
    claim.status.provider_id = node["spec"]["providerID"]
    claim.status.capacity = _fractions(node["status"]["capacity"])
    claim.status.allocatable = _fractions(node["status"]["allocatable"])
    return claim


def _to_nodeclaim(node: Mapping[str, Any]) -> NodeClaim:
    metadata = node["metadata"]
    status = node.get("status", {})
    node_labels = metadata.get("labels") or {}
    return NodeClaim.from_manifest(
        {
            "metadata": {
                "name": metadata["name"],
                "labels": node_labels,
                "annotations": metadata.get("annotations") or {},
            },
            "spec": {
                "requirements": [],
                "nodeClassRef": {
                    "group": GROUP,
                    "kind": KIND,
                    "name": node_labels.get(NODE_CLASS_LABEL, "unknown"),
                },
            },
            "status": {
                "nodeName": metadata["name"],
                "providerID": node["spec"]["providerID"],
                "capacity": status.get("capacity") or {},
                "allocatable": status.get("allocatable") or {},
            },
        }
    )


def _node_name_of(provider_id: str | None) -> str:
    if not provider_id or not provider_id.startswith(PROVIDER_ID_PREFIX):
        raise NodeClaimNotFound(f"{provider_id!r} is not a kwok providerID")
    return provider_id.removeprefix(PROVIDER_ID_PREFIX)


def _quantities(resources: Mapping[str, int]) -> dict[str, str]:
    """Thousandths to the shorter of the decimal and binary quantity strings."""
    out = {}
    for resource, amount in resources.items():
        value = Fraction(amount, 1000)
        decimal, binary = format_quantity(value), format_quantity(value, binary=True)
        out[resource] = binary if len(binary) < len(decimal) else decimal
    return out


def _fractions(quantities: Mapping[str, str]) -> dict[str, Fraction]:
    return {name: parse_quantity(value) for name, value in quantities.items()}


def _api_error(action: str, error: k8s.ApiException) -> CloudProviderError:
    detail = error.reason or ""
    if error.body:
        try:
            detail = json.loads(error.body).get("message", detail)
        except (ValueError, AttributeError):
            detail = str(error.body)[:300]
    return CloudProviderError(f"{action}: {error.status} {detail}")
