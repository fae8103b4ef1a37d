"""Offerings Azure recently refused (allocation failures, quota, SKU not available), each kept
out for as long as its error says: upstream's unavailable-offerings cache and TTLs."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from karpenter_azure.instancetype import REGIONAL_ZONE
from karpenter_core.sdk.types import InsufficientCapacity

if TYPE_CHECKING:
    from karpenter_azure.instances import ArmError
    from karpenter_core.sdk.types import InstanceType, Offering

__all__ = [
    "ALLOCATION_FAILURE_TTL",
    "LOW_QUOTA_TTL",
    "SKU_NOT_AVAILABLE_ON_DEMAND_TTL",
    "SKU_NOT_AVAILABLE_SPOT_TTL",
    "SUBSCRIPTION_QUOTA_TTL",
    "UNAVAILABLE_OFFERINGS_TTL",
    "UnavailableOfferings",
    "capacity_error",
]

UNAVAILABLE_OFFERINGS_TTL = timedelta(minutes=3)
"""The default: how long an offering stays out when the error names no longer time."""
LOW_QUOTA_TTL = timedelta(minutes=10)
"""A VM family's vCPU quota is reached (its limit is not zero: it may free up soon)."""
SUBSCRIPTION_QUOTA_TTL = timedelta(hours=1)
"""A quota whose limit is zero, or the subscription's spot (low-priority) quota, is reached."""
ALLOCATION_FAILURE_TTL = timedelta(hours=1)
"""Azure could not allocate the size (in a zone, or in every zone)."""
SKU_NOT_AVAILABLE_SPOT_TTL = timedelta(hours=1)
"""The size is not sold as spot here."""
SKU_NOT_AVAILABLE_ON_DEMAND_TTL = timedelta(hours=23)
"""The size is not sold here at all (restricted for the subscription)."""

_ANY = ""
"""The instance type and zone of the whole-spot mark."""

_log = logging.getLogger(__name__)


class UnavailableOfferings:
    """A thread-safe cache of ``(capacity_type, instance_type, zone)`` keys, each expiring at its
    own time (by ``clock``); ``mark_spot`` keeps every spot offering out.

    ``seq`` grows on every mark and whenever marks expire, so anything derived from availability
    (the catalog's offerings) can be cached against it.
    """

    __slots__ = ("_clock", "_expiry", "_lock", "_next", "_seq", "_snapshot")

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._clock = lambda: clock().timestamp()
        self._lock = threading.Lock()
        self._expiry: dict[tuple[str, str, str], float] = {}
        self._next = math.inf
        self._seq = 0
        self._snapshot: tuple[int, dict[str, frozenset[tuple[str, str]]], bool] = (0, {}, False)

    @property
    def seq(self) -> int:
        """A counter that changes whenever an offering's availability may have changed."""
        if self._clock() >= self._next:
            self._expire()
        return self._seq

    def mark(
        self,
        capacity_type: str,
        instance_type: str,
        zone: str,
        reason: str,
        ttl: timedelta = UNAVAILABLE_OFFERINGS_TTL,
    ) -> None:
        """Keep the offering out for ``ttl`` from now (a longer mark already there stays)."""
        self._mark((capacity_type, instance_type, zone), ttl)
        _log.info(
            "marked offering %s:%s:%s unavailable for %s: %s",
            capacity_type,
            instance_type,
            zone,
            ttl,
            reason,
        )

    def mark_spot(self, reason: str, ttl: timedelta = SUBSCRIPTION_QUOTA_TTL) -> None:
        """Keep every spot offering out for ``ttl`` (the subscription's spot quota is used)."""
        self._mark(("spot", _ANY, _ANY), ttl)
        _log.info("marked every spot offering unavailable for %s: %s", ttl, reason)

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        """Whether the offering is kept out now."""
        marks, spot_out = self._current()
        if capacity_type == "spot" and spot_out:
            return True
        return (capacity_type, zone) in marks.get(instance_type, frozenset())

    def snapshot(self) -> tuple[dict[str, frozenset[tuple[str, str]]], bool]:
        """The offerings kept out now, by instance type (``(capacity_type, zone)`` pairs), and
        whether every spot offering is. The same dict is returned until ``seq`` changes; do not
        modify it."""
        return self._current()

    def _current(self) -> tuple[dict[str, frozenset[tuple[str, str]]], bool]:
        seq = self.seq
        taken, marks, spot_out = self._snapshot
        if taken == seq:
            return marks, spot_out
        with self._lock:
            now = self._clock()
            grouped: dict[str, set[tuple[str, str]]] = {}
            spot_out = False
            for (capacity_type, instance_type, zone), expiry in self._expiry.items():
                if expiry <= now:
                    continue
                if instance_type == _ANY:
                    spot_out = True
                else:
                    grouped.setdefault(instance_type, set()).add((capacity_type, zone))
            marks = {name: frozenset(pairs) for name, pairs in grouped.items()}
            self._snapshot = (self._seq, marks, spot_out)
            return marks, spot_out

    def _mark(self, key: tuple[str, str, str], ttl: timedelta) -> None:
        with self._lock:
            expiry = self._clock() + ttl.total_seconds()
            if self._expiry.get(key, -math.inf) >= expiry:
                return
            self._expiry[key] = expiry
            self._next = min(self._next, expiry)
            self._seq += 1

    def _expire(self) -> None:
        with self._lock:
            now = self._clock()
            if now < self._next:
                return
            kept = {k: e for k, e in self._expiry.items() if e > now}
            if len(kept) != len(self._expiry):
                self._seq += 1
            self._expiry = kept
            self._next = min(kept.values(), default=math.inf)


