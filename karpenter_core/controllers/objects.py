"""Small pure helpers on Kubernetes objects: API paths, status conditions, quantities, taints.

Reads go through the cluster state's models; writes are plain JSON dicts built with these.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Protocol

from karpenter_core.apis.quantity import format_quantity
from karpenter_core.apis.v1.common import Condition

__all__ = [
    "NODECLAIMS",
    "format_time",
    "name_of",
    "node_path",
    "nodeclaim_path",
    "nodepool_path",
    "pod_path",
    "quantities",
    "set_condition",
    "status_condition",
    "status_true",
    "taint_list",
]

NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"


def nodeclaim_path(name: str) -> str:
    """The API path of a NodeClaim."""
    return f"{NODECLAIMS}/{name}"


def nodepool_path(name: str) -> str:
    """The API path of a NodePool."""
    return f"/apis/karpenter.sh/v1/nodepools/{name}"


def node_path(name: str) -> str:
    """The API path of a Node."""
    return f"/api/v1/nodes/{name}"


def pod_path(namespace: str, name: str) -> str:
    """The API path of a Pod."""
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def name_of(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` of a manifest (empty if unset)."""
    return str((obj.get("metadata") or {}).get("name") or "")


def format_time(moment: datetime) -> str:
    """An RFC 3339 timestamp in UTC, to the second, as the API writes them."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    status: MutableMapping[str, Any],
    kind: str,
    value: str,
    reason: str,
    message: str,
    now: datetime,
) -> bool:
    """Set a condition in a status dict; return whether anything changed.

    ``lastTransitionTime`` moves only when the status value changes.
    """
    conditions: list[dict[str, Any]] = list(status.get("conditions") or ())
    for index, item in enumerate(conditions):
        if item.get("type") != kind:
            continue
        if (item.get("status"), item.get("reason"), item.get("message", "")) == (
            value,
            reason,
            message,
        ):
            return False
        updated = {**item, "status": value, "reason": reason, "message": message}
        if item.get("status") != value:
            updated["lastTransitionTime"] = format_time(now)
        conditions[index] = updated
        status["conditions"] = conditions
        return True
    conditions.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": format_time(now),
        }
    )
    status["conditions"] = conditions
    return True


class _Status(Protocol):
    conditions: list[Condition]


class _Conditioned(Protocol):
    @property
    def status(self) -> _Status: ...


def status_condition(obj: _Conditioned, kind: str) -> Condition | None:
    """The condition of type ``kind`` of a NodeClaim's or NodePool's status, or None."""
    return next((c for c in obj.status.conditions if c.type == kind), None)


def status_true(obj: _Conditioned, kind: str) -> bool:
    """Whether a NodeClaim's or NodePool's condition ``kind`` is True."""
    found = status_condition(obj, kind)
    return found is not None and found.status == "True"


def quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    """Thousandths of a unit to quantity strings (the shorter of decimal and binary forms)."""
    out = {}
    for resource, amount in sorted(amounts.items()):
        value = Fraction(amount, 1000)
        decimal, binary = format_quantity(value), format_quantity(value, binary=True)
        out[resource] = binary if len(binary) < len(decimal) else decimal
    return out


def taint_list(taints: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Taints as plain dicts with key, effect and (when set) value."""
    out = []
    for taint in taints:
        item = {"key": taint["key"], "effect": taint["effect"]}
        if taint.get("value"):
            item["value"] = taint["value"]
        out.append(item)
    return out
