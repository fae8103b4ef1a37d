"""How the controllers run: a level-triggered loop per controller, and a keyed worker pool.

Each controller looks at the shared cluster state on every pass (every ``period`` seconds, or
sooner when woken) and decides what to do per object; slow per-object work (cloud calls, drains)
goes to a small thread pool that never runs two tasks for the same key at once and honours
per-key requeue times.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

__all__ = ["KeyedWorkers", "LoopController"]

log = logging.getLogger("karpenter.controllers")


class KeyedWorkers:
    """A thread pool running at most one task per key; a task may ask to run again later."""

    def __init__(self, name: str, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._running: set[Hashable] = set()
        self._not_before: dict[Hashable, float] = {}
        self.name = name

    def submit(self, key: Hashable, task: Callable[[], float | None]) -> bool:
        """Run ``task`` for ``key`` unless it is not due; the task returns seconds until it
        should run again (None: whenever the controller next finds work for the key)."""
        with self._lock:
            if key in self._running or self._not_before.get(key, 0.0) > time.monotonic():
                return False
            self._running.add(key)
            self._not_before.pop(key, None)
        self._pool.submit(self._run, key, task)
        return True

    def _run(self, key: Hashable, task: Callable[[], float | None]) -> None:
        after: float | None = None
        try:
            after = task()
        except Exception:
            log.exception("%s: reconciling %s failed; retrying in 1s", self.name, key)
            after = 1.0
        finally:
            with self._lock:
                self._running.discard(key)
                if after is not None:
                    self._not_before[key] = time.monotonic() + after

    def forget(self, keys: set[Hashable]) -> None:
        """Drop requeue times of keys that no longer exist."""
        with self._lock:
            for key in [k for k in self._not_before if k not in keys]:
                del self._not_before[key]

    def idle(self) -> bool:
        """Whether no task is running."""
        with self._lock:
            return not self._running

    def shutdown(self) -> None:
        """Wait for running tasks and stop the threads."""
        self._pool.shutdown(wait=True, cancel_futures=True)


class _Changes(Protocol):
    def generation(self) -> int: ...

    def wait_for_change(self, timeout: float, since: int | None = None) -> bool: ...


class LoopController:
    """A controller that runs ``reconcile`` every ``period`` seconds, or sooner when the cluster
    state changes (at most every ``min_interval`` seconds)."""

    name = "controller"
    period = 1.0
    min_interval = 0.05

    def __init__(self, changes: _Changes | None = None) -> None:
        self._changes = changes

    def reconcile(self) -> None:
        """One pass over the cluster state."""
        raise NotImplementedError

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set; a failed pass is logged and retried on the next one."""
        try:
            while not stop.is_set():
                since = self._changes.generation() if self._changes is not None else 0
                started = time.monotonic()
                try:
                    self.reconcile()
                except Exception:
                    log.exception("%s: pass failed", self.name)
                self._pause(stop, started, since)
        finally:
            self.close()

    def _pause(self, stop: threading.Event, started: float, since: int) -> None:
        deadline = started + self.period
        stop.wait(max(0.0, started + self.min_interval - time.monotonic()))
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._changes is None:
                stop.wait(min(remaining, 0.2))
            elif self._changes.wait_for_change(min(remaining, 0.2), since):
                return

    def close(self) -> None:
        """Release resources after the loop ends."""
