"""Kubernetes Events with upstream's reasons, deduplicated and sent off the caller's thread.

The same (object, reason, message) is published at most once per ``DEDUPE_WINDOW`` (2 minutes,
as upstream). Events go through a bounded queue to one sender thread, so a controller never waits
on the apiserver for an event; when the queue is full, events are dropped (and counted).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from karpenter_core.operator.kube import ApiError, KubeClient

__all__ = ["DEDUPE_WINDOW", "Deduper", "EventRecorder", "Reason", "reference"]

DEDUPE_WINDOW = 120.0
NORMAL, WARNING = "Normal", "Warning"

log = logging.getLogger("karpenter.events")


class Reason:
    """The reasons of the events the core publishes, upstream Karpenter's strings (users read
    and filter them with kubectl: they never change). Every event the core publishes takes its
    reason from here; a provider's own events carry the provider's reasons."""

    NOMINATED = "Nominated"
    FAILED_SCHEDULING = "FailedScheduling"
    NO_COMPATIBLE_INSTANCE_TYPES = "NoCompatibleInstanceTypes"
    INSUFFICIENT_CAPACITY = "InsufficientCapacityError"
    NODECLASS_NOT_READY = "NodeClassNotReady"
    LAUNCHED = "Launched"
    REGISTERED = "Registered"
    EVICTED = "Evicted"
    FAILED_DRAINING = "FailedDraining"
    DISRUPTED = "Disrupted"
    LIVENESS = "Liveness"
    NODEPOOL_LIMIT_EXCEEDED = "NodePoolLimitExceeded"
    DISRUPTION_BLOCKED = "DisruptionBlocked"
    DISRUPTION_LAUNCHING = "DisruptionLaunching"
    DISRUPTION_TERMINATING = "DisruptionTerminating"
    DISRUPTION_WAITING_READINESS = "DisruptionWaitingReadiness"
    UNCONSOLIDATABLE = "Unconsolidatable"


def reference(obj: Any) -> dict[str, Any]:
    """The involved-object part of an Event for a manifest dict, an API model (NodeClaim,
    NodePool) or a decoded pod or node (``ClusterPod``, ``ClusterNode``)."""
    if isinstance(obj, Mapping):
        meta = obj.get("metadata") or {}
        return {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid") if meta.get(k)},
        }
    metadata = getattr(obj, "metadata", None)
    if metadata is not None:  # a pydantic API object
        return {
            "apiVersion": getattr(obj, "api_version", ""),
            "kind": getattr(obj, "kind", ""),
            "metadata": {
                k: v
                for k, v in (
                    ("name", metadata.name),
                    ("namespace", metadata.namespace),
                    ("uid", metadata.uid),
                )
                if v
            },
        }
    namespace = getattr(obj, "namespace", "")
    uid = getattr(obj, "uid", "")
    meta = {"name": obj.name}
    if namespace:
        meta["namespace"] = namespace
    if uid and uid != getattr(obj, "key", None):
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod" if namespace else "Node", "metadata": meta}


class Deduper:
    """Remembers what was published and answers whether a repeat is due."""

    def __init__(
        self, window: float = DEDUPE_WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window = window
        self.clock = clock
        self._seen: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def admit(self, key: tuple[str, ...]) -> bool:
        """True if ``key`` was not admitted within the window (and remember it now)."""
        now = self.clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < self.window:
                return False
            self._seen[key] = now
            if len(self._seen) > 10_000:
                self._seen = {k: t for k, t in self._seen.items() if now - t < self.window}
            return True


class EventRecorder:
    """Publishes core/v1 Events about objects."""

    def __init__(
        self,
        client: KubeClient,
        deduper: Deduper | None = None,
        max_queued: int = 5000,
        component: str = "karpenter",
    ) -> None:
        self.client = client
        self.deduper = deduper or Deduper()
        self.component = component
        self.dropped = 0
        self._queue: queue.Queue[tuple[dict[str, Any], str, str, str] | None] = queue.Queue(
            max_queued
        )
        self._thread = threading.Thread(target=self._send_loop, name="events", daemon=True)
        self._thread.start()

    def warning(self, obj: Any, reason: str, message: str) -> bool:
        """Publish a Warning event; False if it was a duplicate or dropped."""
        return self.publish(obj, WARNING, reason, message)

    def publish(self, obj: Any, event_type: str, reason: str, message: str) -> bool:
        """Queue an event about ``obj`` (see ``reference``) unless it is a recent duplicate."""
        involved = reference(obj)
        meta = involved["metadata"]
        key = (
            involved["kind"],
            meta.get("namespace", ""),
            meta.get("name", ""),
            meta.get("uid", ""),
            reason,
            message,
        )
        if not self.deduper.admit(key):
            return False
        try:
            self._queue.put_nowait((involved, event_type, reason, message))
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event was sent (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def close(self) -> None:
        """Send what is queued, then stop the sender."""
        self.flush()
        self._queue.put(None)

    def _send_loop(self) -> None:
        while (item := self._queue.get()) is not None:
            involved, event_type, reason, message = item
            try:
                self.client.create_event(involved, event_type, reason, message, self.component)
            except ApiError as error:
                log.warning("cannot publish event", extra={"reason": reason, "error": str(error)})
            except Exception:
                log.exception("cannot publish event", extra={"reason": reason})
            finally:
                self._queue.task_done()
        self._queue.task_done()
