"""The instance types an EC2NodeClass can launch, with their offerings and prices.

Live, the catalog reads DescribeInstanceTypes, DescribeInstanceTypeOfferings and
DescribeAvailabilityZones, again once the data is ``REFRESH_INTERVAL`` old (or on ``refresh()``).
One refresh runs at a time; meanwhile other callers get the data read before (only the very first
read makes them wait).
Offline, it reads the packaged shapes and zone offerings of a region (see ``data/README.md``),
with the packaged on-demand prices and spot prices estimated from them.

``instance_types(node_class)`` is cached per NodeClass inputs (zones, AMI family, kubelet, root
volume) and rebuilt when the EC2 data, the prices (``PriceBook.seq``) or the unavailable
offerings (``UnavailableOfferings.seq``) change, so repeated calls cost a dictionary lookup.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING, Any

from karpenter_aws import labels
from karpenter_aws.errors import AWS_ERRORS
from karpenter_aws.instancetype import (
    DEFAULT_AMI_FAMILY,
    BuildOptions,
    Shape,
    build,
    default_ephemeral_storage,
    shape,
)
from karpenter_aws.pricing import PriceBook
from karpenter_aws.unavailable import UnavailableOfferings
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.types import (
    CloudProviderError,
    InstanceType,
    Offering,
    Requirement,
    Requirements,
)

if TYPE_CHECKING:
    from karpenter_aws.nodeclass import EC2NodeClass
    from karpenter_aws.settings import AWSSettings

__all__ = [
    "OFFLINE_SPOT_ESTIMATE",
    "REFRESH_INTERVAL",
    "RETRY_INTERVAL",
    "CatalogError",
    "InstanceTypeCatalog",
    "offline_regions",
]

REFRESH_INTERVAL = timedelta(hours=12)
"""How old the EC2 instance type and offering data may get before it is read again."""
RETRY_INTERVAL = timedelta(minutes=1)
"""How soon a failed refresh is retried (the previous data is kept meanwhile)."""
OFFLINE_SPOT_ESTIMATE = 0.4
"""Offline spot prices are this fraction of on-demand (spot usually saves 60-70%)."""

_log = logging.getLogger(__name__)
_TYPE_FILTERS = [
    {"Name": "supported-virtualization-type", "Values": ["hvm"]},
    {"Name": "processor-info.supported-architecture", "Values": ["x86_64", "arm64"]},
]
_CAPACITY_ORDER = (wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT)
_NO_ZONES: frozenset[str] = frozenset()
_NO_MARKS: frozenset[tuple[str, str]] = frozenset()
_CACHE_SIZE = 64
"""How many sets of NodeClass inputs keep their built instance types (least recently used go)."""


class CatalogError(CloudProviderError):
    """The catalog has no instance type data: EC2 could not be read, or the region is unknown."""


@dataclass(frozen=True, slots=True)
class _Data:
    """One consistent snapshot of what EC2 offers in the region."""

    shapes: tuple[Shape, ...]
    offered: Mapping[str, frozenset[str]]
    zones: Mapping[str, str]
    version: int


@dataclass(slots=True)
class _Built:
    """Instance types built for one set of NodeClass inputs, what they were built from, and
    when they were last used (a tick of the catalog)."""

    version: int
    prices_seq: int
    unavailable_seq: int
    marks: Mapping[str, frozenset[tuple[str, str]]]
    types: list[InstanceType]
    index: Mapping[str, int]
    requirements: Mapping[tuple[str, str], Requirements]
    used: int = 0

    def matches(self, version: int, prices_seq: int, unavailable_seq: int) -> bool:
        """Whether the instance types are current."""
        return (self.version, self.prices_seq, self.unavailable_seq) == (
            version,
            prices_seq,
            unavailable_seq,
        )


@functools.cache
def _packaged(name: str) -> dict[str, Any]:
    raw = resources.files("karpenter_aws").joinpath(f"data/{name}").read_bytes()
    data: dict[str, Any] = json.loads(gzip.decompress(raw))
    return data


@functools.cache
def _packaged_shapes() -> tuple[Shape, ...]:
    infos = _packaged("instance_types.json.gz")["instance_types"]
    return tuple(s for s in map(shape, infos) if s is not None)


def offline_regions() -> list[str]:
    """Regions the packaged offline data covers."""
    return sorted(_packaged("regions.json.gz")["regions"])


def _paginate(client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
    items: list[Any] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        items.extend(page.get(key) or ())
    return items


class InstanceTypeCatalog:
    """Instance types per EC2NodeClass, from EC2 (``live``) or packaged data (``offline``)."""

    def __init__(
        self,
        settings: AWSSettings,
        region: str,
        prices: PriceBook,
        unavailable: UnavailableOfferings,
        *,
        ec2: Any = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.region = region
        self.prices = prices
        self.unavailable = unavailable
        self.ec2 = ec2
        self._clock = clock
        self._lock = threading.RLock()
        self._refreshed = threading.Condition(self._lock)
        self._refreshing = False
        self._data: _Data | None = None
        self._due: datetime | None = None
        self._cache: dict[tuple[BuildOptions, tuple[tuple[str, str], ...]], _Built] = {}
        self._ticks = itertools.count(1)

    @classmethod
    def live(
        cls,
        settings: AWSSettings,
        ec2: Any,
        prices: PriceBook,
        unavailable: UnavailableOfferings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> InstanceTypeCatalog:
        """A catalog reading EC2 through the boto3 client ``ec2`` (lazily, on first use), in
        ``settings.region`` or else the client's region."""
        region = settings.region or ec2.meta.region_name
        return cls(settings, region, prices, unavailable, ec2=ec2, clock=clock)

    @classmethod
    def offline(
        cls, settings: AWSSettings, unavailable: UnavailableOfferings | None = None
    ) -> InstanceTypeCatalog:
        """A catalog of the packaged data for ``settings.region`` (us-east-1 when unset), with
        packaged on-demand prices and estimated spot prices; no AWS call is made."""
        region = settings.region or "us-east-1"
        regions = _packaged("regions.json.gz")["regions"]
        if region not in regions:
            raise CatalogError(
                f"no offline instance type data for region {region!r}; "
                f"available: {', '.join(offline_regions())}"
            )
        prices = PriceBook(region, spot_estimate=OFFLINE_SPOT_ESTIMATE, isolated_vpc=True)
        catalog = cls(settings, region, prices, unavailable or UnavailableOfferings())
        zones = {z["name"]: z["id"] for z in regions[region]["zones"]}
        names = [z["name"] for z in regions[region]["zones"]]
        offered = {
            name: frozenset(names[i] for i in indices)
            for name, indices in regions[region]["offerings"].items()
        }
        shapes = tuple(s for s in _packaged_shapes() if s.name in offered)
        catalog._data = _Data(shapes, offered, zones, 1)
        return catalog

    @property
    def is_live(self) -> bool:
        """Whether the catalog reads EC2 (rather than packaged data)."""
        return self.ec2 is not None

    def zones(self) -> dict[str, str]:
        """All zones of the region that offer some instance type, by name, with their zone ids."""
        return dict(self._current().zones)

    def refresh(self) -> None:
        """Read instance types, their zone offerings and the zones from EC2 now (after any
        refresh already under way).

        On failure the previous data is kept and ``CatalogError`` is raised, naming the call.
        Offline catalogs have nothing to refresh.
        """
        if self.ec2 is None:
            return
        with self._refreshed:
            while self._refreshing:
                self._refreshed.wait()
            self._refreshing = True
        self._fetch_and_install()

    def _fetch_and_install(self) -> None:
        """Read EC2 without holding the lock and install the result; the caller has set
        ``_refreshing``, which this clears."""
        try:
            try:
                infos = _paginate(
                    self.ec2,
                    "describe_instance_types",
                    "InstanceTypes",
                    Filters=_TYPE_FILTERS,
                    PaginationConfig={"PageSize": 100},
                )
                rows = _paginate(
                    self.ec2,
                    "describe_instance_type_offerings",
                    "InstanceTypeOfferings",
                    LocationType="availability-zone",
                    PaginationConfig={"PageSize": 1000},
                )
                zone_rows = self.ec2.describe_availability_zones().get("AvailabilityZones") or ()
            except AWS_ERRORS as error:
                with self._lock:
                    self._due = self._clock() + RETRY_INTERVAL
                raise CatalogError(
                    f"reading EC2 instance types in {self.region}: {error}"
                ) from error
            with self._lock:
                self._install(infos, rows, zone_rows)
                self._due = self._clock() + REFRESH_INTERVAL
        finally:
            with self._refreshed:
                self._refreshing = False
                self._refreshed.notify_all()

    def _install(
        self,
        infos: Iterable[Mapping[str, Any]],
        rows: Iterable[Mapping[str, str]],
        zone_rows: Iterable[Mapping[str, Any]],
    ) -> None:
        offered: dict[str, set[str]] = {}
        for row in rows:
            offered.setdefault(row["InstanceType"], set()).add(row["Location"])
        zone_ids = {z["ZoneName"]: z.get("ZoneId", "") for z in zone_rows}
        all_zones = sorted({zone for zones in offered.values() for zone in zones})
        shapes = tuple(
            sorted((s for s in map(shape, infos) if s is not None), key=lambda s: s.name)
        )
        frozen = {name: frozenset(zones) for name, zones in offered.items()}
        zones = {zone: zone_ids.get(zone, "") for zone in all_zones}
        previous = self._data
        if (
            previous is not None
            and [s.name for s in previous.shapes] == [s.name for s in shapes]
            and previous.offered == frozen
            and previous.zones == zones
        ):
            return
        version = 1 if previous is None else previous.version + 1
        self._data = _Data(shapes, frozen, zones, version)
        self._cache.clear()
        _log.info(
            "discovered %d instance types offered in %d zones of %s",
            len(shapes),
            len(zones),
            self.region,
        )

    def _stale(self) -> bool:
        return self.ec2 is not None and (self._due is None or self._clock() >= self._due)

    def _current(self) -> _Data:
        """The EC2 data, refreshed first when stale. While one caller refreshes, the others keep
        the data read before; only without any data do they wait for it."""
        if self._stale():
            with self._refreshed:
                while self._refreshing and self._data is None:
                    self._refreshed.wait()
                claimed = not self._refreshing and self._stale()
                if claimed:
                    self._refreshing = True
            if claimed:
                try:
                    self._fetch_and_install()
                except CatalogError as error:
                    if self._data is None:
                        raise
                    _log.warning("%s; keeping the instance types read before", error)
        data = self._data
        if data is None:
            raise CatalogError(f"no instance types known in {self.region}")
        return data

    def instance_types(self, node_class: EC2NodeClass | None = None) -> list[InstanceType]:
        """Every instance type the EC2NodeClass may launch (including those with no available
        offering); ``None`` means all zones of the region and AL2023 defaults.

        The zones are those of the EC2NodeClass's resolved subnets. Offline, where nothing
        resolves them, an EC2NodeClass without subnets in its status gets all zones of the region.

        The list is shared between callers: do not modify it or its instance types.
        """
        data = self._current()
        options, zones = self._inputs(node_class, data)
        key = (options, zones)
        useq = self.unavailable.seq
        entry = self._cache.get(key)
        if entry is not None and entry.matches(data.version, self.prices.seq, useq):
            entry.used = next(self._ticks)
            return entry.types
        with self._lock:
            entry = self._cache.get(key)
            pseq = self.prices.seq
            if entry is not None and entry.matches(data.version, pseq, useq):
                entry.used = next(self._ticks)
                return entry.types
            if entry is not None and (entry.version, entry.prices_seq) == (data.version, pseq):
                entry = self._update_availability(entry, data, options, dict(zones), useq)
            else:
                entry = self._build(data, options, dict(zones), pseq, useq)
            entry.used = next(self._ticks)
            cache = self._cache
            cache[key] = entry
            if len(cache) > _CACHE_SIZE:
                del cache[min(cache, key=lambda k: cache[k].used)]
            return entry.types

    def _inputs(
        self, node_class: EC2NodeClass | None, data: _Data
    ) -> tuple[BuildOptions, tuple[tuple[str, str], ...]]:
        settings = self.settings
        if node_class is None:
            options = BuildOptions(
                ami_family=DEFAULT_AMI_FAMILY,
                vm_memory_overhead_percent=settings.vm_memory_overhead_percent,
                reserved_enis=settings.reserved_enis,
                ephemeral_storage=default_ephemeral_storage(DEFAULT_AMI_FAMILY),
                region=self.region,
            )
            return options, tuple(sorted(data.zones.items()))
        family = node_class.resolved_ami_family()
        kubelet = node_class.spec.kubelet
        root = node_class.root_volume_size()
        options = BuildOptions(
            ami_family=family,
            vm_memory_overhead_percent=settings.vm_memory_overhead_percent,
            reserved_enis=settings.reserved_enis,
            max_pods=kubelet.max_pods if kubelet else None,
            pods_per_core=kubelet.pods_per_core if kubelet else None,
            kube_reserved=tuple(sorted((kubelet.kube_reserved or {}).items())) if kubelet else (),
            system_reserved=(
                tuple(sorted((kubelet.system_reserved or {}).items())) if kubelet else ()
            ),
            eviction_hard=tuple(sorted((kubelet.eviction_hard or {}).items())) if kubelet else (),
            ephemeral_storage=root if root is not None else default_ephemeral_storage(family),
            instance_store_raid0=node_class.spec.instance_store_policy == "RAID0",
            region=self.region,
        )
        subnets = node_class.status.subnets
        if not subnets and not self.is_live:
            return options, tuple(sorted(data.zones.items()))
        zones = {
            subnet.zone: subnet.zone_id or data.zones.get(subnet.zone, "") for subnet in subnets
        }
        return options, tuple(sorted(zones.items()))

    def _offering_requirements(
        self, zones: Mapping[str, str]
    ) -> dict[tuple[str, str], Requirements]:
        out: dict[tuple[str, str], Requirements] = {}
        for zone, zone_id in zones.items():
            for capacity_type in _CAPACITY_ORDER:
                parts = [
                    Requirement(wk.CAPACITY_TYPE, False, frozenset((capacity_type,))),
                    Requirement(wk.TOPOLOGY_ZONE, False, frozenset((zone,))),
                ]
                if zone_id:
                    parts.append(
                        Requirement(labels.LABEL_TOPOLOGY_ZONE_ID, False, frozenset((zone_id,)))
                    )
                out[(capacity_type, zone)] = Requirements(parts)
        return out

    def _build(
        self, data: _Data, options: BuildOptions, zones: dict[str, str], pseq: int, useq: int
    ) -> _Built:
        marks = self.unavailable.snapshot()
        requirements = self._offering_requirements(zones)
        wanted = frozenset(zones)
        types: list[InstanceType] = []
        index: dict[str, int] = {}
        for item in data.shapes:
            built = self._instance_type(item, data, options, zones, wanted, requirements, marks)
            if built is not None:
                index[item.name] = len(types)
                types.append(built)
        return _Built(data.version, pseq, useq, marks, types, index, requirements)

    def _update_availability(
        self, entry: _Built, data: _Data, options: BuildOptions, zones: dict[str, str], useq: int
    ) -> _Built:
        """``entry`` with only the instance types whose unavailable offerings changed rebuilt."""
        marks = self.unavailable.snapshot()
        old = entry.marks
        changed = [n for n in old.keys() | marks.keys() if old.get(n) != marks.get(n)]
        types = list(entry.types)
        shapes = {s.name: s for s in data.shapes} if changed else {}
        wanted = frozenset(zones)
        for name in changed:
            position = entry.index.get(name)
            if position is None:
                continue
            rebuilt = self._instance_type(
                shapes[name], data, options, zones, wanted, entry.requirements, marks
            )
            if rebuilt is not None:
                types[position] = rebuilt
        return _Built(
            entry.version, entry.prices_seq, useq, marks, types, entry.index, entry.requirements
        )

    def _instance_type(
        self,
        item: Shape,
        data: _Data,
        options: BuildOptions,
        zones: Mapping[str, str],
        wanted: frozenset[str],
        requirements: Mapping[tuple[str, str], Requirements],
        marks: Mapping[str, frozenset[tuple[str, str]]],
    ) -> InstanceType | None:
        prices = self.prices
        name = item.name
        type_zones = sorted(data.offered.get(name, _NO_ZONES) & wanted)
        unavailable = marks.get(name, _NO_MARKS)
        spot_estimated = prices.spot_estimated
        on_demand_estimated = prices.on_demand_estimated
        on_demand = prices.on_demand(name)
        offerings: list[Offering] = []
        for capacity_type in _CAPACITY_ORDER:
            if capacity_type not in item.capacity_types:
                continue
            spot = capacity_type == wk.CAPACITY_TYPE_SPOT
            for zone in type_zones:
                price = prices.spot(name, zone) if spot else on_demand
                offerings.append(
                    Offering(
                        requirements[(capacity_type, zone)],
                        0.0 if price is None else price,
                        price is not None and (capacity_type, zone) not in unavailable,
                        estimated=spot_estimated if spot else on_demand_estimated,
                    )
                )
        return build(item, options, {zone: zones[zone] for zone in type_zones}, offerings)
