"""EC2 prices: on-demand from the Price List API (with a packaged static table as fallback) and
spot from the spot price history.

Until the first successful spot update, the spot price of a type is an estimate: its on-demand
price times ``spot_estimate`` (1.0 by default, as upstream does). Both kinds are read again
every 12 hours (the SDK's ``REFRESH_INTERVAL``), sooner after a failure (``RETRY_INTERVAL``); a
failed update keeps the previous prices and is logged once while it repeats; nothing here raises
for an AWS error.
"""

from __future__ import annotations

import datetime
import functools
import gzip
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from karpenter_core.sdk.catalog import RefreshedData
from karpenter_core.sdk.types import CloudProviderError

__all__ = [
    "RETRY_INTERVAL",
    "OnDemandTable",
    "PriceBook",
    "SpotTable",
    "StaticPrices",
    "on_demand_filters",
    "parse_price_list",
    "parse_spot_history",
    "pricing_api_region",
    "static_prices",
]

_log = logging.getLogger(__name__)
_FALLBACK_REGION = "us-east-1"
_SPOT_PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]

RETRY_INTERVAL = datetime.timedelta(minutes=5)
"""How soon a failed price read is retried (upstream's controller retries a failed update
with a backoff that grows to about 16 minutes; the prices read before stay meanwhile)."""


@dataclass(frozen=True, slots=True)
class StaticPrices:
    """The packaged on-demand table for one region, with its provenance."""

    region: str
    prices: Mapping[str, float]
    source: str
    as_of: str


@functools.cache
def _price_data() -> dict[str, Any]:
    raw = resources.files("karpenter_aws").joinpath("data/prices.json.gz").read_bytes()
    data: dict[str, Any] = json.loads(gzip.decompress(raw))
    return data


def static_prices(region: str) -> StaticPrices:
    """The packaged on-demand prices of ``region``, else those of us-east-1 (as upstream does)."""
    data = _price_data()
    tables: dict[str, dict[str, float]] = data["on_demand"]
    chosen = region if region in tables else _FALLBACK_REGION
    return StaticPrices(chosen, tables[chosen], data["source"], data["as_of"])


def pricing_api_region(region: str) -> str:
    """The region whose Price List API endpoint serves ``region``."""
    for prefix, endpoint in (
        ("ap-", "ap-south-1"),
        ("cn-", "cn-northwest-1"),
        ("eu-", "eu-central-1"),
    ):
        if region.startswith(prefix):
            return endpoint
    return _FALLBACK_REGION


def _currency(region: str) -> str:
    return "CNY" if region.startswith("cn-") else "USD"


