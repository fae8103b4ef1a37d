"""The Drifted condition: a launched NodeClaim no longer matches its NodePool or its NodeClass.

As upstream's NodeClaim disruption controller: once the NodeClaim is launched, the condition is
True with the drift's reason (NodePoolDrifted, RequirementsDrifted, else the cloud provider's
``is_drifted`` reason) and it is removed when the NodeClaim no longer drifts; a NodeClaim not
launched never has it. Its lastTransitionTime is when the drift was first seen, and the
disruption planner takes drifted nodes earliest first by it; the planner finds drift itself on
every pass with the same check, so the condition gives the order and shows drift to users.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import CONDITION_DRIFTED, CONDITION_LAUNCHED
from karpenter_core.controllers.objects import (
    nodeclaim_path,
    set_condition,
    status_condition,
    status_true,
)
from karpenter_core.controllers.runtime import LoopController
from karpenter_core.controllers.writes import patch_status
from karpenter_core.disruption.drift import NodePoolShape, nodepool_drift
from karpenter_core.operator.kube import NotFound

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.cloudprovider.types import CloudProvider
    from karpenter_core.controllers.context import Context

__all__ = ["DriftedController", "drifted_condition", "provider_drift"]

log = logging.getLogger("karpenter.controllers")


def provider_drift(provider: CloudProvider, nodeclaim: NodeClaim) -> str | None:
    """The cloud provider's drift reason for the NodeClaim ("" when not drifted); None, logged,
    when the provider fails to answer."""
    try:
        return provider.is_drifted(nodeclaim) or ""
    except Exception:
        log.exception("is_drifted failed", extra={"nodeclaim": nodeclaim.metadata.name})
        return None


def drifted_condition(
    nodeclaim: NodeClaim,
    nodepool: NodePoolShape | None,
    provider: Callable[[NodeClaim], str | None],
) -> str | None:
    """The reason the NodeClaim's Drifted condition should carry, "" when it should have none,
    or None to leave it as it is (its NodePool unknown, or the provider could not say). The
    drift from the NodePool (``nodepool``: its shape) is checked first; the ``provider`` is
    asked only when there is none."""
    if not status_true(nodeclaim, CONDITION_LAUNCHED):
        return ""
    if nodepool is None:
        return None
    metadata = nodeclaim.metadata
    reason = nodepool_drift(nodepool, metadata.labels, metadata.annotations)
    return reason or provider(nodeclaim)


class DriftedController(LoopController):
    """Sets or removes every NodeClaim's Drifted condition, every disruption poll period."""

    name = "nodeclaim.drifted"

    def __init__(self, context: Context) -> None:
        super().__init__(None)
        self.context = context
        self.period = context.settings.disruption_poll_period

    def reconcile(self) -> None:
        """One pass over the NodeClaims not being deleted."""
        state = self.context.state
        provider = self.context.provider
        shapes: dict[str, NodePoolShape | None] = {}
        for nodeclaim in state.nodeclaims():
            if nodeclaim.metadata.deletion_timestamp is not None:
                continue
            name = nodeclaim.metadata.labels.get(wk.NODEPOOL, "")
            if name not in shapes:
                nodepool = state.nodepool(name)
                shapes[name] = NodePoolShape.of(nodepool) if nodepool is not None else None
            reason = drifted_condition(
                nodeclaim, shapes[name], lambda claim: provider_drift(provider, claim)
            )
            if reason is None:
                continue
            current = status_condition(nodeclaim, CONDITION_DRIFTED)
            if reason and (current is None or (current.status, current.reason) != ("True", reason)):
                self._write(nodeclaim, reason)
            elif not reason and current is not None:
                self._write(nodeclaim, "")

    def _write(self, nodeclaim: NodeClaim, reason: str) -> None:
        context = self.context

        def mark(status: dict[str, Any]) -> None:
            if reason:
                set_condition(status, CONDITION_DRIFTED, "True", reason, reason, context.now())
            else:
                status["conditions"] = [
                    c for c in status.get("conditions") or () if c.get("type") != CONDITION_DRIFTED
                ]

        name = nodeclaim.metadata.name or ""
        try:
            patch_status(context, nodeclaim_path(name), nodeclaim.to_manifest(), mark)
        except NotFound:
            return
        if reason:
            log.debug("marking drifted", extra={"nodeclaim": name, "reason": reason})
        else:
            log.debug("removing the drifted condition", extra={"nodeclaim": name})
