"""The nodeclass controller: resolves each AKSNodeClass into its status, as upstream's status,
hash and termination controllers do.

Every poll it lists the AKSNodeClasses and, for those whose generation changed or whose last
resolution is older than the resync period, resolves:

- the Kubernetes version, from the apiserver's /version (``gitVersion`` without the ``v``); a
  version lower than the one in status is kept out (no downgrade), as upstream;
- the node images, for that version (``images.ImageResolver``);
- the subnet, ``spec.vnetSubnetID`` or the cluster's: it must parse, a custom subnet must be in
  the cluster's VNet (and not in an AKS-managed one), and a GET through azure-mgmt-network must
  find it;

then writes the status with upstream's conditions (KubernetesVersionReady, ImagesReady,
SubnetsReady, ValidationSucceeded, and Ready when all are True). An Azure error keeps that
part's previous value and condition (Unknown when there was none) and retries sooner. It keeps
the drift hash annotations and the termination finalizer on every AKSNodeClass; when the hash
version changes it re-stamps the NodeClaims not yet drifted, and once a deleted AKSNodeClass has
no NodeClaim left it releases the finalizer.

``resolve_status`` is the Azure part: nodeclass in, status out.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from azure.core.exceptions import AzureError, ResourceNotFoundError
from pydantic import ValidationError

from karpenter_azure.images import FIPSImagesUnavailable, ImageResolver, community_gallery_versions
from karpenter_azure.nodeclass import (
    CONDITION_IMAGES_READY,
    CONDITION_KUBERNETES_VERSION_READY,
    CONDITION_SUBNETS_READY,
    CONDITION_TYPES,
    CONDITION_VALIDATION_SUCCEEDED,
    GROUP,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    KIND,
    PLURAL,
    VERSION,
    AKSNodeClass,
    AKSNodeClassStatus,
    NodeImage,
    nodeclass_hash,
    validation_problems,
)
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.common import CONDITION_READY, Condition
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.operator import logs

__all__ = [
    "DEFAULT_RESYNC",
    "ERROR_RETRY",
    "TERMINATION_FINALIZER",
    "NodeClassController",
    "SubnetGetter",
    "SubnetID",
    "parse_subnet_id",
    "resolve_status",
    "subnet_getter",
]

TERMINATION_FINALIZER = f"{GROUP}/termination"
"""Finalizer held on an AKSNodeClass until no NodeClaim uses it."""
DEFAULT_RESYNC = timedelta(minutes=3)
"""How often an unchanged AKSNodeClass is resolved again (upstream's subnet check interval)."""
ERROR_RETRY = timedelta(seconds=10)
"""How soon an AKSNodeClass whose resolution hit an Azure error is resolved again."""
MAX_POLL = timedelta(seconds=5)
"""The longest pause between two passes over the AKSNodeClasses."""

_MERGE_PATCH = "application/merge-patch+json"
_MANAGED_VNET = re.compile(r"(?i)^aks-vnet-\d{8}$")
_MANAGED_SUBNET = "aks-subnet"
_CONDITION_DRIFTED = "Drifted"

SubnetGetter = Callable[[str, str, str], Any]
"""``(resource group, virtual network, subnet) -> subnet``; raises azure-core's
``ResourceNotFoundError`` when it does not exist."""


def subnet_getter(network: Any) -> SubnetGetter:
    """A ``SubnetGetter`` over azure-mgmt-network's ``NetworkManagementClient``."""

    def get(resource_group: str, vnet: str, subnet: str) -> Any:
        return network.subnets.get(resource_group, vnet, subnet)

    return get


@dataclass(frozen=True, slots=True)
class SubnetID:
    """The parts of a subnet's ARM id."""

    subscription: str
    resource_group: str
    vnet: str
    subnet: str

    def same_vnet(self, other: SubnetID) -> bool:
        """Whether both subnets are in one virtual network."""
        return (self.subscription, self.resource_group, self.vnet) == (
            other.subscription,
            other.resource_group,
            other.vnet,
        )


def parse_subnet_id(subnet_id: str) -> SubnetID | None:
    """The parts of ``/subscriptions/<s>/resourceGroups/<g>/providers/Microsoft.Network/
    virtualNetworks/<v>/subnets/<n>`` (path words in any case), or None."""
    parts = subnet_id.split("/")
    if len(parts) != 11:
        return None
    parsed = SubnetID(parts[2], parts[4], parts[8], parts[10])
    rebuilt = (
        f"/subscriptions/{parsed.subscription}/resourceGroups/{parsed.resource_group}"
        f"/providers/Microsoft.Network/virtualNetworks/{parsed.vnet}/subnets/{parsed.subnet}"
    )
    return parsed if rebuilt.lower() == subnet_id.lower() else None


def _aks_managed_vnet(node_resource_group: str, subnet: SubnetID) -> bool:
    return (
        _MANAGED_VNET.match(subnet.vnet) is not None
        and subnet.resource_group.lower() == node_resource_group.lower()
        and subnet.subnet.lower() == _MANAGED_SUBNET
    )


@dataclass(slots=True)
class _Outcome:
    """One condition's verdict."""

    status: str
    reason: str
    message: str = ""
    azure_error: bool = False


def _true(condition: str) -> _Outcome:
    return _Outcome("True", condition)


def _kept(previous: Condition | None, reason: str, message: str) -> _Outcome:
    """The previous verdict after an Azure error (Unknown with the error when there was none)."""
    if previous is None:
        return _Outcome("Unknown", reason, message, azure_error=True)
    return _Outcome(previous.status, previous.reason, previous.message, azure_error=True)


def _version_tuple(version: str) -> tuple[int, int, int] | None:
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", version)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def _kubernetes_version(
    node_class: AKSNodeClass, server_version: str, earlier: Mapping[str, Condition]
) -> str:
    """The version to record: the server's, unless that is lower than the one recorded."""
    goal = server_version.removeprefix("v")
    current = node_class.status.kubernetes_version
    ready = earlier.get(CONDITION_KUBERNETES_VERSION_READY)
    if current and ready is not None and ready.status == "True":
        goal_parts, current_parts = _version_tuple(goal), _version_tuple(current)
        if goal_parts is not None and current_parts is not None and goal_parts < current_parts:
            return current
    return goal


