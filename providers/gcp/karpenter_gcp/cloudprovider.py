"""The GCP cloud provider: one Compute Engine instance per NodeClaim, for GCENodeClasses.

``GCPCloudProvider.from_context`` builds it. With a cluster (``kube_client``) or Google clients
it is live: the catalog reads the Compute API (machine types, zones) and Cloud Billing prices,
GCENodeClasses come from the context's read view (the controller's informer cache) and
``create`` launches instances. Without either it is offline (``karpenter simulate``): the
catalog is the packaged data and nothing can be launched.

The provider is a thin layer over its parts: the catalog (``catalog``, priced by ``pricing``),
the instances (``instances``: the choice of offering, the insert, its errors), drift
(``drift``) and the SDK's NodeClass binding and machine view. It finds the GCENodeClass a call
is about, shapes the catalog by it (``build_options``) and hands it down.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from google.auth.exceptions import DefaultCredentialsError

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.kubeletconfig import KubeletConfiguration
from karpenter_core.sdk.machines import MachineView
from karpenter_core.sdk.nodeclass import NodeClassBinding
from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_core.sdk.record import ProviderContext, is_offline
from karpenter_core.sdk.types import (
    CloudProviderError,
    InstanceType,
    NodeClaimNotFound,
    NodeClassReadiness,
    RepairPolicy,
)
from karpenter_gcp.catalog import Catalog
from karpenter_gcp.clients import GCPClients
from karpenter_gcp.drift import drift_reason, repair_policies
from karpenter_gcp.instances import Instances, instance_name, provider_id
from karpenter_gcp.instancetype import BuildOptions
from karpenter_gcp.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    NODE_CLASS,
    GCENodeClass,
    nodeclass_hash,
)
from karpenter_gcp.pricing import GCPPricing
from karpenter_gcp.settings import GCPSettings

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.apis.v1.nodepool import NodePool

__all__ = ["LOCAL_SSD_GIB", "GCPCloudProvider", "build_options"]

LOCAL_SSD_GIB = 375
"""The size of one local SSD partition (GCE's fixed size)."""


def build_options(settings: GCPSettings, node_class: GCENodeClass | None) -> BuildOptions:
    """What of the settings and the GCENodeClass (None: its defaults) shapes instance types:
    the kubelet's pods and reservations, the boot disk or local SSDs for ephemeral storage."""
    base = BuildOptions(
        settings.region, vm_memory_overhead_percent=settings.vm_memory_overhead_percent
    )
    if node_class is None:
        return base
    spec = node_class.spec
    kubelet = spec.kubelet_configuration or KubeletConfiguration()
    local_ssds = [d for d in spec.disks if d.category == "local-ssd"]

    def pairs(values: Mapping[str, object] | None) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, str(v)) for k, v in (values or {}).items()))

    return replace(
        base,
        max_pods=kubelet.max_pods or base.max_pods,
        pods_per_core=kubelet.pods_per_core,
        boot_disk_gib=spec.boot_disk_gib(),
        local_ssd_gib=LOCAL_SSD_GIB * len(local_ssds),
        local_ssd_count=len(local_ssds),
        kube_reserved=pairs(kubelet.kube_reserved),
        system_reserved=pairs(kubelet.system_reserved),
        eviction_hard=pairs(kubelet.eviction_hard),
    )


def _billing(clients: GCPClients) -> Any:
    """The Cloud Billing client, the first client built: ``CloudProviderError`` in one line
    when google-auth finds no credentials."""
    try:
        return clients.billing
    except DefaultCredentialsError as error:
        raise CloudProviderError(
            "the gcp provider found no Google credentials (Workload Identity on GKE, "
            f"GOOGLE_APPLICATION_CREDENTIALS elsewhere): {error}"
        ) from None


