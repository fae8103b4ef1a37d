"""VM prices: the Azure Retail Prices API, with the packaged table as fallback.

The Retail Prices API is public JSON over HTTPS (no credential): ``GET <url>?api-version=...&
$filter=...`` answers ``{"Items": [...], "NextPageLink": ...}``, pages linked until
``NextPageLink`` is empty. As upstream does, the filter selects consumption prices in USD of the
Virtual Machines service in one ``armRegionName``; Windows products (``productName`` ending
" Windows") and Low Priority meters (``meterName`` ending " Low Priority") are skipped; an item
whose ``skuName`` ends with " Spot" is the spot price of its ``armSkuName``, the others are
on-demand prices.

``PriceBook`` holds a region's prices, refreshed by the SDK's ``RefreshedData``. It starts from
the packaged table; ``refresh`` replaces them from the API, ``refresh_in_background`` does so on
a daemon thread when the prices are ``REFRESH_INTERVAL`` old, keeping the previous prices (and
logging once while the failure repeats) when the API fails.
"""

from __future__ import annotations

import functools
import json
import logging
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.catalog import REFRESH_INTERVAL, RefreshedData
from karpenter_core.sdk.types import CloudProviderError

__all__ = [
    "API_VERSION",
    "REFRESH_INTERVAL",
    "RETAIL_PRICES_URL",
    "RETRY_INTERVAL",
    "PriceBook",
    "PricingError",
    "fetch_prices",
    "http_getter",
    "price_filter",
    "split_prices",
]

RETAIL_PRICES_URL = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
RETRY_INTERVAL = timedelta(minutes=5)
"""How soon a background refresh follows a failed read."""
_TIMEOUT_SECONDS = 30.0
_MAX_PAGES = 1000

_log = logging.getLogger(__name__)

Getter = Callable[[str], Mapping[str, Any]]
"""Reads one page: URL in, decoded JSON out."""


class PricingError(CloudProviderError):
    """The Retail Prices API could not be read."""


def price_filter(region: str) -> str:
    """The OData ``$filter`` upstream sends for ``region``."""
    terms = {
        "priceType": "Consumption",
        "currencyCode": "USD",
        "serviceFamily": "Compute",
        "serviceName": "Virtual Machines",
        "armRegionName": region,
    }
    return " and ".join(f"{field} eq '{value}'" for field, value in terms.items())


def split_prices(items: Iterable[Mapping[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """On-demand and spot prices by ARM SKU name from Retail Prices items (Windows and Low
    Priority items skipped; unusable items ignored)."""
    on_demand: dict[str, float] = {}
    spot: dict[str, float] = {}
    for item in items:
        name = item.get("armSkuName")
        if not name or str(item.get("productName", "")).endswith(" Windows"):
            continue
        if str(item.get("meterName", "")).endswith(" Low Priority"):
            continue
        try:
            price = float(item["retailPrice"])
        except (KeyError, TypeError, ValueError):
            continue
        table = spot if str(item.get("skuName", "")).endswith(" Spot") else on_demand
        table[str(name)] = price
    return on_demand, spot


def http_getter(ca_bundle: str = "") -> Getter:
    """A page reader over HTTPS, trusting ``ca_bundle`` (a PEM file) instead of the system's
    CAs when given (the fake ARM server's test CA)."""
    context = functools.cache(lambda: ssl.create_default_context(cafile=ca_bundle or None))

    def get(url: str) -> Mapping[str, Any]:
        opened = urllib.request.urlopen(url, timeout=_TIMEOUT_SECONDS, context=context())
        with opened as response:
            data: Mapping[str, Any] = json.loads(response.read())
        return data

    return get


def fetch_prices(
    region: str, url: str = RETAIL_PRICES_URL, get: Getter | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """On-demand and spot prices of ``region`` from the Retail Prices API at ``url``, following
    every page; ``PricingError`` names what failed."""
    get = get or http_getter()
    query = urllib.parse.urlencode({"api-version": API_VERSION, "$filter": price_filter(region)})
    next_url: str | None = f"{url}?{query}"
    items: list[Mapping[str, Any]] = []
    pages = 0
    while next_url:
        pages += 1
        if pages > _MAX_PAGES:
            raise PricingError(f"retail prices for {region}: more than {_MAX_PAGES} pages")
        try:
            page = get(next_url)
        except (OSError, ValueError) as error:
            raise PricingError(f"reading retail prices for {region}: {error}") from error
        items.extend(page.get("Items") or ())
        next_url = page.get("NextPageLink") or None
    on_demand, spot = split_prices(items)
    if not on_demand:
        raise PricingError(f"the Retail Prices API has no Linux VM prices for {region}")
    return on_demand, spot


Prices = tuple[dict[str, float], dict[str, float]]
"""On-demand and spot prices by VM size."""


class PriceBook:
    """Thread-safe prices of one region; ``seq`` changes whenever the prices do."""

    def __init__(
        self,
        region: str,
        on_demand: Mapping[str, float],
        spot: Mapping[str, float],
        source: str,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.region = region
        self.source = source
        self._url = RETAIL_PRICES_URL
        self._get: Getter | None = None
        self._prices: RefreshedData[Prices] = RefreshedData(
            self._read,
            what=f"prices of {region}",
            interval=REFRESH_INTERVAL,
            retry=RETRY_INTERVAL,
            initial=(dict(on_demand), dict(spot)),
            clock=clock,
        )

    @property
    def seq(self) -> int:
        """A counter that changes whenever the prices do."""
        return self._prices.version

    @property
    def empty(self) -> bool:
        """Whether no on-demand price is known (a region without packaged prices)."""
        return not self._tables()[0]

    def price(self, capacity_type: str, name: str) -> float | None:
        """The hourly price of ``name`` for ``capacity_type``, None when unknown."""
        on_demand, spot = self._tables()
        return (spot if capacity_type == wk.CAPACITY_TYPE_SPOT else on_demand).get(name)

    def refresh(self, url: str = RETAIL_PRICES_URL, get: Getter | None = None) -> bool:
        """Read the region's prices from ``url`` now; True when they were read. On failure the
        previous prices stay and the failure is logged."""
        self._url, self._get = url, get
        try:
            self._prices.refresh()
        except PricingError as error:
            _log.warning("%s; keeping the %s", error, self.source)
            return False
        return True

    def refresh_in_background(
        self, url: str = RETAIL_PRICES_URL, get: Getter | None = None
    ) -> threading.Thread | None:
        """Start a refresh from ``url`` on a daemon thread when the prices were never read, are
        ``REFRESH_INTERVAL`` old or the last read failed ``RETRY_INTERVAL`` ago, and none is
        running; the thread, or None when none started."""
        self._url, self._get = url, get
        return self._prices.refresh_in_background()

    def _tables(self) -> Prices:
        return self._prices.latest or ({}, {})

    def _read(self) -> Prices:
        """The prices from the API (``PricingError`` when it fails)."""
        prices = fetch_prices(self.region, self._url, self._get)
        self.source = "Retail Prices API"
        _log.info("read %d on-demand and %d spot prices for %s", *map(len, prices), self._url)
        return prices
