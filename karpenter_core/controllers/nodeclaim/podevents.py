"""Pod events: persist when a pod was last bound to or removed from a NodeClaim's node.

The cluster state tracks that time per node (``ClusterState.last_pod_event``); this controller
writes it to the NodeClaim's ``status.lastPodEventTime`` so that consolidateAfter survives a
restart (the state reads the field back when it lists NodeClaims). As upstream, a NodeClaim is
written at most once per ``DEDUPE_WINDOW``; unlike upstream, a newer time seen within the window
is not dropped but written once the window has passed.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from karpenter_core.controllers.nodeclaim.pod_event_loop import PodEventLoop
from karpenter_core.controllers.objects import format_time, nodeclaim_path
from karpenter_core.operator.kube import NotFound

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim

__all__ = ["DEDUPE_WINDOW", "PodEventsController", "pod_event_update"]

DEDUPE_WINDOW = 10.0
"""Seconds after a written lastPodEventTime before the next write."""


def pod_event_update(
    persisted: datetime | None,
    seen: float | None,
    now: datetime,
    window: float = DEDUPE_WINDOW,
) -> datetime | None:
    """The lastPodEventTime to write, or None: the pod event ``seen`` (epoch seconds, cut to
    the second as the API keeps it) when it is newer than ``persisted`` and ``persisted`` is at
    least ``window`` seconds old."""
    if seen is None:
        return None
    moment = datetime.fromtimestamp(int(seen), UTC)
    if persisted is not None and (
        moment <= persisted or (now - persisted).total_seconds() < window
    ):
        return None
    return moment


class PodEventsController(PodEventLoop):
    """Writes each NodeClaim's ``status.lastPodEventTime`` from the cluster state."""

    name = "nodeclaim.podevents"

    def reconcile_nodeclaim(
        self, nodeclaim: NodeClaim, last_pod_event: float | None, now: datetime
    ) -> None:
        """Write the NodeClaim if its node saw a newer pod event."""
        moment = pod_event_update(nodeclaim.status.last_pod_event_time, last_pod_event, now)
        if moment is not None:
            self._write(nodeclaim, moment)

    def _write(self, nodeclaim: NodeClaim, moment: datetime) -> None:
        """A merge patch of the one field on the status subresource: it cannot undo another
        writer's change, so it needs no resourceVersion."""
        path = nodeclaim_path(nodeclaim.metadata.name or "") + "/status"
        body = {"status": {"lastPodEventTime": format_time(moment)}}
        with contextlib.suppress(NotFound):
            self.context.state.update_nodeclaim(self.context.client.patch(path, body))
