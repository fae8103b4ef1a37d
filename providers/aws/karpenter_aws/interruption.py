"""Interruption messages: EventBridge events delivered to the interruption queue, parsed.

The SQS message body is the EventBridge event as JSON (``version``, ``id``, ``source``,
``detail-type``, ``time``, ``detail``). Five events matter, keyed by source and detail-type as
upstream does; every other well-formed event is a no-op, and anything malformed parses to None.
Both are deleted from the queue without acting.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "CAPACITY_RESERVATION_INTERRUPTED",
    "CORDON_AND_DRAIN",
    "INSTANCE_STOPPED",
    "INSTANCE_TERMINATED",
    "NO_ACTION",
    "NO_OP",
    "REBALANCE_RECOMMENDATION",
    "SCHEDULED_CHANGE",
    "SPOT_INTERRUPTED",
    "InterruptionMessage",
    "parse_message",
]

# Message kinds (upstream's values: they label karpenter_interruption_received_messages_total).
REBALANCE_RECOMMENDATION = "rebalance_recommendation"
SCHEDULED_CHANGE = "scheduled_change"
SPOT_INTERRUPTED = "spot_interrupted"
INSTANCE_STOPPED = "instance_stopped"
INSTANCE_TERMINATED = "instance_terminated"
CAPACITY_RESERVATION_INTERRUPTED = "capacity_reservation_interrupted"
NO_OP = "no_op"

# What a message asks for: delete the NodeClaim (the core cordons, drains and replaces), or not.
CORDON_AND_DRAIN = "CordonAndDrain"
NO_ACTION = "NoAction"

_EC2 = "aws.ec2"
_HEALTH = "aws.health"
_SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
_REBALANCE = "EC2 Instance Rebalance Recommendation"
_STATE_CHANGE = "EC2 Instance State-change Notification"
_RESERVATION_WARNING = "EC2 Capacity Reservation Instance Interruption Warning"
_HEALTH_EVENT = "AWS Health Event"
_STOPPED_STATES = frozenset({"stopping", "stopped"})
_TERMINATED_STATES = frozenset({"shutting-down", "terminated"})


@dataclass(frozen=True, slots=True)
class InterruptionMessage:
    """A parsed interruption event: its kind, the instances it concerns, when it was emitted
    (None when the event carries no valid time) and the action it calls for."""

    kind: str
    instance_ids: tuple[str, ...]
    start_time: datetime | None
    action: str
    id: str = ""


def parse_message(body: str | bytes | None) -> InterruptionMessage | None:
    """Parse an SQS message body; None when it is not an EventBridge event (never raises)."""
    if not body:
        return None
    try:
        event = json.loads(body)
    except (ValueError, TypeError):
        return None
    if not isinstance(event, dict):
        return None
    source, detail_type = event.get("source"), event.get("detail-type")
    detail = event.get("detail")
    if not isinstance(source, str) or not isinstance(detail_type, str):
        return None
    if not isinstance(detail, dict):
        return None
    raw_id = event.get("id")
    event_id = raw_id if isinstance(raw_id, str) else ""
    start = _time(event.get("time"))
    if event.get("version", "0") != "0":
        return InterruptionMessage(NO_OP, (), start, NO_ACTION, event_id)
    kind, ids = _classify(source, detail_type, detail)
    if ids is None:
        return None
    action = NO_ACTION if kind in (NO_OP, REBALANCE_RECOMMENDATION) else CORDON_AND_DRAIN
    return InterruptionMessage(kind, ids, start, action, event_id)


def _classify(
    source: str, detail_type: str, detail: Mapping[str, Any]
) -> tuple[str, tuple[str, ...] | None]:
    """The kind and instance ids of an event; ids None when the detail is malformed."""
    if source == _EC2 and detail_type in (_SPOT_WARNING, _REBALANCE, _RESERVATION_WARNING):
        kind = {
            _SPOT_WARNING: SPOT_INTERRUPTED,
            _REBALANCE: REBALANCE_RECOMMENDATION,
            _RESERVATION_WARNING: CAPACITY_RESERVATION_INTERRUPTED,
        }[detail_type]
        return kind, _instance_id(detail)
    if source == _EC2 and detail_type == _STATE_CHANGE:
        state = detail.get("state")
        if not isinstance(state, str):
            return NO_OP, None
        state = state.lower()
        if state in _STOPPED_STATES:
            return INSTANCE_STOPPED, _instance_id(detail)
        if state in _TERMINATED_STATES:
            return INSTANCE_TERMINATED, _instance_id(detail)
        return NO_OP, ()
    if source == _HEALTH and detail_type == _HEALTH_EVENT:
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return NO_OP, ()
        entities = detail.get("affectedEntities") or []
        if not isinstance(entities, list):
            return NO_OP, None
        ids = tuple(
            entity["entityValue"]
            for entity in entities
            if isinstance(entity, dict)
            and isinstance(entity.get("entityValue"), str)
            and entity["entityValue"]
        )
        return SCHEDULED_CHANGE, ids
    return NO_OP, ()


def _instance_id(detail: Mapping[str, Any]) -> tuple[str, ...] | None:
    value = detail.get("instance-id")
    return (value,) if isinstance(value, str) and value else None


def _time(value: Any) -> datetime | None:
    """An RFC 3339 time as EventBridge writes it (``2024-05-01T12:00:00Z``), in UTC."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