def on_demand_filters(region: str, tenancy: str, product_family: str) -> list[dict[str, str]]:
    """GetProducts filters selecting Linux on-demand prices without preinstalled software."""
    terms = {
        "regionCode": region,
        "serviceCode": "AmazonEC2",
        "preInstalledSw": "NA",
        "operatingSystem": "Linux",
        "capacitystatus": "Used",
        "marketoption": "OnDemand",
        "tenancy": tenancy,
        "productFamily": product_family,
    }
    return [
        {"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in terms.items()
    ]


def parse_price_list(price_list: Iterable[str], currency: str = "USD") -> dict[str, float]:
    """Instance type to hourly on-demand price from GetProducts ``PriceList`` JSON strings;
    unparseable items and zero prices are skipped."""
    prices: dict[str, float] = {}
    for item in price_list:
        try:
            product = json.loads(item)
            name = product["product"]["attributes"]["instanceType"]
            terms = product["terms"]["OnDemand"]
        except (ValueError, KeyError, TypeError):
            continue
        if not name or not isinstance(terms, dict):
            continue
        for term in terms.values():
            for dimension in (term.get("priceDimensions") or {}).values():
                try:
                    price = float(dimension["pricePerUnit"][currency])
                except (KeyError, TypeError, ValueError):
                    continue
                if price > 0:
                    prices[name] = price
    return prices


def parse_spot_history(
    records: Iterable[Mapping[str, Any]],
) -> dict[str, dict[str, float]]:
    """Instance type to zone to price: the latest record per type and zone."""
    latest: dict[tuple[str, str], tuple[datetime.datetime, float]] = {}
    for record in records:
        try:
            price = float(record["SpotPrice"])
            key = (record["InstanceType"], record["AvailabilityZone"])
            stamp = record["Timestamp"]
        except (KeyError, TypeError, ValueError):
            continue
        seen = latest.get(key)
        if seen is None or stamp >= seen[0]:
            latest[key] = (stamp, price)
    out: dict[str, dict[str, float]] = {}
    for (name, zone), (_, price) in latest.items():
        out.setdefault(name, {})[zone] = price
    return out


def _no_client() -> Any:
    raise CloudProviderError("no AWS client given")


OnDemandTable = tuple[dict[str, float], str, bool]
"""On-demand prices by instance type, where they come from, and whether they are estimates."""
SpotTable = dict[str, dict[str, float]]
"""Spot prices by instance type and zone."""


class PriceBook:
    """Thread-safe on-demand and spot prices of one region; ``seq`` changes with the prices.

    Each kind is the SDK's ``RefreshedData``, so on-demand and spot prices are read (and fail)
    independently: ``refresh_on_demand``/``refresh_spot`` read now, ``refresh_in_background``
    reads what is ``REFRESH_INTERVAL`` old (or failed ``RETRY_INTERVAL`` ago) on daemon threads.
    A failed read keeps the previous prices and is logged once while it repeats.

    ``on_demand_estimated`` is True while the on-demand prices are another region's (the
    packaged table has only us-east-1's) and the pricing API has not answered.
    """

    def __init__(
        self,
        region: str,
        on_demand: Mapping[str, float] | None = None,
        *,
        spot_estimate: float = 1.0,
        isolated_vpc: bool = False,
        now: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self.region = region
        if on_demand is None:
            static = static_prices(region)
            table: OnDemandTable = (
                dict(static.prices),
                f"static table for {static.region} as of {static.as_of}",
                static.region != region,
            )
        else:
            table = (dict(on_demand), "given", False)
        self.spot_estimate = spot_estimate
        self.isolated_vpc = isolated_vpc
        self._now = now or (lambda: datetime.datetime.now(datetime.UTC))
        self._pricing: Callable[[], Any] = _no_client
        self._ec2: Callable[[], Any] = _no_client
        self._on_demand: RefreshedData[OnDemandTable] = RefreshedData(
            self._read_on_demand,
            what="on-demand prices",
            retry=RETRY_INTERVAL,
            initial=table,
            same=lambda old, new: old[0] == new[0] and old[2] == new[2],
            clock=self._now,
        )
        self._spot: RefreshedData[SpotTable] = RefreshedData(
            self._read_spot, what="spot prices", retry=RETRY_INTERVAL, clock=self._now
        )

    @property
    def seq(self) -> int:
        """A counter that changes whenever the prices do (0: the prices the book started with)."""
        return self._on_demand.version - 1 + self._spot.version

    @property
    def source(self) -> str:
        """Where the on-demand prices come from."""
        return self._on_demand_table()[1]

    @property
    def on_demand_estimated(self) -> bool:
        """Whether the on-demand prices are another region's (see the class)."""
        return self._on_demand_table()[2]

    @property
    def spot_estimated(self) -> bool:
        """Whether spot prices are still estimates from on-demand (no spot history read yet)."""
        return self._spot.latest is None

    def on_demand(self, instance_type: str) -> float | None:
        """The hourly on-demand price, or None when unknown."""
        return self._on_demand_table()[0].get(instance_type)

    def spot(self, instance_type: str, zone: str) -> float | None:
        """The hourly spot price in ``zone``, or None when unknown."""
        spot = self._spot.latest
        if spot is None:
            price = self.on_demand(instance_type)
            return None if price is None else price * self.spot_estimate
        zones = spot.get(instance_type)
        return None if zones is None else zones.get(zone)

    def on_demand_prices(self) -> dict[str, float]:
        """A copy of the on-demand table."""
        return dict(self._on_demand_table()[0])

    def refresh_on_demand(self, pricing: Any) -> bool:
        """Read on-demand prices from the Price List API (``pricing`` is a boto3 pricing client);
        True when prices were read. Skipped in isolated VPCs and GovCloud."""
        self._pricing = lambda: pricing
        return self._on_demand.try_refresh()

    def refresh_spot(self, ec2: Any) -> bool:
        """Read current spot prices from DescribeSpotPriceHistory; True when prices were read."""
        self._ec2 = lambda: ec2
        return self._spot.try_refresh()

    def refresh(self, pricing: Any, ec2: Any) -> None:
        """Read on-demand (unless in an isolated VPC) and spot prices now; failures are logged
        and the previous prices kept."""
        if not self.isolated_vpc:
            self.refresh_on_demand(pricing)
        self.refresh_spot(ec2)

    def refresh_in_background(
        self, pricing: Callable[[], Any], ec2: Callable[[], Any]
    ) -> list[threading.Thread]:
        """Start a read of the on-demand (unless in an isolated VPC) and the spot prices that
        are due, each on a daemon thread, with the clients ``pricing()`` and ``ec2()`` (built
        on the thread); the threads started. Returns at once."""
        self._pricing, self._ec2 = pricing, ec2
        kinds = (self._spot,) if self.isolated_vpc else (self._on_demand, self._spot)
        return [thread for kind in kinds if (thread := kind.refresh_in_background()) is not None]

    def _on_demand_table(self) -> OnDemandTable:
        table = self._on_demand.latest
        assert table is not None  # the book starts with a table
        return table

    def _read_on_demand(self) -> OnDemandTable:
        """The on-demand table merged with the Price List API's prices (``CloudProviderError``
        when they cannot be read)."""
        if self.isolated_vpc or self.region.startswith("us-gov"):
            raise CloudProviderError("pricing API not used in isolated VPCs and GovCloud regions")
        currency = _currency(self.region)
        found: dict[str, float] = {}
        for tenancy, family in (
            ("Shared", "Compute Instance"),
            ("Dedicated", "Compute Instance (bare metal)"),
        ):
            filters = on_demand_filters(self.region, tenancy, family)
            try:
                pages = (
                    self._pricing()
                    .get_paginator("get_products")
                    .paginate(
                        ServiceCode="AmazonEC2", Filters=filters, PaginationConfig={"PageSize": 100}
                    )
                )
                part: dict[str, float] = {}
                for page in pages:
                    part.update(parse_price_list(page.get("PriceList") or (), currency))
            except Exception as error:  # a price read must not fail loudly; the prices stay
                raise CloudProviderError(f"reading on-demand prices failed: {error}") from error
            if not part:
                raise CloudProviderError(f"no on-demand prices found for {family}")
            found.update(part)
        _log.info("read on-demand prices for %d instance types", len(found))
        return {**self._on_demand_table()[0], **found}, "pricing API", False

    def _read_spot(self) -> SpotTable:
        """The spot table merged with the spot price history's latest prices
        (``CloudProviderError`` when they cannot be read)."""
        try:
            pages = (
                self._ec2()
                .get_paginator("describe_spot_price_history")
                .paginate(
                    ProductDescriptions=_SPOT_PRODUCTS,
                    StartTime=self._now(),
                    PaginationConfig={"PageSize": 1000},
                )
            )
            records: list[Mapping[str, Any]] = []
            for page in pages:
                records.extend(page.get("SpotPriceHistory") or ())
        except Exception as error:  # a price read must not fail loudly; the prices stay
            raise CloudProviderError(f"reading spot prices failed: {error}") from error
        found = parse_spot_history(records)
        if not found:
            raise CloudProviderError("no spot prices found")
        merged = {name: dict(zones) for name, zones in (self._spot.latest or {}).items()}
        for name, zones in found.items():
            merged.setdefault(name, {}).update(zones)
        count = sum(len(zones) for zones in found.values())
        _log.info("read spot prices for %d instance types, %d offerings", len(found), count)
        return merged
