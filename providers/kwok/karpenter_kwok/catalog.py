"""KWOK's instance-type catalog, as data: upstream's generated matrix or a JSON document.

The JSON format is upstream KWOK's: a list of ``{"name", "architecture", "operatingSystems",
"resources", "offerings": [{"Price", "Available", "Requirements": [node selector terms]}]}``.
The generated matrix is produced in that same format and goes through the same parser. Pure: no
file or network access here (``cloudprovider`` reads files).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from karpenter_core.apis import labels
from karpenter_core.apis.quantity import QuantityError, format_quantity, parse_quantity, to_milli
from karpenter_core.sdk.types import (
    CloudProviderError,
    InstanceType,
    Offering,
    Overhead,
    Requirement,
    Requirements,
)
from karpenter_kwok.labels import INSTANCE_CPU, INSTANCE_FAMILY, INSTANCE_MEMORY, INSTANCE_SIZE

__all__ = [
    "CATALOG_ENV",
    "CATALOG_OPTION",
    "CPU_COUNTS",
    "DEFAULT_PODS",
    "KUBE_RESERVED",
    "MEMORY_FAMILIES",
    "ZONES",
    "CatalogError",
    "generic_catalog",
    "parse_catalog",
]

CATALOG_OPTION = "instance-types-file-path"
CATALOG_ENV = "INSTANCE_TYPES_FILE_PATH"
"""The provider setting (and its environment variable) naming a JSON catalog file."""

CPU_COUNTS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
MEMORY_FAMILIES = ((2, "c"), (4, "s"), (8, "m"))
"""GiB of memory per vCPU, and the family letter it gives (compute, standard, memory)."""
OPERATING_SYSTEMS = ("linux", "windows")
ARCHITECTURES = (labels.ARCH_AMD64, labels.ARCH_ARM64)
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")
CAPACITY_TYPES = (labels.CAPACITY_TYPE_SPOT, labels.CAPACITY_TYPE_ON_DEMAND)
SPOT_DISCOUNT = 0.7
EPHEMERAL_STORAGE = "20Gi"
MAX_PODS = 1024
PODS_PER_CPU = 16
DEFAULT_PODS = 110
"""Pods per node when a catalog entry does not say (Kubernetes' default)."""

KUBE_RESERVED = {
    "cpu": to_milli(parse_quantity("100m")),
    "memory": to_milli(parse_quantity("10Mi")),
}
_OVERHEAD = Overhead(kube_reserved=KUBE_RESERVED)
_GIB = 2**30
_AWS_SIZE = re.compile(r"^\w+\.(nano|micro|small|medium|large|\d*xlarge|metal)$")
_FAMILY_DELIMITER = re.compile(r"[.-]")
_BINARY_SUFFIX = re.compile(r"(Ki|Mi|Gi|Ti|Pi|Ei)$")


class CatalogError(CloudProviderError, ValueError):
    """The instance-type catalog is malformed; the message names the source, entry and field."""


def generic_catalog() -> list[dict[str, Any]]:
    """Upstream's generic matrix (144 types), in the JSON catalog format."""
    entries = []
    for cpu in CPU_COUNTS:
        for factor, family in MEMORY_FAMILIES:
            memory = cpu * factor * _GIB
            price = _price(cpu, memory)
            for os_name in OPERATING_SYSTEMS:
                for arch in ARCHITECTURES:
                    entries.append(
                        {
                            "name": f"{family}-{cpu}x-{arch}-{os_name}",
                            "offerings": [
                                _offering(zone, capacity_type, price)
                                for zone in ZONES
                                for capacity_type in CAPACITY_TYPES
                            ],
                            "architecture": arch,
                            "operatingSystems": [os_name],
                            "resources": {
                                "cpu": str(cpu),
                                "ephemeral-storage": EPHEMERAL_STORAGE,
                                "memory": format_quantity(Fraction(memory), binary=True),
                                "pods": str(min(cpu * PODS_PER_CPU, MAX_PODS)),
                            },
                        }
                    )
    return entries


def _price(cpu: int, memory_bytes: int) -> float:
    """Hourly on-demand price: 0.025 per vCPU plus 0.001 per GB (decimal) of memory."""
    return 0.025 * cpu + 0.001 * memory_bytes / 1e9


def _offering(zone: str, capacity_type: str, on_demand_price: float) -> dict[str, Any]:
    spot = capacity_type == labels.CAPACITY_TYPE_SPOT
    return {
        "Price": on_demand_price * SPOT_DISCOUNT if spot else on_demand_price,
        "Available": True,
        "Requirements": [
            {"key": labels.CAPACITY_TYPE, "operator": "In", "values": [capacity_type]},
            {"key": labels.TOPOLOGY_ZONE, "operator": "In", "values": [zone]},
        ],
    }


def parse_catalog(data: object, source: str) -> list[InstanceType]:
    """Instance types from catalog data; ``CatalogError`` names ``source``, the entry and field."""
    if not isinstance(data, list):
        raise CatalogError(f"{source}: expected a JSON list of instance types, got {_kind(data)}")
    instance_types: list[InstanceType] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(data):
        where = f"{source}: entry {index}"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: expected an object, got {_kind(entry)}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise CatalogError(f"{where}: 'name' must be a non-empty string")
        where = f"{where} ({name})"
        if name in seen:
            raise CatalogError(f"{where}: duplicate name, already used by entry {seen[name]}")
        seen[name] = index
        try:
            instance_types.append(_instance_type(name, entry))
        except CatalogError as error:
            raise CatalogError(f"{where}: {error}") from None
    return instance_types


def _instance_type(name: str, entry: Mapping[str, Any]) -> InstanceType:
    arch = entry.get("architecture")
    if not isinstance(arch, str) or not arch:
        raise CatalogError("'architecture' must be a non-empty string such as 'amd64'")
    systems = entry.get("operatingSystems")
    if not _strings(systems) or not systems:
        raise CatalogError("'operatingSystems' must be a non-empty list of strings")
    capacity, cpu, memory = _resources(entry.get("resources"))
    offerings_data = entry.get("offerings")
    if not isinstance(offerings_data, list):
        raise CatalogError(f"'offerings' must be a list, got {_kind(offerings_data)}")
    offerings = [_offering_from(i, o) for i, o in enumerate(offerings_data)]
    requirements = Requirements(
        Requirement(key, False, frozenset(values))
        for key, values in (
            (labels.INSTANCE_TYPE, (name,)),
            (labels.ARCH, (arch,)),
            (labels.OS, systems),
            (labels.TOPOLOGY_ZONE, {o.zone for o in offerings}),
            (labels.CAPACITY_TYPE, {o.capacity_type for o in offerings}),
            (INSTANCE_SIZE, (_size(name, cpu),)),
            (INSTANCE_FAMILY, (_family(name),)),
            (INSTANCE_CPU, (cpu,)),
            (INSTANCE_MEMORY, (memory,)),
        )
    )
    return InstanceType(name, requirements, offerings, capacity, _OVERHEAD)


def _resources(data: object) -> tuple[dict[str, int], str, str]:
    """Capacity in thousandths, plus the canonical cpu and memory strings for the labels."""
    if not isinstance(data, dict):
        raise CatalogError(f"'resources' must be an object, got {_kind(data)}")
    capacity: dict[str, int] = {"pods": DEFAULT_PODS * 1000}
    canonical: dict[str, str] = {}
    for resource, raw in data.items():
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise CatalogError(f"resources.{resource}: expected a quantity, got {_kind(raw)}")
        try:
            amount = parse_quantity(raw)
        except QuantityError as error:
            raise CatalogError(f"resources.{resource}: {error}") from None
        if amount < 0:
            raise CatalogError(f"resources.{resource}: {raw!r} is negative")
        capacity[resource] = to_milli(amount)
        binary = isinstance(raw, str) and bool(_BINARY_SUFFIX.search(raw.strip()))
        canonical[resource] = format_quantity(amount, binary=binary)
    for required in ("cpu", "memory"):
        if required not in canonical:
            raise CatalogError(f"resources.{required} is missing")
    return capacity, canonical["cpu"], canonical["memory"]


def _offering_from(index: int, data: object) -> Offering:
    where = f"offerings[{index}]"
    if not isinstance(data, dict):
        raise CatalogError(f"{where}: expected an object, got {_kind(data)}")
    terms = data.get("Requirements")
    if terms is None:
        hint = ""
        if {"zone", "capacityType"} & data.keys():
            hint = (
                " (this looks like the old KWOK format with zone/capacityType/price; use "
                "Price, Available and Requirements: [{key, operator, values}])"
            )
        raise CatalogError(f"{where}: 'Requirements' is missing{hint}")
    if not isinstance(terms, list) or not all(isinstance(t, dict) for t in terms):
        raise CatalogError(f"{where}.Requirements: expected a list of {{key, operator, values}}")
    price = data.get("Price")
    if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
        raise CatalogError(f"{where}.Price: expected a non-negative number, got {price!r}")
    available = data.get("Available", True)
    if not isinstance(available, bool):
        raise CatalogError(f"{where}.Available: expected true or false, got {available!r}")
    if not all(isinstance(t.get("key"), str) and _strings(t.get("values", [])) for t in terms):
        raise CatalogError(
            f"{where}.Requirements: each requirement needs a string 'key' and a list of 'values'"
        )
    try:
        return Offering(Requirements.from_node_selector(terms), float(price), available)
    except (ValueError, KeyError) as error:  # RequirementError is a ValueError
        message = str(error).strip("'")
        if isinstance(error, KeyError):
            message = f"a requirement has no {message!r}"
        raise CatalogError(f"{where}.Requirements: {message}") from None


def _size(name: str, cpu: str) -> str:
    """AWS-style sizes (``m5.large`` -> ``large``); otherwise the CPU count."""
    match = _AWS_SIZE.match(name)
    return match.group(1) if match else cpu


def _family(name: str) -> str:
    """The part before the first ``.`` or ``-``; otherwise the first letter."""
    parts = _FAMILY_DELIMITER.split(name, maxsplit=1)
    return parts[0] if len(parts) == 2 else name[:1]


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )
