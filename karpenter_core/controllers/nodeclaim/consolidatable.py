"""The Consolidatable condition: a NodeClaim's consolidateAfter has run out.

As upstream, the condition is True once the NodePool's consolidateAfter has passed since the
last pod event on the node (or, with none yet, since the NodeClaim was initialized), and absent
otherwise: before then, while the NodeClaim is not initialized, and when consolidation is off
(``Never``) or the NodePool is unknown. The disruption planner applies the same timer to its
snapshot itself; the condition shows it on the NodeClaim.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.duration import parse_nillable_duration
from karpenter_core.apis.v1.nodeclaim import CONDITION_CONSOLIDATABLE, CONDITION_INITIALIZED
from karpenter_core.controllers.nodeclaim.pod_event_loop import PodEventLoop
from karpenter_core.controllers.objects import (
    nodeclaim_path,
    set_condition,
    status_condition,
    status_true,
)
from karpenter_core.controllers.writes import patch_status
from karpenter_core.operator.kube import NotFound

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.apis.v1.nodepool import NodePool

__all__ = ["ConsolidatableController", "consolidatable_at", "consolidate_after"]


def consolidate_after(nodepool: NodePool | None) -> timedelta | None:
    """The NodePool's consolidateAfter; None when consolidation is off or the NodePool unknown."""
    if nodepool is None:
        return None
    return parse_nillable_duration(nodepool.spec.disruption.consolidate_after)


def consolidatable_at(
    nodeclaim: NodeClaim, after: timedelta | None, last_pod_event: datetime | None
) -> datetime | None:
    """When the NodeClaim becomes consolidatable, ``after`` (its NodePool's consolidateAfter)
    past its last pod event or else its initialization; None if it cannot (consolidation off,
    not initialized)."""
    initialized = status_condition(nodeclaim, CONDITION_INITIALIZED)
    if after is None or initialized is None or initialized.status != "True":
        return None
    since = last_pod_event or initialized.last_transition_time
    return since + after


def _without_condition(status: dict[str, Any]) -> None:
    status["conditions"] = [
        c for c in status.get("conditions") or () if c.get("type") != CONDITION_CONSOLIDATABLE
    ]


class ConsolidatableController(PodEventLoop):
    """Sets or clears every NodeClaim's Consolidatable condition as its timer runs out."""

    name = "nodeclaim.consolidatable"

    def reconcile_nodeclaim(
        self, nodeclaim: NodeClaim, last_pod_event: float | None, now: datetime
    ) -> None:
        """Write the NodeClaim if its condition is not what its timer says."""
        nodepool = self.context.state.nodepool(nodeclaim.metadata.labels.get(wk.NODEPOOL, ""))
        due = consolidatable_at(
            nodeclaim,
            consolidate_after(nodepool),
            datetime.fromtimestamp(last_pod_event, UTC) if last_pod_event else None,
        )
        wanted = due is not None and now >= due
        if wanted and not status_true(nodeclaim, CONDITION_CONSOLIDATABLE):
            self._write(nodeclaim, consolidatable=True)
        elif not wanted and status_condition(nodeclaim, CONDITION_CONSOLIDATABLE) is not None:
            self._write(nodeclaim, consolidatable=False)

    def _write(self, nodeclaim: NodeClaim, consolidatable: bool) -> None:
        context = self.context

        def mark(status: dict[str, Any]) -> None:
            if consolidatable:
                set_condition(
                    status, CONDITION_CONSOLIDATABLE, "True", "Consolidatable", "", context.now()
                )
            else:
                _without_condition(status)

        try:
            patch_status(
                context,
                nodeclaim_path(nodeclaim.metadata.name or ""),
                nodeclaim.to_manifest(),
                mark,
            )
        except NotFound:
            return
