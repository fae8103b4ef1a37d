"""Polling helper for tests that wait on a cluster to converge."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None],
    description: str,
    timeout: float = 60.0,
    interval: float = 0.2,
) -> T:
    """Call ``condition`` until it returns something truthy, and return that.

    Raises ``TimeoutError`` naming ``description`` and the last value seen.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {description} (last value: {value!r})"
            )
        time.sleep(interval)
