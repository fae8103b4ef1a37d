"""EC2 instances as NodeClaims: the one launched for a NodeClaim, and those ``get`` and ``list``
read back.

A NodeClaim's labels are its instance type's (from the catalog, for the instance's EC2NodeClass)
with the instance's own type, zone, zone ID and capacity type; its status has the provider ID, the
image and the type's capacity and allocatable. The view reads nothing itself: the instance types
of an EC2NodeClass, the region's zone IDs, the EC2NodeClasses and the clock are handed to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from fractions import Fraction

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
    GROUP,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    KIND,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.types import InstanceType

__all__ = ["NodeClaimView", "fill_status", "instance_labels"]

_TERMINATING = frozenset({"shutting-down", "terminated"})

InstanceTypesOf = Callable[[EC2NodeClass | None], Iterable[InstanceType]]
"""The instance types of an EC2NodeClass (the defaults' for None)."""


def instance_labels(
    instance: Instance,
    instance_type: InstanceType | None,
    node_class: EC2NodeClass | None,
    zone_ids: Callable[[], Mapping[str, str]],
) -> dict[str, str]:
    """The labels of ``instance``'s NodeClaim: its type's, and the instance's type, zone, zone
    ID (from the EC2NodeClass's subnets, else ``zone_ids``), capacity type and EC2NodeClass."""
    labels = dict(instance_type.requirements.labels()) if instance_type else {}
    labels[wk.INSTANCE_TYPE] = instance.instance_type
    labels[wk.TOPOLOGY_ZONE] = instance.zone
    labels[wk.CAPACITY_TYPE] = instance.capacity_type
    zone_id = ""
    if node_class is not None:
        zone_id = next(
            (s.zone_id or "" for s in node_class.status.subnets if s.zone == instance.zone), ""
        )
    zone_id = zone_id or zone_ids().get(instance.zone, "")
    if zone_id:
        labels[LABEL_TOPOLOGY_ZONE_ID] = zone_id
    else:
        labels.pop(LABEL_TOPOLOGY_ZONE_ID, None)
    node_class_name = node_class.metadata.name if node_class else instance.tags.get(TAG_NODECLASS)
    if node_class_name:
        labels[LABEL_NODECLASS] = node_class_name
    return labels


def fill_status(
    claim: NodeClaim,
    instance: Instance,
    instance_type: InstanceType | None,
    requested: Iterable[str],
) -> None:
    """Set ``claim``'s provider ID and image, and its capacity and allocatable from
    ``instance_type`` (EFA interfaces only when ``requested``)."""
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


class NodeClaimView:
    """Instances as NodeClaims, from what it is handed: ``instance_types`` of an EC2NodeClass,
    the region's ``zone_ids`` (zone name to ID), the EC2NodeClass named (``node_class``, None
    when missing) and the ``clock``."""

    def __init__(
        self,
        instance_types: InstanceTypesOf,
        zone_ids: Callable[[], Mapping[str, str]],
        node_class: Callable[[str], EC2NodeClass | None],
        clock: Callable[[], datetime],
    ) -> None:
        self._instance_types = instance_types
        self._zone_ids = zone_ids
        self._node_class = node_class
        self._clock = clock

    def created(
        self, nodeclaim: NodeClaim, node_class: EC2NodeClass, instance: Instance
    ) -> NodeClaim:
        """``nodeclaim`` once ``instance`` is launched for it: labels, the EC2NodeClass hash and
        instance profile annotations, and the status."""
        claim = nodeclaim.model_copy(deep=True)
        types = {t.name: t for t in self._instance_types(node_class)}
        instance_type = types.get(instance.instance_type)
        labels = instance_labels(instance, instance_type, node_class, self._zone_ids)
        claim.metadata.labels = {**labels, **nodeclaim.metadata.labels}
        claim.metadata.annotations = {
            **nodeclaim.metadata.annotations,
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
            ANNOTATION_INSTANCE_PROFILE: node_class.status.instance_profile or "",
        }
        fill_status(claim, instance, instance_type, nodeclaim.spec.resources.requests)
        return claim

    def nodeclaim(self, instance: Instance) -> NodeClaim:
        """One instance as a NodeClaim."""
        return self._read(instance, {})

    def nodeclaims(self, instances: Iterable[Instance]) -> list[NodeClaim]:
        """Instances as NodeClaims, each EC2NodeClass read once."""
        seen: dict[str, tuple[EC2NodeClass | None, dict[str, InstanceType]]] = {}
        return [self._read(instance, seen) for instance in instances]

    def _read(
        self,
        instance: Instance,
        seen: dict[str, tuple[EC2NodeClass | None, dict[str, InstanceType]]],
    ) -> NodeClaim:
        """An instance as a NodeClaim (``seen``: each EC2NodeClass read and its instance types
        by name, filled lazily so that a list reads each EC2NodeClass once)."""
        node_class_name = instance.tags.get(TAG_NODECLASS, "")
        if node_class_name not in seen:
            node_class = self._node_class(node_class_name)
            types = {t.name: t for t in self._instance_types(node_class)}
            seen[node_class_name] = (node_class, types)
        node_class, types = seen[node_class_name]
        instance_type = types.get(instance.instance_type)
        labels = instance_labels(instance, instance_type, node_class, self._zone_ids)
        nodepool = instance.tags.get(TAG_NODEPOOL)
        if nodepool:
            labels[wk.NODEPOOL] = nodepool
        terminating = instance.state in _TERMINATING
        claim = NodeClaim.model_validate(
            {
                "metadata": {
                    "name": instance.tags.get(TAG_NODECLAIM) or instance.id,
                    "labels": labels,
                    "creationTimestamp": instance.launch_time,
                    "deletionTimestamp": self._clock() if terminating else None,
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
        fill_status(claim, instance, instance_type, ())
        return claim
