"""Checks on what a provider returns, where it enters the core.

A provider bug (a NaN price, a capacity that is not a number) would otherwise surface deep in the scheduler as an unrelated traceback; here it becomes one
``InvalidProviderOutput`` that names the provider, the instance type and the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from karpenter_core.cloudprovider.types import CloudProviderError, InstanceType

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.types import CloudProvider

__all__ = ["InvalidProviderOutput", "instance_types_of", "validate_instance_types"]


class InvalidProviderOutput(CloudProviderError):
    """A provider returned something the core cannot use; the message names what and where."""


def instance_types_of(provider: CloudProvider, nodepool: NodePool) -> list[InstanceType]:
    """``provider.get_instance_types(nodepool)``, validated."""
    instance_types = provider.get_instance_types(nodepool)
    validate_instance_types(provider.name, nodepool.metadata.name or "", instance_types)
    return instance_types


def validate_instance_types(provider: str, nodepool: str, instance_types: Iterable[object]) -> None:
    """Raise ``InvalidProviderOutput`` at the first instance type the core cannot use.

    Each must be an ``InstanceType`` with a name no other has, every offering's price finite and
    not negative, and capacity and overhead amounts that are whole non-negative thousandths. A
    type with no offering is allowed (one not offered in the NodeClass's zones): it is never
    chosen.
    """
    where = f"provider {provider!r} (NodePool {nodepool!r})"
    seen: set[str] = set()
    for instance_type in instance_types:
        if not isinstance(instance_type, InstanceType):
            raise InvalidProviderOutput(
                f"{where} returned a {type(instance_type).__name__} among its instance types, "
                "not an InstanceType"
            )
        if not isinstance(instance_type.name, str) or not instance_type.name:
            raise InvalidProviderOutput(
                f"{where} returned an instance type with the name {instance_type.name!r}"
            )
        label = f"{where}, instance type {instance_type.name!r}"
        if instance_type.name in seen:
            raise InvalidProviderOutput(f"{label}: returned twice (names must be unique)")
        seen.add(instance_type.name)
        for offering in instance_type.offerings:
            price = offering.price
            if (
                isinstance(price, bool)
                or not isinstance(price, int | float)
                or not math.isfinite(price)
                or price < 0
            ):
                raise InvalidProviderOutput(
                    f"{label}: offering {offering.capacity_type} in {offering.zone} has the price "
                    f"{price!r} (a price must be a finite number, not negative)"
                )
        _check_amounts(label, "capacity", instance_type.capacity)
        overhead = instance_type.overhead
        for part in ("kube_reserved", "system_reserved", "eviction_threshold"):
            _check_amounts(label, f"overhead.{part}", getattr(overhead, part))


def _check_amounts(label: str, field: str, amounts: Mapping[str, object]) -> None:
    for resource, amount in amounts.items():
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise InvalidProviderOutput(
                f"{label}: {field}[{resource!r}] is {amount!r} (resource amounts are whole "
                "thousandths of their unit, not negative)"
            )