def _images(
    node_class: AKSNodeClass,
    resolver: ImageResolver,
    kubernetes_version: str,
    previous: Condition | None,
) -> tuple[list[NodeImage], _Outcome]:
    try:
        images = resolver.resolve(node_class.spec, kubernetes_version)
    except FIPSImagesUnavailable as error:
        return [], _Outcome("False", "SIGRequiredForFIPS", str(error))
    except AzureError as error:
        message = f"listing node image versions failed: {error.message}"
        return node_class.status.images, _kept(previous, "ImagesResolutionFailed", message)
    if not images:
        return [], _Outcome(
            "False",
            "ImagesNotFound",
            f"no version of the {node_class.spec.image_family} node images for Kubernetes "
            f"{kubernetes_version} was found",
        )
    return images, _true(CONDITION_IMAGES_READY)


def _subnet(
    node_class: AKSNodeClass,
    get_subnet: SubnetGetter,
    cluster_subnet_id: str,
    node_resource_group: str,
    previous: Condition | None,
) -> _Outcome:
    subnet_id = node_class.spec.vnet_subnet_id or cluster_subnet_id
    if not subnet_id:
        return _Outcome(
            "False",
            "SubnetIDInvalid",
            "spec.vnetSubnetID is not set and the provider has no cluster subnet "
            "(--vnet-subnet-id)",
        )
    subnet = parse_subnet_id(subnet_id)
    if subnet is None:
        return _Outcome("False", "SubnetIDInvalid", f"Failed to parse vnetSubnetID {subnet_id}")
    cluster = parse_subnet_id(cluster_subnet_id) if cluster_subnet_id else None
    if subnet_id != cluster_subnet_id and cluster is not None:
        if _aks_managed_vnet(node_resource_group, cluster) and cluster.same_vnet(subnet):
            return _Outcome(
                "False",
                "SubnetIDInvalid",
                f"custom subnet cannot be in the same VNet as cluster managed VNet: {subnet_id}",
            )
        if not cluster.same_vnet(subnet):
            return _Outcome(
                "False",
                "SubnetIDInvalid",
                "vnetSubnetID does not match the cluster subscription, resource group, or "
                f"virtual network: {subnet_id}",
            )
    try:
        get_subnet(subnet.resource_group, subnet.vnet, subnet.subnet)
    except ResourceNotFoundError:
        return _Outcome("False", "SubnetNotFound", f"resource not found: {subnet_id}")
    except AzureError as error:
        return _Outcome(
            "False",
            "SubnetUnknownError",
            f"unknown error getting subnet: {error.message}",
            azure_error=True,
        )
    return _true(CONDITION_SUBNETS_READY)


