"""The VM sizes an AKSNodeClass can launch in a region, with their offerings and prices.

Live, ``Catalog`` reads the Resource SKUs API (``skus.read_skus``) on first use and again once the
data is ``REFRESH_INTERVAL`` old, keeping what it read before when a refresh fails; prices start
from the packaged table and are refreshed from the Retail Prices API in the background
(``pricing.PriceBook``); in a region the package lacks, the first read is waited for. Offline, it reads the packaged catalog (``data/skus.json.gz``, see
``data/README.md``): every VM size SkyPilot's public Azure catalog lists for the region, with its
on-demand and spot prices; nothing is fetched.

``instance_types(node_class)`` is cached per build inputs (the AKSNodeClass's maxPods, OS disk
and encryption at host) and rebuilt when the SKUs or the prices (``PriceBook.seq``) change; when
only the unavailable offerings (``UnavailableOfferings.seq``) do, just the sizes whose marks
changed are rebuilt.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING, Any

from karpenter_azure.instancetype import (
    DEFAULT_OS_DISK_SIZE_GB,
    BuildOptions,
    build,
    max_pods,
)
from karpenter_azure.pricing import RETAIL_PRICES_URL, PriceBook, http_getter
from karpenter_azure.skus import Sku, VMSize, list_records, parse_size, read_skus, skip_reason
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
REFRESH_INTERVAL = timedelta(hours=12)
"""How old the Resource SKUs data may get before it is read again."""
RETRY_INTERVAL = timedelta(minutes=1)
"""How soon a failed SKU read is retried (the previous data is kept meanwhile)."""
DERIVED = frozenset({"zones", "architecture", "accelerated_networking", "premium_io", "spot"})
"""The ``Sku`` fields the packaged catalog derives rather than reads (see data/README.md)."""

_log = logging.getLogger(__name__)
_CACHE_SIZE = 32
_FIRST_PRICES_WAIT = timedelta(seconds=60)
"""How long a live catalog without any price (no packaged table for the region) waits for the
first Retail Prices read before building with none."""


class CatalogError(CloudProviderError):
    """No VM size data: the Resource SKUs API could not be read, or the region is unknown."""


@functools.cache
def _packaged() -> dict[str, Any]:
    raw = resources.files("karpenter_azure").joinpath("data/skus.json.gz").read_bytes()
    data: dict[str, Any] = json.loads(gzip.decompress(raw))
    return data


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


@dataclass(slots=True)
class _Built:
    """Instance types built for one set of inputs, and the unavailable marks they reflect."""

    key: tuple[int, int, int]
    types: list[InstanceType]
    marks: Marks


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
        self._clock = clock
        self._lock = threading.Lock()
        self._skus: list[Sku] = list(skus)
        self._version = 1 if skus else 0
        self._due: datetime | None = None
        self._cache: dict[BuildOptions, _Built] = {}
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
        if self._stale():
            with self._lock:
                if self._stale():
                    self._read()
        if not self._skus:
            raise CatalogError(f"no VM sizes known in {self.region}")
        return self._skus

    def refresh(self) -> None:
        """Read the Resource SKUs API now (live); on failure keep the previous sizes and, when
        there are none, raise ``CatalogError``."""
        if self._compute is None:
            return
        with self._lock:
            self._read()

    def _stale(self) -> bool:
        return self._compute is not None and (self._due is None or self._clock() >= self._due)

    def _read(self) -> None:
        """Read the SKUs; the caller holds the lock."""
        from azure.core.exceptions import AzureError  # live only: keeps offline imports light

        assert self._compute is not None
        try:
            skus = read_skus(list_records(self._compute(), self.region), self.region)
        except AzureError as error:
            self._due = self._clock() + RETRY_INTERVAL
            if not self._skus:
                raise CatalogError(f"reading VM sizes in {self.region}: {error}") from error
            _log.warning(
                "reading VM sizes in %s: %s; keeping the sizes read before", self.region, error
            )
            return
        self._due = self._clock() + REFRESH_INTERVAL
        if skus != self._skus:
            self._skus = skus
            self._version += 1
            self._cache.clear()
            _log.info("discovered %d VM sizes in %s", len(skus), self.region)

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
        key = (self._version, self.prices.seq, self.unavailable.seq)
        entry = self._cache.get(options)
        if entry is not None and entry.key == key:
            return entry.types
        marks = self.unavailable.snapshot()

        def rebuild(sku: Sku) -> InstanceType | None:
            return build(sku, options, self.prices.price, marks.excludes)

        same_whole = entry is not None and entry.marks.capacity_types == marks.capacity_types
        if entry is not None and entry.key[:2] == key[:2] and same_whole:
            # only availability changed: rebuild the sizes whose marks did
            old = entry.marks
            changed = {n for n in old.keys() | marks.keys() if old.get(n) != marks.get(n)}
            by_name = {sku.name: sku for sku in skus if sku.name in changed}
            types = [
                rebuilt
                for instance_type in entry.types
                if (
                    rebuilt := rebuild(by_name[instance_type.name])
                    if instance_type.name in by_name
                    else instance_type
                )
                is not None
            ]
        else:
            types = [t for t in map(rebuild, skus) if t is not None]
        with self._lock:
            if len(self._cache) >= _CACHE_SIZE and options not in self._cache:
                self._cache.pop(next(iter(self._cache)))
            self._cache[options] = _Built(key, types, marks)
        return types
