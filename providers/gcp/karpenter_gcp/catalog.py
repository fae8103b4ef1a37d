"""The machine types a GCENodeClass can launch in a region, with their offerings and prices.

Offline, the rows come from the packaged catalog (``data/machinetypes.json.gz``, see
``data/README.md``): SkyPilot's public GCP catalog's machine types per region with the zones
and on-demand and spot prices; GPUs from a table per machine family (``family_gpus``), since
that source leaves the accelerators of a2/a3/g2 types empty. Live, the same rows are read from
the Compute API: the zones of the region that are UP (Zones API) and the machine types of each
(machineTypes aggregatedList), GPUs from the type's ``accelerators``; they are refreshed on the
SDK's ``RefreshedData`` and the last good read is kept when one fails.

``Catalog.instance_types(options)`` is cached per build options and rebuilt when the rows or the
prices change, or, for the types concerned, the unavailable offerings (``InstanceTypeCache``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from karpenter_core.sdk.catalog import InstanceTypeCache, RefreshedData, packaged_json
from karpenter_core.sdk.offerings import Marks, UnavailableOfferings, without_unavailable
from karpenter_core.sdk.types import CloudProviderError, InstanceType
from karpenter_gcp.instancetype import BuildOptions, MachineType, build

__all__ = [
    "GPU_MEMORY_MIB",
    "Catalog",
    "CatalogError",
    "family_gpus",
    "live_machine_types",
    "machine_type",
    "offline_machine_types",
    "offline_regions",
    "packaged_prices",
    "packaged_source",
]

FAMILY_GPUS = {
    "a2-highgpu": "nvidia-tesla-a100",
    "a2-megagpu": "nvidia-tesla-a100",
    "a2-ultragpu": "nvidia-a100-80gb",
    "a3-edgegpu": "nvidia-h100-80gb",
    "a3-highgpu": "nvidia-h100-80gb",
    "a3-megagpu": "nvidia-h100-mega-80gb",
    "a3-ultragpu": "nvidia-h200-141gb",
    "g2-standard": "nvidia-l4",
}
"""The GPU (GCE accelerator type) of each machine family and shape that has GPUs attached."""
GPU_MEMORY_MIB = {
    "nvidia-tesla-a100": 40960,
    "nvidia-a100-80gb": 81920,
    "nvidia-h100-80gb": 81920,
    "nvidia-h100-mega-80gb": 81920,
    "nvidia-h200-141gb": 144384,
    "nvidia-l4": 24576,
    "nvidia-tesla-t4": 16384,
    "nvidia-tesla-v100": 16384,
    "nvidia-tesla-p100": 16384,
    "nvidia-tesla-p4": 8192,
}
"""MiB of memory per GPU by accelerator type (Google's published GPU table)."""
_G2_GPUS = {24: 2, 48: 4, 96: 8}
"""L4 GPUs of a g2-standard type by vCPUs (one below 24); a2/a3 names carry ``-<n>g``."""
_ARM_FAMILIES = frozenset({"t2a", "c4a", "n4a"})
_PACKAGE = ("karpenter_gcp", "data/machinetypes.json.gz")


class CatalogError(CloudProviderError):
    """No machine type data: the Compute API could not be read, or the region is unknown."""


class ComputeClients(Protocol):
    """What the live catalog reads through (``karpenter_gcp.clients.GCPClients``)."""

    project: str
    zones: Any
    machine_types: Any


def family_gpus(name: str, vcpus: int) -> tuple[str, int]:
    """GPU name and count of a machine type by its family ("", 0 without GPUs)."""
    gpu = FAMILY_GPUS.get("-".join(name.split("-")[:2]))
    if gpu is None:
        return "", 0
    count = re.search(r"-(\d+)g(?:-|$)", name)
    return gpu, int(count.group(1)) if count else _G2_GPUS.get(vcpus, 1)


def architecture(name: str) -> str:
    """arm64 for the Arm families (t2a, c4a, n4a), else amd64."""
    return "arm64" if name.split("-")[0] in _ARM_FAMILIES else "amd64"


def _packaged() -> dict[str, Any]:
    return packaged_json(*_PACKAGE)


def offline_regions() -> list[str]:
    """The regions the packaged catalog covers."""
    return sorted(_packaged()["regions"])


def packaged_source() -> dict[str, str]:
    """Where the packaged catalog comes from: repository, path, commit, ranges, sha256."""
    return dict(_packaged()["source"])


def _region_offers(region: str) -> list[list[Any]]:
    regions = _packaged()["regions"]
    if region not in regions:
        raise CatalogError(
            f"no offline machine type data for region {region!r}; available: "
            + ", ".join(offline_regions())
        )
    offers: list[list[Any]] = regions[region]
    return offers


def offline_machine_types(region: str) -> list[MachineType]:
    """The packaged machine types of ``region``, each with the zones that list it."""
    types = _packaged()["types"]
    zones: dict[int, list[str]] = {}
    for index, letters, _, _ in _region_offers(region):
        zones.setdefault(index, []).extend(f"{region}-{z}" for z in letters.split(","))
    out = []
    for index, listed in sorted(zones.items()):
        name, vcpus, memory, arch, gpu, count = types[index]
        out.append(
            MachineType(name, vcpus, memory, tuple(sorted(listed)), arch, gpu, count,
                        GPU_MEMORY_MIB.get(gpu, 0))
        )  # fmt: skip
    return out


def packaged_prices(region: str) -> dict[tuple[str, str, str], float]:
    """Hourly prices of ``region`` by ``(capacity type, machine type, zone)``."""
    types = _packaged()["types"]
    out: dict[tuple[str, str, str], float] = {}
    for index, letters, on_demand, spot in _region_offers(region):
        name = types[index][0]
        for letter in letters.split(","):
            out["on-demand", name, f"{region}-{letter}"] = on_demand
            if spot is not None:
                out["spot", name, f"{region}-{letter}"] = spot
    return out


def machine_type(api: Any, zones: Iterable[str]) -> MachineType:
    """A row from a Compute API MachineType (``compute_v1.MachineType``) offered in ``zones``."""
    gpus = list(api.accelerators)
    gpu = gpus[0].guest_accelerator_type if gpus else ""
    arch = {"ARM64": "arm64", "X86_64": "amd64"}.get(api.architecture, architecture(api.name))
    return MachineType(
        name=api.name,
        vcpus=api.guest_cpus,
        memory_mib=api.memory_mb,
        zones=tuple(sorted(zones)),
        architecture=arch,
        gpu_name=gpu,
        gpu_count=sum(g.guest_accelerator_count for g in gpus),
        gpu_memory_mib=GPU_MEMORY_MIB.get(gpu, 0),
    )


def live_machine_types(clients: ComputeClients, region: str) -> list[MachineType]:
    """The machine types of ``region`` from the Compute API: the region's zones that are UP,
    and per type the zones among them that list it (deprecated types left out)."""
    try:
        up = {
            z.name
            for z in clients.zones.list(project=clients.project)
            if z.region.rsplit("/", 1)[-1] == region and z.status == "UP"
        }
        if not up:
            raise CatalogError(f"no zone of region {region!r} is up in {clients.project}")
        seen: dict[str, tuple[Any, list[str]]] = {}
        listing = clients.machine_types.aggregated_list(project=clients.project)
        for scope, scoped in listing:
            zone = scope.removeprefix("zones/")
            if zone not in up:
                continue
            for api in scoped.machine_types:
                if api.deprecated.state in ("", "ACTIVE"):
                    seen.setdefault(api.name, (api, []))[1].append(zone)
    except CatalogError:
        raise
    except Exception as error:  # google-api-core's errors and transport failures
        raise CatalogError(f"reading machine types of {region}: {error}") from error
    return [machine_type(api, zones) for _, (api, zones) in sorted(seen.items())]


class Catalog:
    """Instance types of one region from live or packaged rows and ``prices``."""

    def __init__(
        self,
        region: str,
        rows: RefreshedData[list[MachineType]],
        prices: Any,
        unavailable: UnavailableOfferings,
    ) -> None:
        self.region = region
        self.rows = rows
        self.prices = prices
        self.unavailable = unavailable
        self._cache: InstanceTypeCache[BuildOptions] = InstanceTypeCache(unavailable, 32)

    @classmethod
    def offline(cls, region: str, prices: Any, unavailable: UnavailableOfferings) -> Catalog:
        """The packaged machine types of ``region`` (nothing read from the cloud)."""
        rows = RefreshedData(None, what="machine types", initial=offline_machine_types(region))
        return cls(region, rows, prices, unavailable)

    @classmethod
    def live(
        cls, clients: ComputeClients, region: str, prices: Any, unavailable: UnavailableOfferings
    ) -> Catalog:
        """Machine types read from the Compute API (refreshed on the SDK's interval)."""
        rows = RefreshedData(
            lambda: live_machine_types(clients, region), what=f"machine types of {region}"
        )
        return cls(region, rows, prices, unavailable)

    def instance_types(self, options: BuildOptions) -> list[InstanceType]:
        """The instance types under ``options`` (a shared list: do not modify it)."""
        rows = self.rows.current()
        by_name = {mt.name: mt for mt in rows}
        price: Callable[[str, MachineType, str], float | None] = self.prices.price

        def one(mt: MachineType, marks: Marks) -> InstanceType:
            return without_unavailable(build(mt, options, price, lambda *_: False), marks)

        return self._cache.get(
            options,
            (self.rows.version, self.prices.seq),
            lambda marks: [one(mt, marks) for mt in rows],
            lambda name, marks: one(by_name[name], marks) if name in by_name else None,
        )
