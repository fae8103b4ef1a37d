"""Launch: what a provider's answer to ``create`` means for the NodeClaim (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.types import CreateError, InsufficientCapacity, NodeClassNotReady
from karpenter_core.operator.events import Reason

__all__ = ["MESSAGE_LIMIT", "LaunchFailure", "launch_failure", "launched"]

MESSAGE_LIMIT = 300
"""Longest error message kept in the Launched condition."""


@dataclass(frozen=True, slots=True)
class LaunchFailure:
    """How a failed launch is handled: deleted (with an event reason and a metric reason) or
    retried with a Launched=Unknown condition reason."""

    delete: bool
    reason: str
    message: str
    metric_reason: str = ""


def launch_failure(error: Exception) -> LaunchFailure:
    """Upstream's mapping of create errors to outcomes."""
    message = str(error) or type(error).__name__
    if isinstance(error, InsufficientCapacity):
        return LaunchFailure(True, Reason.INSUFFICIENT_CAPACITY, message, "insufficient_capacity")
    if isinstance(error, NodeClassNotReady):
        return LaunchFailure(True, Reason.NODECLASS_NOT_READY, message, "nodeclass_not_ready")
    if isinstance(error, CreateError):
        return LaunchFailure(False, error.reason, error.message[:MESSAGE_LIMIT])
    return LaunchFailure(False, "LaunchFailed", message[:MESSAGE_LIMIT])


def launched(
    nodeclaim: NodeClaim, created: NodeClaim
) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """The labels, annotations and status fields to write after a successful create.

    The provider's labels (zone, capacity type, instance type) are added; the NodeClaim's own
    labels win, as upstream. The hostname label belongs to the Node, not the NodeClaim. The
    provider's annotations (e.g. its NodeClass hash, which drift compares) win over the
    NodeClaim's.
    """
    labels = {k: v for k, v in created.metadata.labels.items() if k != wk.HOSTNAME}
    labels.update(nodeclaim.metadata.labels)
    annotations = {**nodeclaim.metadata.annotations, **created.metadata.annotations}
    status = created.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    fields = {
        key: status[key]
        for key in ("providerID", "imageID", "capacity", "allocatable")
        if status.get(key)
    }
    return labels, annotations, fields
