"""The preemption controller: acts on spot instances Compute Engine preempted.

Every ``interval`` it lists each zone's operations of type ``compute.instances.preempted``.
For each one not seen before, the NodeClaim of the preempted instance (by providerID) is
deleted at once (the core's termination controller drains and replaces it) and its spot
offering is kept out of launches, as AWS's interruption controller does for a spot
interruption. An operation older than the offerings cache's TTL (one found at start-up) deletes
its NodeClaim but marks nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.nodeclaims import NODECLAIM_VERSION, ClusterNodeClaims
from karpenter_core.sdk.observe import logs, metrics
from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_core.sdk.record import ProviderContext
from karpenter_gcp.errors import RETRY
from karpenter_gcp.instances import message_json, provider_id

__all__ = ["PREEMPTED", "Preemption", "PreemptionController", "preemptions"]

PREEMPTED = "compute.instances.preempted"
REASON = "InstancePreempted"
POLL_INTERVAL = 5.0


@dataclass(frozen=True, slots=True)
class Preemption:
    """One preempted instance, from its zone operation."""

    id: str
    provider_id: str
    inserted: datetime | None


def preemptions(project: str, operations: Iterable[Mapping[str, Any]]) -> list[Preemption]:
    """The preemptions among zone operations (their JSON)."""
    out = []
    for op in operations:
        if op.get("operationType") != PREEMPTED:
            continue
        zone = str(op.get("zone", "")).rsplit("/", 1)[-1]
        name = str(op.get("targetLink", "")).rsplit("/", 1)[-1]
        inserted = op.get("insertTime")
        when = datetime.fromisoformat(inserted) if inserted else None
        out.append(
            Preemption(str(op.get("id") or op.get("name")), provider_id(project, zone, name), when)
        )
    return out


class PreemptionController:
    """Deletes the NodeClaims of preempted instances and marks their offerings unavailable.

    ``clients`` holds the Compute ``zone_operations`` client; ``context`` needs ``kube_client``
    (and ``events``, to publish an Event on each NodeClaim)."""

    name = "preemption"

    def __init__(
        self,
        context: ProviderContext,
        clients: Any,
        project: str,
        zones: Sequence[str],
        unavailable: UnavailableOfferings,
        *,
        interval: float = POLL_INTERVAL,
    ) -> None:
        self._context = context
        self._clients = clients
        self._project = project
        self._zones = tuple(zones)
        self._unavailable = unavailable
        self._interval = interval
        self._cluster = ClusterNodeClaims(context.kube_client)
        self._seen: set[str] = set()

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set; a failed poll is logged and tried again next time."""
        with logs.bind(controller=self.name):
            while not stop.is_set():
                try:
                    self.poll()
                except Exception as error:
                    self._context.logger.error("preemption: polling failed: %s", error)
                stop.wait(self._interval)

    def poll(self) -> int:
        """Read the zones' preemptions and act on the new ones; returns how many were new."""
        found: list[Preemption] = []
        for zone in self._zones:
            pages = self._clients.zone_operations.list(
                request={
                    "project": self._project,
                    "zone": zone,
                    "filter": f'operationType="{PREEMPTED}"',
                },
                retry=RETRY,
            )
            found += preemptions(self._project, (message_json(op) for op in pages))
        new = [p for p in found if p.id not in self._seen]
        self._seen = {p.id for p in found}
        if new:
            by_id = {p.provider_id: p for p in new}
            for claim in self._cluster.nodeclaims():
                preemption = by_id.get((claim.get("status") or {}).get("providerID", ""))
                if preemption is not None:
                    self._act(claim, preemption)
        return len(new)

    def _act(self, claim: Mapping[str, Any], preemption: Preemption) -> None:
        meta = claim.get("metadata") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        instance_type, zone = labels.get(wk.INSTANCE_TYPE, ""), labels.get(wk.TOPOLOGY_ZONE, "")
        now = self._context.clock()
        recent = preemption.inserted is None or now - preemption.inserted < self._unavailable.ttl
        if instance_type and zone and recent:
            self._unavailable.mark(wk.CAPACITY_TYPE_SPOT, instance_type, zone, REASON)
        name = str(meta.get("name", ""))
        if meta.get("deletionTimestamp") or not self._cluster.delete_nodeclaim(name):
            return
        metrics.nodeclaim_disrupted(REASON, labels)
        self._context.logger.info("preemption: deleting NodeClaim %s", name)
        if self._context.events is not None:
            involved = {
                "apiVersion": f"{wk.GROUP}/{NODECLAIM_VERSION}",
                "kind": "NodeClaim",
                "metadata": {"name": name, "uid": meta.get("uid", "")},
            }
            message = f"Compute Engine preempted spot instance {preemption.provider_id}"
            self._context.events.publish(involved, "Warning", REASON, message)
