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

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from azure.core.exceptions import AzureError, ResourceNotFoundError

from karpenter_azure.images import FIPSImagesUnavailable, ImageResolver, community_gallery_versions
from karpenter_azure.nodeclass import (
    CONDITION_IMAGES_READY,
    CONDITION_KUBERNETES_VERSION_READY,
    CONDITION_SUBNETS_READY,
    CONDITION_TYPES,
    CONDITION_VALIDATION_SUCCEEDED,
    HASH_VERSION,
    NODE_CLASS,
    AKSNodeClass,
    AKSNodeClassStatus,
    NodeImage,
    nodeclass_hash,
)
from karpenter_core.apis.v1.common import CONDITION_READY, Condition
from karpenter_core.sdk.nodeclass import Verdict, ready_verdict, resolved_status, stamp_conditions
from karpenter_core.sdk.record import ProviderContext
from karpenter_core.sdk.status import (
    ERROR_RETRY,
    NodeClassStatusController,
    git_version,
    kept_verdict,
)

__all__ = [
    "DEFAULT_RESYNC",
    "ERROR_RETRY",
    "NodeClassController",
    "SubnetGetter",
    "SubnetID",
    "parse_subnet_id",
    "resolve_status",
    "subnet_getter",
]

DEFAULT_RESYNC = timedelta(minutes=3)
"""How often an unchanged AKSNodeClass is resolved again (upstream's subnet check interval)."""
_MANAGED_VNET = re.compile(r"(?i)^aks-vnet-\d{8}$")
_MANAGED_SUBNET = "aks-subnet"

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
) -> tuple[list[NodeImage], Verdict]:
    try:
        images = resolver.resolve(node_class.spec, kubernetes_version)
    except FIPSImagesUnavailable as error:
        return [], Verdict("False", "SIGRequiredForFIPS", str(error))
    except AzureError as error:
        message = f"listing node image versions failed: {error.message}"
        return node_class.status.images, kept_verdict(previous, "ImagesResolutionFailed", message)
    if not images:
        return [], Verdict(
            "False",
            "ImagesNotFound",
            f"no version of the {node_class.spec.image_family} node images for Kubernetes "
            f"{kubernetes_version} was found",
        )
    return images, Verdict.true(CONDITION_IMAGES_READY)


def _subnet(
    node_class: AKSNodeClass,
    get_subnet: SubnetGetter,
    cluster_subnet_id: str,
    node_resource_group: str,
    previous: Condition | None,
) -> Verdict:
    subnet_id = node_class.spec.vnet_subnet_id or cluster_subnet_id
    if not subnet_id:
        return Verdict(
            "False",
            "SubnetIDInvalid",
            "spec.vnetSubnetID is not set and the provider has no cluster subnet "
            "(--vnet-subnet-id)",
        )
    subnet = parse_subnet_id(subnet_id)
    if subnet is None:
        return Verdict("False", "SubnetIDInvalid", f"Failed to parse vnetSubnetID {subnet_id}")
    cluster = parse_subnet_id(cluster_subnet_id) if cluster_subnet_id else None
    if subnet_id != cluster_subnet_id and cluster is not None:
        if _aks_managed_vnet(node_resource_group, cluster) and cluster.same_vnet(subnet):
            return Verdict(
                "False",
                "SubnetIDInvalid",
                f"custom subnet cannot be in the same VNet as cluster managed VNet: {subnet_id}",
            )
        if not cluster.same_vnet(subnet):
            return Verdict(
                "False",
                "SubnetIDInvalid",
                "vnetSubnetID does not match the cluster subscription, resource group, or "
                f"virtual network: {subnet_id}",
            )
    try:
        get_subnet(subnet.resource_group, subnet.vnet, subnet.subnet)
    except ResourceNotFoundError:
        return Verdict("False", "SubnetNotFound", f"resource not found: {subnet_id}")
    except AzureError as error:
        return Verdict(
            "False",
            "SubnetUnknownError",
            f"unknown error getting subnet: {error.message}",
            cloud_error=True,
        )
    return Verdict.true(CONDITION_SUBNETS_READY)


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
    outcomes: dict[str, Verdict] = {}

    kubernetes_version = _kubernetes_version(node_class, server_version, earlier)
    outcomes[CONDITION_KUBERNETES_VERSION_READY] = Verdict.true(CONDITION_KUBERNETES_VERSION_READY)
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
    outcomes[CONDITION_VALIDATION_SUCCEEDED] = Verdict.true(CONDITION_VALIDATION_SUCCEEDED)
    outcomes[CONDITION_READY] = ready_verdict(outcomes, CONDITION_TYPES)

    conditions = stamp_conditions(
        outcomes,
        previous.conditions,
        now,
        node_class.metadata.generation,
    )
    status = AKSNodeClassStatus(
        images=resolved, kubernetes_version=kubernetes_version, conditions=conditions
    )
    return resolved_status(status, outcomes)


class NodeClassController(
    NodeClassStatusController[AKSNodeClass], info=NODE_CLASS, hash_version=HASH_VERSION
):
    """Keeps every AKSNodeClass's status resolved against the apiserver and Azure.

    ``images`` resolves node images; ``get_subnet`` reads a subnet (``subnet_getter`` of the
    network client); ``cluster_subnet_id`` is the provider's ``--vnet-subnet-id`` and
    ``node_resource_group`` its node resource group.
    """

    restamp_nodeclaims = True

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
        super().__init__(context, resync)
        self._images = images
        self._get_subnet = get_subnet
        self._cluster_subnet_id = cluster_subnet_id
        self._node_resource_group = node_resource_group

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

    def spec_hash(self, node_class: AKSNodeClass) -> str:
        """``nodeclass_hash`` of the spec."""
        return nodeclass_hash(node_class.spec)

    def kubernetes_version(self, version_info: Mapping[str, Any]) -> str:
        """The apiserver's ``gitVersion`` (``resolve_status`` takes the ``v`` off)."""
        return git_version(version_info)

    def resolve(
        self, node_class: AKSNodeClass, kubernetes_version: str, now: datetime
    ) -> tuple[dict[str, Any], bool]:
        """``resolve_status`` against this controller's resolvers."""
        return resolve_status(
            node_class,
            server_version=kubernetes_version,
            images=self._images,
            get_subnet=self._get_subnet,
            cluster_subnet_id=self._cluster_subnet_id,
            node_resource_group=self._node_resource_group,
            now=now,
        )

    def log_resolved(self, name: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
        """New node image ids and a new Kubernetes version."""
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