def resolve_status(
    node_class: AKSNodeClass,
    *,
    server_version: str,
    images: ImageResolver,
    get_subnet: SubnetGetter,
    cluster_subnet_id: str,
    node_resource_group: str,
    now: datetime,
) -> tuple[dict[str, Any], bool]:
    """The status ``node_class`` should have (camelCase JSON) and whether an Azure call failed.

    ``server_version`` is the apiserver's ``gitVersion``. Conditions keep their
    lastTransitionTime unless their status changes.
    """
    previous = node_class.status
    earlier = {condition.type: condition for condition in previous.conditions}
    outcomes: dict[str, _Outcome] = {}

    kubernetes_version = _kubernetes_version(node_class, server_version, earlier)
    outcomes[CONDITION_KUBERNETES_VERSION_READY] = _true(CONDITION_KUBERNETES_VERSION_READY)
    resolved, outcomes[CONDITION_IMAGES_READY] = _images(
        node_class, images, kubernetes_version, earlier.get(CONDITION_IMAGES_READY)
    )
    outcomes[CONDITION_SUBNETS_READY] = _subnet(
        node_class,
        get_subnet,
        cluster_subnet_id,
        node_resource_group,
        earlier.get(CONDITION_SUBNETS_READY),
    )
    outcomes[CONDITION_VALIDATION_SUCCEEDED] = _true(CONDITION_VALIDATION_SUCCEEDED)
    unhealthy = [name for name in CONDITION_TYPES if outcomes[name].status != "True"]
    outcomes[CONDITION_READY] = (
        _Outcome(
            "False",
            "UnhealthyDependents",
            "; ".join(
                f"{name}={outcomes[name].status}: {outcomes[name].message}" for name in unhealthy
            ),
        )
        if unhealthy
        else _true(CONDITION_READY)
    )

    stamp = now.replace(microsecond=0)
    conditions = []
    for name, outcome in outcomes.items():
        before = earlier.get(name)
        conditions.append(
            Condition(
                type=name,
                status=outcome.status,
                reason=outcome.reason,
                message=outcome.message,
                last_transition_time=(
                    before.last_transition_time
                    if before is not None and before.status == outcome.status
                    else stamp
                ),
                observed_generation=node_class.metadata.generation,
            )
        )
    status = AKSNodeClassStatus(
        images=resolved, kubernetes_version=kubernetes_version, conditions=conditions
    )
    return (
        status.model_dump(mode="json", by_alias=True, exclude_none=True),
        any(outcome.azure_error for outcome in outcomes.values()),
    )


@dataclass(slots=True)
class _Resolved:
    generation: int | None
    due: datetime


