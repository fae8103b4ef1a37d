"""VM sizes from the Resource SKUs API as ``Sku`` records, with upstream's filters.

``from_resource_sku`` reads one record as azure-mgmt-compute returns it
(``ComputeManagementClient.resource_skus.list(filter="location eq '<region>'")``: the models are
mappings of the ARM JSON, so recorded JSON works the same) and ``read_skus`` lists a region. The
packaged offline catalog (``catalog``) builds the same ``Sku`` records, so one instance-type
builder serves both.

Kept out, as upstream does: sizes AKS does not run (``RESTRICTED``), sizes restricted in the
location for the subscription, fewer than 2 vCPUs or less than 3.5 GiB of memory, constrained-CPU
sizes (``E8-4ds_v5``), confidential sizes (``DC*``, ``EC*``), and sizes with GPUs whose maker the
name does not tell. ``skip_reason`` says why a record is kept out.

A size name reads ``[Standard_]<family><subfamily><vCPUs>[-<constrained vCPUs>]<features>
[_<accelerator or variant>][_v<version>][_Promo]`` (``Standard_NC24ads_A100_v4``: family N,
subfamily C, features ``ads``, accelerator ``A100``, version 4). Upstream's series label joins
family, subfamily, features and version (``NCads_v4``); its version label drops the ``v`` and
backfills 1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from karpenter_core.apis import labels as wk

__all__ = [
    "ARCH_AMD64",
    "ARCH_ARM64",
    "MIN_MEMORY_GIB",
    "MIN_VCPUS",
    "RESTRICTED",
    "Sku",
    "VMSize",
    "from_resource_sku",
    "gpu_manufacturer",
    "list_records",
    "parse_size",
    "read_skus",
    "skip_reason",
]

ARCH_AMD64 = wk.ARCH_AMD64
ARCH_ARM64 = wk.ARCH_ARM64
MIN_VCPUS = 2
MIN_MEMORY_GIB = 3.5
RESTRICTED = frozenset(
    {
        "Standard_A0",
        "Standard_A1",
        "Standard_A1_v2",
        "Standard_B1s",
        "Standard_B1ms",
        "Standard_F1",
        "Standard_F1s",
        "Basic_A0",
        "Basic_A1",
        "Basic_A2",
        "Basic_A3",
        "Basic_A4",
    }
)
"""Sizes AKS does not run nodes on (upstream's list)."""

_BASE = re.compile(r"([A-Z])([A-Z]*)(\d+)(?:-(\d+))?([a-z]*)")
_VERSION = re.compile(r"[vV]\d+")
_ARCHITECTURES = {"x64": ARCH_AMD64, "arm64": ARCH_ARM64}
_AMD_ACCELERATORS = ("MI300X", "V620")


@dataclass(frozen=True, slots=True)
class VMSize:
    """The parts of a VM size name."""

    family: str
    subfamily: str
    cpus: int
    constrained_cpus: int | None
    features: str
    accelerator: str
    version: str
    promo: bool

    @property
    def series(self) -> str:
        """Upstream's ``sku-series``: ``Dads_v5``, ``NCads_v4``, ``D`` for ``Standard_D2``."""
        base = f"{self.family}{self.subfamily}{self.features}"
        return f"{base}_{self.version}" if self.version else base

    @property
    def version_number(self) -> str:
        """Upstream's ``sku-version``: the version without ``v``, 1 when the name has none."""
        return self.version[1:] if self.version else "1"

    @property
    def arm64(self) -> bool:
        """Whether the name marks an Arm (Ampere/Cobalt) size: ``p`` among the features."""
        return "p" in self.features


def parse_size(name: str) -> VMSize | None:
    """The parts of ``name`` (with or without the ``Standard_``/``Basic_`` tier), None when it
    is not a VM size name."""
    _, _, rest = name.partition("_") if name.startswith(("Standard_", "Basic_")) else ("", "", name)
    parts = rest.split("_")
    match = _BASE.fullmatch(parts[0])
    if match is None:
        return None
    family, subfamily, cpus, constrained, features = match.groups()
    promo = len(parts) > 1 and parts[-1] == "Promo"
    tail = parts[1:-1] if promo else parts[1:]
    version = ""
    if tail and _VERSION.fullmatch(tail[-1]):
        version = tail.pop().lower()
    return VMSize(
        family=family,
        subfamily=subfamily,
        cpus=int(cpus),
        constrained_cpus=int(constrained) if constrained else None,
        features=features,
        accelerator="_".join(tail),
        version=version,
        promo=promo,
    )


def gpu_manufacturer(size: VMSize) -> str | None:
    """``nvidia`` or ``amd`` for N-family sizes (by the accelerator in the name: Radeon on NVv4,
    V620 on NG, MI300X on ND), None for other families."""
    if size.family != "N":
        return None
    if size.accelerator in _AMD_ACCELERATORS or (size.subfamily == "V" and size.version == "v4"):
        return "amd"
    if size.subfamily == "G":
        return "amd"
    return "nvidia"


@dataclass(frozen=True, slots=True)
class Sku:
    """One VM size in one region: what the instance-type builder needs.

    ``zones`` are ARM zone numbers ("1"); ``spot`` is the SKU's LowPriorityCapable;
    ``hyperv_generations`` ("V1", "V2"); ``ephemeral_os_max_gb`` and ``encryption_at_host`` are
    None where unknown. ``derived`` names the fields taken from the size name (or a documented
    rule) rather than read from Azure.
    """

    name: str
    size: VMSize
    vcpus: int
    memory_gib: float
    architecture: str
    zones: tuple[str, ...]
    spot: bool
    accelerated_networking: bool
    premium_io: bool
    hyperv_generations: tuple[str, ...]
    gpus: int
    ephemeral_os_max_gb: int | None = None
    encryption_at_host: bool | None = None
    restricted_zones: frozenset[str] = frozenset()
    location_restricted: bool = False
    derived: frozenset[str] = field(default_factory=frozenset)

    @property
    def gpu_manufacturer(self) -> str | None:
        """``nvidia`` or ``amd`` when the size has GPUs, else None."""
        return gpu_manufacturer(self.size) if self.gpus else None


def skip_reason(sku: Sku) -> str | None:
    """Why upstream keeps ``sku`` out of the catalog, or None when it stays."""
    if sku.name in RESTRICTED:
        return "not supported by AKS"
    if sku.location_restricted:
        return "restricted in the location for the subscription"
    if sku.vcpus < MIN_VCPUS:
        return f"fewer than {MIN_VCPUS} vCPUs"
    if sku.memory_gib < MIN_MEMORY_GIB:
        return f"less than {MIN_MEMORY_GIB} GiB of memory"
    if sku.size.constrained_cpus is not None:
        return "constrained vCPUs"
    if f"{sku.size.family}{sku.size.subfamily}".startswith(("DC", "EC")):
        return "confidential"
    if sku.gpus and sku.gpu_manufacturer is None:
        return "GPUs of an unknown maker"
    return None


def _capabilities(record: Mapping[str, Any]) -> dict[str, str]:
    return {str(c["name"]): str(c["value"]) for c in record.get("capabilities") or ()}


def _true(value: str | None) -> bool:
    return (value or "").lower() == "true"


def _number(value: str | None) -> float:
    try:
        return float(value) if value else 0.0
    except ValueError:
        return 0.0


def _restrictions(record: Mapping[str, Any], location: str) -> tuple[bool, frozenset[str]]:
    """Whether the whole location is restricted, and the restricted zones."""
    whole = False
    zones: set[str] = set()
    for restriction in record.get("restrictions") or ():
        info = restriction.get("restrictionInfo") or {}
        kind = str(restriction.get("type") or "")
        if kind == "Location" and location.lower() in (
            str(v).lower() for v in (restriction.get("values") or info.get("locations") or ())
        ):
            whole = True
        elif kind == "Zone":
            zones.update(str(z) for z in info.get("zones") or ())
    return whole, frozenset(zones)


def from_resource_sku(record: Mapping[str, Any], location: str) -> Sku | None:
    """A ``Sku`` from one Resource SKUs record (an azure-mgmt-compute ``ResourceSku`` or its ARM
    JSON) in ``location``; None when it is not a VM size of that location, has no vCPU or memory
    figure, or its name does not parse. Filters are ``skip_reason``'s."""
    if str(record.get("resourceType") or "") != "virtualMachines":
        return None
    locations = [str(loc).lower() for loc in record.get("locations") or ()]
    if locations and location.lower() not in locations:
        return None
    name = str(record.get("name") or "")
    size = parse_size(name)
    caps = _capabilities(record)
    vcpus = int(_number(caps.get("vCPUs")))
    memory = _number(caps.get("MemoryGB"))
    if size is None or not vcpus or not memory:
        return None
    zones: set[str] = set()
    for info in record.get("locationInfo") or ():
        if str(info.get("location") or "").lower() == location.lower():
            zones.update(str(z) for z in info.get("zones") or ())
    whole, restricted = _restrictions(record, location)
    arch = _ARCHITECTURES.get(caps.get("CpuArchitectureType", "x64").lower(), "")
    ephemeral = None
    if _true(caps.get("EphemeralOSDiskSupported")):
        cached = _number(caps.get("CachedDiskBytes")) / 2**30
        resource = _number(caps.get("MaxResourceVolumeMB")) / 1024
        ephemeral = int(max(cached, resource))
    generations = tuple(
        g.strip().upper() for g in caps.get("HyperVGenerations", "V1").split(",") if g.strip()
    )
    encryption = caps.get("EncryptionAtHostSupported")
    return Sku(
        name=name,
        size=size,
        vcpus=vcpus,
        memory_gib=memory,
        architecture=arch,
        zones=tuple(sorted(zones - restricted)),
        spot=_true(caps.get("LowPriorityCapable")),
        accelerated_networking=_true(caps.get("AcceleratedNetworkingEnabled")),
        premium_io=_true(caps.get("PremiumIO")),
        hyperv_generations=generations,
        gpus=int(_number(caps.get("GPUs"))),
        ephemeral_os_max_gb=ephemeral or None,
        encryption_at_host=None if encryption is None else _true(encryption),
        restricted_zones=restricted,
        location_restricted=whole,
    )


def read_skus(records: Iterable[Mapping[str, Any]], location: str) -> list[Sku]:
    """The VM sizes of ``records`` that upstream keeps in ``location``, by name."""
    kept = {}
    for record in records:
        sku = from_resource_sku(record, location)
        if sku is not None and skip_reason(sku) is None:
            kept[sku.name] = sku
    return [kept[name] for name in sorted(kept)]


def list_records(compute: Any, location: str) -> Iterator[Mapping[str, Any]]:
    """The Resource SKUs records of ``location`` through an azure-mgmt-compute client."""
    yield from compute.resource_skus.list(filter=f"location eq '{location}'")
