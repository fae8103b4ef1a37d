"""Launching an EC2 instance for a NodeClaim: the create flow below the cloud provider.

A launch takes the cheapest instance types the NodeClaim allows (at most 60), picks spot when it
may, groups the types by AMI (from the EC2NodeClass's ``status.amis``) and pod capacity into
launch templates (with the cluster's details in their user data), and asks CreateFleet for one
instance of any of them, in one subnet per zone. Offerings EC2 had no capacity for are kept out
for a while (``UnavailableOfferings``), subnets out of addresses are skipped until described
again, and a launch template deleted behind the cache is made again once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from karpenter_aws.amis import map_to_instance_types
from karpenter_aws.catalog import InstanceTypeCatalog
from karpenter_aws.cluster import ClusterInfo, ClusterResolver
from karpenter_aws.errors import AWS_ERRORS, describe_error, error_code
from karpenter_aws.fleet import (
    FleetBatcher,
    FleetError,
    FleetOutcome,
    LaunchedInstance,
    TemplateOverrides,
    capacity_type_for,
    compatible_instance_types,
    fleet_failure,
    fleet_request,
    launch_template_config,
    offerings_for,
)
from karpenter_aws.instances import Instance, Instances
from karpenter_aws.labels import (
    TAG_EKS_CLUSTER_NAME,
    TAG_NAME,
    TAG_NODECLAIM,
    TAG_NODECLASS,
    TAG_NODEPOOL,
    cluster_tag,
)
from karpenter_aws.launchtemplates import NOT_FOUND_CODES, LaunchTemplateConfig, LaunchTemplates
from karpenter_aws.nodeclass import KIND, EC2NodeClass
from karpenter_aws.settings import AWSSettings
from karpenter_aws.subnets import ZonalSubnets
from karpenter_aws.unavailable import UnavailableOfferings
from karpenter_aws.userdata import BootstrapOptions, UserDataError, build_user_data
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.types import (
    CreateError,
    InstanceType,
    InsufficientCapacity,
    Requirements,
    launch_request,
)

__all__ = ["InstanceLauncher", "launch_tags", "node_labels"]

log = logging.getLogger("karpenter.aws")

_RESTRICTED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io")
_NO_FREE_ADDRESSES = "InsufficientFreeAddressesInSubnet"


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


def _ami_pod_groups(
    nodeclaim: NodeClaim, node_class: EC2NodeClass, instance_types: Sequence[InstanceType]
) -> dict[tuple[str, int], list[InstanceType]]:
    """The instance types by (AMI, pods): one launch template each; ``CreateError`` when no
    AMI of ``node_class`` fits any of them."""
    by_ami = map_to_instance_types(instance_types, node_class.status.amis)
    if not by_ami:
        raise CreateError(
            "NoCompatibleAMI",
            f"no AMI of {KIND} {node_class.metadata.name or ''!r} ("
            + ", ".join(a.id for a in node_class.status.amis)
            + ") fits the instance types NodeClaim "
            f"{nodeclaim.metadata.name!r} allows",
        )
    groups: dict[tuple[str, int], list[InstanceType]] = {}
    for ami_id, types in by_ami.items():
        for instance_type in types:
            pods = instance_type.capacity.get("pods", 0) // 1000
            groups.setdefault((ami_id, pods), []).append(instance_type)
    return groups


@dataclass(frozen=True, slots=True)
class _Launch:
    """One NodeClaim's launch, as planned: what to ask CreateFleet for and how to tag it."""

    nodeclaim: NodeClaim
    node_class: EC2NodeClass
    instance_types: Sequence[InstanceType]
    """Cheapest first."""
    requirements: Requirements
    capacity_type: str
    tags: Mapping[str, str]
    """On the instance, its volumes, the fleet and the launch templates."""
    own_tags: Mapping[str, str]
    """On the instance alone (CreateTags after a batched CreateFleet)."""

    @property
    def name(self) -> str:
        """The NodeClaim's name."""
        return self.nodeclaim.metadata.name or ""


