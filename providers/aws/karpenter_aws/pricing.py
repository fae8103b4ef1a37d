"""EC2 prices: on-demand from the Price List API (with a packaged static table as fallback) and
spot from the spot price history.

Until the first successful spot update, the spot price of a type is an estimate: its on-demand
price times ``spot_estimate`` (1.0 by default, as upstream does). A failed update keeps the
previous prices and is logged once per distinct failure; nothing here raises for an AWS error.
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

from karpenter_aws.errors import AWS_ERRORS

__all__ = [
    "PriceBook",
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


class PriceBook:
    """Thread-safe on-demand and spot prices of one region; ``seq`` changes with the prices.

    ``on_demand_estimated`` is True while the on-demand prices are another region's (the
    packaged table has only us-east-1's) and the pricing API has not answered.
    """

    __slots__ = (
        "_failures",
        "_lock",
        "_now",
        "_on_demand",
        "_spot",
        "isolated_vpc",
        "on_demand_estimated",
        "region",
        "seq",
        "source",
        "spot_estimate",
    )

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
            on_demand = static.prices
            self.source = f"static table for {static.region} as of {static.as_of}"
            self.on_demand_estimated = static.region != region
        else:
            self.source = "given"
            self.on_demand_estimated = False
        self._on_demand: dict[str, float] = dict(on_demand)
        self._spot: dict[str, dict[str, float]] | None = None
        self.spot_estimate = spot_estimate
        self.isolated_vpc = isolated_vpc
        self._now = now or (lambda: datetime.datetime.now(datetime.UTC))
        self._lock = threading.Lock()
        self._failures: dict[str, str] = {}
        self.seq = 0

    @property
    def spot_estimated(self) -> bool:
        """Whether spot prices are still estimates from on-demand (no spot history read yet)."""
        return self._spot is None

    def on_demand(self, instance_type: str) -> float | None:
        """The hourly on-demand price, or None when unknown."""
        return self._on_demand.get(instance_type)

    def spot(self, instance_type: str, zone: str) -> float | None:
        """The hourly spot price in ``zone``, or None when unknown."""
        spot = self._spot
        if spot is None:
            price = self._on_demand.get(instance_type)
            return None if price is None else price * self.spot_estimate
        zones = spot.get(instance_type)
        return None if zones is None else zones.get(zone)

    def on_demand_prices(self) -> dict[str, float]:
        """A copy of the on-demand table."""
        return dict(self._on_demand)

    def refresh_on_demand(self, pricing: Any) -> bool:
        """Read on-demand prices from the Price List API (``pricing`` is a boto3 pricing client);
        True when prices were read. Skipped in isolated VPCs and GovCloud."""
        if self.isolated_vpc or self.region.startswith("us-gov"):
            self._failed("on-demand", "pricing API not used in isolated VPCs and GovCloud regions")
            return False
        currency = _currency(self.region)
        found: dict[str, float] = {}
        for tenancy, family in (
            ("Shared", "Compute Instance"),
            ("Dedicated", "Compute Instance (bare metal)"),
        ):
            filters = on_demand_filters(self.region, tenancy, family)
            try:
                pages = pricing.get_paginator("get_products").paginate(
                    ServiceCode="AmazonEC2", Filters=filters, PaginationConfig={"PageSize": 100}
                )
                part: dict[str, float] = {}
                for page in pages:
                    part.update(parse_price_list(page.get("PriceList") or (), currency))
            except AWS_ERRORS as error:
                self._failed("on-demand", f"reading on-demand prices failed: {error}")
                return False
            if not part:
                self._failed("on-demand", f"no on-demand prices found for {family}")
                return False
            found.update(part)
        with self._lock:
            merged = {**self._on_demand, **found}
            if merged != self._on_demand or self.on_demand_estimated:
                self._on_demand = merged
                self.seq += 1
                _log.info("updated on-demand prices for %d instance types", len(found))
            self.source = "pricing API"
            self.on_demand_estimated = False
            self._failures.pop("on-demand", None)
        return True

    def refresh_spot(self, ec2: Any) -> bool:
        """Read current spot prices from DescribeSpotPriceHistory; True when prices were read."""
        try:
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                ProductDescriptions=_SPOT_PRODUCTS,
                StartTime=self._now(),
                PaginationConfig={"PageSize": 1000},
            )
            records: list[Mapping[str, Any]] = []
            for page in pages:
                records.extend(page.get("SpotPriceHistory") or ())
        except AWS_ERRORS as error:
            self._failed("spot", f"reading spot prices failed: {error}")
            return False
        found = parse_spot_history(records)
        if not found:
            self._failed("spot", "no spot prices found")
            return False
        with self._lock:
            merged = {name: dict(zones) for name, zones in (self._spot or {}).items()}
            for name, zones in found.items():
                merged.setdefault(name, {}).update(zones)
            if merged != self._spot:
                self._spot = merged
                self.seq += 1
                count = sum(len(zones) for zones in found.values())
                _log.info(
                    "updated spot prices for %d instance types, %d offerings", len(found), count
                )
            self._failures.pop("spot", None)
        return True

    def _failed(self, kind: str, message: str) -> None:
        if self._failures.get(kind) != message:
            self._failures[kind] = message
            _log.warning("%s; keeping the previous %s prices", message, kind)
