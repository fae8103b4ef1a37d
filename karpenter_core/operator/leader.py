"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

A candidate takes the Lease when it is free, released, or its holder has not renewed it for
``lease_duration`` (measured on the candidate's own clock from when it last saw the record
change, so clocks need not agree). The leader renews every ``retry_period`` and steps down when
it could not renew for ``renew_deadline``. On a clean shutdown it releases the Lease so another
replica takes over at once.

Stepping down means ending the process, as controller-runtime does: a controller thread stuck in
a cloud call cannot be stopped, and it must not act once another replica may lead. Each renewal
request is bounded by what is left of the renew deadline, and a watchdog thread ends the process
when the deadline passes, even while a renewal is still blocked in a socket read. The deadline
counts from the start of the last successful renewal, so the process is gone before any other
replica can see the Lease expire (``renew_deadline < lease_duration``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from karpenter_core.operator.kube import ApiError, KubeClient, NotFound
from karpenter_core.operator.settings import Settings

__all__ = ["LeaderElector", "exit_process"]

log = logging.getLogger("karpenter.leader")
FLUSH_TIMEOUT = 0.5
"""Seconds spent flushing logs before the process ends on a lost Lease."""


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()


def exit_process(code: int) -> None:
    """End the process at once with ``code``, after flushing logs for at most
    ``FLUSH_TIMEOUT`` (a handler blocked on a full pipe must not delay the exit)."""
    flusher = threading.Thread(target=_flush_logs, name="flush logs", daemon=True)
    flusher.start()
    flusher.join(FLUSH_TIMEOUT)
    os._exit(code)


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
        terminate: Callable[[int], None] = exit_process,
    ) -> None:
        """``terminate(1)`` is called when leadership is lost (the default ends the process)."""
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
        self._terminate = terminate
        self._renewed_at = 0.0
        """Monotonic time the last successful acquire or renewal started."""
        self._done = threading.Event()
        self._lost = threading.Event()
        self._exit_lock = threading.Lock()

    def is_leader(self) -> bool:
        """Whether this process holds the Lease now."""
        return self._leader.is_set()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; ``run`` returns, and a leader releases the Lease unless told not
        to (then a successor waits for it to expire, as after a crash)."""
        self._release_on_stop = release
        self._stop.set()

    def run(self, on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        """Block: acquire the Lease, call ``on_started`` (in a new thread), renew until ``stop()``
        is called, then call ``on_stopped`` and return. A renewal that does not succeed within
        ``renew_deadline`` loses the Lease: ``terminate(1)`` is called (by a watchdog, so a blocked
        request cannot delay it) and, if that returns, ``run`` stops as well."""
        while not self._stop.is_set():
            started = time.monotonic()
            if self._try(self.renew_deadline):
                self._renewed_at = started
                break
            self._stop.wait(self.retry_period)
        if self._stop.is_set():
            return
        self._leader.set()
        log.info("became leader", extra={"lease": self.name, "identity": self.identity})
        threading.Thread(target=self._watchdog, name="leader watchdog", daemon=True).start()
        threading.Thread(target=on_started, name="leader work", daemon=True).start()
        try:
            while not self._stop.wait(self.retry_period) and not self._lost.is_set():
                started = time.monotonic()
                remaining = self._renewed_at + self.renew_deadline - started
                if remaining > 0 and self._try(remaining):
                    self._renewed_at = started
                elif time.monotonic() >= self._renewed_at + self.renew_deadline:
                    self._lose()
        finally:
            self._done.set()
            self._leader.clear()
            if self._stop.is_set() and self._release_on_stop and not self._lost.is_set():
                self._release()
            on_stopped()

    def _watchdog(self) -> None:
        """Lose the Lease once ``renew_deadline`` passes without a successful renewal."""
        while not self._done.is_set():
            remaining = self._renewed_at + self.renew_deadline - time.monotonic()
            if remaining <= 0:
                self._lose()
                return
            self._done.wait(remaining)

    def _lose(self) -> None:
        """Step down: stop answering as leader and end the process (once)."""
        with self._exit_lock:
            if self._lost.is_set():
                return
            self._lost.set()
        self._leader.clear()
        log.error(
            "leadership lost: the Lease was not renewed within the renew deadline, exiting",
            extra={"lease": self.name, "renew_deadline": self.renew_deadline},
        )
        self._terminate(1)

    def _try(self, budget: float) -> bool:
        """One attempt to acquire or renew within ``budget`` seconds (each request gets what is
        left of it); True if we hold the Lease afterwards."""
        deadline = time.monotonic() + budget
        now = _micro_time()
        try:
            lease = self.client.get(self.path, timeout=budget)
        except NotFound:
            return self._create(now, deadline - time.monotonic())
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
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            self._lease = self.client.replace(self.path, lease, timeout=left)
        except ApiError as error:
            log.info("cannot update the Lease", extra={"error": str(error)})
            return False
        self._observed = (self.identity, now)
        self._observed_at = time.monotonic()
        return True

    def _create(self, now: str, budget: float) -> bool:
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
        if budget <= 0:
            return False
        try:
            self._lease = self.client.create(self.path.rsplit("/", 1)[0], body, timeout=budget)
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
            self.client.replace(self.path, lease, timeout=self.renew_deadline)
            log.info("released the Lease", extra={"lease": self.name})
        except ApiError as error:
            log.warning("cannot release the Lease", extra={"error": str(error)})