class InstanceLauncher:
    """Launches EC2 instances for NodeClaims of ready EC2NodeClasses; ``instances`` is the
    cluster's instance cache the launches fill (and ``get``, ``list`` and ``delete`` read)."""

    def __init__(
        self,
        settings: AWSSettings,
        ec2: Any,
        catalog: InstanceTypeCatalog,
        unavailable: UnavailableOfferings,
        cluster: ClusterResolver,
        clock: Callable[[], datetime],
    ) -> None:
        self._settings = settings
        self._catalog = catalog
        self._unavailable = unavailable
        self._cluster = cluster
        self._clock = clock
        self.instances = Instances(
            ec2, settings.cluster_name, settings.batch_idle, settings.batch_max
        )
        self._templates = LaunchTemplates(ec2, settings.cluster_name, clock)
        self._subnets = ZonalSubnets(ec2, clock)
        self._batcher = FleetBatcher(ec2, settings.batch_idle, settings.batch_max)

    @contextmanager
    def expecting(self) -> Iterator[None]:
        """Hold open the instance lookup and CreateFleet batches for this caller's launch:
        concurrent launches share one lookup and, when their requests are the same, one
        CreateFleet."""
        with self.instances.expecting_lookup(), self._batcher.expecting():
            yield

    def launch(self, nodeclaim: NodeClaim, node_class: EC2NodeClass) -> Instance:
        """The instance launched for ``nodeclaim`` before, else a new one of ``node_class``.
        ``InsufficientCapacity`` when no offering fits or EC2 has none; ``CreateError`` when
        the launch cannot be made."""
        name = nodeclaim.metadata.name or ""
        existing = self.instances.find_for_nodeclaim(name)
        if existing is not None:
            log.info(
                "found the instance launched before",
                extra={"nodeclaim": name, "instance_id": existing.id},
            )
            return existing
        launch = self._plan(nodeclaim, node_class)
        outcome = self._create_fleet(launch)
        self._learn_from(outcome.errors, launch.capacity_type)
        if outcome.instance is None:
            raise fleet_failure(outcome.errors, name)
        instance = self._launched(launch, outcome.instance)
        self.instances.remember(instance)
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
        return instance

    def _plan(self, nodeclaim: NodeClaim, node_class: EC2NodeClass) -> _Launch:
        """The instance types, capacity type and tags of the launch."""
        name = nodeclaim.metadata.name or ""
        requirements, requests = launch_request(nodeclaim)
        instance_types = compatible_instance_types(
            self._catalog.instance_types(node_class), requirements, requests
        )
        if not instance_types:
            raise InsufficientCapacity(
                f"no instance type of {KIND} {node_class.metadata.name!r} meets the requirements "
                f"and requests of NodeClaim {name!r} with an available offering"
            )
        nodepool = nodeclaim.metadata.labels.get(wk.NODEPOOL, "")
        own_tags = {TAG_NODECLAIM: name}
        if TAG_NAME not in node_class.spec.tags:
            own_tags[TAG_NAME] = name
        return _Launch(
            nodeclaim=nodeclaim,
            node_class=node_class,
            instance_types=instance_types,
            requirements=requirements,
            capacity_type=capacity_type_for(requirements, instance_types),
            tags=launch_tags(self._settings.cluster_name, node_class, nodepool),
            own_tags=own_tags,
        )

    def _create_fleet(self, launch: _Launch) -> FleetOutcome:
        """CreateFleet for the launch; its launch templates are made again once when EC2 says
        one is gone."""
        for attempt in range(2):
            templates = self._launch_templates(launch)
            subnets = self._zonal_subnets(launch.node_class)
            configs = [
                config
                for config in (launch_template_config(t, subnets) for t in templates)
                if config is not None
            ]
            if not configs:
                raise CreateError(
                    "NoSubnetForOfferings",
                    f"no subnet of {KIND} {launch.node_class.metadata.name!r} is in a zone where "
                    f"the instance types for NodeClaim {launch.name!r} are offered",
                )
            request = fleet_request(launch.capacity_type, configs, launch.tags)
            try:
                return self._batcher.launch(request, launch.own_tags, launch.capacity_type)
            except AWS_ERRORS as error:
                code = error_code(error)
                if code in NOT_FOUND_CODES and attempt == 0:
                    for template in templates:
                        self._templates.invalidate(template.template_name)
                    continue
                raise CreateError(
                    code or "CreateFleetFailed",
                    describe_error(f"creating a fleet for NodeClaim {launch.name!r}", error),
                ) from None
        raise AssertionError("unreachable")

    def _learn_from(self, errors: Sequence[FleetError], capacity_type: str) -> None:
        """Keep out the offerings EC2 had no capacity for and the subnets out of addresses."""
        for error in errors:
            if error.insufficient_capacity and error.instance_type and error.zone:
                self._unavailable.mark(capacity_type, error.instance_type, error.zone, error.code)
            if error.code == _NO_FREE_ADDRESSES and error.subnet_id:
                self._subnets.mark_exhausted(error.subnet_id)

    def _launched(self, launch: _Launch, launched: LaunchedInstance) -> Instance:
        """The instance as CreateFleet reported it, before EC2 describes it."""
        return Instance(
            id=launched.instance_id,
            instance_type=launched.instance_type,
            zone=launched.zone,
            state="pending",
            image_id=launched.image_id,
            subnet_id=launched.subnet_id,
            security_group_ids=tuple(
                sorted(g.id for g in launch.node_class.status.security_groups)
            ),
            capacity_type=launched.capacity_type,
            tags={**launch.tags, **launch.own_tags},
            launch_time=self._clock(),
        )

    def _zonal_subnets(self, node_class: EC2NodeClass) -> dict[str, str]:
        """Zone -> the subnet of ``node_class`` to launch into."""
        ids = [s.id for s in node_class.status.subnets]
        try:
            zonal = self._subnets.get(ids)
        except AWS_ERRORS as error:
            raise CreateError(
                "SubnetResolutionFailed",
                describe_error(
                    f"describing the subnets of {KIND} {node_class.metadata.name!r}", error
                ),
            ) from None
        return {zone: subnet.id for zone, subnet in zonal.items()}

    def _launch_templates(self, launch: _Launch) -> list[TemplateOverrides]:
        """One launch template per (AMI, pod capacity), with its types' offerings, cheapest
        group first."""
        groups = _ami_pod_groups(launch.nodeclaim, launch.node_class, launch.instance_types)
        cluster = self._cluster.get()
        self._cluster.check(cluster, launch.node_class)
        rank = {t.name: i for i, t in enumerate(launch.instance_types)}
        out = []
        for (ami_id, pods), types in sorted(
            groups.items(), key=lambda item: min(rank[t.name] for t in item[1])
        ):
            template = self._ensure_template(launch, cluster, ami_id, pods)
            pairs = tuple(
                (t.name, o.zone)
                for t in sorted(types, key=lambda t: rank[t.name])
                for o in offerings_for(t, launch.requirements, launch.capacity_type)
            )
            if pairs:
                out.append(TemplateOverrides(template, ami_id, pairs))
        return out

    def _ensure_template(
        self, launch: _Launch, cluster: ClusterInfo, ami_id: str, pods: int
    ) -> str:
        """The name of the launch template for ``ami_id`` and ``pods``, made if missing."""
        node_class = launch.node_class
        options = BootstrapOptions.for_node_class(
            node_class,
            cluster_name=self._settings.cluster_name,
            cluster_endpoint=cluster.endpoint,
            ca_bundle=cluster.ca_bundle or None,
            service_cidr=cluster.service_cidr or None,
            cluster_dns=cluster.cluster_dns,
            labels=node_labels(launch.nodeclaim.metadata.labels, launch.capacity_type),
            taints=[*launch.nodeclaim.spec.taints, *launch.nodeclaim.spec.startup_taints],
            max_pods=pods,
        )
        try:
            user_data = build_user_data(node_class.resolved_ami_family(), options)
        except (UserDataError, ValueError) as error:
            raise CreateError("UserDataInvalid", str(error)) from None
        config = LaunchTemplateConfig.build(node_class, ami_id, user_data, launch.tags)
        return self._templates.ensure(config)
