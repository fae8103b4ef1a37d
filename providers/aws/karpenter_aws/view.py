"""EC2 instances as NodeClaims: the one launched for a NodeClaim, and those ``get`` and ``list``
read back, through the SDK's ``MachineView``.

An instance becomes a ``Machine`` (its tags name its NodeClaim, NodePool and EC2NodeClass); the
view adds AWS's own labels, the zone ID (from the EC2NodeClass's subnets, else the region's
zones) and the EC2NodeClass's name, and shows EFA interfaces in capacity and allocatable only
when the NodeClaim requests them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from karpenter_aws.instances import Instance, provider_id
from karpenter_aws.instancetype import RESOURCE_EFA
from karpenter_aws.labels import (
    ANNOTATION_INSTANCE_PROFILE,
    LABEL_NODECLASS,
    LABEL_TOPOLOGY_ZONE_ID,
    TAG_NODECLAIM,
    TAG_NODECLASS,
    TAG_NODEPOOL,
)
from karpenter_aws.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_core.sdk.machines import Machine, MachineView
from karpenter_core.sdk.nodeclass import NodeClassBinding
from karpenter_core.sdk.types import InstanceType

__all__ = ["created_annotations", "machine", "nodeclaim_view"]

_TERMINATING = frozenset({"shutting-down", "terminated"})


def machine(instance: Instance) -> Machine:
    """An EC2 instance in the terms of a NodeClaim."""
    tags = instance.tags
    return Machine(
        id=instance.id,
        provider_id=provider_id(instance.zone, instance.id),
        instance_type=instance.instance_type,
        capacity_type=instance.capacity_type,
        zone=instance.zone,
        created=instance.launch_time,
        nodeclaim=tags.get(TAG_NODECLAIM, ""),
        nodepool=tags.get(TAG_NODEPOOL, ""),
        node_class=tags.get(TAG_NODECLASS, ""),
        image_id=instance.image_id,
        deleting=instance.state in _TERMINATING,
    )


def created_annotations(node_class: EC2NodeClass) -> dict[str, str]:
    """The annotations a launched NodeClaim gets: the EC2NodeClass's hash (and its version) and
    its instance profile."""
    return {
        HASH_ANNOTATION: nodeclass_hash(node_class.spec),
        HASH_VERSION_ANNOTATION: HASH_VERSION,
        ANNOTATION_INSTANCE_PROFILE: node_class.status.instance_profile or "",
    }


def nodeclaim_view(
    binding: NodeClassBinding[EC2NodeClass],
    instance_types: Callable[[EC2NodeClass | None], Iterable[InstanceType]],
    zone_ids: Callable[[], Mapping[str, str]],
) -> MachineView[EC2NodeClass]:
    """The view of instances of ``binding``'s EC2NodeClasses: labels from ``instance_types`` of
    the EC2NodeClass, the zone ID from its subnets or the region's ``zone_ids`` (zone name to
    ID), EFA interfaces only when requested."""

    def aws_labels(machine: Machine, node_class: EC2NodeClass | None) -> dict[str, str | None]:
        zone_id = ""
        if node_class is not None:
            zone_id = next(
                (s.zone_id or "" for s in node_class.status.subnets if s.zone == machine.zone), ""
            )
        zone_id = zone_id or zone_ids().get(machine.zone, "")
        labels: dict[str, str | None] = {LABEL_TOPOLOGY_ZONE_ID: zone_id or None}
        name = node_class.metadata.name if node_class else machine.node_class
        if name:
            labels[LABEL_NODECLASS] = name
        return labels

    return MachineView(
        binding, instance_types, extra_labels=aws_labels, requested_only={RESOURCE_EFA}
    )
