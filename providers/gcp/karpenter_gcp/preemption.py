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
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.nodeclaims import NODECLAIM_VERSION, ClusterNodeClaims
from karpenter_core.sdk.observe import logs, metrics
from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_core.sdk.record import ProviderContext
from karpenter_gcp.clients import GCPClients
from karpenter_gcp.errors import RETRY
from karpenter_gcp.instances import message_json, provider_id

__all__ = ["PREEMPTED", "PreemptionController", "preemptions"]

PREEMPTED = "compute.instances.preempted"
REASON = "InstancePreempted"


def preemptions(project: str, operations: Iterable[Mapping[str, Any]]) -> dict[str, Preemption]:
    """The preempted instances among zone operations (their JSON) by operation id: their
    providerID and when they were preempted."""
    return {
        str(op.get("id") or op.get("name")): (
            provider_id(
                project,
                str(op.get("zone", "")).rsplit("/", 1)[-1],
                str(op.get("targetLink", "")).rsplit("/", 1)[-1],
            ),
            datetime.fromisoformat(op["insertTime"]) if op.get("insertTime") else None,
        )
        for op in operations
        if op.get("operationType") == PREEMPTED
    }


Preemption = tuple[str, datetime | None]


class PreemptionController:
    """Deletes the NodeClaims of preempted instances and marks their offerings unavailable.

    It reads the operations of ``zones`` (the region's); ``context`` needs ``kube_client``
    (and ``events``, to publish an Event on each NodeClaim)."""

    name = "preemption"

    def __init__(
        self,
        context: ProviderContext,
        clients: GCPClients,
        project: str,
        zones: Iterable[str],
        unavailable: UnavailableOfferings,
        interval: float = 5.0,
    ) -> None:
        self._context, self._clients, self._project = context, clients, project
        self._zones, self._unavailable, self._interval = tuple(zones), unavailable, interval
        self._cluster = ClusterNodeClaims(context.kube_client)
        self._seen: set[str] = set()

    def run(self, stop: threading.Event) -> None:
        """Poll every ``interval`` until ``stop`` is set; a failed poll is logged."""
        with logs.bind(controller=self.name):
            while not stop.is_set():
                try:
                    self.poll()
                except Exception as error:
                    self._context.logger.error("preemption: polling failed: %s", error)
                stop.wait(self._interval)

    def poll(self) -> int:
        """Read the zones' preemptions and act on the new ones; returns how many were new."""
        found: dict[str, Preemption] = {}
        for zone in self._zones:
            request = {
                "project": self._project,
                "zone": zone,
                "filter": f'operationType="{PREEMPTED}"',
            }
            pages = self._clients.zone_operations.list(request=request, retry=RETRY)
            found |= preemptions(self._project, (message_json(op) for op in pages))
        new = dict(p for op, p in found.items() if op not in self._seen)
        self._seen = set(found)
        for claim in self._cluster.nodeclaims() if new else ():
            pid = (claim.get("status") or {}).get("providerID", "")
            if pid in new:
                self._act(claim, new[pid])
        return len(new)

    def _act(self, claim: Mapping[str, Any], inserted: datetime | None) -> None:
        meta = claim.get("metadata") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        instance_type, zone = labels.get(wk.INSTANCE_TYPE, ""), labels.get(wk.TOPOLOGY_ZONE, "")
        recent = inserted is None or self._context.clock() - inserted < self._unavailable.ttl
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
            message = f"Compute Engine preempted the spot instance of NodeClaim {name}"
            self._context.events.publish(involved, "Warning", REASON, message)
