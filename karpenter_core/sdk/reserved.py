"""What a provider computes node overhead with: reservations charged by tiers of a node's size,
and the kubelet's reservations and eviction thresholds as a NodeClass writes them."""

from __future__ import annotations

import math
from collections.abc import Iterable

from karpenter_core.apis.quantity import QuantityError, parse_quantity, to_milli

__all__ = ["overrides", "quantity_milli", "signal_milli", "tiered"]


def tiered(amount: float, tiers: Iterable[tuple[float, float]]) -> float:
    """``amount`` charged by ``(upper bound, rate)`` tiers in ascending order: the part of it up
    to each bound (above the previous one) at that tier's rate."""
    total, lower = 0.0, 0.0
    for upper, rate in tiers:
        if amount <= lower:
            break
        total += (min(upper, amount) - lower) * rate
        lower = upper
    return total


def quantity_milli(value: str) -> int | None:
    """A Kubernetes quantity in thousandths; None when ``value`` is not one."""
    try:
        return to_milli(parse_quantity(value))
    except QuantityError:
        return None


def signal_milli(capacity: int, value: str) -> int | None:
    """An eviction signal in thousandths: a percentage of ``capacity`` (rounded up; 100%
    disables it) or a quantity; None when it is neither."""
    if value.endswith("%"):
        try:
            percent = float(value[:-1])
        except ValueError:
            return None
        if percent == 100:
            percent = 0.0
        return math.ceil(float(capacity) / 100 * percent) * 1000
    return quantity_milli(value)


def overrides(pairs: Iterable[tuple[str, str]]) -> dict[str, int]:
    """``(resource, quantity)`` pairs as thousandths by resource; values that are not
    quantities are left out."""
    out: dict[str, int] = {}
    for resource, value in pairs:
        milli = quantity_milli(value)
        if milli is not None:
            out[resource] = milli
    return out