def capacity_error(
    unavailable: UnavailableOfferings,
    error: ArmError,
    instance_type: InstanceType,
    zone: str,
    capacity_type: str,
) -> InsufficientCapacity | None:
    """When ``error`` (from launching ``instance_type`` in ``zone`` as ``capacity_type``) says
    Azure has no capacity or quota for it: mark what upstream marks, for upstream's TTLs, and
    return the ``InsufficientCapacity`` to raise (the next create chooses another offering);
    None for any other error.

    A zone is an offering's zone; ``REGIONAL_ZONE`` ("0") is a regional (non-zonal) one. The error's details
    are read too: the first code that says something about capacity counts.
    """
    for code, message in error.codes():
        mapped = _capacity_error(unavailable, code, message, instance_type, zone, capacity_type)
        if mapped is not None:
            return mapped
    return None


def _capacity_error(
    unavailable: UnavailableOfferings,
    code: str,
    message: str,
    instance_type: InstanceType,
    zone: str,
    capacity_type: str,
) -> InsufficientCapacity | None:
    name = instance_type.name
    lowered = message.lower()
    if code == "OperationNotAllowed" and "lowprioritycores" in lowered:
        unavailable.mark_spot(code, SUBSCRIPTION_QUOTA_TTL)
        return InsufficientCapacity(
            f"the subscription's spot (low-priority) vCPU quota is used up: {message}"
        )
    if code == "OperationNotAllowed" and "family cores quota" in lowered:
        ttl = SUBSCRIPTION_QUOTA_TTL if "current limit: 0" in lowered else LOW_QUOTA_TTL
        for offering in _offerings(instance_type, capacity_type=capacity_type):
            unavailable.mark(capacity_type, name, offering.zone, "SubscriptionQuotaReached", ttl)
        return InsufficientCapacity(
            f"the {capacity_type} vCPU quota of {name}'s family is used up: {message}"
        )
    if code == "OperationNotAllowed" and "total regional cores quota" in lowered:
        return InsufficientCapacity(
            f"the regional {capacity_type} vCPU quota is used up: {message}"
        )
    if code == "SkuNotAvailable":
        ttl = (
            SKU_NOT_AVAILABLE_ON_DEMAND_TTL
            if capacity_type == "on-demand"
            else SKU_NOT_AVAILABLE_SPOT_TTL
        )
        for offering in _offerings(instance_type, capacity_type=capacity_type, scope_of=zone):
            unavailable.mark(capacity_type, name, offering.zone, code, ttl)
        return InsufficientCapacity(f"{name} is not available as {capacity_type} here: {message}")
    if code == "ZonalAllocationFailed":
        for each in ("on-demand", "spot"):
            unavailable.mark(each, name, zone, code, ALLOCATION_FAILURE_TTL)
        return InsufficientCapacity(f"Azure could not allocate {name} in zone {zone}: {message}")
    if code == "AllocationFailed":
        for offering in _offerings(instance_type, scope_of=zone):
            for each in ("on-demand", "spot"):
                unavailable.mark(each, name, offering.zone, code, ALLOCATION_FAILURE_TTL)
        return InsufficientCapacity(f"Azure could not allocate {name}: {message}")
    if code == "OverconstrainedZonalAllocationRequest":
        unavailable.mark(capacity_type, name, zone, code, ALLOCATION_FAILURE_TTL)
        return InsufficientCapacity(
            f"Azure could not allocate {capacity_type} {name} in zone {zone}: {message}"
        )
    if code == "OverconstrainedAllocationRequest":
        for offering in _offerings(instance_type, capacity_type=capacity_type, scope_of=zone):
            unavailable.mark(capacity_type, name, offering.zone, code, ALLOCATION_FAILURE_TTL)
        return InsufficientCapacity(f"Azure could not allocate {capacity_type} {name}: {message}")
    return None


def _offerings(
    instance_type: InstanceType, capacity_type: str = "", scope_of: str | None = None
) -> list[Offering]:
    """The type's offerings of ``capacity_type`` (any when ""), in the placement scope of zone
    ``scope_of`` (zonal, or regional: ``REGIONAL_ZONE``; any when None)."""
    return [
        offering
        for offering in instance_type.offerings
        if (not capacity_type or offering.capacity_type == capacity_type)
        and (scope_of is None or (offering.zone == REGIONAL_ZONE) == (scope_of == REGIONAL_ZONE))
    ]
