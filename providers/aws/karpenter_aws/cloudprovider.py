"""The AWS cloud provider: EC2 instances launched with CreateFleet for EC2NodeClasses.

``AWSCloudProvider.from_context`` builds it. With a cluster (``kube_client``) or AWS clients it
is live: the catalog reads EC2, EC2NodeClasses come from the context's read view (the
controller's informer cache) and ``create`` launches instances. Without either it is offline
(``karpenter simulate``): the catalog is the packaged data and nothing can be launched.

The provider is a thin layer over its parts, each in its own module: the instance type catalog
(``catalog``), the price refresher (``pricerefresh``), the cluster's details (``cluster``), the
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
from karpenter_aws.nodeclass import GROUP, KIND, EC2NodeClass
from karpenter_aws.pricerefresh import PriceRefresher
from karpenter_aws.pricing import PriceBook
from karpenter_aws.settings import AWSSettings
from karpenter_aws.unavailable import UnavailableOfferings
from karpenter_aws.view import NodeClaimView
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.nodeclass import launchable_node_class, node_class_ref_readiness
from karpenter_core.sdk.record import ProviderContext
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
        self._prices = PriceRefresher(catalog.prices, clients, settings.isolated_vpc, context.clock)
        self._cluster = ClusterResolver(settings, clients, context.clock)
        self._view = NodeClaimView(
            catalog.instance_types, catalog.zones, self._node_class, context.clock
        )
        self._lock = threading.Lock()
        self._launcher_built: InstanceLauncher | None = None

    @classmethod
    def from_context(cls, context: ProviderContext) -> AWSCloudProvider:
        """The factory: live with a cluster or AWS clients, offline (packaged catalog) without."""
        settings = AWSSettings.from_mapping(context.settings)
        clients = AWSClients(settings, context.clients)
        unavailable = UnavailableOfferings(clock=context.clock)
        if context.kube_client is None and not context.clients:
            catalog = InstanceTypeCatalog.offline(settings, unavailable)
        else:
            prices = PriceBook(clients.region, isolated_vpc=settings.isolated_vpc)
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
            return list(self.catalog.instance_types(self._node_class_of(nodepool)))
        self._prices.refresh_when_due()
        if self._context.node_classes is None:
            return list(self.catalog.instance_types(None))
        node_class = self._node_class_of(nodepool)
        if node_class is None:
            return []
        return list(self.catalog.instance_types(node_class))

    def refresh_prices(self) -> None:
        """Read on-demand (unless in an isolated VPC) and spot prices now; failures are logged
        and the previous prices kept."""
        self._prices.refresh()

    # -- instances ----------------------------------------------------------------------------

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Launch an instance for the NodeClaim (or find the one launched for it before).

        Concurrent creates share one lookup of their instances and, when their requests are
        the same, one CreateFleet: each counts as expected by both batches until it joins them.
        """
        launcher = self._launcher()
        with launcher.expecting():
            node_class = self._ready_node_class(nodeclaim)
            instance = launcher.launch(nodeclaim, node_class)
            return self._view.created(nodeclaim, node_class, instance)

    def get(self, provider_id: str) -> NodeClaim:
        """The instance behind ``provider_id`` as a NodeClaim (as read within the instance cache's
        minute); ``NodeClaimNotFound`` once gone."""
        instance = self._launcher().instances.get(instance_id_of(provider_id))
        return self._view.nodeclaim(instance)

    def list(self) -> builtins.list[NodeClaim]:
        """Every live instance of the cluster tagged with a NodePool, as NodeClaims."""
        return self._view.nodeclaims(self._launcher().instances.list())

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
        ref = nodeclaim.spec.node_class_ref
        if (ref.group, ref.kind) != (GROUP, KIND):
            return ""
        node_class = self._node_class(ref.name)
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
        return [EC2NodeClass]

    def node_class_readiness(self, nodepool: NodePool) -> NodeClassReadiness:
        """Whether the NodePool's EC2NodeClass exists and is Ready (always ready offline)."""
        if not self.catalog.is_live:
            return NodeClassReadiness(ready=True)
        return node_class_ref_readiness(
            "aws", GROUP, KIND, nodepool.spec.template.spec.node_class_ref, self._node_class
        )

    def _node_class(self, name: str) -> EC2NodeClass | None:
        """The EC2NodeClass ``name`` from the context's read view; None when it is missing, is
        being deleted (as upstream, a deleting EC2NodeClass launches nothing) or there is no
        view."""
        lookup = self._context.node_classes
        found = lookup(KIND, name) if lookup is not None and name else None
        if not isinstance(found, EC2NodeClass) or found.metadata.deletion_timestamp is not None:
            return None
        return found

    def _node_class_of(self, nodepool: NodePool) -> EC2NodeClass | None:
        ref = nodepool.spec.template.spec.node_class_ref
        if (ref.group, ref.kind) != (GROUP, KIND):
            return None
        return self._node_class(ref.name)

    def _ready_node_class(self, nodeclaim: NodeClaim) -> EC2NodeClass:
        """The NodeClaim's EC2NodeClass; ``NodeClassNotReady`` (or, without a view of
        EC2NodeClasses, ``CloudProviderError``) when it cannot be launched from."""
        lookup = self._node_class if self._context.node_classes is not None else None
        return launchable_node_class(
            "aws", GROUP, KIND, nodeclaim.metadata.name or "", nodeclaim.spec.node_class_ref, lookup
        )
