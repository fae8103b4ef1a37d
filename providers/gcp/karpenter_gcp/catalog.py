"""The machine types a GCENodeClass can launch in a region, with their offerings and prices.

Offline, the rows come from the packaged catalog (``data/machinetypes.json.gz``, see
``data/README.md``): SkyPilot's public GCP catalog's machine types per region with their zones
and on-demand and spot prices, GPUs from a table per machine family (the source leaves a2/a3/g2
accelerators empty). Live, the same rows come from the Compute API: the region's zones that are
UP (Zones API) and the machine types of each (machineTypes aggregatedList), GPUs from the
type's ``accelerators``, refreshed on the SDK's ``RefreshedData`` (the last good read kept).

``Catalog.instance_types(options)`` is cached per build options and rebuilt when the rows or the
prices change, or, for the types concerned, the unavailable offerings (``InstanceTypeCache``);
each call lets the prices refresh in the background when they are due.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from karpenter_core.sdk.catalog import InstanceTypeCache, RefreshedData, packaged_json
from karpenter_core.sdk.offerings import Marks, UnavailableOfferings
from karpenter_core.sdk.types import CloudProviderError, InstanceType
from karpenter_gcp.instancetype import BuildOptions, MachineType, build

if TYPE_CHECKING:
    from karpenter_gcp.pricing import GCPPricing

__all__ = [
    "Catalog",
    "CatalogError",
    "gpu_memory_mib",
    "live_machine_types",
    "machine_type",
    "offline_machine_types",
    "offline_regions",
    "packaged_prices",
    "packaged_source",
]

_PACKAGE = ("karpenter_gcp", "data/machinetypes.json.gz")


class CatalogError(CloudProviderError):
    """No machine type data: the Compute API could not be read, or the region is unknown."""


def _packaged() -> dict[str, Any]:
    return packaged_json(*_PACKAGE)


def gpu_memory_mib(gpu: str) -> int:
    """MiB of memory per GPU of a GCE accelerator type (0 when not in the recorded table)."""
    memory: int = _packaged()["gpu_memory_mib"].get(gpu, 0)
    return memory


def offline_regions() -> list[str]:
    """The regions the packaged catalog covers."""
    return sorted(_packaged()["regions"])


def packaged_source() -> dict[str, str]:
    """Where the packaged catalog comes from: repository, path, commit, sha256."""
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
                        gpu_memory_mib(gpu))
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
    arch = "arm64" if api.architecture == "ARM64" else "amd64"
    count = sum(g.guest_accelerator_count for g in gpus)
    zones = tuple(sorted(zones))
    return MachineType(api.name, api.guest_cpus, api.memory_mb, zones, arch, gpu, count,
                       gpu_memory_mib(gpu))  # fmt: skip


def live_machine_types(clients: Any, region: str) -> list[MachineType]:
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
        prices: GCPPricing,
        unavailable: UnavailableOfferings,
    ) -> None:
        self.region = region
        self.rows = rows
        self.prices = prices
        self.unavailable = unavailable
        self._cache: InstanceTypeCache[BuildOptions] = InstanceTypeCache(unavailable, 32)

    @classmethod
    def offline(cls, region: str, prices: GCPPricing, unavailable: UnavailableOfferings) -> Catalog:
        """The packaged machine types of ``region`` (nothing read from the cloud)."""
        rows = RefreshedData(None, what="machine types", initial=offline_machine_types(region))
        return cls(region, rows, prices, unavailable)

    @classmethod
    def live(
        cls, clients: Any, region: str, prices: GCPPricing, unavailable: UnavailableOfferings
    ) -> Catalog:
        """Machine types read from the Compute API (refreshed on the SDK's interval)."""
        rows = RefreshedData(
            lambda: live_machine_types(clients, region), what=f"machine types of {region}"
        )
        return cls(region, rows, prices, unavailable)

    def instance_types(self, options: BuildOptions) -> list[InstanceType]:
        """The instance types under ``options`` (a shared list: do not modify it)."""
        rows = self.rows.current()
        self.prices.refresh_in_background()
        by_name = {mt.name: mt for mt in rows}

        def one(mt: MachineType, marks: Marks) -> InstanceType:
            return build(mt, options, self.prices.price, marks.excludes)

        return self._cache.get(
            options,
            (self.rows.version, self.prices.seq),
            lambda marks: [one(mt, marks) for mt in rows],
            lambda name, marks: one(by_name[name], marks) if name in by_name else None,
        )
