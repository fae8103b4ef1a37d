"""The Azure cloud provider: one VM and one NIC per NodeClaim, for AKSNodeClasses.

``AzureCloudProvider.from_context`` builds it. With a cluster (``kube_client``) or Azure clients
it is live: the catalog reads the Resource SKUs and Retail Prices APIs, AKSNodeClasses come from
the context's read view (the controller's informer cache) and ``create`` launches VMs. Without
either it is offline (``karpenter simulate``): the catalog is the packaged data and nothing can
be launched.

A launch takes one VM size, zone and capacity type, as upstream does: the cheapest available
offering the NodeClaim allows; at the same price spot before on-demand and a zone before a
regional placement. When Azure refuses it for capacity or quota, the offering (and what the error
says about its neighbours) is kept out for upstream's TTL and the create fails with
``InsufficientCapacity``, so the next create moves on to another size or zone.
"""

from __future__ import annotations

import builtins
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from azure.core.exceptions import HttpResponseError

from karpenter_azure.bootstrap import BootstrapOptions, custom_data
from karpenter_azure.catalog import Catalog
from karpenter_azure.clients import AzureClients
from karpenter_azure.drift import LABEL_KUBELET_IDENTITY_CLIENT_ID, drift_reason, repair_policies
from karpenter_azure.images import select_image
from karpenter_azure.instances import (
    DELETING,
    TAG_BILLING,
    TAG_CLUSTER,
    TAG_NODECLAIM,
    TAG_NODECLASS,
    TAG_NODEPOOL,
    Instances,
    LaunchSpec,
    VirtualMachine,
    arm_error,
    provider_id,
    resource_name,
    tag_key,
    vm_name_of,
)
from karpenter_azure.instancetype import (
    LABEL_SKU_ACCELERATED_NETWORKING,
    LABEL_SKU_STORAGE_PREMIUM_CAPABLE,
    REGIONAL_ZONE,
    zone_label,
)
from karpenter_azure.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    KIND,
    NODE_CLASS,
    AKSNodeClass,
    nodeclass_hash,
)
from karpenter_azure.nodefacts import NodeFactsReader
from karpenter_azure.settings import AzureSettings
from karpenter_azure.unavailable import UnavailableOfferings, capacity_error
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.launch import cheapest_offering
from karpenter_core.sdk.machines import Machine, MachineView
from karpenter_core.sdk.nodeclass import NodeClassBinding
from karpenter_core.sdk.record import ProviderContext, is_offline
from karpenter_core.sdk.types import (
    CloudProviderError,
    CreateError,
    InstanceType,
    InsufficientCapacity,
    NodeClassReadiness,
    Offering,
    RepairPolicy,
    Requirements,
    launch_request,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.apis.v1.nodepool import NodePool

__all__ = [
    "AzureCloudProvider",
    "arm_zone",
    "choose_offering",
    "launch_tags",
]

log = logging.getLogger("karpenter.azure")


def arm_zone(region: str, zone: str) -> str:
    """The ARM zone ("1") of a zone label (``eastus-1``); "" for a regional placement (zone
    ``"0"``)."""
    match = re.fullmatch(rf"{re.escape(region.lower())}-(\d+)", zone)
    return match.group(1) if match else ""


def choose_offering(
    instance_types: Iterable[InstanceType],
    requirements: Requirements,
    requests: Mapping[str, int],
) -> tuple[InstanceType, Offering] | None:
    """Upstream's choice for one VM: the SDK's cheapest offering, a zone before a regional
    placement at the same price."""
    return cheapest_offering(
        instance_types, requirements, requests, deferred=lambda o: o.zone == REGIONAL_ZONE
    )


def launch_tags(cluster_name: str, node_class: AKSNodeClass, nodepool: str) -> dict[str, str]:
    """Tags of a VM and its NIC: the AKSNodeClass's ``spec.tags`` and upstream's own (keys with
    ``/`` written with ``_``, as Azure requires); Karpenter's win a collision."""
    tags = {tag_key(k): v for k, v in node_class.spec.tags.items()}
    tags.update(
        {
            TAG_CLUSTER: cluster_name,
            TAG_BILLING: "linux",
            TAG_NODECLASS: node_class.metadata.name or "",
        }
    )
    if nodepool:
        tags[TAG_NODEPOOL] = nodepool
    return tags


class AzureCloudProvider:
    """Launches, lists, drifts and deletes Azure VMs for Karpenter."""

    name = "azure"

    def __init__(
        self,
        settings: AzureSettings,
        clients: AzureClients,
        catalog: Catalog,
        unavailable: UnavailableOfferings,
        context: ProviderContext,
    ) -> None:
        self.settings = settings
        self.clients = clients
        self.catalog = catalog
        self.unavailable = unavailable
        self._context = context
        self.node_classes = NodeClassBinding[AKSNodeClass]("azure", NODE_CLASS, context)
        self.view = MachineView(self.node_classes, catalog.instance_types)
        self._lock = threading.Lock()
        self._instances: Instances | None = None
        self._node_facts = NodeFactsReader(context.kube_client, context.clock)

    @classmethod
    def from_context(cls, context: ProviderContext) -> AzureCloudProvider:
        """The factory: live with a cluster or Azure clients, offline (packaged catalog)
        without."""
        settings = AzureSettings.from_mapping(context.settings)
        clients = AzureClients(settings, context.clients)
        unavailable = UnavailableOfferings(clock=context.clock)
        if is_offline(context):
            catalog = Catalog.offline(settings, unavailable)
        else:
            catalog = Catalog.live(settings, clients, unavailable, context.clock)
        return cls(settings, clients, catalog, unavailable, context)

    # -- catalog ------------------------------------------------------------------------------

    def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
        """The VM sizes for the NodePool's AKSNodeClass. Offline, the packaged catalog shaped by
        the AKSNodeClass of the input (its defaults when it is not there); live, none when the
        AKSNodeClass is missing or another provider's kind."""
        if not self.node_classes.owns(nodepool.spec.template.spec.node_class_ref):
            return []
        node_class = self.node_classes.of_nodepool(nodepool)
        if self.catalog.is_live and node_class is None and self.node_classes.has_view:
            return []
        return list(self.catalog.instance_types(node_class))

    # -- launch -------------------------------------------------------------------------------

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Launch a VM for the NodeClaim, or return the one launched for it before."""
        instances = self._instances_or_fail()
        claim_name = nodeclaim.metadata.name or ""
        node_class = self.node_classes.launchable(nodeclaim)
        name = resource_name(claim_name)
        existing = instances.find(name)
        if existing is not None and existing.provisioning_state not in ("Failed", DELETING):
            log.info("found the VM launched before", extra={"nodeclaim": claim_name, "vm": name})
            return self._created(nodeclaim, node_class, existing)
        requirements, requests = launch_request(nodeclaim)
        chosen = choose_offering(self.catalog.instance_types(node_class), requirements, requests)
        if chosen is None:
            raise InsufficientCapacity(
                f"no VM size of {KIND} {node_class.metadata.name!r} meets the requirements and "
                f"requests of NodeClaim {claim_name!r} with an available offering"
            )
        instance_type, offering = chosen
        spec = self._launch_spec(nodeclaim, node_class, name, instance_type, offering)
        try:
            vm = instances.launch(spec)
        except HttpResponseError as error:
            raise self._launch_error(error, spec, instance_type, offering, claim_name) from None
        log.info(
            "launched VM",
            extra={
                "nodeclaim": claim_name,
                "vm": name,
                "instance_type": instance_type.name,
                "zone": offering.zone,
                "capacity_type": offering.capacity_type,
            },
        )
        return self._created(nodeclaim, node_class, vm)

    def _launch_error(
        self,
        error: HttpResponseError,
        spec: LaunchSpec,
        instance_type: InstanceType,
        offering: Offering,
        claim_name: str,
    ) -> CloudProviderError:
        """What a failed launch raises: ``InsufficientCapacity`` (the offering marked) when
        Azure had no capacity or quota for it, else ``CreateError``; the VM's leftovers go."""
        failure = arm_error(error)
        self._instances_or_fail().cleanup(spec.name)
        zone, capacity_type = offering.zone, offering.capacity_type
        mapped = capacity_error(self.unavailable, failure, instance_type, zone, capacity_type)
        if mapped is not None:
            return mapped
        return CreateError(
            failure.code or "LaunchFailed",
            f"launching VM {spec.name} ({instance_type.name}, {capacity_type}, zone "
            f"{zone or 'none'}) for NodeClaim {claim_name!r} failed: {failure.message}",
        )

    def _launch_spec(
        self,
        nodeclaim: NodeClaim,
        node_class: AKSNodeClass,
        name: str,
        instance_type: InstanceType,
        offering: Offering,
    ) -> LaunchSpec:
        settings = self.settings
        image_id, subnet_id = self._image_and_subnet(node_class, instance_type)
        max_pods = instance_type.capacity.get("pods", 0) // 1000
        tags = launch_tags(
            settings.cluster_name, node_class, nodeclaim.metadata.labels.get(wk.NODEPOOL, "")
        )
        tags[TAG_NODECLAIM] = nodeclaim.metadata.name or ""
        flags = instance_type.requirements
        node_subnet_pods = settings.network_plugin == "azure" and not settings.network_plugin_mode
        return LaunchSpec(
            name=name,
            vm_size=instance_type.name,
            zone=arm_zone(settings.region, offering.zone),
            capacity_type=offering.capacity_type,
            image_id=image_id,
            subnet_id=subnet_id,
            os_disk_size_gb=node_class.spec.os_disk_size_gb,
            custom_data=custom_data(
                self._bootstrap(nodeclaim, node_class, instance_type, offering, max_pods)
            ),
            tags=tags,
            accelerated_networking=_label_true(flags, LABEL_SKU_ACCELERATED_NETWORKING),
            encryption_at_host=node_class.spec.encryption_at_host(),
            premium_storage=_label_true(flags, LABEL_SKU_STORAGE_PREMIUM_CAPABLE),
            secondary_ips=max(max_pods - 1, 0) if node_subnet_pods else 0,
        )

    def _image_and_subnet(
        self, node_class: AKSNodeClass, instance_type: InstanceType
    ) -> tuple[str, str]:
        """The image the VM size boots and the subnet its NIC joins."""
        node_class_name = node_class.metadata.name
        image_id = select_image(node_class.status.images, instance_type.requirements)
        if image_id is None:
            raise CreateError(
                "NoCompatibleImage",
                f"no image of {KIND} {node_class_name!r} fits VM size {instance_type.name}",
            )
        subnet_id = node_class.spec.vnet_subnet_id or self.settings.vnet_subnet_id
        if not subnet_id:
            raise CreateError(
                "NoSubnet",
                f"{KIND} {node_class_name!r} has no spec.vnetSubnetID and --vnet-subnet-id "
                "(VNET_SUBNET_ID) is not set",
            )
        return image_id, subnet_id

    def _bootstrap(
        self,
        nodeclaim: NodeClaim,
        node_class: AKSNodeClass,
        instance_type: InstanceType,
        offering: Offering,
        max_pods: int,
    ) -> BootstrapOptions:
        """How the node joins the cluster: its labels, taints and kubelet settings."""
        settings = self.settings
        labels = {
            **nodeclaim.metadata.labels,
            wk.INSTANCE_TYPE: instance_type.name,
            wk.CAPACITY_TYPE: offering.capacity_type,
            wk.TOPOLOGY_ZONE: offering.zone,
        }
        if settings.kubelet_identity_client_id:
            labels[LABEL_KUBELET_IDENTITY_CLIENT_ID] = settings.kubelet_identity_client_id
        return BootstrapOptions(
            cluster_endpoint=settings.cluster_endpoint,
            ca_bundle=settings.cluster_ca_bundle,
            bootstrap_token=settings.kubelet_bootstrap_token,
            labels=labels,
            taints=[*nodeclaim.spec.taints, *nodeclaim.spec.startup_taints],
            max_pods=max_pods,
            kubelet=node_class.spec.kubelet,
        )

    def _instances_or_fail(self) -> Instances:
        if not self.catalog.is_live:
            raise CloudProviderError(
                "the azure provider is offline (no cluster and no Azure clients): it serves the "
                "packaged VM sizes only; launching and listing VMs need Azure"
            )
        problems = self.settings.launch_problems()
        if problems:
            raise CloudProviderError(
                "the azure provider needs these settings to launch and list VMs: "
                + ", ".join(problems)
            )
        with self._lock:
            if self._instances is None:
                self._instances = Instances(
                    self.clients.compute, self.clients.network, self.settings
                )
            return self._instances

    def _created(
        self, nodeclaim: NodeClaim, node_class: AKSNodeClass, vm: VirtualMachine
    ) -> NodeClaim:
        annotations = {
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
        }
        return self.view.created(nodeclaim, node_class, self._machine(vm), annotations)

    def _machine(self, vm: VirtualMachine) -> Machine:
        settings = self.settings
        return Machine(
            id=vm.name,
            provider_id=provider_id(
                settings.subscription_id, settings.node_resource_group, vm.name
            ),
            instance_type=vm.vm_size,
            capacity_type=vm.capacity_type,
            zone=zone_label(settings.region, vm.zone),
            created=vm.created,
            nodeclaim=vm.tags.get(TAG_NODECLAIM, ""),
            nodepool=vm.tags.get(TAG_NODEPOOL, ""),
            node_class=vm.tags.get(TAG_NODECLASS, ""),
            image_id=vm.image_id,
        )

    # -- get, list, delete ----------------------------------------------------------------------

    def get(self, provider_id: str) -> NodeClaim:
        """The VM behind ``provider_id`` as a NodeClaim; ``NodeClaimNotFound`` once gone."""
        instances = self._instances_or_fail()
        return self.view.nodeclaim(self._machine(instances.get(vm_name_of(provider_id))))

    def list(self) -> list[NodeClaim]:
        """Every VM of the cluster tagged with a NodePool, as NodeClaims."""
        instances = self._instances_or_fail()
        return self.view.nodeclaims(self._machine(vm) for vm in instances.list())

    def delete(self, nodeclaim: NodeClaim) -> None:
        """Start deleting the VM; ``NodeClaimNotFound`` once it is being deleted or gone."""
        instances = self._instances_or_fail()
        known = nodeclaim.status.provider_id
        name = vm_name_of(known) if known else resource_name(nodeclaim.metadata.name or "")
        try:
            instances.delete(name)
        except HttpResponseError as error:
            failure = arm_error(error)
            raise CloudProviderError(f"deleting VM {name} failed: {failure.message}") from None

    # -- drift, repair, node classes ----------------------------------------------------------

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """Why the VM no longer matches its AKSNodeClass (NodeClassDrift, K8sVersionDrift,
        KubeletIdentityDrift, ImageDrift), or "". The node's kubelet version and labels are read
        from the cluster when there is one; offline, only NodeClassDrift and ImageDrift."""
        node_class = self.node_classes.of_nodeclaim(nodeclaim)
        if node_class is None:
            return ""
        return drift_reason(
            node_class,
            nodeclaim_annotations=nodeclaim.metadata.annotations,
            nodeclaim_image_id=nodeclaim.status.image_id,
            node=self._node_facts.read(nodeclaim.status.node_name),
            kubelet_identity_client_id=self.settings.kubelet_identity_client_id,
        )

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        """Upstream's (``karpenter_azure.drift.repair_policies``)."""
        return repair_policies()

    def supported_node_classes(self) -> builtins.list[type[BaseModel]]:
        """AKSNodeClass."""
        return self.node_classes.supported()

    def node_class_readiness(self, nodepool: NodePool) -> NodeClassReadiness:
        """Whether the NodePool's AKSNodeClass exists and is Ready (always ready offline)."""
        return self.node_classes.readiness(nodepool, live=self.catalog.is_live)


def _label_true(requirements: Requirements, key: str) -> bool:
    requirement = requirements.get(key)
    return requirement is not None and requirement.any() == "true"
