"""The ``karpenter.sh/v1`` API: NodePool and NodeClaim models."""

from karpenter_core.apis.v1.common import (
    Condition,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ObjectMeta,
    Taint,
)
from karpenter_core.apis.v1.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpenter_core.apis.v1.nodepool import (
    Budget,
    Disruption,
    NodeClaimTemplate,
    NodeClaimTemplateSpec,
    NodePool,
    NodePoolSpec,
    NodePoolStatus,
)

__all__ = [
    "Budget",
    "Condition",
    "Disruption",
    "NodeClaim",
    "NodeClaimSpec",
    "NodeClaimStatus",
    "NodeClaimTemplate",
    "NodeClaimTemplateSpec",
    "NodeClassReference",
    "NodePool",
    "NodePoolSpec",
    "NodePoolStatus",
    "NodeSelectorRequirementWithMinValues",
    "ObjectMeta",
    "Taint",
]
