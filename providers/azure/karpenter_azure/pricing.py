"""VM prices: the Azure Retail Prices API, with the packaged table as fallback.

The Retail Prices API is public JSON over HTTPS (no credential): ``GET <url>?api-version=...&
$filter=...`` answers ``{"Items": [...], "NextPageLink": ...}``, pages linked until
``NextPageLink`` is empty. As upstream does, the filter selects consumption prices in USD of the
Virtual Machines service in one ``armRegionName``; Windows products (``productName`` ending
" Windows") and Low Priority meters (``meterName`` ending " Low Priority") are skipped; an item
whose ``skuName`` ends with " Spot" is the spot price of its ``armSkuName``, the others are
on-demand prices.

``PriceBook`` holds a region's prices. It starts from the packaged table; ``refresh`` replaces
them from the API, ``refresh_in_background`` does so on a daemon thread when the prices are
``REFRESH_INTERVAL`` old, keeping the previous prices (and logging once) when the API fails.
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
REFRESH_INTERVAL = timedelta(hours=12)
"""How old prices may get before a background refresh reads them again."""
RETRY_INTERVAL = timedelta(minutes=5)
"""How soon a background refresh follows a failed read."""
_TIMEOUT_SECONDS = 30.0
_MAX_PAGES = 1000

_log = logging.getLogger(__name__)

Getter = Callable[[str], Mapping[str, Any]]
"""Reads one page: URL in, decoded JSON out."""


class PricingError(Exception):
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
        self._on_demand = dict(on_demand)
        self._spot = dict(spot)
        self._clock = clock
        self._lock = threading.Lock()
        self._refreshing = False
        self._due: datetime | None = None
        self._failure = ""
        self.seq = 0

    @property
    def empty(self) -> bool:
        """Whether no on-demand price is known (a region without packaged prices)."""
        return not self._on_demand

    def price(self, capacity_type: str, name: str) -> float | None:
        """The hourly price of ``name`` for ``capacity_type``, None when unknown."""
        table = self._spot if capacity_type == wk.CAPACITY_TYPE_SPOT else self._on_demand
        return table.get(name)

    def refresh(self, url: str = RETAIL_PRICES_URL, get: Getter | None = None) -> bool:
        """Read the region's prices from the API now; True when they were read. On failure the
        previous prices stay and the failure is logged (once while it repeats)."""
        try:
            on_demand, spot = fetch_prices(self.region, url, get)
        except PricingError as error:
            with self._lock:
                self._due = self._clock() + RETRY_INTERVAL
                if str(error) != self._failure:
                    self._failure = str(error)
                    _log.warning("%s; keeping the %s", error, self.source)
            return False
        with self._lock:
            if (on_demand, spot) != (self._on_demand, self._spot):
                self._on_demand, self._spot = on_demand, spot
                self.seq += 1
            self.source = "Retail Prices API"
            self._due = self._clock() + REFRESH_INTERVAL
            self._failure = ""
        _log.info("read %d on-demand and %d spot prices for %s", len(on_demand), len(spot), url)
        return True

    def refresh_in_background(
        self, url: str = RETAIL_PRICES_URL, get: Getter | None = None
    ) -> threading.Thread | None:
        """Start a refresh on a daemon thread when the prices were never read, are
        ``REFRESH_INTERVAL`` old or the last read failed ``RETRY_INTERVAL`` ago, and none is
        running; the thread, or None when none started."""
        with self._lock:
            due = self._due is None or self._clock() >= self._due
            if self._refreshing or not due:
                return None
            self._refreshing = True

        def run() -> None:
            try:
                self.refresh(url, get)
            finally:
                with self._lock:
                    self._refreshing = False

        thread = threading.Thread(target=run, name=f"azure-prices-{self.region}", daemon=True)
        thread.start()
        return thread
