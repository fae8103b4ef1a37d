"""Liveness: NodeClaims that never launched or never registered are given up on (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

from karpenter_core.apis.v1.nodeclaim import CONDITION_LAUNCHED, CONDITION_REGISTERED, NodeClaim
from karpenter_core.controllers.objects import status_condition

__all__ = ["liveness_verdict"]


def liveness_verdict(
    nodeclaim: NodeClaim, now: datetime, launch_timeout: float, registration_timeout: float
) -> str | None:
    """Why to delete the NodeClaim, or None.

    Launch is timed from creation; registration from the moment the NodeClaim launched.
    """
    launched = status_condition(nodeclaim, CONDITION_LAUNCHED)
    if launched is None or launched.status != "True":
        created = nodeclaim.metadata.creation_timestamp
        if created is not None and now - created >= timedelta(seconds=launch_timeout):
            return f"not launched within {launch_timeout:g}s"
        return None
    registered = status_condition(nodeclaim, CONDITION_REGISTERED)
    if registered is not None and registered.status == "True":
        return None
    if now - launched.last_transition_time >= timedelta(seconds=registration_timeout):
        return f"not registered within {registration_timeout:g}s of launch"
    return None