class _Cluster:
    """The apiserver calls the controller makes (raw JSON)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client as k8s

        self._custom = k8s.CustomObjectsApi(api_client)
        self._version = k8s.VersionApi(api_client)
        self.api_exception = k8s.ApiException

    def server_version(self) -> str:
        response = self._version.get_code(_preload_content=False)
        version = json.loads(response.data).get("gitVersion")
        if not version:
            raise CloudProviderError("the apiserver's /version has no gitVersion")
        return str(version)

    def node_classes(self) -> list[dict[str, Any]]:
        response = self._custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _preload_content=False
        )
        return json.loads(response.data).get("items") or []

    def nodeclaims_using(self, name: str) -> list[dict[str, Any]]:
        response = self._custom.list_cluster_custom_object(
            wk.GROUP, "v1", "nodeclaims", _preload_content=False
        )
        using = []
        for item in json.loads(response.data).get("items") or ():
            ref = (item.get("spec") or {}).get("nodeClassRef") or {}
            if ref.get("group") == GROUP and ref.get("kind") == KIND and ref.get("name") == name:
                using.append(item)
        return using

    def patch(self, name: str, body: Mapping[str, Any]) -> None:
        self._custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, body, _content_type=_MERGE_PATCH, _preload_content=False
        )

    def patch_status(self, name: str, body: Mapping[str, Any]) -> None:
        self._custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, name, body, _content_type=_MERGE_PATCH, _preload_content=False
        )

    def patch_nodeclaim(self, name: str, body: Mapping[str, Any]) -> None:
        self._custom.patch_cluster_custom_object(
            wk.GROUP,
            "v1",
            "nodeclaims",
            name,
            body,
            _content_type=_MERGE_PATCH,
            _preload_content=False,
        )


class NodeClassController:
    """Keeps every AKSNodeClass's status resolved against the apiserver and Azure.

    ``images`` resolves node images; ``get_subnet`` reads a subnet (``subnet_getter`` of the
    network client); ``cluster_subnet_id`` is the provider's ``--vnet-subnet-id`` and
    ``node_resource_group`` its node resource group.
    """

    name = "nodeclass"

    def __init__(
        self,
        context: ProviderContext,
        *,
        images: ImageResolver,
        get_subnet: SubnetGetter,
        cluster_subnet_id: str,
        node_resource_group: str,
        resync: timedelta = DEFAULT_RESYNC,
    ) -> None:
        if context.kube_client is None:
            raise CloudProviderError(
                "the nodeclass controller needs a Kubernetes cluster to read AKSNodeClasses"
            )
        self._log = context.logger
        self._clock: Callable[[], datetime] = context.clock
        self._images = images
        self._get_subnet = get_subnet
        self._cluster_subnet_id = cluster_subnet_id
        self._node_resource_group = node_resource_group
        self._resync = resync
        self._poll = min(MAX_POLL, resync) if resync > timedelta(0) else MAX_POLL
        self._cluster = _Cluster(context.kube_client)
        self._resolved: dict[str, _Resolved] = {}
        self._invalid: set[tuple[str, int | None]] = set()
        self._waiting: dict[str, tuple[str, ...]] = {}

    @classmethod
    def for_provider(cls, context: ProviderContext, provider: Any) -> NodeClassController:
        """The controller of an Azure cloud provider: ``provider.settings`` (``region``,
        ``vnet_subnet_id``, ``node_resource_group``) and ``provider.clients`` (``compute``,
        ``network``)."""
        settings, clients = provider.settings, provider.clients
        return cls(
            context,
            images=ImageResolver(
                community_gallery_versions(clients.compute), settings.region, context.clock
            ),
            get_subnet=subnet_getter(clients.network),
            cluster_subnet_id=settings.vnet_subnet_id,
            node_resource_group=settings.node_resource_group,
        )

    def run(self, stop: threading.Event) -> None:
        """Resolve AKSNodeClasses until ``stop`` is set; failures are logged and retried."""
        with logs.bind(controller=self.name):
            while not stop.is_set():
                try:
                    self.sync()
                except Exception as error:
                    self._log.error("nodeclass: listing AKSNodeClasses failed: %s", error)
                stop.wait(self._poll.total_seconds())

    def sync(self) -> None:
        """One pass over all AKSNodeClasses."""
        server_version: str | None = None
        seen: set[str] = set()
        for raw in self._cluster.node_classes():
            metadata = raw.get("metadata") or {}
            name = str(metadata.get("name") or "")
            seen.add(str(metadata.get("uid") or name))
            try:
                node_class = AKSNodeClass.from_manifest(raw)
            except ValidationError as error:
                self._report_invalid(raw, error)
                continue
            try:
                if node_class.metadata.deletion_timestamp is not None:
                    self._finalize(node_class)
                    continue
                self._ensure_metadata(node_class)
                if self._due(node_class):
                    if server_version is None:
                        server_version = self._cluster.server_version()
                    self._reconcile(node_class, server_version)
            except self._cluster.api_exception as error:
                if error.status not in (404, 409):  # gone, or changed meanwhile: next pass
                    self._log.error(
                        "nodeclass: updating AKSNodeClass %s failed: %s %s",
                        name,
                        error.status,
                        error.reason,
                    )
            except Exception as error:
                self._log.error("nodeclass: reconciling AKSNodeClass %s failed: %s", name, error)
        for uid in set(self._resolved) - seen:
            del self._resolved[uid]
        self._invalid = {key for key in self._invalid if key[0] in seen}
        self._waiting = {key: users for key, users in self._waiting.items() if key in seen}

    def _key(self, node_class: AKSNodeClass) -> str:
        return node_class.metadata.uid or node_class.metadata.name or ""

    def _due(self, node_class: AKSNodeClass) -> bool:
        resolved = self._resolved.get(self._key(node_class))
        return (
            resolved is None
            or resolved.generation != node_class.metadata.generation
            or self._clock() >= resolved.due
        )

    def _ensure_metadata(self, node_class: AKSNodeClass) -> None:
        metadata = node_class.metadata
        spec_hash = nodeclass_hash(node_class.spec)
        if metadata.annotations.get(HASH_VERSION_ANNOTATION) != HASH_VERSION:
            self._restamp_nodeclaims(metadata.name or "", spec_hash)
        annotations = {HASH_ANNOTATION: spec_hash, HASH_VERSION_ANNOTATION: HASH_VERSION}
        patch: dict[str, Any] = {}
        if any(metadata.annotations.get(k) != v for k, v in annotations.items()):
            patch["annotations"] = annotations
        if TERMINATION_FINALIZER not in metadata.finalizers:
            patch["finalizers"] = [*metadata.finalizers, TERMINATION_FINALIZER]
            patch["resourceVersion"] = metadata.resource_version
        if patch:
            self._cluster.patch(metadata.name or "", {"metadata": patch})

    def _restamp_nodeclaims(self, name: str, spec_hash: str) -> None:
        """NodeClaims of another hash version get this one, and, unless already drifted, the
        current hash (a hash version change is no drift)."""
        for item in self._cluster.nodeclaims_using(name):
            annotations = (item.get("metadata") or {}).get("annotations") or {}
            if annotations.get(HASH_VERSION_ANNOTATION) == HASH_VERSION:
                continue
            update = {HASH_VERSION_ANNOTATION: HASH_VERSION}
            conditions = (item.get("status") or {}).get("conditions") or ()
            if not any(c.get("type") == _CONDITION_DRIFTED for c in conditions):
                update[HASH_ANNOTATION] = spec_hash
            self._cluster.patch_nodeclaim(
                item["metadata"]["name"], {"metadata": {"annotations": update}}
            )

    def _reconcile(self, node_class: AKSNodeClass, server_version: str) -> None:
        now = self._clock()
        status, failed = resolve_status(
            node_class,
            server_version=server_version,
            images=self._images,
            get_subnet=self._get_subnet,
            cluster_subnet_id=self._cluster_subnet_id,
            node_resource_group=self._node_resource_group,
            now=now,
        )
        before = node_class.status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if status != before:
            patch = {**{key: None for key in before if key not in status}, **status}
            self._cluster.patch_status(node_class.metadata.name or "", {"status": patch})
            self._log_changes(node_class.metadata.name or "", before, status)
        retry = min(self._resync, ERROR_RETRY) if failed else self._resync
        self._resolved[self._key(node_class)] = _Resolved(
            node_class.metadata.generation, now + retry
        )

    def _finalize(self, node_class: AKSNodeClass) -> None:
        metadata = node_class.metadata
        name = metadata.name or ""
        if TERMINATION_FINALIZER not in metadata.finalizers:
            return
        key = self._key(node_class)
        users = tuple(
            sorted(item["metadata"]["name"] for item in self._cluster.nodeclaims_using(name))
        )
        if users:
            if self._waiting.get(key) != users:
                self._log.info(
                    "nodeclass: AKSNodeClass %s is deleted; waiting for NodeClaims %s to go",
                    name,
                    ", ".join(users),
                )
                self._waiting[key] = users
            return
        self._waiting.pop(key, None)
        finalizers = [f for f in metadata.finalizers if f != TERMINATION_FINALIZER]
        self._cluster.patch(
            name,
            {"metadata": {"finalizers": finalizers, "resourceVersion": metadata.resource_version}},
        )
        self._resolved.pop(key, None)

    def _report_invalid(self, raw: Mapping[str, Any], error: ValidationError) -> None:
        metadata = raw.get("metadata") or {}
        key = (str(metadata.get("uid") or metadata.get("name")), metadata.get("generation"))
        if key in self._invalid:
            return
        self._invalid.add(key)
        self._log.error(
            "nodeclass: AKSNodeClass %s is not valid, skipping it: %s",
            metadata.get("name"),
            validation_problems(error),
        )

    def _log_changes(self, name: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
        old_ids = sorted(item["id"] for item in before.get("images") or ())
        new_ids = sorted(item["id"] for item in after.get("images") or ())
        if new_ids and new_ids != old_ids:
            self._log.info("nodeclass: AKSNodeClass %s: images %s", name, ", ".join(new_ids))
        if after.get("kubernetesVersion") != before.get("kubernetesVersion"):
            self._log.info(
                "nodeclass: AKSNodeClass %s: Kubernetes version %s",
                name,
                after.get("kubernetesVersion"),
            )
        old_conditions = {c["type"]: c for c in before.get("conditions") or ()}
        for condition in after.get("conditions") or ():
            old = old_conditions.get(condition["type"])
            changed = old is None or (old["status"], old.get("message")) != (
                condition["status"],
                condition.get("message"),
            )
            if changed and condition["status"] != "True" and condition["type"] != CONDITION_READY:
                self._log.warning(
                    "nodeclass: AKSNodeClass %s: %s is %s: %s",
                    name,
                    condition["type"],
                    condition["status"],
                    condition.get("message", ""),
                )
