"""Every event the core publishes takes its reason from ``Reason``, whose strings are upstream's
(users filter events by them with kubectl)."""

from __future__ import annotations

import ast
from pathlib import Path

import karpenter_core
from karpenter_core.operator.events import Reason

CORE = Path(karpenter_core.__file__).parent

UPSTREAM = {
    "Nominated",
    "FailedScheduling",
    "NoCompatibleInstanceTypes",
    "InsufficientCapacityError",
    "NodeClassNotReady",
    "Launched",
    "Registered",
    "Evicted",
    "FailedDraining",
    "Disrupted",
    "Liveness",
    "NodePoolLimitExceeded",
    "DisruptionBlocked",
    "DisruptionLaunching",
    "DisruptionTerminating",
    "DisruptionWaitingReadiness",
    "Unconsolidatable",
}


def _reasons() -> set[str]:
    return {value for name, value in vars(Reason).items() if name.isupper()}


def test_reasons_are_upstreams_strings() -> None:
    assert _reasons() == UPSTREAM


def _literal_reasons(path: Path) -> list[str]:
    """The ``publish(obj, type, reason, message)`` calls in ``path`` whose reason is a string
    literal, as ``file:line``."""
    return [
        f"{path.relative_to(CORE)}:{call.lineno}"
        for call in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "publish"
        and len(call.args) > 2
        and isinstance(call.args[2], ast.Constant | ast.JoinedStr)
    ]


def test_the_core_publishes_no_literal_reason() -> None:
    literal = [hit for path in sorted(CORE.rglob("*.py")) for hit in _literal_reasons(path)]
    assert literal == []
