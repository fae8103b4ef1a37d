"""The Retail Prices API client and the price book."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from karpenter_azure.pricing import (
    REFRESH_INTERVAL,
    RETRY_INTERVAL,
    PriceBook,
    PricingError,
    fetch_prices,
    price_filter,
    split_prices,
)


def item(sku_name: str, arm_sku: str, price: float, **extra: str) -> dict[str, Any]:
    """One Retail Prices item, as the API answers it."""
    return {
        "currencyCode": "USD",
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": "eastus",
        "location": "US East",
        "meterName": extra.get("meterName", sku_name.removeprefix("Standard_")),
        "productName": extra.get("productName", "Virtual Machines DSv5 Series"),
        "skuName": sku_name,
        "armSkuName": arm_sku,
        "serviceName": "Virtual Machines",
        "serviceFamily": "Compute",
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        "isPrimaryMeterRegion": True,
    }


ITEMS = [
    item("D4s v5", "Standard_D4s_v5", 0.192),
    item("D4s v5 Spot", "Standard_D4s_v5", 0.0211),
    item("D4s v5", "Standard_D4s_v5", 0.376, productName="Virtual Machines DSv5 Series Windows"),
    item("D4s v5 Low Priority", "Standard_D4s_v5", 0.04, meterName="D4s v5 Low Priority"),
    item("D2s v5", "Standard_D2s_v5", 0.096),
]


def test_spot_windows_and_low_priority_items_are_told_apart() -> None:
    on_demand, spot = split_prices(ITEMS)
    assert on_demand == {"Standard_D4s_v5": 0.192, "Standard_D2s_v5": 0.096}
    assert spot == {"Standard_D4s_v5": 0.0211}


class PriceServer:
    """A Retail Prices endpoint on 127.0.0.1 that pages its items two at a time."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.queries: list[dict[str, list[str]]] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                outer.queries.append(query)
                if outer.status != 200:
                    self.send_error(outer.status)
                    return
                skip = int(query.get("$skip", ["0"])[0])
                page = outer.items[skip : skip + 2]
                following = ""
                if skip + 2 < len(outer.items):
                    params = {**{k: v[0] for k, v in query.items()}, "$skip": str(skip + 2)}
                    following = f"{outer.url}?{urllib.parse.urlencode(params)}"
                body = json.dumps({"Items": page, "NextPageLink": following or None}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/retail/prices"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[PriceServer]:
    served = PriceServer(list(ITEMS))
    yield served
    served.close()


def test_every_page_is_read_with_upstreams_filter(server: PriceServer) -> None:
    on_demand, spot = fetch_prices("eastus", server.url)
    assert on_demand == {"Standard_D4s_v5": 0.192, "Standard_D2s_v5": 0.096}
    assert spot == {"Standard_D4s_v5": 0.0211}
    assert len(server.queries) == 3
    first = server.queries[0]
    assert first["$filter"] == [price_filter("eastus")]
    assert "armRegionName eq 'eastus'" in first["$filter"][0]
    assert "serviceName eq 'Virtual Machines'" in first["$filter"][0]


def test_a_failing_api_names_the_region(server: PriceServer) -> None:
    server.status = 503
    with pytest.raises(PricingError, match="eastus"):
        fetch_prices("eastus", server.url)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_refresh_replaces_the_prices_and_a_failed_one_keeps_them(server: PriceServer) -> None:
    book = PriceBook("eastus", {"Standard_D4s_v5": 0.5}, {}, "packaged prices")
    packaged = book.seq
    assert book.refresh(server.url)
    assert book.price("on-demand", "Standard_D4s_v5") == 0.192 and book.seq > packaged
    assert book.price("spot", "Standard_D4s_v5") == 0.0211
    assert book.source == "Retail Prices API"
    read = book.seq
    assert book.refresh(server.url) and book.seq == read  # the same prices: no change
    server.status = 500
    assert not book.refresh(server.url)
    assert (book.price("on-demand", "Standard_D4s_v5"), book.seq) == (0.192, read)


def test_background_refresh_runs_when_due_only(server: PriceServer) -> None:
    clock = Clock()
    book = PriceBook("eastus", {}, {}, "packaged prices", clock=clock)
    thread = book.refresh_in_background(server.url)
    assert thread is not None
    thread.join(10)
    assert book.price("on-demand", "Standard_D2s_v5") == 0.096
    clock.now += REFRESH_INTERVAL - timedelta(seconds=1)
    assert book.refresh_in_background(server.url) is None
    clock.now += timedelta(seconds=1)
    again = book.refresh_in_background(server.url)
    assert again is not None
    again.join(10)
    assert len(server.queries) == 6


def test_a_failed_background_read_is_retried_sooner(server: PriceServer) -> None:
    clock = Clock()
    book = PriceBook("eastus", {"Standard_D4s_v5": 0.5}, {}, "packaged prices", clock=clock)
    server.status = 503
    thread = book.refresh_in_background(server.url)
    assert thread is not None
    thread.join(10)
    assert book.price("on-demand", "Standard_D4s_v5") == 0.5
    clock.now += RETRY_INTERVAL - timedelta(seconds=1)
    assert book.refresh_in_background(server.url) is None
    clock.now += timedelta(seconds=1)
    server.status = 200
    again = book.refresh_in_background(server.url)
    assert again is not None
    again.join(10)
    assert book.price("on-demand", "Standard_D4s_v5") == 0.192
