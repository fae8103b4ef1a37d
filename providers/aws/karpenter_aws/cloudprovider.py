"""The AWS cloud provider: EC2 instances launched with CreateFleet for EC2NodeClasses.

``AWSCloudProvider.from_context`` builds it. With a cluster (``kube_client``) or AWS clients it
is live: the catalog reads EC2, EC2NodeClasses come from the context's read view (the
controller's informer cache) and ``create`` launches instances. Without either it is offline
(``karpenter simulate``): the catalog is the packaged data and nothing can be launched.

The provider is a thin layer over its parts, each in its own module: the instance type catalog
(``catalog``, whose ``PriceBook`` refreshes its prices), the cluster's details (``cluster``), the
instance launcher (``launcher``: subnets, launch templates, CreateFleet), drift (``drift``) and the
NodeClaim view of instances (``view``). It finds the EC2NodeClass a call is about and hands it
down.
"""

from __future__ import annotations

import builtins
import logging
import threading
from datetime import timedelta
from typing import TYPE_CHECKING

from karpenter_aws.catalog import InstanceTypeCatalog
from karpenter_aws.clients import AWSClients
from karpenter_aws.cluster import ClusterResolver
from karpenter_aws.drift import drift_reason
from karpenter_aws.instances import instance_id_of
from karpenter_aws.launcher import InstanceLauncher
from karpenter_aws.nodeclass import NODE_CLASS, EC2NodeClass
from karpenter_aws.pricing import PriceBook
from karpenter_aws.settings import AWSSettings
from karpenter_aws.unavailable import UnavailableOfferings
from karpenter_aws.view import created_annotations, machine, nodeclaim_view
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.nodeclass import NodeClassBinding
from karpenter_core.sdk.record import ProviderContext, is_offline
from karpenter_core.sdk.types import (
    CloudProviderError,
    InstanceType,
    NodeClassReadiness,
    RepairPolicy,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.apis.v1.nodepool import NodePool

__all__ = ["AWSCloudProvider"]

log = logging.getLogger("karpenter.aws")


class AWSCloudProvider:
    """Launches, lists, drifts and terminates EC2 instances for Karpenter."""

    name = "aws"

    def __init__(
        self,
        settings: AWSSettings,
        clients: AWSClients,
        catalog: InstanceTypeCatalog,
        unavailable: UnavailableOfferings,
        context: ProviderContext,
    ) -> None:
        self.settings = settings
        self.clients = clients
        self.catalog = catalog
        self.unavailable = unavailable
        self._context = context
        self._cluster = ClusterResolver(settings, clients, context.clock)
        self.node_classes = NodeClassBinding[EC2NodeClass]("aws", NODE_CLASS, context)
        self.view = nodeclaim_view(self.node_classes, catalog.instance_types, catalog.zones)
        self._lock = threading.Lock()
        self._launcher_built: InstanceLauncher | None = None

    @classmethod
    def from_context(cls, context: ProviderContext) -> AWSCloudProvider:
        """The factory: live with a cluster or AWS clients, offline (packaged catalog) without."""
        settings = AWSSettings.from_mapping(context.settings)
        clients = AWSClients(settings, context.clients)
        unavailable = UnavailableOfferings(clock=context.clock)
        if is_offline(context):
            catalog = InstanceTypeCatalog.offline(settings, unavailable)
        else:
            prices = PriceBook(
                clients.region, isolated_vpc=settings.isolated_vpc, now=context.clock
            )
            catalog = InstanceTypeCatalog.live(
                settings, clients.ec2, prices, unavailable, context.clock
            )
        return cls(settings, clients, catalog, unavailable, context)

    # -- catalog ------------------------------------------------------------------------------

    def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
        """The instance types of the NodePool's EC2NodeClass. Offline (``karpenter
        simulate``), the packaged catalog shaped by the EC2NodeClass of the input (the
        defaults when it is not there); live, none when the EC2NodeClass is missing, or the
        whole catalog when the context has no view of EC2NodeClasses (AWS clients only)."""
        if not self.catalog.is_live:
            return list(self.catalog.instance_types(self.node_classes.of_nodepool(nodepool)))
        self.catalog.prices.refresh_in_background(
            lambda: self.clients.pricing, lambda: self.clients.ec2
        )
        if not self.node_classes.has_view:
            return list(self.catalog.instance_types(None))
        node_class = self.node_classes.of_nodepool(nodepool)
        if node_class is None:
            return []
        return list(self.catalog.instance_types(node_class))

    def refresh_prices(self) -> None:
        """Read on-demand (unless in an isolated VPC) and spot prices now; failures are logged
        and the previous prices kept."""
        self.catalog.prices.refresh(self.clients.pricing, self.clients.ec2)

    # -- instances ----------------------------------------------------------------------------

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Launch an instance for the NodeClaim (or find the one launched for it before).

        Concurrent creates share one lookup of their instances and, when their requests are
        the same, one CreateFleet: each counts as expected by both batches until it joins them.
        """
        launcher = self._launcher()
        with launcher.expecting():
            node_class = self.node_classes.launchable(nodeclaim)
            instance = launcher.launch(nodeclaim, node_class)
            annotations = created_annotations(node_class)
            return self.view.created(nodeclaim, node_class, machine(instance), annotations)

    def get(self, provider_id: str) -> NodeClaim:
        """The instance behind ``provider_id`` as a NodeClaim (as read within the instance cache's
        minute); ``NodeClaimNotFound`` once gone."""
        instance = self._launcher().instances.get(instance_id_of(provider_id))
        return self.view.nodeclaim(machine(instance))

    def list(self) -> builtins.list[NodeClaim]:
        """Every live instance of the cluster tagged with a NodePool, as NodeClaims."""
        return self.view.nodeclaims(map(machine, self._launcher().instances.list()))

    def delete(self, nodeclaim: NodeClaim) -> None:
        """Start terminating the instance (read afresh); ``NodeClaimNotFound`` once it is gone."""
        instances = self._launcher().instances
        instance_id = instance_id_of(nodeclaim.status.provider_id)
        instance = instances.terminate(instance_id)
        if instance.state != "shutting-down":
            log.info(
                "terminating instance",
                extra={"nodeclaim": nodeclaim.metadata.name, "instance_id": instance_id},
            )

    def _launcher(self) -> InstanceLauncher:
        """The launcher, built on first use; ``CloudProviderError`` offline or without the
        cluster name."""
        if not self.catalog.is_live:
            raise CloudProviderError(
                "the aws provider is offline (no cluster and no AWS clients): it serves the "
                "packaged instance types only; launching and listing instances need AWS"
            )
        if not self.settings.cluster_name:
            raise CloudProviderError(
                "the aws provider needs the cluster name to launch instances: set "
                "--cluster-name (CLUSTER_NAME)"
            )
        with self._lock:
            if self._launcher_built is None:
                self._launcher_built = InstanceLauncher(
                    self.settings,
                    self.clients.ec2,
                    self.catalog,
                    self.unavailable,
                    self._cluster,
                    self._context.clock,
                )
            return self._launcher_built

    # -- drift, repair, node classes ----------------------------------------------------------

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """Why the instance no longer matches its EC2NodeClass: NodeClassDrift (the hashed spec
        changed), AMIDrift, SecurityGroupDrift or SubnetDrift; "" when it still matches.
        Offline (``karpenter simulate``), only NodeClassDrift, against the EC2NodeClasses of
        the input."""
        node_class = self.node_classes.of_nodeclaim(nodeclaim)
        if node_class is None:
            return ""
        return drift_reason(
            nodeclaim,
            node_class,
            live=self.catalog.is_live,
            instance_types=self.catalog.instance_types,
            instance=lambda: self._launcher().instances.get(
                instance_id_of(nodeclaim.status.provider_id)
            ),
        )

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        """Upstream's: the kubelet's Ready condition, and the EKS node monitoring agent's."""
        minutes = timedelta(minutes=1)
        return [
            RepairPolicy("Ready", "False", 30 * minutes),
            RepairPolicy("Ready", "Unknown", 30 * minutes),
            RepairPolicy("AcceleratedHardwareReady", "False", 10 * minutes),
            RepairPolicy("StorageReady", "False", 30 * minutes),
            RepairPolicy("NetworkingReady", "False", 30 * minutes),
            RepairPolicy("KernelReady", "False", 30 * minutes),
            RepairPolicy("ContainerRuntimeReady", "False", 30 * minutes),
        ]

    def supported_node_classes(self) -> builtins.list[type[BaseModel]]:
        """EC2NodeClass."""
        return self.node_classes.supported()

    def node_class_readiness(self, nodepool: NodePool) -> NodeClassReadiness:
        """Whether the NodePool's EC2NodeClass exists and is Ready (always ready offline)."""
        return self.node_classes.readiness(nodepool, live=self.catalog.is_live)
