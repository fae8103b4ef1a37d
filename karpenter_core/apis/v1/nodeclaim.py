"""The ``karpenter.sh/v1`` NodeClaim: one node Karpenter launched or is launching."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from karpenter_core.apis import labels as wk
from karpenter_core.apis.crdgen import KubeSchema, PrinterColumn, cel
from karpenter_core.apis.v1.common import (
    CONDITION_READY,
    Conditions,
    KubeModel,
    KubeObject,
    NodeClaimSpecFields,
    ObjectMeta,
    ResourceList,
)

__all__ = [
    "CONDITION_CONSOLIDATABLE",
    "CONDITION_DISRUPTION_REASON",
    "CONDITION_DRAINED",
    "CONDITION_DRIFTED",
    "CONDITION_INITIALIZED",
    "CONDITION_INSTANCE_TERMINATING",
    "CONDITION_LAUNCHED",
    "CONDITION_REGISTERED",
    "CONDITION_VOLUMES_DETACHED",
    "NODECLAIM_PRINTER_COLUMNS",
    "NodeClaim",
    "NodeClaimSpec",
    "NodeClaimStatus",
    "ResourceRequirements",
]

# Condition types. Ready is True once Launched, Registered and Initialized are.
CONDITION_LAUNCHED = "Launched"
CONDITION_REGISTERED = "Registered"
CONDITION_INITIALIZED = "Initialized"
CONDITION_CONSOLIDATABLE = "Consolidatable"
CONDITION_DRIFTED = "Drifted"
CONDITION_DRAINED = "Drained"
CONDITION_VOLUMES_DETACHED = "VolumesDetached"
CONDITION_INSTANCE_TERMINATING = "InstanceTerminating"
CONDITION_DISRUPTION_REASON = "DisruptionReason"


def _label_path(key: str) -> str:
    return ".metadata.labels." + key.replace(".", "\\.")


NODECLAIM_PRINTER_COLUMNS = (
    PrinterColumn("Type", "string", _label_path(wk.INSTANCE_TYPE)),
    PrinterColumn("Capacity", "string", _label_path(wk.CAPACITY_TYPE)),
    PrinterColumn("Zone", "string", _label_path(wk.TOPOLOGY_ZONE)),
    PrinterColumn("Node", "string", ".status.nodeName"),
    PrinterColumn("Ready", "string", f'.status.conditions[?(@.type=="{CONDITION_READY}")].status'),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    PrinterColumn("ImageID", "string", ".status.imageID", priority=1),
    PrinterColumn("ID", "string", ".status.providerID", priority=1),
    PrinterColumn("NodePool", "string", _label_path(wk.NODEPOOL), priority=1),
    PrinterColumn("NodeClass", "string", ".spec.nodeClassRef.name", priority=1),
    PrinterColumn(
        "Drifted",
        "string",
        f'.status.conditions[?(@.type=="{CONDITION_DRIFTED}")].status',
        priority=1,
    ),
)
"""``kubectl get nodeclaims`` columns (``-o wide`` adds those of priority 1)."""


class ResourceRequirements(KubeModel):
    """The resources the NodeClaim's node must offer."""

    requests: ResourceList = Field(default_factory=dict)
    """The resources the pods bound for the node request, daemons included."""


class NodeClaimSpec(NodeClaimSpecFields):
    """What to launch: the NodePool template's spec plus the pods' resource requests."""

    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """The resources the node must offer."""


class NodeClaimStatus(KubeModel):
    """What was launched, and how far its lifecycle has gone."""

    node_name: str | None = None
    """The name of the Node object of the instance."""
    provider_id: str | None = Field(default=None, alias="providerID")
    """The cloud provider's ID of the instance."""
    image_id: str | None = Field(default=None, alias="imageID")
    """The image the instance runs."""
    capacity: ResourceList = Field(default_factory=dict)
    """The expected capacity of the node."""
    allocatable: ResourceList = Field(default_factory=dict)
    """The expected allocatable resources of the node (capacity less overhead)."""
    last_pod_event_time: datetime | None = None
    """When a pod was last bound to or removed from the node."""
    conditions: Conditions = Field(default_factory=list)
    """Launched, Registered, Initialized, Ready, and the disruption conditions."""


class NodeClaim(KubeObject):
    """A request for one node; the spec is immutable once created."""

    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodeClaim"] = "NodeClaim"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: Annotated[NodeClaimSpec, KubeSchema(rules=(cel("self == oldSelf", "spec is immutable"),))]
    status: NodeClaimStatus = Field(default_factory=NodeClaimStatus)
