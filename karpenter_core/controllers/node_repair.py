"""Node repair (feature gate NodeRepair): replace nodes whose conditions say they are broken.

A node is unhealthy when one of the provider's repair policies matches one of its conditions
(type and status) for longer than the policy's toleration. Its NodeClaim is deleted (and the
provisioner replaces the capacity), unless more than 20% of its NodePool's nodes are unhealthy,
when repair stops for that NodePool: a widespread failure is not fixed by replacing nodes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from karpenter_core.apis import labels as wk
from karpenter_core.controllers.objects import nodeclaim_path
from karpenter_core.controllers.runtime import LoopController
from karpenter_core.operator import metrics
from karpenter_core.operator.events import Reason
from karpenter_core.operator.kube import NotFound

if TYPE_CHECKING:
    from karpenter_core.cloudprovider.types import RepairPolicy
    from karpenter_core.controllers.context import Context
    from karpenter_core.state.cluster import ClusterNode

__all__ = ["MAX_UNHEALTHY_FRACTION", "NodeRepair", "repairs", "unhealthy"]

log = logging.getLogger("karpenter.node_repair")

MAX_UNHEALTHY_FRACTION = 0.2


def unhealthy(node: ClusterNode, policies: Sequence[RepairPolicy], now: float) -> str | None:
    """The condition that has matched a policy past its toleration, or None."""
    for policy in policies:
        status, since = node.conditions.get(policy.condition_type, ("", None))
        if status != policy.condition_status or since is None:
            continue
        if now - since >= policy.toleration.total_seconds():
            return f"{policy.condition_type}={status}"
    return None


def repairs(
    nodes: Iterable[ClusterNode], policies: Sequence[RepairPolicy], now: float
) -> tuple[list[tuple[ClusterNode, str]], list[str]]:
    """(nodes to replace with the matched condition, NodePools where repair is blocked)."""
    by_pool: dict[str, list[ClusterNode]] = {}
    for node in nodes:
        if node.nodepool and node.deletion_time is None:
            by_pool.setdefault(node.nodepool, []).append(node)
    replace: list[tuple[ClusterNode, str]] = []
    blocked: list[str] = []
    for pool, members in sorted(by_pool.items()):
        broken = [(n, c) for n in members if (c := unhealthy(n, policies, now)) is not None]
        if not broken:
            continue
        if len(broken) > MAX_UNHEALTHY_FRACTION * len(members):
            blocked.append(pool)
            continue
        replace.extend(broken)
    return replace, blocked


class NodeRepair(LoopController):
    """Deletes the NodeClaims of unhealthy nodes."""

    name = "node_repair"

    def __init__(self, context: Context, period: float = 10.0) -> None:
        super().__init__()
        self.context = context
        self.period = period

    def reconcile(self) -> None:
        """One pass over the nodes."""
        context = self.context
        policies = context.provider.repair_policies()
        if not policies:
            return
        replace, blocked = repairs(context.state.nodes(), policies, time.time())
        for pool in blocked:
            log.warning(
                "node repair blocked: more than 20%% of the nodepool's nodes are unhealthy",
                extra={"nodepool": pool},
            )
        for node, matched in replace:
            claim = context.state.nodeclaim_for_node(node)
            if claim is None or claim.metadata.deletion_timestamp is not None:
                continue
            name = claim.metadata.name or ""
            log.info(
                "repairing node", extra={"node": node.name, "nodeclaim": name, "condition": matched}
            )
            context.events.publish(
                node,
                "Warning",
                Reason.DISRUPTED,
                f"Repairing node: condition {matched} past toleration",
            )
            metrics.nodeclaim_disrupted("unhealthy", node.labels)
            metrics.NODECLAIMS_UNHEALTHY_DISRUPTED.labels(
                metrics.snake_case(matched.split("=", 1)[0]),
                node.labels.get(wk.NODEPOOL, ""),
                node.labels.get(wk.CAPACITY_TYPE, ""),
                claim.status.image_id or "",
            ).inc()
            try:
                context.client.delete(nodeclaim_path(name))
            except NotFound:
                continue
