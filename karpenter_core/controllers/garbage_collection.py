"""Garbage collection: instances without a NodeClaim, and NodeClaims whose instance is gone.

An instance the provider lists that no NodeClaim points at is deleted once it has been seen
orphaned for ``grace`` seconds (a NodeClaim's providerID is written just after its launch, so a
fresh instance is briefly unclaimed). A registered NodeClaim whose instance is no longer listed
is deleted, unless its Node is still Ready. ``orphans`` and ``lost_nodeclaims`` decide, purely.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from karpenter_core.apis.v1.nodeclaim import CONDITION_REGISTERED
from karpenter_core.cloudprovider.types import NodeClaimNotFound
from karpenter_core.controllers.objects import nodeclaim_path, status_true
from karpenter_core.controllers.runtime import LoopController
from karpenter_core.operator import metrics
from karpenter_core.operator.kube import NotFound

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.controllers.context import Context
    from karpenter_core.state.cluster import ClusterNode

__all__ = ["GarbageCollector", "lost_nodeclaims", "orphans"]

log = logging.getLogger("karpenter.garbage_collection")


def orphans(
    instances: Iterable[NodeClaim],
    nodeclaims: Iterable[NodeClaim],
    first_seen: dict[str, float],
    now: float,
    grace: float,
) -> list[NodeClaim]:
    """Instances no NodeClaim claims that have been unclaimed for ``grace`` seconds.

    ``first_seen`` (providerID -> when first seen unclaimed) is updated in place.
    """
    claimed = {c.status.provider_id for c in nodeclaims if c.status.provider_id}
    unclaimed = {}
    for instance in instances:
        provider_id = instance.status.provider_id
        if provider_id and provider_id not in claimed:
            unclaimed[provider_id] = instance
    for provider_id in [p for p in first_seen if p not in unclaimed]:
        del first_seen[provider_id]
    out = []
    for provider_id, instance in unclaimed.items():
        seen = first_seen.setdefault(provider_id, now)
        if now - seen >= grace:
            out.append(instance)
    return out


def lost_nodeclaims(
    instances: Iterable[NodeClaim],
    nodeclaims: Iterable[NodeClaim],
    nodes: Mapping[str, ClusterNode],
) -> list[NodeClaim]:
    """Registered NodeClaims whose instance is not listed, unless their Node is still Ready."""
    listed = {i.status.provider_id for i in instances}
    out = []
    for claim in nodeclaims:
        provider_id = claim.status.provider_id
        if (
            claim.metadata.deletion_timestamp is None
            and provider_id
            and status_true(claim, CONDITION_REGISTERED)
            and provider_id not in listed
        ):
            node = nodes.get(provider_id)
            if node is None or not node.ready():
                out.append(claim)
    return out


class GarbageCollector(LoopController):
    """Cleans up leaked instances and NodeClaims whose instance vanished."""

    name = "garbage_collection"

    def __init__(self, context: Context, period: float = 10.0, grace: float = 30.0) -> None:
        super().__init__()
        self.context = context
        self.period = period
        self.grace = grace
        self._first_seen: dict[str, float] = {}

    def reconcile(self) -> None:
        """One pass: list instances, compare with the NodeClaims."""
        context = self.context
        instances = context.provider.list()
        claims = context.state.nodeclaims()  # read after the list: newer claims are included
        for instance in orphans(instances, claims, self._first_seen, time.monotonic(), self.grace):
            log.info(
                "deleting instance without a nodeclaim",
                extra={"provider_id": instance.status.provider_id},
            )
            with contextlib.suppress(NodeClaimNotFound):
                context.provider.delete(instance)
            self._first_seen.pop(instance.status.provider_id or "", None)
        nodes = {n.provider_id: n for n in context.state.nodes() if n.provider_id}
        for claim in lost_nodeclaims(instances, claims, nodes):
            name = claim.metadata.name or ""
            log.info("deleting nodeclaim whose instance is gone", extra={"nodeclaim": name})
            metrics.nodeclaim_disrupted("garbage_collected", claim.metadata.labels)
            try:
                context.client.delete(nodeclaim_path(name))
            except NotFound:
                continue
