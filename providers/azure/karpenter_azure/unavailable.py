"""Offerings Azure recently refused (allocation failures, quota, SKU not available), each kept
out for as long as its error says: upstream's TTLs, kept in the SDK's cache
(``karpenter_core.sdk.offerings``)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from karpenter_azure.instancetype import REGIONAL_ZONE
from karpenter_core.sdk.offerings import UNAVAILABLE_OFFERINGS_TTL, UnavailableOfferings
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
        unavailable.mark_capacity_type("spot", code, SUBSCRIPTION_QUOTA_TTL)
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
