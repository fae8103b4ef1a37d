"""The VM sizes an AKSNodeClass can launch in a region, with their offerings and prices.

Live, ``Catalog`` reads the Resource SKUs API (``skus.read_skus``) on first use and again once the
data is ``REFRESH_INTERVAL`` old, keeping what it read before when a refresh fails (the SDK's
``RefreshedData``); prices start
from the packaged table and are refreshed from the Retail Prices API in the background
(``pricing.PriceBook``); in a region the package lacks, the first read is waited for. Offline, it reads the packaged catalog (``data/skus.json.gz``, see
``data/README.md``): every VM size SkyPilot's public Azure catalog lists for the region, with its
on-demand and spot prices; nothing is fetched.

``instance_types(node_class)`` is cached per build inputs (the AKSNodeClass's maxPods, OS disk
and encryption at host) and rebuilt when the SKUs or the prices (``PriceBook.seq``) change; when
only the unavailable offerings (``UnavailableOfferings.seq``) do, just the sizes whose marks
changed are rebuilt (the SDK's ``InstanceTypeCache``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from karpenter_azure.instancetype import (
    DEFAULT_OS_DISK_SIZE_GB,
    BuildOptions,
    build,
    max_pods,
)
from karpenter_azure.pricing import RETAIL_PRICES_URL, PriceBook, http_getter
from karpenter_azure.skus import Sku, VMSize, list_records, parse_size, read_skus, skip_reason
from karpenter_core.sdk.catalog import (
    REFRESH_INTERVAL,
    InstanceTypeCache,
    RefreshedData,
    packaged_json,
)
from karpenter_core.sdk.offerings import Marks, UnavailableOfferings
from karpenter_core.sdk.types import CloudProviderError, InstanceType

if TYPE_CHECKING:
    from karpenter_azure.clients import AzureClients
    from karpenter_azure.nodeclass import AKSNodeClass
    from karpenter_azure.settings import AzureSettings

__all__ = [
    "DEFAULT_REGION",
    "DERIVED",
    "REFRESH_INTERVAL",
    "Catalog",
    "CatalogError",
    "offline_regions",
    "offline_skus",
    "packaged_source",
]

DEFAULT_REGION = "eastus"
"""The region of an offline catalog when the settings name none."""
DERIVED = frozenset({"zones", "architecture", "accelerated_networking", "premium_io", "spot"})
"""The ``Sku`` fields the packaged catalog derives rather than reads (see data/README.md)."""

_log = logging.getLogger(__name__)
_CACHE_SIZE = 32
_FIRST_PRICES_WAIT = timedelta(seconds=60)
"""How long a live catalog without any price (no packaged table for the region) waits for the
first Retail Prices read before building with none."""


class CatalogError(CloudProviderError):
    """No VM size data: the Resource SKUs API could not be read, or the region is unknown."""


def _packaged() -> dict[str, Any]:
    return packaged_json("karpenter_azure", "data/skus.json.gz")


def offline_regions() -> list[str]:
    """The regions the packaged catalog covers."""
    return sorted(_packaged()["regions"])


def packaged_source() -> dict[str, str]:
    """Where the packaged catalog comes from: repository, path, commit, sha256, prices_as_of."""
    return dict(_packaged()["source"])


@functools.cache
def _sizes() -> tuple[tuple[Any, VMSize | None], ...]:
    return tuple((entry, parse_size(entry[0])) for entry in _packaged()["sizes"])


def _packaged_region(region: str) -> dict[str, Any]:
    regions = _packaged()["regions"]
    if region not in regions:
        raise CatalogError(
            f"no offline VM size data for region {region!r}; "
            f"available: {', '.join(offline_regions())}"
        )
    data: dict[str, Any] = regions[region]
    return data


def offline_skus(region: str) -> list[Sku]:
    """The packaged VM sizes of ``region`` that upstream keeps (``skus.skip_reason``)."""
    data = _packaged_region(region)
    zones = tuple(data["zones"])
    sizes = _sizes()
    out: list[Sku] = []
    for index, _, spot in data["offers"]:
        (name, vcpus, memory, gpus, generations, arch, accelerated, premium), size = sizes[index]
        if size is None:
            continue
        sku = Sku(
            name=name,
            size=size,
            vcpus=vcpus,
            memory_gib=memory,
            architecture=arch,
            zones=zones,
            spot=spot is not None,
            accelerated_networking=accelerated,
            premium_io=premium,
            hyperv_generations=tuple(generations.split(",")) if generations else (),
            gpus=gpus,
            derived=DERIVED,
        )
        if skip_reason(sku) is None:
            out.append(sku)
    return out


def _packaged_prices(region: str) -> tuple[dict[str, float], dict[str, float]]:
    sizes = _packaged()["sizes"]
    on_demand: dict[str, float] = {}
    spot: dict[str, float] = {}
    for index, od, sp in _packaged_region(region)["offers"]:
        name = sizes[index][0]
        if od is not None:
            on_demand[name] = od
        if sp is not None:
            spot[name] = sp
    return on_demand, spot


def _price_book(region: str, clock: Callable[[], datetime]) -> PriceBook:
    """The packaged prices of ``region`` (none for a region the package lacks)."""
    if region not in _packaged()["regions"]:
        return PriceBook(region, {}, {}, "no packaged prices", clock=clock)
    source = packaged_source()
    on_demand, spot = _packaged_prices(region)
    label = f"packaged prices ({source['repository']}@{source['commit'][:12]})"
    return PriceBook(region, on_demand, spot, label, clock=clock)


class Catalog:
    """Instance types per AKSNodeClass, from Azure (``live``) or packaged data (``offline``)."""

    def __init__(
        self,
        settings: AzureSettings,
        region: str,
        prices: PriceBook,
        unavailable: UnavailableOfferings,
        *,
        compute: Callable[[], Any] | None = None,
        skus: Sequence[Sku] = (),
        prices_url: str = RETAIL_PRICES_URL,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.region = region
        self.prices = prices
        self.unavailable = unavailable
        self.prices_url = prices_url
        self._compute = compute
        self._skus = RefreshedData(
            self._read if compute is not None else None,
            what=f"VM sizes of {region}",
            initial=list(skus) if skus or compute is None else None,
            on_change=lambda read: _log.info("discovered %d VM sizes in %s", len(read), region),
            clock=clock,
        )
        self._cache: InstanceTypeCache[BuildOptions] = InstanceTypeCache(unavailable, _CACHE_SIZE)
        self._price_getter = http_getter(settings.arm_ca_bundle)

    @classmethod
    def offline(
        cls, settings: AzureSettings, unavailable: UnavailableOfferings | None = None
    ) -> Catalog:
        """The packaged catalog of ``settings.region`` (eastus when unset); no Azure call."""
        region = settings.region or DEFAULT_REGION
        skus = offline_skus(region)
        prices = _price_book(region, lambda: datetime.now(UTC))
        return cls(settings, region, prices, unavailable or UnavailableOfferings(), skus=skus)

    @classmethod
    def live(
        cls,
        settings: AzureSettings,
        clients: AzureClients,
        unavailable: UnavailableOfferings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> Catalog:
        """A catalog reading the Resource SKUs API through ``clients.compute`` (on first use) and
        the Retail Prices API (at the ARM endpoint override when one is set, for the fake ARM
        server), with the packaged prices until those answer."""
        if not settings.region:
            raise CatalogError("no Azure region: set --region (LOCATION)")
        url = RETAIL_PRICES_URL
        if settings.arm_endpoint_url:
            url = settings.arm_endpoint_url.rstrip("/") + "/api/retail/prices"
        return cls(
            settings,
            settings.region,
            _price_book(settings.region, clock),
            unavailable,
            compute=lambda: clients.compute,
            prices_url=url,
            clock=clock,
        )

    @property
    def is_live(self) -> bool:
        """Whether the catalog reads Azure (rather than packaged data)."""
        return self._compute is not None

    def skus(self) -> list[Sku]:
        """The region's VM sizes, read from Azure first when stale (live)."""
        skus = self._skus.current()
        if not skus:
            raise CatalogError(f"no VM sizes known in {self.region}")
        return skus

    def _read(self) -> list[Sku]:
        """The region's VM sizes from the Resource SKUs API; ``CatalogError`` when it fails."""
        from azure.core.exceptions import AzureError  # live only: keeps offline imports light

        assert self._compute is not None
        try:
            return read_skus(list_records(self._compute(), self.region), self.region)
        except AzureError as error:
            raise CatalogError(f"reading VM sizes in {self.region}: {error}") from error

    def options(self, node_class: AKSNodeClass | None) -> BuildOptions:
        """The build inputs for ``node_class`` (AKSNodeClass defaults for None)."""
        settings = self.settings
        spec = node_class.spec if node_class is not None else None
        return BuildOptions(
            region=self.region,
            max_pods=max_pods(
                settings.network_plugin,
                settings.network_plugin_mode,
                spec.max_pods if spec is not None else None,
            ),
            os_disk_size_gb=spec.os_disk_size_gb if spec is not None else DEFAULT_OS_DISK_SIZE_GB,
            encryption_at_host=spec.encryption_at_host() if spec is not None else False,
            vm_memory_overhead_percent=settings.vm_memory_overhead_percent,
        )

    def instance_types(self, node_class: AKSNodeClass | None = None) -> list[InstanceType]:
        """Every VM size the AKSNodeClass may launch (including those with no available
        offering). The list is shared between callers: do not modify it or its types."""
        skus = self.skus()
        if self._compute is not None:
            reading = self.prices.refresh_in_background(self.prices_url, self._price_getter)
            if reading is not None and self.prices.empty:
                reading.join(_FIRST_PRICES_WAIT.total_seconds())
        options = self.options(node_class)

        def build_all(marks: Marks) -> list[InstanceType]:
            return [t for t in (self._build(sku, options, marks) for sku in skus) if t]

        def rebuild(name: str, marks: Marks) -> InstanceType | None:
            return self._build(next(s for s in skus if s.name == name), options, marks)

        stamp = (self._skus.version, self.prices.seq)
        return self._cache.get(options, stamp, build_all, rebuild)

    def _build(self, sku: Sku, options: BuildOptions, marks: Marks) -> InstanceType | None:
        return build(sku, options, self.prices.price, marks.excludes)