class GCPCloudProvider:
    """Launches, lists, drifts and deletes Compute Engine instances for Karpenter."""

    name = "gcp"

    def __init__(
        self,
        settings: GCPSettings,
        clients: GCPClients,
        catalog: Catalog,
        unavailable: UnavailableOfferings,
        context: ProviderContext,
    ) -> None:
        self.settings = settings
        self.clients = clients
        self.catalog = catalog
        self.unavailable = unavailable
        self._context = context
        self._live = not is_offline(context)
        self.node_classes = NodeClassBinding[GCENodeClass]("gcp", NODE_CLASS, context)
        self.view = MachineView(self.node_classes, self._instance_types)
        self._lock = threading.Lock()
        self._instances: Instances | None = None

    @classmethod
    def from_context(cls, context: ProviderContext) -> GCPCloudProvider:
        """The factory: live with a cluster or Google clients, offline (packaged catalog)
        without."""
        settings = GCPSettings.from_mapping(context.settings)
        clients = GCPClients.create(
            settings.project_id, endpoint=settings.api_endpoint or None, given=context.clients
        )
        unavailable = UnavailableOfferings(clock=context.clock)
        if is_offline(context):
            pricing = GCPPricing(settings.region)
            catalog = Catalog.offline(settings.region, pricing, unavailable)
        else:
            pricing = GCPPricing(settings.region, _billing(clients))
            catalog = Catalog.live(clients, settings.region, pricing, unavailable)
        return cls(settings, clients, catalog, unavailable, context)

    @property
    def zones(self) -> builtins.list[str]:
        """The region's zones that offer a machine type (read with the catalog)."""
        return sorted({zone for row in self.catalog.rows.current() for zone in row.zones})

    # -- catalog ------------------------------------------------------------------------------

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        """The machine types for the NodePool's GCENodeClass. Offline, the packaged catalog
        shaped by the GCENodeClass of the input (its defaults when it is not there); live, none
        when the GCENodeClass is missing or another provider's kind."""
        if not self.node_classes.owns(nodepool.spec.template.spec.node_class_ref):
            return []
        node_class = self.node_classes.of_nodepool(nodepool)
        if self._live and node_class is None and self.node_classes.has_view:
            return []
        return builtins.list(self._instance_types(node_class))

    def _instance_types(self, node_class: GCENodeClass | None) -> builtins.list[InstanceType]:
        return self.catalog.instance_types(build_options(self.settings, node_class))

    # -- instances ----------------------------------------------------------------------------

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Launch an instance for the NodeClaim, or return the one launched for it before."""
        instances = self._instances_or_fail()
        node_class = self.node_classes.launchable(nodeclaim)
        machine = instances.create(nodeclaim, node_class, self._instance_types(node_class))
        annotations = {
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
        }
        return self.view.created(nodeclaim, node_class, machine, annotations)

    def get(self, provider_id: str) -> NodeClaim:
        """The instance behind ``provider_id`` as a NodeClaim; ``NodeClaimNotFound`` once gone."""
        return self.view.nodeclaim(self._instances_or_fail().get(provider_id))

    def list(self) -> builtins.list[NodeClaim]:
        """Every instance of the cluster labelled with a NodePool, as NodeClaims."""
        return self.view.nodeclaims(self._instances_or_fail().list())

    def delete(self, nodeclaim: NodeClaim) -> None:
        """Start deleting the instance (and its disks); ``NodeClaimNotFound`` once it is being
        deleted or gone. A NodeClaim without a providerID is looked for by name in each zone."""
        instances = self._instances_or_fail()
        known = nodeclaim.status.provider_id
        if not known:
            name = instance_name(nodeclaim.metadata.name or "")
            found = (instances.find(zone, name) for zone in self.zones)
            machine = next((m for m in found if m is not None), None)
            if machine is None:
                raise NodeClaimNotFound(f"no instance {name!r} in {self.settings.region}")
            known = provider_id(self.settings.project_id, machine.zone, machine.id)
        instances.delete(known)

    def _instances_or_fail(self) -> Instances:
        if not self._live:
            raise CloudProviderError(
                "the gcp provider is offline (no cluster and no Google clients): it serves the "
                "packaged machine types only; launching and listing instances need GCP"
            )
        problems = self.settings.launch_problems()
        if problems:
            raise CloudProviderError(
                "the gcp provider needs these settings to launch and list instances: "
                + ", ".join(problems)
            )
        with self._lock:
            if self._instances is None:
                self._instances = Instances(
                    self.clients, self.settings, self.zones, self.unavailable, self._context.clock
                )
            return self._instances

    # -- drift, repair, node classes ----------------------------------------------------------

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """Why the instance no longer matches its GCENodeClass (NodeClassDrift, ImageDrift),
        or ""."""
        node_class = self.node_classes.of_nodeclaim(nodeclaim)
        return "" if node_class is None else drift_reason(nodeclaim, node_class)

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        """The community provider's (``karpenter_gcp.drift.repair_policies``)."""
        return repair_policies()

    def supported_node_classes(self) -> builtins.list[type[BaseModel]]:
        """GCENodeClass."""
        return self.node_classes.supported()

    def node_class_readiness(self, nodepool: NodePool) -> NodeClassReadiness:
        """Whether the NodePool's GCENodeClass exists and is Ready (always ready offline)."""
        return self.node_classes.readiness(nodepool, live=self._live)
