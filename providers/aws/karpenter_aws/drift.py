"""Why an instance no longer matches its EC2NodeClass, checked in upstream's order:

- ``NodeClassDrift``: the hash of the EC2NodeClass spec the NodeClaim was launched with (same
  hash version) differs from the current one;
- ``AMIDrift``: the NodeClaim's image is not among the EC2NodeClass's AMIs for its instance type;
- ``SecurityGroupDrift``: the instance's security groups are not the EC2NodeClass's;
- ``SubnetDrift``: the instance's subnet is not one of the EC2NodeClass's.

The checks are pure; ``drift_reason`` runs them, reading the instance types and the instance only
when a check needs them. Offline only the first applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from karpenter_aws.amis import map_to_instance_types
from karpenter_aws.instances import Instance
from karpenter_aws.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.types import InstanceType, NodeClaimNotFound

__all__ = [
    "DRIFT_AMI",
    "DRIFT_NODECLASS",
    "DRIFT_SECURITY_GROUP",
    "DRIFT_SUBNET",
    "ami_drifted",
    "drift_reason",
    "nodeclass_drifted",
    "security_groups_drifted",
    "subnet_drifted",
]

DRIFT_NODECLASS = "NodeClassDrift"
DRIFT_AMI = "AMIDrift"
DRIFT_SECURITY_GROUP = "SecurityGroupDrift"
DRIFT_SUBNET = "SubnetDrift"


def nodeclass_drifted(nodeclaim: NodeClaim, node_class: EC2NodeClass) -> bool:
    """Whether the NodeClaim's EC2NodeClass hash (of the current hash version) is stale."""
    annotations = nodeclaim.metadata.annotations
    claimed = annotations.get(HASH_ANNOTATION)
    return (
        claimed is not None
        and annotations.get(HASH_VERSION_ANNOTATION) == HASH_VERSION
        and claimed != nodeclass_hash(node_class.spec)
    )


def ami_drifted(
    nodeclaim: NodeClaim,
    node_class: EC2NodeClass,
    instance_types: Callable[[EC2NodeClass], Iterable[InstanceType]],
) -> bool:
    """Whether the NodeClaim's image is no AMI of ``node_class`` for its instance type (one of
    ``instance_types(node_class)``); False when any of them is unknown."""
    image_id = nodeclaim.status.image_id
    type_name = nodeclaim.metadata.labels.get(wk.INSTANCE_TYPE)
    if not image_id or not type_name or not node_class.status.amis:
        return False
    instance_type = next((t for t in instance_types(node_class) if t.name == type_name), None)
    if instance_type is None:
        return False
    return image_id not in map_to_instance_types([instance_type], node_class.status.amis)


def security_groups_drifted(node_class: EC2NodeClass, instance: Instance) -> bool:
    """Whether the instance's security groups differ from the EC2NodeClass's resolved ones."""
    groups = {g.id for g in node_class.status.security_groups}
    return bool(groups) and groups != set(instance.security_group_ids)


def subnet_drifted(node_class: EC2NodeClass, instance: Instance) -> bool:
    """Whether the instance's subnet is none of the EC2NodeClass's resolved ones."""
    subnets = {s.id for s in node_class.status.subnets}
    return bool(subnets) and instance.subnet_id not in subnets


def drift_reason(
    nodeclaim: NodeClaim,
    node_class: EC2NodeClass,
    *,
    live: bool,
    instance_types: Callable[[EC2NodeClass], Iterable[InstanceType]],
    instance: Callable[[], Instance],
) -> str:
    """The first drift of ``nodeclaim`` from ``node_class`` ("" for none). Offline (not
    ``live``) only NodeClassDrift; an instance already gone (``instance`` raises
    ``NodeClaimNotFound``) has no security group or subnet drift."""
    if nodeclass_drifted(nodeclaim, node_class):
        return DRIFT_NODECLASS
    if not live:
        return ""
    if ami_drifted(nodeclaim, node_class, instance_types):
        return DRIFT_AMI
    try:
        found = instance()
    except NodeClaimNotFound:
        return ""
    if security_groups_drifted(node_class, found):
        return DRIFT_SECURITY_GROUP
    if subnet_drifted(node_class, found):
        return DRIFT_SUBNET
    return ""
