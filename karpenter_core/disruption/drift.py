"""Whether a node no longer matches its NodePool: the drift both the disruption planner and the
Drifted condition find, without I/O.

As upstream, a node has drifted from its NodePool when its ``karpenter.sh/nodepool-hash``
annotation (of the current hash version) differs from the NodePool's hash (NodePoolDrifted), or
when one of its labels is outside the NodePool's requirements (RequirementsDrifted). The cloud
provider's own drift (``is_drifted``) is asked only after these, by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.hashing import HASH_VERSION, nodepool_hash

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodepool import NodePool

__all__ = ["NODEPOOL_DRIFTED", "REQUIREMENTS_DRIFTED", "NodePoolShape", "nodepool_drift"]

NODEPOOL_DRIFTED = "NodePoolDrifted"
REQUIREMENTS_DRIFTED = "RequirementsDrifted"


@dataclass(frozen=True)
class NodePoolShape:
    """What drift compares a node with: its NodePool's hash and requirements."""

    hash: str
    requirements: Requirements

    @classmethod
    def of(cls, nodepool: NodePool) -> NodePoolShape:
        """The NodePool's shape as it is now."""
        manifest = nodepool.to_manifest()
        template = manifest["spec"]["template"]["spec"]
        return cls(
            nodepool_hash(manifest),
            Requirements.from_node_selector(template.get("requirements") or ()),
        )


def nodepool_drift(
    shape: NodePoolShape, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> str:
    """Why a node or NodeClaim with these labels and annotations has drifted from its NodePool
    (NodePoolDrifted, RequirementsDrifted), or "" when it has not."""
    if (
        annotations.get(wk.NODEPOOL_HASH_VERSION) == HASH_VERSION
        and wk.NODEPOOL_HASH in annotations
        and annotations[wk.NODEPOOL_HASH] != shape.hash
    ):
        return NODEPOOL_DRIFTED
    for key, requirement in shape.requirements.items():
        value = labels.get(key)
        if value is not None and not requirement.has(value):
            return REQUIREMENTS_DRIFTED
    return ""
