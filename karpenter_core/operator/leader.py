"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

A candidate takes the Lease when it is free, released, or its holder has not renewed it for
``lease_duration`` (measured on the candidate's own clock from when it last saw the record
change, so clocks need not agree). The leader renews every ``retry_period`` and steps down when
it could not renew for ``renew_deadline``. On a clean shutdown it releases the Lease so another
replica takes over at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from karpenter_core.operator.kube import ApiError, KubeClient, NotFound
from karpenter_core.operator.settings import Settings

__all__ = ["LeaderElector"]

log = logging.getLogger("karpenter.leader")


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaign for the Lease ``settings.leader_election_name`` as ``identity``."""

    def __init__(
        self,
        client: KubeClient,
        settings: Settings,
        identity: str,
        namespace: str | None = None,
    ) -> None:
        self.client = client
        self.identity = identity
        self.name = settings.leader_election_name
        self.namespace = namespace or settings.lease_namespace()
        self.lease_duration = settings.lease_duration
        self.renew_deadline = settings.renew_deadline
        self.retry_period = settings.retry_period
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"
        self._stop = threading.Event()
        self._leader = threading.Event()
        self._observed: tuple[str, str] = ("", "")
        self._observed_at = 0.0
        self._lease: dict[str, Any] | None = None
        self._release_on_stop = True

    def is_leader(self) -> bool:
        """Whether this process holds the Lease now."""
        return self._leader.is_set()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; ``run`` returns, and a leader releases the Lease unless told not
        to (then a successor waits for it to expire, as after a crash)."""
        self._release_on_stop = release
        self._stop.set()

    def run(self, on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        """Block: acquire the Lease, call ``on_started`` (in a new thread), renew until the Lease
        is lost or ``stop()`` is called, then call ``on_stopped`` and return."""
        while not self._stop.is_set() and not self._try():
            self._stop.wait(self.retry_period)
        if self._stop.is_set():
            return
        self._leader.set()
        log.info("became leader", extra={"lease": self.name, "identity": self.identity})
        threading.Thread(target=on_started, name="leader work", daemon=True).start()
        last_renewed = time.monotonic()
        try:
            while not self._stop.wait(self.retry_period):
                if self._try():
                    last_renewed = time.monotonic()
                elif time.monotonic() - last_renewed > self.renew_deadline:
                    log.error("leadership lost: the Lease was not renewed in time")
                    return
        finally:
            self._leader.clear()
            if self._stop.is_set() and self._release_on_stop:
                self._release()
            on_stopped()

    def _try(self) -> bool:
        """One attempt to acquire or renew; True if we hold the Lease afterwards."""
        now = _micro_time()
        try:
            lease = self.client.get(self.path)
        except NotFound:
            return self._create(now)
        except ApiError as error:
            log.warning("cannot read the Lease", extra={"error": str(error)})
            return False
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        held_by_other = holder and holder != self.identity
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if held_by_other and time.monotonic() < self._observed_at + duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        lease["spec"] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(self.lease_duration),
            "acquireTime": spec.get("acquireTime") if holder == self.identity else now,
            "renewTime": now,
            "leaseTransitions": transitions if holder == self.identity else transitions + 1,
        }
        try:
            self._lease = self.client.replace(self.path, lease)
        except ApiError as error:
            log.info("cannot update the Lease", extra={"error": str(error)})
            return False
        self._observed = (self.identity, now)
        self._observed_at = time.monotonic()
        return True

    def _create(self, now: str) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            self._lease = self.client.create(self.path.rsplit("/", 1)[0], body)
        except ApiError as error:
            log.info("cannot create the Lease", extra={"error": str(error)})
            return False
        self._observed = (self.identity, now)
        self._observed_at = time.monotonic()
        return True

    def _release(self) -> None:
        """Give the Lease up (holder cleared, 1 s duration) so a successor need not wait."""
        if self._lease is None:
            return
        lease = dict(self._lease)
        spec = dict(lease.get("spec") or {})
        now = _micro_time()
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=now, acquireTime=now)
        lease["spec"] = spec
        try:
            self.client.replace(self.path, lease)
            log.info("released the Lease", extra={"lease": self.name})
        except ApiError as error:
            log.warning("cannot release the Lease", extra={"error": str(error)})
