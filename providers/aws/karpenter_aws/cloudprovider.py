"""The AWS cloud provider: EC2 instances launched with CreateFleet for EC2NodeClasses.

``AWSCloudProvider.from_context`` builds it. With a cluster (``kube_client``) or AWS clients it
is live: the catalog reads EC2, EC2NodeClasses come from the context's read view (the
controller's informer cache) and ``create`` launches instances. Without either it is offline (``karpenter simulate``): the catalog is the
packaged data and nothing can be launched.

A launch takes the cheapest instance types the NodeClaim allows (at most 60), groups them by AMI
(from the EC2NodeClass's ``status.amis``) and pod capacity into launch templates, and asks
CreateFleet for one instance of any of them, in one subnet per zone. Offerings EC2 has no
capacity for are kept out for a while (``UnavailableOfferings``).
"""

from __future__ import annotations

import builtins
import ipaddress
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from karpenter_aws.amis import map_to_instance_types
from karpenter_aws.catalog import InstanceTypeCatalog
from karpenter_aws.clients import AWSClients
from karpenter_aws.errors import AWS_ERRORS, describe_error, error_code
from karpenter_aws.fleet import (
    FleetBatcher,
    FleetOutcome,
    TemplateOverrides,
    capacity_type_for,
    compatible_instance_types,
    fleet_failure,
    fleet_request,
    launch_template_config,
    offerings_for,
)
from karpenter_aws.instances import Instance, Instances, instance_id_of, provider_id
from karpenter_aws.instancetype import RESOURCE_EFA
from karpenter_aws.labels import (
    ANNOTATION_INSTANCE_PROFILE,
    LABEL_NODECLASS,
    LABEL_TOPOLOGY_ZONE_ID,
    TAG_EKS_CLUSTER_NAME,
    TAG_NAME,
    TAG_NODECLAIM,
    TAG_NODECLASS,
    TAG_NODEPOOL,
    cluster_tag,
)
from karpenter_aws.launchtemplates import NOT_FOUND_CODES, LaunchTemplateConfig, LaunchTemplates
from karpenter_aws.nodeclass import (
    AMI_FAMILY_AL2023,
    GROUP,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    KIND,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_aws.pricing import PriceBook
from karpenter_aws.settings import AWSSettings
from karpenter_aws.subnets import ZonalSubnets
from karpenter_aws.unavailable import UnavailableOfferings
from karpenter_aws.userdata import BootstrapOptions, UserDataError, build_user_data
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.nodeclass import launchable_node_class, node_class_ref_readiness
from karpenter_core.sdk.record import ProviderContext
from karpenter_core.sdk.types import (
    CloudProviderError,
    CreateError,
    InstanceType,
    InsufficientCapacity,
    NodeClaimNotFound,
    NodeClassReadiness,
    RepairPolicy,
    Requirements,
    launch_request,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.apis.v1.nodepool import NodePool

__all__ = [
    "CLUSTER_RETRY",
    "PRICE_REFRESH",
    "AWSCloudProvider",
    "ClusterInfo",
    "cluster_dns_ip",
    "launch_tags",
    "node_labels",
]

log = logging.getLogger("karpenter.aws")

CLUSTER_RETRY = timedelta(minutes=1)
"""How long after a failed (or incomplete) EKS DescribeCluster it is tried again."""
PRICE_REFRESH = timedelta(hours=12)
"""How often on-demand and spot prices are read again (live catalogs only)."""

_DRIFT_NODECLASS = "NodeClassDrift"
_DRIFT_AMI = "AMIDrift"
_DRIFT_SECURITY_GROUP = "SecurityGroupDrift"
_DRIFT_SUBNET = "SubnetDrift"
_TERMINATING = frozenset({"shutting-down", "terminated"})
_RESTRICTED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io")


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What nodes need to join the cluster."""

    endpoint: str
    ca_bundle: str
    service_cidr: str
    lookup_error: str = ""
    """Why EKS DescribeCluster did not fill in what the settings leave out ("" when it did)."""

    @property
    def cluster_dns(self) -> tuple[str, ...]:
        """The cluster DNS address: the tenth address of the service CIDR (EKS's kube-dns)."""
        address = cluster_dns_ip(self.service_cidr)
        return (address,) if address else ()


def cluster_dns_ip(service_cidr: str) -> str | None:
    """The tenth address of ``service_cidr``, or None when it is not a CIDR."""
    try:
        network = ipaddress.ip_network(service_cidr.strip(), strict=False)
    except ValueError:
        return None
    return str(network[10]) if network.num_addresses > 10 else None


def launch_tags(cluster_name: str, node_class: EC2NodeClass, nodepool: str) -> dict[str, str]:
    """Tags of everything launched for ``node_class``: its ``spec.tags`` and Karpenter's own."""
    return {
        **node_class.spec.tags,
        cluster_tag(cluster_name): "owned",
        TAG_NODEPOOL: nodepool,
        TAG_EKS_CLUSTER_NAME: cluster_name,
        TAG_NODECLASS: node_class.metadata.name or "",
    }


def node_labels(labels: Mapping[str, str], capacity_type: str) -> dict[str, str]:
    """Labels the kubelet registers the node with: the NodeClaim's and the capacity type,
    without those node admission refuses (``kubernetes.io`` and ``k8s.io`` domains)."""
    out = {}
    for key, value in {**labels, wk.CAPACITY_TYPE: capacity_type}.items():
        domain = wk.label_domain(key)
        if any(domain == d or domain.endswith("." + d) for d in _RESTRICTED_LABEL_DOMAINS):
            continue
        out[key] = value
    return out


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
        self._lock = threading.Lock()
        self._cluster_info: ClusterInfo | None = None
        self._cluster_retry: tuple[datetime, ClusterInfo] | None = None
        self._prices_due: datetime | None = None
        self._launcher: _Launcher | None = None

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

    # -- node classes -------------------------------------------------------------------------

    @property
    def _has_node_classes(self) -> bool:
        """Whether the context gave a read view of the EC2NodeClasses."""
        return self._context.node_classes is not None

    def _node_class(self, name: str) -> EC2NodeClass | None:
        """The EC2NodeClass ``name`` from the context's read view; None when it is missing, is
        being deleted (as upstream, a deleting EC2NodeClass launches nothing) or there is no
        view."""
        lookup = self._context.node_classes
        found = lookup(KIND, name) if lookup is not None and name else None
        if not isinstance(found, EC2NodeClass) or found.metadata.deletion_timestamp is not None:
            return None
        return found

    # -- catalog ------------------------------------------------------------------------------

    def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
        """The instance types of the NodePool's EC2NodeClass. Offline (``karpenter
        simulate``), the packaged catalog shaped by the EC2NodeClass of the input (the
        defaults when it is not there); live, none when the EC2NodeClass is missing, or the
        whole catalog when the context has no view of EC2NodeClasses (AWS clients only)."""
        if not self.catalog.is_live:
            return list(self.catalog.instance_types(self._node_class_of(nodepool)))
        self._refresh_prices_when_due()
        if not self._has_node_classes:
            return list(self.catalog.instance_types(None))
        node_class = self._node_class_of(nodepool)
        if node_class is None:
            return []
        return list(self.catalog.instance_types(node_class))

    def refresh_prices(self) -> None:
        """Read on-demand (unless in an isolated VPC) and spot prices now; failures are logged
        and the previous prices kept."""
        with self._lock:
            self._prices_due = self._context.clock() + PRICE_REFRESH
        prices = self.catalog.prices
        if not self.settings.isolated_vpc:
            prices.refresh_on_demand(self.clients.pricing)
        prices.refresh_spot(self.clients.ec2)

    def _refresh_prices_when_due(self) -> None:
        with self._lock:
            due = self._prices_due is None or self._context.clock() >= self._prices_due
            if due:
                self._prices_due = self._context.clock() + PRICE_REFRESH
        if due:
            threading.Thread(target=self._refresh_quietly, name="aws-prices", daemon=True).start()

    def _refresh_quietly(self) -> None:
        try:
            self.refresh_prices()
        except Exception as error:  # a background refresh must not die loudly; prices stay
            log.warning("refreshing EC2 prices failed: %s", error)

    # -- launch -------------------------------------------------------------------------------

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Launch an instance for the NodeClaim (or find the one launched for it before).

        Concurrent creates share one lookup of their instances and, when their requests are
        the same, one CreateFleet: each counts as expected by both batches until it joins them.
        """
        launcher = self._launch_parts()
        with launcher.instances.expecting_lookup(), launcher.batcher.expecting():
            return self._create(launcher, nodeclaim)

    def _create(self, launcher: _Launcher, nodeclaim: NodeClaim) -> NodeClaim:
        name = nodeclaim.metadata.name or ""
        node_class = self._ready_node_class(nodeclaim)
        existing = launcher.instances.find_for_nodeclaim(name)
        if existing is not None:
            log.info(
                "found the instance launched before",
                extra={"nodeclaim": name, "instance_id": existing.id},
            )
            return self._created(nodeclaim, node_class, existing)
        requirements, requests = launch_request(nodeclaim)
        instance_types = compatible_instance_types(
            self.catalog.instance_types(node_class), requirements, requests
        )
        if not instance_types:
            raise InsufficientCapacity(
                f"no instance type of {KIND} {node_class.metadata.name!r} meets the requirements "
                f"and requests of NodeClaim {name!r} with an available offering"
            )
        capacity_type = capacity_type_for(requirements, instance_types)
        tags = launch_tags(
            self.settings.cluster_name, node_class, nodeclaim.metadata.labels.get(wk.NODEPOOL, "")
        )
        own_tags = {TAG_NODECLAIM: name}
        if TAG_NAME not in node_class.spec.tags:
            own_tags[TAG_NAME] = name
        outcome = self._launch(
            launcher,
            nodeclaim,
            node_class,
            instance_types,
            requirements,
            capacity_type,
            tags,
            own_tags,
        )
        for error in outcome.errors:
            if error.insufficient_capacity and error.instance_type and error.zone:
                self.unavailable.mark(capacity_type, error.instance_type, error.zone, error.code)
            if error.code == "InsufficientFreeAddressesInSubnet" and error.subnet_id:
                launcher.subnets.mark_exhausted(error.subnet_id)
        if outcome.instance is None:
            raise fleet_failure(outcome.errors, name)
        launched = outcome.instance
        instance = Instance(
            id=launched.instance_id,
            instance_type=launched.instance_type,
            zone=launched.zone,
            state="pending",
            image_id=launched.image_id,
            subnet_id=launched.subnet_id,
            security_group_ids=tuple(sorted(g.id for g in node_class.status.security_groups)),
            capacity_type=launched.capacity_type,
            tags={**tags, **own_tags},
            launch_time=self._context.clock(),
        )
        launcher.instances.remember(instance)
        log.info(
            "launched instance",
            extra={
                "nodeclaim": name,
                "instance_id": instance.id,
                "instance_type": instance.instance_type,
                "zone": instance.zone,
                "capacity_type": instance.capacity_type,
            },
        )
        return self._created(nodeclaim, node_class, instance)

    def _launch_parts(self) -> _Launcher:
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
            if self._launcher is None:
                ec2 = self.clients.ec2
                settings = self.settings
                self._launcher = _Launcher(
                    instances=Instances(
                        ec2, settings.cluster_name, settings.batch_idle, settings.batch_max
                    ),
                    templates=LaunchTemplates(ec2, settings.cluster_name, self._context.clock),
                    subnets=ZonalSubnets(ec2, self._context.clock),
                    batcher=FleetBatcher(ec2, settings.batch_idle, settings.batch_max),
                )
            return self._launcher

    def _ready_node_class(self, nodeclaim: NodeClaim) -> EC2NodeClass:
        lookup = self._node_class if self._has_node_classes else None
        return launchable_node_class(
            "aws", GROUP, KIND, nodeclaim.metadata.name or "", nodeclaim.spec.node_class_ref, lookup
        )

    def _launch(
        self,
        launcher: _Launcher,
        nodeclaim: NodeClaim,
        node_class: EC2NodeClass,
        instance_types: Sequence[InstanceType],
        requirements: Requirements,
        capacity_type: str,
        tags: Mapping[str, str],
        own_tags: Mapping[str, str],
    ) -> FleetOutcome:
        name = nodeclaim.metadata.name or ""
        for attempt in range(2):
            templates = self._templates(
                launcher, nodeclaim, node_class, instance_types, requirements, capacity_type, tags
            )
            subnets = self._subnets(launcher, node_class)
            configs = [
                config
                for config in (launch_template_config(t, subnets) for t in templates)
                if config is not None
            ]
            if not configs:
                raise CreateError(
                    "NoSubnetForOfferings",
                    f"no subnet of {KIND} {node_class.metadata.name!r} is in a zone where the "
                    f"instance types for NodeClaim {name!r} are offered",
                )
            request = fleet_request(capacity_type, configs, tags)
            try:
                return launcher.batcher.launch(request, own_tags, capacity_type)
            except AWS_ERRORS as error:
                code = error_code(error)
                if code in NOT_FOUND_CODES and attempt == 0:
                    for template in templates:
                        launcher.templates.invalidate(template.template_name)
                    continue
                raise CreateError(
                    code or "CreateFleetFailed",
                    describe_error(f"creating a fleet for NodeClaim {name!r}", error),
                ) from None
        raise AssertionError("unreachable")

    def _subnets(self, launcher: _Launcher, node_class: EC2NodeClass) -> dict[str, str]:
        ids = [s.id for s in node_class.status.subnets]
        try:
            zonal = launcher.subnets.get(ids)
        except AWS_ERRORS as error:
            raise CreateError(
                "SubnetResolutionFailed",
                describe_error(
                    f"describing the subnets of {KIND} {node_class.metadata.name!r}", error
                ),
            ) from None
        return {zone: subnet.id for zone, subnet in zonal.items()}

    def _templates(
        self,
        launcher: _Launcher,
        nodeclaim: NodeClaim,
        node_class: EC2NodeClass,
        instance_types: Sequence[InstanceType],
        requirements: Requirements,
        capacity_type: str,
        tags: Mapping[str, str],
    ) -> list[TemplateOverrides]:
        """One launch template per (AMI, pod capacity), with its types' offerings."""
        node_class_name = node_class.metadata.name or ""
        by_ami = map_to_instance_types(instance_types, node_class.status.amis)
        if not by_ami:
            raise CreateError(
                "NoCompatibleAMI",
                f"no AMI of {KIND} {node_class_name!r} ("
                + ", ".join(a.id for a in node_class.status.amis)
                + ") fits the instance types NodeClaim "
                f"{nodeclaim.metadata.name!r} allows",
            )
        groups: dict[tuple[str, int], list[InstanceType]] = {}
        for ami_id, types in by_ami.items():
            for instance_type in types:
                pods = instance_type.capacity.get("pods", 0) // 1000
                groups.setdefault((ami_id, pods), []).append(instance_type)
        cluster = self._cluster()
        self._check_cluster(cluster, node_class)
        labels = node_labels(nodeclaim.metadata.labels, capacity_type)
        taints = [*nodeclaim.spec.taints, *nodeclaim.spec.startup_taints]
        rank = {t.name: i for i, t in enumerate(instance_types)}
        out = []
        for (ami_id, pods), types in sorted(
            groups.items(), key=lambda item: min(rank[t.name] for t in item[1])
        ):
            options = BootstrapOptions.for_node_class(
                node_class,
                cluster_name=self.settings.cluster_name,
                cluster_endpoint=cluster.endpoint,
                ca_bundle=cluster.ca_bundle or None,
                service_cidr=cluster.service_cidr or None,
                cluster_dns=cluster.cluster_dns,
                labels=labels,
                taints=taints,
                max_pods=pods,
            )
            try:
                user_data = build_user_data(node_class.resolved_ami_family(), options)
            except (UserDataError, ValueError) as error:
                raise CreateError("UserDataInvalid", str(error)) from None
            config = LaunchTemplateConfig.build(node_class, ami_id, user_data, tags)
            template = launcher.templates.ensure(config)
            pairs = tuple(
                (t.name, o.zone)
                for t in sorted(types, key=lambda t: rank[t.name])
                for o in offerings_for(t, requirements, capacity_type)
            )
            if pairs:
                out.append(TemplateOverrides(template, ami_id, pairs))
        return out

    def _cluster(self) -> ClusterInfo:
        """The cluster endpoint, CA and service CIDR: the settings, else EKS DescribeCluster.

        A complete answer is kept. After a failed or incomplete one, the settings (and what EKS
        did say) are used, and EKS is asked again after ``CLUSTER_RETRY``.
        """
        now = self._context.clock()
        with self._lock:
            if self._cluster_info is not None:
                return self._cluster_info
            retry = self._cluster_retry
        if retry is not None and now < retry[0]:
            return retry[1]
        settings = self.settings
        endpoint = settings.cluster_endpoint
        ca_bundle = settings.cluster_ca_bundle
        service_cidr = settings.service_cidr
        problem = ""
        if not (endpoint and ca_bundle and service_cidr):
            cluster: dict[str, Any] = {}
            try:
                cluster = self.clients.eks.describe_cluster(name=settings.cluster_name)["cluster"]
            except AWS_ERRORS as error:
                problem = describe_error(
                    f"reading EKS cluster {settings.cluster_name!r} failed", error
                )
                log.warning("%s", problem)
            network = cluster.get("kubernetesNetworkConfig") or {}
            endpoint = endpoint or cluster.get("endpoint") or ""
            ca_bundle = ca_bundle or (cluster.get("certificateAuthority") or {}).get("data") or ""
            service_cidr = (
                service_cidr
                or network.get("serviceIpv4Cidr")
                or network.get("serviceIpv6Cidr")
                or ""
            )
            if not problem and not (endpoint and service_cidr):
                problem = f"EKS cluster {settings.cluster_name!r} reports no " + (
                    "endpoint" if not endpoint else "service CIDR"
                )
        info = ClusterInfo(endpoint, ca_bundle, service_cidr, problem)
        with self._lock:
            if problem:
                self._cluster_retry = (now + CLUSTER_RETRY, info)
            else:
                self._cluster_info = info
        return info

    def _check_cluster(self, cluster: ClusterInfo, node_class: EC2NodeClass) -> None:
        """``CreateError`` when nodes of ``node_class`` could not join: no cluster endpoint, or
        no service CIDR for AL2023 (nodeadm needs it)."""
        name = self.settings.cluster_name
        why = f" ({cluster.lookup_error})" if cluster.lookup_error else ""
        if not cluster.endpoint:
            raise CreateError(
                "ClusterDiscoveryFailed",
                f"the endpoint of cluster {name!r} is unknown{why}: set --cluster-endpoint "
                "(CLUSTER_ENDPOINT) or allow eks:DescribeCluster",
            )
        if node_class.resolved_ami_family() == AMI_FAMILY_AL2023 and not cluster.service_cidr:
            raise CreateError(
                "ClusterCIDRUnknown",
                f"{KIND} {node_class.metadata.name!r} uses AL2023, whose nodeadm needs the "
                f"service CIDR of cluster {name!r}, which is unknown{why}: set --service-cidr "
                "(SERVICE_CIDR) or allow eks:DescribeCluster",
            )

    def _created(
        self, nodeclaim: NodeClaim, node_class: EC2NodeClass, instance: Instance
    ) -> NodeClaim:
        claim = nodeclaim.model_copy(deep=True)
        types = {t.name: t for t in self.catalog.instance_types(node_class)}
        requested = set(nodeclaim.spec.resources.requests)
        labels = self._labels(instance, types.get(instance.instance_type), node_class)
        claim.metadata.labels = {**labels, **nodeclaim.metadata.labels}
        claim.metadata.annotations = {
            **nodeclaim.metadata.annotations,
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
            ANNOTATION_INSTANCE_PROFILE: node_class.status.instance_profile or "",
        }
        self._fill_status(claim, instance, types.get(instance.instance_type), requested)
        return claim

    def _labels(
        self,
        instance: Instance,
        instance_type: InstanceType | None,
        node_class: EC2NodeClass | None,
    ) -> dict[str, str]:
        labels = dict(instance_type.requirements.labels()) if instance_type else {}
        labels[wk.INSTANCE_TYPE] = instance.instance_type
        labels[wk.TOPOLOGY_ZONE] = instance.zone
        labels[wk.CAPACITY_TYPE] = instance.capacity_type
        zone_id = ""
        if node_class is not None:
            zone_id = next(
                (s.zone_id or "" for s in node_class.status.subnets if s.zone == instance.zone), ""
            )
        zone_id = zone_id or self.catalog.zones().get(instance.zone, "")
        if zone_id:
            labels[LABEL_TOPOLOGY_ZONE_ID] = zone_id
        else:
            labels.pop(LABEL_TOPOLOGY_ZONE_ID, None)
        node_class_name = (
            node_class.metadata.name if node_class else instance.tags.get(TAG_NODECLASS)
        )
        if node_class_name:
            labels[LABEL_NODECLASS] = node_class_name
        return labels

    @staticmethod
    def _fill_status(
        claim: NodeClaim,
        instance: Instance,
        instance_type: InstanceType | None,
        requested: Iterable[str],
    ) -> None:
        claim.status.provider_id = provider_id(instance.zone, instance.id)
        claim.status.image_id = instance.image_id or None
        if instance_type is None:
            return
        keep_efa = RESOURCE_EFA in set(requested)

        def shown(resources: Mapping[str, int]) -> dict[str, Fraction]:
            return {
                name: Fraction(amount, 1000)
                for name, amount in resources.items()
                if amount and (name != RESOURCE_EFA or keep_efa)
            }

        claim.status.capacity = shown(instance_type.capacity)
        claim.status.allocatable = shown(instance_type.allocatable)

    # -- get, list, delete ----------------------------------------------------------------------

    def get(self, provider_id: str) -> NodeClaim:
        """The instance behind ``provider_id`` as a NodeClaim (as read within the instance cache's
        minute); ``NodeClaimNotFound`` once gone."""
        launcher = self._launch_parts()
        instance = launcher.instances.get(instance_id_of(provider_id))
        return self._view(instance, {})

    def list(self) -> list[NodeClaim]:
        """Every live instance of the cluster tagged with a NodePool, as NodeClaims."""
        launcher = self._launch_parts()
        instances = launcher.instances.list()
        seen: dict[str, tuple[EC2NodeClass | None, dict[str, InstanceType]]] = {}
        return [self._view(instance, seen) for instance in instances]

    def delete(self, nodeclaim: NodeClaim) -> None:
        """Start terminating the instance (read afresh); ``NodeClaimNotFound`` once it is gone."""
        launcher = self._launch_parts()
        instance_id = instance_id_of(nodeclaim.status.provider_id)
        instance = launcher.instances.terminate(instance_id)
        if instance.state != "shutting-down":
            log.info(
                "terminating instance",
                extra={"nodeclaim": nodeclaim.metadata.name, "instance_id": instance_id},
            )

    def _view(
        self,
        instance: Instance,
        seen: dict[str, tuple[EC2NodeClass | None, dict[str, InstanceType]]],
    ) -> NodeClaim:
        """An instance as a NodeClaim (``seen``: each EC2NodeClass read and its instance types
        by name, filled lazily so that a list reads each EC2NodeClass once)."""
        node_class_name = instance.tags.get(TAG_NODECLASS, "")
        if node_class_name not in seen:
            node_class = self._node_class(node_class_name)
            types = {t.name: t for t in self.catalog.instance_types(node_class)}
            seen[node_class_name] = (node_class, types)
        node_class, types = seen[node_class_name]
        instance_type = types.get(instance.instance_type)
        labels = self._labels(instance, instance_type, node_class)
        nodepool = instance.tags.get(TAG_NODEPOOL)
        if nodepool:
            labels[wk.NODEPOOL] = nodepool
        claim = NodeClaim.model_validate(
            {
                "metadata": {
                    "name": instance.tags.get(TAG_NODECLAIM) or instance.id,
                    "labels": labels,
                    "creationTimestamp": instance.launch_time,
                    "deletionTimestamp": (
                        self._context.clock() if instance.state in _TERMINATING else None
                    ),
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
        self._fill_status(claim, instance, instance_type, ())
        return claim

    # -- drift, repair, node classes ----------------------------------------------------------

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """Why the instance no longer matches its EC2NodeClass: NodeClassDrift (the hashed spec
        changed), AMIDrift, SecurityGroupDrift or SubnetDrift; "" when it still matches.
        Offline (``karpenter simulate``), only NodeClassDrift, against the EC2NodeClasses of
        the input."""
        ref = nodeclaim.spec.node_class_ref
        if (ref.group, ref.kind) != (GROUP, KIND):
            return ""
        live = self.catalog.is_live
        node_class = self._node_class(ref.name)
        if node_class is None:
            return ""
        annotations = nodeclaim.metadata.annotations
        claimed = annotations.get(HASH_ANNOTATION)
        if (
            claimed is not None
            and annotations.get(HASH_VERSION_ANNOTATION) == HASH_VERSION
            and claimed != nodeclass_hash(node_class.spec)
        ):
            return _DRIFT_NODECLASS
        if not live:
            return ""
        if self._ami_drifted(nodeclaim, node_class):
            return _DRIFT_AMI
        try:
            instance = self._launch_parts().instances.get(
                instance_id_of(nodeclaim.status.provider_id)
            )
        except NodeClaimNotFound:
            return ""
        groups = {g.id for g in node_class.status.security_groups}
        if groups and groups != set(instance.security_group_ids):
            return _DRIFT_SECURITY_GROUP
        subnets = {s.id for s in node_class.status.subnets}
        if subnets and instance.subnet_id not in subnets:
            return _DRIFT_SUBNET
        return ""

    def _ami_drifted(self, nodeclaim: NodeClaim, node_class: EC2NodeClass) -> bool:
        image_id = nodeclaim.status.image_id
        type_name = nodeclaim.metadata.labels.get(wk.INSTANCE_TYPE)
        if not image_id or not type_name or not node_class.status.amis:
            return False
        instance_type = next(
            (t for t in self.catalog.instance_types(node_class) if t.name == type_name), None
        )
        if instance_type is None:
            return False
        return image_id not in map_to_instance_types([instance_type], node_class.status.amis)

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

    def _node_class_of(self, nodepool: NodePool) -> EC2NodeClass | None:
        ref = nodepool.spec.template.spec.node_class_ref
        if (ref.group, ref.kind) != (GROUP, KIND):
            return None
        return self._node_class(ref.name)


@dataclass(frozen=True, slots=True)
class _Launcher:
    """The parts of a live provider that talk to EC2 for launches."""

    instances: Instances
    templates: LaunchTemplates
    subnets: ZonalSubnets
    batcher: FleetBatcher
