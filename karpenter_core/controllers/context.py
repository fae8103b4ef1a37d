"""What every controller gets from the operator: settings, client, state, provider, events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from karpenter_core.cloudprovider.types import CloudProvider
    from karpenter_core.operator.events import EventRecorder
    from karpenter_core.operator.kube import KubeClient
    from karpenter_core.operator.settings import Settings
    from karpenter_core.state.cluster import ClusterState

__all__ = ["Context"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class Context:
    """The operator's parts the controllers share.

    ``provider`` is the instrumented CloudProvider; ``clock`` gives aware UTC datetimes;
    ``trigger_provisioning`` asks the provisioner for a new batch (a NodeClaim went away).
    """

    settings: Settings
    client: KubeClient
    state: ClusterState
    provider: CloudProvider
    events: EventRecorder
    clock: Callable[[], datetime] = _utcnow
    trigger_provisioning: Callable[[], None] = field(default=lambda: None)

    def now(self) -> datetime:
        """The current time (UTC)."""
        return self.clock()
