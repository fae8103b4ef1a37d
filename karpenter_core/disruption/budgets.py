"""Disruption budgets: how many of a NodePool's nodes may be disrupted now, for a reason."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from croniter import CroniterBadDateError, croniter

from karpenter_core.apis.duration import DurationError, parse_duration

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.scheduling.snapshot import NodeInfo

__all__ = [
    "DRIFTED",
    "EMPTY",
    "UNDERUTILIZED",
    "allowed_by_nodepool",
    "allowed_disruptions",
    "schedule_error",
]

EMPTY = "Empty"
DRIFTED = "Drifted"
UNDERUTILIZED = "Underutilized"

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


_SOME_TIME = datetime(2000, 1, 1, tzinfo=UTC)


def schedule_error(schedule: str) -> str | None:
    """Why a budget's cron ``schedule`` cannot be used (not a cron expression croniter reads,
    or one that names no date, such as February 30th), else None."""
    expression = _MACROS.get(schedule, schedule)
    if not croniter.is_valid(expression):
        return f"{schedule!r} is not a valid cron schedule"
    try:
        croniter(expression, _SOME_TIME).get_next(datetime)
    except CroniterBadDateError:
        return f"{schedule!r} never fires: no date matches it"
    return None


def _window(budget: Mapping[str, Any]) -> tuple[str, timedelta] | None:
    """The budget's cron expression and duration; None when it has no schedule.

    Raises ``ValueError`` when either cannot be read.
    """
    schedule = budget.get("schedule")
    if schedule is None:
        return None
    try:
        duration = parse_duration(str(budget.get("duration")))
    except DurationError as err:
        raise ValueError(str(err)) from None
    problem = schedule_error(str(schedule))
    if problem is not None:
        raise ValueError(problem)
    return _MACROS.get(str(schedule), str(schedule)), duration


def _active(window: tuple[str, timedelta] | None, now: datetime) -> bool:
    """Always active without a schedule; otherwise for ``duration`` after each hit."""
    if window is None:
        return True
    expression, duration = window
    previous = croniter(expression, now + timedelta(seconds=1)).get_prev(datetime)
    return previous <= now < previous + duration


def _limit(budget: Mapping[str, Any], total: int) -> int:
    nodes = str(budget.get("nodes", "10%"))
    try:
        if nodes.endswith("%"):
            return math.ceil(int(nodes[:-1]) * total / 100)
        return int(nodes)
    except ValueError:
        return 0


def allowed_disruptions(
    budgets: Sequence[Mapping[str, Any]],
    reason: str,
    total: int,
    disrupting: int,
    now: datetime | None = None,
) -> int:
    """Nodes that may start being disrupted for ``reason``: the most restrictive active budget
    that covers the reason, less the nodes already being disrupted; never below 0.

    A budget whose schedule cannot be read allows nothing (fails closed), as upstream.
    """
    now = now or datetime.now(UTC)
    limit = None
    for budget in budgets:
        reasons = budget.get("reasons")
        if reasons and reason not in reasons:
            continue
        try:
            window = _window(budget)
        except ValueError:
            return 0
        if not _active(window, now):
            continue
        value = _limit(budget, total)
        limit = value if limit is None else min(limit, value)
    if limit is None:
        return max(total - disrupting, 0)
    return max(limit - disrupting, 0)


def allowed_by_nodepool(
    nodepools: Iterable[NodePool], nodes: Iterable[NodeInfo], reason: str, now: datetime
) -> dict[str, int]:
    """Disruptions each NodePool allows now for ``reason``, counted as upstream: its nodes are
    the initialized nodes labelled with its name (a percentage is of those, rounded up), and
    every one of them that is NotReady or being deleted (marked for deletion by a command in
    flight included) is already disrupting."""
    total: dict[str, int] = {}
    disrupting: dict[str, int] = {}
    for node in nodes:
        if not node.initialized or node.nodepool is None or node.unclaimed:
            continue
        total[node.nodepool] = total.get(node.nodepool, 0) + 1
        if node.deleting or node.not_ready:
            disrupting[node.nodepool] = disrupting.get(node.nodepool, 0) + 1
    out: dict[str, int] = {}
    for nodepool in nodepools:
        name = nodepool.metadata.name or ""
        budgets = [b.model_dump(exclude_none=True) for b in nodepool.spec.disruption.budgets]
        out[name] = allowed_disruptions(
            budgets, reason, total.get(name, 0), disrupting.get(name, 0), now
        )
    return out
