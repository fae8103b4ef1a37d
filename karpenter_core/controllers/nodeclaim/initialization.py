"""Initialization: is a registered Node ready for pods as its NodeClaim expects? (pure)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from karpenter_core.apis.quantity import to_milli
from karpenter_core.scheduling.cluster import EPHEMERAL_TAINTS

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.state.cluster import ClusterNode

__all__ = ["initialization_blocker"]

_STANDARD_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def initialization_blocker(nodeclaim: NodeClaim, node: ClusterNode) -> str | None:
    """Why the Node is not initialized yet, or None once it is Ready, its startup and
    ephemeral taints are gone and every extended resource the NodeClaim requests is there."""
    if not node.ready():
        return "node is not Ready"
    startup = {(t.key, t.effect) for t in nodeclaim.spec.startup_taints}
    for taint in node.taints:
        if taint.key in EPHEMERAL_TAINTS or (taint.key, taint.effect) in startup:
            return f"taint {taint.key}:{taint.effect} is still on the node"
    for resource, amount in nodeclaim.spec.resources.requests.items():
        if resource in _STANDARD_RESOURCES or to_milli(amount) <= 0:
            continue
        if node.allocatable.get(resource, 0) <= 0:
            return f"resource {resource} is not registered on the node"
    return None
