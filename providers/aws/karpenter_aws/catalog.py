"""The instance types an EC2NodeClass can launch, with their offerings and prices.

Live, the catalog reads DescribeInstanceTypes, DescribeInstanceTypeOfferings and
DescribeAvailabilityZones, again once the data is ``REFRESH_INTERVAL`` old (or on ``refresh()``):
the SDK's ``RefreshedData``, so one refresh runs at a time and meanwhile other callers get the data
read before (only the very first read makes them wait).
Offline, it reads the packaged shapes and zone offerings of a region (see ``data/README.md``),
with the packaged on-demand prices and spot prices estimated from them.

``instance_types(node_class)`` is cached per NodeClass inputs (zones, AMI family, kubelet, root
volume) and rebuilt when the EC2 data, the prices (``PriceBook.seq``) or the unavailable
offerings (``UnavailableOfferings.seq``) change (the SDK's ``InstanceTypeCache``), so repeated
calls cost a dictionary lookup.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
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
from karpenter_core.sdk.catalog import (
    REFRESH_INTERVAL,
    RETRY_INTERVAL,
    InstanceTypeCache,
    RefreshedData,
    packaged_json,
)
from karpenter_core.sdk.offerings import Marks
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

OFFLINE_SPOT_ESTIMATE = 0.4
"""Offline spot prices are this fraction of on-demand (spot usually saves 60-70%)."""

_log = logging.getLogger(__name__)
_TYPE_FILTERS = [
    {"Name": "supported-virtualization-type", "Values": ["hvm"]},
    {"Name": "processor-info.supported-architecture", "Values": ["x86_64", "arm64"]},
]
_CAPACITY_ORDER = (wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT)
_NO_ZONES: frozenset[str] = frozenset()
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

    def same(self, other: _Data) -> bool:
        """Whether ``other`` offers the same instance types in the same zones."""
        return (
            [s.name for s in self.shapes] == [s.name for s in other.shapes]
            and self.offered == other.offered
            and self.zones == other.zones
        )


def _packaged(name: str) -> dict[str, Any]:
    return packaged_json("karpenter_aws", f"data/{name}")


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
        data: _Data | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.region = region
        self.prices = prices
        self.unavailable = unavailable
        self.ec2 = ec2
        self._data = RefreshedData(
            self._read if ec2 is not None else None,
            what=f"instance types of {region}",
            initial=data,
            same=_Data.same,
            on_change=self._discovered,
            clock=clock,
        )
        self._cache: InstanceTypeCache[tuple[BuildOptions, tuple[tuple[str, str], ...]]] = (
            InstanceTypeCache(unavailable, _CACHE_SIZE)
        )

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
        zones = {z["name"]: z["id"] for z in regions[region]["zones"]}
        names = [z["name"] for z in regions[region]["zones"]]
        offered = {
            name: frozenset(names[i] for i in indices)
            for name, indices in regions[region]["offerings"].items()
        }
        shapes = tuple(s for s in _packaged_shapes() if s.name in offered)
        data = _Data(shapes, offered, zones)
        return cls(settings, region, prices, unavailable or UnavailableOfferings(), data=data)

    @property
    def is_live(self) -> bool:
        """Whether the catalog reads EC2 (rather than packaged data)."""
        return self.ec2 is not None

    def zones(self) -> dict[str, str]:
        """All zones of the region that offer some instance type, by name, with their zone ids."""
        return dict(self._data.current().zones)

    def refresh(self) -> None:
        """Read instance types, their zone offerings and the zones from EC2 now (after any
        refresh already under way).

        On failure the previous data is kept and ``CatalogError`` is raised, naming the call.
        Offline catalogs have nothing to refresh.
        """
        self._data.refresh()

    def _read(self) -> _Data:
        """What EC2 offers in the region now; ``CatalogError`` naming the call when it fails."""
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
            raise CatalogError(f"reading EC2 instance types in {self.region}: {error}") from error
        return _data(infos, rows, zone_rows)

    def _discovered(self, data: _Data) -> None:
        _log.info(
            "discovered %d instance types offered in %d zones of %s",
            len(data.shapes),
            len(data.zones),
            self.region,
        )

    def instance_types(self, node_class: EC2NodeClass | None = None) -> list[InstanceType]:
        """Every instance type the EC2NodeClass may launch (including those with no available
        offering); ``None`` means all zones of the region and AL2023 defaults.

        The zones are those of the EC2NodeClass's resolved subnets. Offline, where nothing
        resolves them, an EC2NodeClass without subnets in its status gets all zones of the region.

        The list is shared between callers: do not modify it or its instance types.
        """
        data = self._data.current()
        options, zones = self._inputs(node_class, data)
        by_name: dict[str, Shape] = {}

        def build_all(marks: Marks) -> list[InstanceType]:
            built = (self._instance_type(s, data, options, zones, marks) for s in data.shapes)
            return [t for t in built if t is not None]

        def rebuild(name: str, marks: Marks) -> InstanceType | None:
            if not by_name:
                by_name.update((s.name, s) for s in data.shapes)
            return self._instance_type(by_name[name], data, options, zones, marks)

        stamp = (self._data.version, self.prices.seq)
        return self._cache.get((options, zones), stamp, build_all, rebuild)

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

    def _instance_type(
        self,
        item: Shape,
        data: _Data,
        options: BuildOptions,
        zones: tuple[tuple[str, str], ...],
        marks: Marks,
    ) -> InstanceType | None:
        zone_ids, wanted, requirements = _zone_facts(zones)
        prices = self.prices
        name = item.name
        type_zones = sorted(data.offered.get(name, _NO_ZONES) & wanted)
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
                        price is not None and not marks.excludes(capacity_type, name, zone),
                        estimated=spot_estimated if spot else on_demand_estimated,
                    )
                )
        return build(item, options, {zone: zone_ids[zone] for zone in type_zones}, offerings)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _zone_facts(
    zones: tuple[tuple[str, str], ...],
) -> tuple[dict[str, str], frozenset[str], dict[tuple[str, str], Requirements]]:
    """For the ``(zone, zone id)`` pairs of a NodeClass: the zone ids by zone, the zones, and
    each offering's requirements by (capacity type, zone), shared by every instance type."""
    zone_ids = dict(zones)
    requirements: dict[tuple[str, str], Requirements] = {}
    for zone, zone_id in zones:
        for capacity_type in _CAPACITY_ORDER:
            parts = [
                Requirement(wk.CAPACITY_TYPE, False, frozenset((capacity_type,))),
                Requirement(wk.TOPOLOGY_ZONE, False, frozenset((zone,))),
            ]
            if zone_id:
                parts.append(
                    Requirement(labels.LABEL_TOPOLOGY_ZONE_ID, False, frozenset((zone_id,)))
                )
            requirements[(capacity_type, zone)] = Requirements(parts)
    return zone_ids, frozenset(zone_ids), requirements


def _data(
    infos: Iterable[Mapping[str, Any]],
    rows: Iterable[Mapping[str, str]],
    zone_rows: Iterable[Mapping[str, Any]],
) -> _Data:
    """EC2's answers as one snapshot: the instance types, the zones each is offered in, and the
    zone ids of every zone that offers some type."""
    offered: dict[str, set[str]] = {}
    for row in rows:
        offered.setdefault(row["InstanceType"], set()).add(row["Location"])
    zone_ids = {z["ZoneName"]: z.get("ZoneId", "") for z in zone_rows}
    all_zones = sorted({zone for zones in offered.values() for zone in zones})
    shapes = tuple(sorted((s for s in map(shape, infos) if s is not None), key=lambda s: s.name))
    return _Data(
        shapes,
        {name: frozenset(zones) for name, zones in offered.items()},
        {zone: zone_ids.get(zone, "") for zone in all_zones},
    )
