"""Crash points: named places where the controller kills its own process, for the resilience
tests only.

A test runs the controller with ``KARPENTER_TEST_CRASH_POINT=<name>`` (``Settings.
test_crash_point``); when the controller reaches the crash point of that name it logs ``test
crash point <name>: killing the process`` and SIGKILLs itself, as an OOM kill or a lost node
would, so the test can show what a restarted controller makes of what was left half done. The
conformance suite's ``crash-between-launch-and-status`` check and
``tests/integration/test_controller_resilience.py`` use ``CRASH_AFTER_LAUNCH``. With the setting
empty (always, in production) a crash point does nothing.
"""

from __future__ import annotations

import logging
import os
import signal

__all__ = ["CRASH_AFTER_LAUNCH", "CRASH_POINTS", "crash_point", "parse_crash_point"]

CRASH_AFTER_LAUNCH = "after-launch-before-status"
"""Right after a provider's ``create`` returned, before the NodeClaim's labels or status are
written (the NodeClaim lifecycle controller)."""
CRASH_POINTS = (CRASH_AFTER_LAUNCH,)
"""Every crash point the controller has."""

log = logging.getLogger("karpenter.crashpoints")


def parse_crash_point(value: str) -> str:
    """A ``KARPENTER_TEST_CRASH_POINT`` value: one of ``CRASH_POINTS``, or empty for none."""
    if value and value not in CRASH_POINTS:
        raise ValueError(
            f"{value!r} is not a crash point ({', '.join(CRASH_POINTS)}, or empty for none)"
        )
    return value


def crash_point(name: str, armed: str) -> None:
    """Kill the process (SIGKILL) if ``name`` is the ``armed`` crash point (the
    ``test_crash_point`` setting); otherwise do nothing."""
    if armed and name == armed:
        log.warning("test crash point %s: killing the process", name)
        os.kill(os.getpid(), signal.SIGKILL)
