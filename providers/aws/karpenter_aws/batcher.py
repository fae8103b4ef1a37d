"""One call for many concurrent callers, as upstream's batcher does for EC2 calls.

Calls with the same key that arrive close together join one batch; the batch runs once no call
joined for ``idle``, ``max_wait`` after it opened, or as soon as it holds ``max_items``. The
first caller of a batch runs it, in its own thread, and every caller gets its own result.

Under the GIL, concurrent callers that each compute a while before calling arrive spread out
further than the idle time; a caller can say it is on its way (``expecting``), and open batches
then wait for it, up to their ``max_wait``, instead of closing when idle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Generic, TypeVar, cast

from karpenter_core.sdk.types import CloudProviderError

__all__ = ["Batcher"]

T = TypeVar("T")
R = TypeVar("R")


class _Waiter(Generic[T]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = threading.Event()
        self.result: object = None
        self.error: BaseException | None = None


class _Batch(Generic[T]):
    __slots__ = ("first", "last", "waiters")

    def __init__(self, now: float) -> None:
        self.first = now
        self.last = now
        self.waiters: list[_Waiter[T]] = []


class Batcher(Generic[T, R]):
    """Runs ``execute(items)`` once for the items of concurrent ``add`` calls with the same key.

    ``execute`` returns one result per item, in order; an exception it raises reaches every
    caller of the batch.
    """

    def __init__(
        self,
        execute: Callable[[list[T]], Sequence[R]],
        idle: timedelta,
        max_wait: timedelta,
        max_items: int,
    ) -> None:
        self._execute = execute
        self._idle = idle.total_seconds()
        self._max_wait = max_wait.total_seconds()
        self._max_items = max_items
        self._changed = threading.Condition()
        self._open: dict[Hashable, _Batch[T]] = {}
        self._expected: set[int] = set()

    @contextmanager
    def expecting(self) -> Iterator[None]:
        """Within this block the calling thread counts as about to ``add``: open batches do not
        close for being idle (only for ``max_wait``) until it adds or leaves the block."""
        caller = threading.get_ident()
        with self._changed:
            self._expected.add(caller)
        try:
            yield
        finally:
            with self._changed:
                if caller in self._expected:
                    self._expected.discard(caller)
                    self._changed.notify_all()

    def add(self, key: Hashable, item: T) -> R:
        """Join the open batch of ``key`` (or open one) and return this item's result."""
        waiter = _Waiter(item)
        caller = threading.get_ident()
        now = time.monotonic()
        with self._changed:
            if caller in self._expected:
                self._expected.discard(caller)
                self._changed.notify_all()
            batch = self._open.get(key)
            leader = batch is None
            if batch is None:
                batch = self._open[key] = _Batch(now)
            batch.waiters.append(waiter)
            batch.last = now
            if len(batch.waiters) >= self._max_items:
                del self._open[key]
                self._changed.notify_all()
        if leader:
            self._run(key, batch)
        else:
            waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        return cast(R, waiter.result)

    def _run(self, key: Hashable, batch: _Batch[T]) -> None:
        with self._changed:
            while self._open.get(key) is batch:
                deadline = batch.first + self._max_wait
                if not self._expected:
                    deadline = min(deadline, batch.last + self._idle)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    del self._open[key]
                    break
                self._changed.wait(remaining)
            waiters = list(batch.waiters)
        answered = False
        try:
            results = self._execute([w.item for w in waiters])
            if len(results) != len(waiters):
                raise CloudProviderError(
                    f"a batch of {len(waiters)} calls got {len(results)} results"
                )
            for waiter, result in zip(waiters, results, strict=True):
                waiter.result = result
            answered = True
        except Exception as error:  # the batch's failure is every caller's
            for waiter in waiters:
                waiter.error = error
            answered = True
        finally:
            for waiter in waiters:
                if not answered:
                    waiter.error = CloudProviderError("a batch ended without an answer")
                waiter.done.set()
