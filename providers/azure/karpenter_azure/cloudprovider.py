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
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from fractions import Fraction
from typing import TYPE_CHECKING

from azure.core.exceptions import HttpResponseError

from karpenter_azure.bootstrap import BootstrapOptions, custom_data
from karpenter_azure.catalog import Catalog
from karpenter_azure.clients import AzureClients
from karpenter_azure.drift import (
    LABEL_KUBELET_IDENTITY_CLIENT_ID,
    NodeFacts,
    drift_reason,
    repair_policies,
)
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
    GROUP,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    KIND,
    AKSNodeClass,
    nodeclass_hash,
)
from karpenter_azure.settings import AzureSettings
from karpenter_azure.unavailable import UnavailableOfferings, capacity_error
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.nodeclass import launchable_node_class, node_class_ref_readiness
from karpenter_core.sdk.record import ProviderContext
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

NODE_FACTS_TTL = timedelta(minutes=1)
"""How long a Node's kubelet version and labels, read for drift, are used before read again."""

_CAPACITY_RANK = {wk.CAPACITY_TYPE_SPOT: 0, wk.CAPACITY_TYPE_ON_DEMAND: 1}


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
    """Upstream's choice for one VM: among the available offerings the requirements allow, of
    types whose labels meet them and whose allocatable covers ``requests``, the cheapest; at
    the same price spot before on-demand, a zone before a regional placement, then by type
    and zone name."""
    best: tuple[tuple[float, int, int, str, str], InstanceType, Offering] | None = None
    for instance_type in instance_types:
        if instance_type.requirements.intersects(requirements) is not None:
            continue
        if any(instance_type.allocatable.get(k, 0) < v for k, v in requests.items()):
            continue
        for offering in instance_type.offerings:
            if not offering.available or requirements.intersects(offering.requirements):
                continue
            key = (
                offering.price,
                _CAPACITY_RANK.get(offering.capacity_type, 2),
                1 if offering.zone == REGIONAL_ZONE else 0,
                instance_type.name,
                offering.zone,
            )
            if best is None or key < best[0]:
                best = (key, instance_type, offering)
    return None if best is None else (best[1], best[2])


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
        self._lock = threading.Lock()
        self._instances: Instances | None = None
        self._node_facts_cache: dict[str, tuple[datetime, NodeFacts | None]] = {}

    @classmethod
    def from_context(cls, context: ProviderContext) -> AzureCloudProvider:
        """The factory: live with a cluster or Azure clients, offline (packaged catalog)
        without."""
        settings = AzureSettings.from_mapping(context.settings)
        clients = AzureClients(settings, context.clients)
        unavailable = UnavailableOfferings(clock=context.clock)
        if context.kube_client is None and not context.clients:
            catalog = Catalog.offline(settings, unavailable)
        else:
            catalog = Catalog.live(settings, clients, unavailable, context.clock)
        return cls(settings, clients, catalog, unavailable, context)

    # -- node classes -------------------------------------------------------------------------

    def _node_class(self, name: str) -> AKSNodeClass | None:
        """The AKSNodeClass ``name`` from the context's read view; None when it is missing, is
        being deleted or there is no view."""
        lookup = self._context.node_classes
        found = lookup(KIND, name) if lookup is not None and name else None
        if not isinstance(found, AKSNodeClass) or found.metadata.deletion_timestamp is not None:
            return None
        return found

    # -- catalog ------------------------------------------------------------------------------

    def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
        """The VM sizes for the NodePool's AKSNodeClass. Offline, the packaged catalog shaped by
        the AKSNodeClass of the input (its defaults when it is not there); live, none when the
        AKSNodeClass is missing or another provider's kind."""
        ref = nodepool.spec.template.spec.node_class_ref
        if (ref.group, ref.kind) != (GROUP, KIND):
            return []
        node_class = self._node_class(ref.name)
        if self.catalog.is_live and node_class is None and self._context.node_classes is not None:
            return []
        return list(self.catalog.instance_types(node_class))

    # -- launch -------------------------------------------------------------------------------

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Launch a VM for the NodeClaim, or return the one launched for it before."""
        instances = self._instances_or_fail()
        claim_name = nodeclaim.metadata.name or ""
        node_class = self._ready_node_class(nodeclaim)
        name = resource_name(claim_name)
        existing = instances.find(name)
        if existing is not None and existing.provisioning_state not in ("Failed", DELETING):
            log.info("found the VM launched before", extra={"nodeclaim": claim_name, "vm": name})
            return self._created(nodeclaim, node_class, existing)
        requirements, requests = launch_request(nodeclaim)
        types = self.catalog.instance_types(node_class)
        chosen = choose_offering(types, requirements, requests)
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
            failure = arm_error(error)
            instances.cleanup(name)
            mapped = capacity_error(
                self.unavailable, failure, instance_type, offering.zone, offering.capacity_type
            )
            if mapped is not None:
                raise mapped from None
            raise CreateError(
                failure.code or "LaunchFailed",
                f"launching VM {name} ({instance_type.name}, {offering.capacity_type}, zone "
                f"{offering.zone or 'none'}) for NodeClaim {claim_name!r} failed: "
                f"{failure.message}",
            ) from None
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

    def _launch_spec(
        self,
        nodeclaim: NodeClaim,
        node_class: AKSNodeClass,
        name: str,
        instance_type: InstanceType,
        offering: Offering,
    ) -> LaunchSpec:
        settings = self.settings
        node_class_name = node_class.metadata.name
        image_id = select_image(node_class.status.images, instance_type.requirements)
        if image_id is None:
            raise CreateError(
                "NoCompatibleImage",
                f"no image of {KIND} {node_class_name!r} fits VM size {instance_type.name}",
            )
        subnet_id = node_class.spec.vnet_subnet_id or settings.vnet_subnet_id
        if not subnet_id:
            raise CreateError(
                "NoSubnet",
                f"{KIND} {node_class_name!r} has no spec.vnetSubnetID and --vnet-subnet-id "
                "(VNET_SUBNET_ID) is not set",
            )
        max_pods = instance_type.capacity.get("pods", 0) // 1000
        labels = {
            **nodeclaim.metadata.labels,
            wk.INSTANCE_TYPE: instance_type.name,
            wk.CAPACITY_TYPE: offering.capacity_type,
        }
        labels[wk.TOPOLOGY_ZONE] = offering.zone
        if settings.kubelet_identity_client_id:
            labels[LABEL_KUBELET_IDENTITY_CLIENT_ID] = settings.kubelet_identity_client_id
        bootstrap = BootstrapOptions(
            cluster_endpoint=settings.cluster_endpoint,
            ca_bundle=settings.cluster_ca_bundle,
            bootstrap_token=settings.kubelet_bootstrap_token,
            labels=labels,
            taints=[*nodeclaim.spec.taints, *nodeclaim.spec.startup_taints],
            max_pods=max_pods,
            kubelet=node_class.spec.kubelet,
        )
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
            custom_data=custom_data(bootstrap),
            tags=tags,
            accelerated_networking=_label_true(flags, LABEL_SKU_ACCELERATED_NETWORKING),
            encryption_at_host=node_class.spec.encryption_at_host(),
            premium_storage=_label_true(flags, LABEL_SKU_STORAGE_PREMIUM_CAPABLE),
            secondary_ips=max(max_pods - 1, 0) if node_subnet_pods else 0,
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

    def _ready_node_class(self, nodeclaim: NodeClaim) -> AKSNodeClass:
        lookup = self._node_class if self._context.node_classes is not None else None
        return launchable_node_class(
            "azure",
            GROUP,
            KIND,
            nodeclaim.metadata.name or "",
            nodeclaim.spec.node_class_ref,
            lookup,
        )

    def _created(
        self, nodeclaim: NodeClaim, node_class: AKSNodeClass, vm: VirtualMachine
    ) -> NodeClaim:
        claim = nodeclaim.model_copy(deep=True)
        types = {t.name: t for t in self.catalog.instance_types(node_class)}
        instance_type = types.get(vm.vm_size)
        claim.metadata.labels = {
            **self._labels(vm, instance_type),
            **nodeclaim.metadata.labels,
        }
        claim.metadata.annotations = {
            **nodeclaim.metadata.annotations,
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
        }
        self._fill_status(claim, vm, instance_type)
        return claim

    def _labels(self, vm: VirtualMachine, instance_type: InstanceType | None) -> dict[str, str]:
        labels = dict(instance_type.requirements.labels()) if instance_type else {}
        labels[wk.INSTANCE_TYPE] = vm.vm_size
        labels[wk.CAPACITY_TYPE] = vm.capacity_type
        labels[wk.TOPOLOGY_ZONE] = zone_label(self.settings.region, vm.zone)
        return labels

    def _fill_status(
        self, claim: NodeClaim, vm: VirtualMachine, instance_type: InstanceType | None
    ) -> None:
        settings = self.settings
        claim.status.provider_id = provider_id(
            settings.subscription_id, settings.node_resource_group, vm.name
        )
        claim.status.image_id = vm.image_id or None
        if instance_type is None:
            return

        def shown(resources: Mapping[str, int]) -> dict[str, Fraction]:
            return {name: Fraction(amount, 1000) for name, amount in resources.items() if amount}

        claim.status.capacity = shown(instance_type.capacity)
        claim.status.allocatable = shown(instance_type.allocatable)

    # -- get, list, delete ----------------------------------------------------------------------

    def get(self, provider_id: str) -> NodeClaim:
        """The VM behind ``provider_id`` as a NodeClaim; ``NodeClaimNotFound`` once gone."""
        instances = self._instances_or_fail()
        return self._view(instances.get(vm_name_of(provider_id)), {})

    def list(self) -> list[NodeClaim]:
        """Every VM of the cluster tagged with a NodePool, as NodeClaims."""
        instances = self._instances_or_fail()
        seen: dict[str, tuple[AKSNodeClass | None, dict[str, InstanceType]]] = {}
        return [self._view(vm, seen) for vm in instances.list()]

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

    def _view(
        self,
        vm: VirtualMachine,
        seen: dict[str, tuple[AKSNodeClass | None, dict[str, InstanceType]]],
    ) -> NodeClaim:
        """A VM as a NodeClaim (``seen``: each AKSNodeClass read and its types by name)."""
        node_class_name = vm.tags.get(TAG_NODECLASS, "")
        if node_class_name not in seen:
            node_class = self._node_class(node_class_name)
            types = {t.name: t for t in self.catalog.instance_types(node_class)}
            seen[node_class_name] = (node_class, types)
        _, types = seen[node_class_name]
        instance_type = types.get(vm.vm_size)
        labels = self._labels(vm, instance_type)
        nodepool = vm.tags.get(TAG_NODEPOOL)
        if nodepool:
            labels[wk.NODEPOOL] = nodepool
        claim = NodeClaim.model_validate(
            {
                "metadata": {
                    "name": vm.tags.get(TAG_NODECLAIM) or vm.name,
                    "labels": labels,
                    "creationTimestamp": vm.created,
                },
                "spec": {
                    "requirements": [],
                    "nodeClassRef": {
                        "group": GROUP,
                        "kind": KIND,
                        "name": node_class_name or "unknown",
                    },
                },
            }
        )
        self._fill_status(claim, vm, instance_type)
        return claim

    # -- drift, repair, node classes ----------------------------------------------------------

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """Why the VM no longer matches its AKSNodeClass (NodeClassDrift, K8sVersionDrift,
        KubeletIdentityDrift, ImageDrift), or "". The node's kubelet version and labels are read
        from the cluster when there is one; offline, only NodeClassDrift and ImageDrift."""
        ref = nodeclaim.spec.node_class_ref
        if (ref.group, ref.kind) != (GROUP, KIND):
            return ""
        node_class = self._node_class(ref.name)
        if node_class is None:
            return ""
        return drift_reason(
            node_class,
            nodeclaim_annotations=nodeclaim.metadata.annotations,
            nodeclaim_image_id=nodeclaim.status.image_id,
            node=self._node_facts(nodeclaim.status.node_name),
            kubelet_identity_client_id=self.settings.kubelet_identity_client_id,
        )

    def _node_facts(self, node_name: str | None) -> NodeFacts | None:
        """The kubelet version and labels of the Node, None without one (or a cluster); read
        from the apiserver at most once per ``NODE_FACTS_TTL`` per Node."""
        client = self._context.kube_client
        if client is None or not node_name:
            return None
        now = self._context.clock()
        with self._lock:
            cached = self._node_facts_cache.get(node_name)
        if cached is not None and now < cached[0]:
            return cached[1]
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        facts: NodeFacts | None = None
        try:
            response = CoreV1Api(client).read_node(node_name, _preload_content=False)
        except ApiException as error:
            if error.status != 404:
                log.warning("reading node %s for drift failed: %s", node_name, error.reason)
                return None
        else:
            node = json.loads(response.data)
            metadata = node.get("metadata") or {}
            if not metadata.get("deletionTimestamp"):
                info = (node.get("status") or {}).get("nodeInfo") or {}
                facts = NodeFacts(
                    kubelet_version=str(info.get("kubeletVersion") or ""),
                    labels=dict(metadata.get("labels") or {}),
                )
        with self._lock:
            self._node_facts_cache = {
                name: entry for name, entry in self._node_facts_cache.items() if now < entry[0]
            }
            self._node_facts_cache[node_name] = (now + NODE_FACTS_TTL, facts)
        return facts

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        """Upstream's (``karpenter_azure.drift.repair_policies``)."""
        return repair_policies()

    def supported_node_classes(self) -> builtins.list[type[BaseModel]]:
        """AKSNodeClass."""
        return [AKSNodeClass]

    def node_class_readiness(self, nodepool: NodePool) -> NodeClassReadiness:
        """Whether the NodePool's AKSNodeClass exists and is Ready (always ready offline)."""
        if not self.catalog.is_live:
            return NodeClassReadiness(ready=True)
        return node_class_ref_readiness(
            "azure", GROUP, KIND, nodepool.spec.template.spec.node_class_ref, self._node_class
        )


def _label_true(requirements: Requirements, key: str) -> bool:
    requirement = requirements.get(key)
    return requirement is not None and requirement.any() == "true"
