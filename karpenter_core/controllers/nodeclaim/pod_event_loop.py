"""A loop over the NodeClaims that judges each by the last pod event on its node.

The pod events controller (which persists that time) and the Consolidatable condition (which
counts consolidateAfter from it) both pass over every NodeClaim that is not being deleted, with
the cluster state's last pod event for its node (None before it has a node or an event).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from karpenter_core.controllers.runtime import LoopController

if TYPE_CHECKING:
    from datetime import datetime

    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.controllers.context import Context

__all__ = ["PodEventLoop"]


class PodEventLoop(LoopController):
    """Calls ``reconcile_nodeclaim`` for every NodeClaim not being deleted, each pass."""

    def __init__(self, context: Context, period: float = 1.0) -> None:
        super().__init__(None)
        self.context = context
        self.period = period

    def reconcile(self) -> None:
        """One pass over the NodeClaims, with one clock reading for all of them."""
        state = self.context.state
        now = self.context.now()
        for nodeclaim in state.nodeclaims():
            if nodeclaim.metadata.deletion_timestamp is not None:
                continue
            node_name = nodeclaim.status.node_name
            seen = state.last_pod_event(node_name) if node_name else None
            self.reconcile_nodeclaim(nodeclaim, seen, now)

    def reconcile_nodeclaim(
        self, nodeclaim: NodeClaim, last_pod_event: float | None, now: datetime
    ) -> None:
        """Act on one NodeClaim; ``last_pod_event`` is in epoch seconds."""
        raise NotImplementedError
