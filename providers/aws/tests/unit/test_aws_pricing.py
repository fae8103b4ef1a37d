"""EC2 prices: the packaged table, Price List API parsing, spot price history."""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from karpenter_aws import moto_account
from karpenter_aws.pricing import (
    RETRY_INTERVAL,
    PriceBook,
    on_demand_filters,
    parse_price_list,
    parse_spot_history,
    pricing_api_region,
    static_prices,
)


def _product(instance_type: str, usd: str, *, family: str = "Compute Instance") -> str:
    """A GetProducts PriceList item as the Price List API returns it (a JSON string)."""
    sku = f"SKU{abs(hash(instance_type)) % 10**8:08d}"
    term = f"{sku}.JRTCKXETXF"
    return json.dumps(
        {
            "product": {
                "productFamily": family,
                "attributes": {
                    "enhancedNetworkingSupported": "Yes",
                    "instanceType": instance_type,
                    "instanceFamily": "General purpose",
                    "regionCode": "us-east-1",
                    "location": "US East (N. Virginia)",
                    "operatingSystem": "Linux",
                    "preInstalledSw": "NA",
                    "tenancy": "Shared",
                    "capacitystatus": "Used",
                    "marketoption": "OnDemand",
                    "licenseModel": "No License required",
                    "vcpu": "2",
                    "memory": "8 GiB",
                    "servicecode": "AmazonEC2",
                    "usagetype": f"BoxUsage:{instance_type}",
                    "operation": "RunInstances",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    term: {
                        "priceDimensions": {
                            f"{term}.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"${usd} per On Demand Linux {instance_type} "
                                "Instance Hour",
                                "appliesTo": [],
                                "rateCode": f"{term}.6YS6EN2CT7",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2026-07-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                }
            },
            "version": "20260701000000",
            "publicationDate": "2026-07-01T00:00:00Z",
        }
    )


def test_parse_price_list() -> None:
    items = [
        _product("m5.large", "0.0960000000"),
        _product("c6g.xlarge", "0.1360000000"),
        _product("m5.xlarge", "0.0000000000"),  # zero prices are not prices
        "not json",
        json.dumps({"product": {"attributes": {}}, "terms": {"OnDemand": {}}}),
    ]
    assert parse_price_list(items) == {"m5.large": 0.096, "c6g.xlarge": 0.136}
    assert parse_price_list(items, currency="CNY") == {}


def test_static_table_has_its_provenance_and_falls_back_to_us_east_1() -> None:
    table = static_prices("us-east-1")
    assert table.as_of == "2026-07-20T13:44:30Z"
    assert "1d927085dd81a9df9301e613f371dac5b4d16bfe" in table.source
    assert table.prices["m5.large"] == pytest.approx(0.096)
    assert table.prices["c6g.xlarge"] == pytest.approx(0.136)
    assert static_prices("eu-west-3").region == "us-east-1"


def test_pricing_api_region() -> None:
    assert pricing_api_region("us-west-2") == "us-east-1"
    assert pricing_api_region("ap-northeast-1") == "ap-south-1"
    assert pricing_api_region("eu-west-1") == "eu-central-1"
    assert pricing_api_region("cn-north-1") == "cn-northwest-1"


def test_spot_is_on_demand_until_spot_prices_are_read() -> None:
    book = PriceBook("us-east-1")
    assert book.spot_estimated
    assert book.spot("m5.large", "us-east-1a") == book.on_demand("m5.large")
    assert book.on_demand("no-such.type") is None
    assert book.spot("no-such.type", "us-east-1a") is None
    estimated = PriceBook("us-east-1", {"m5.large": 0.1}, spot_estimate=0.4)
    assert estimated.spot("m5.large", "us-east-1b") == pytest.approx(0.04)


def test_parse_spot_history_keeps_the_latest_record() -> None:
    early = datetime.datetime(2026, 7, 1, tzinfo=datetime.UTC)
    late = early + datetime.timedelta(hours=1)
    records = [
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": "us-east-1a",
            "SpotPrice": "0.05",
            "Timestamp": late,
        },
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": "us-east-1a",
            "SpotPrice": "0.09",
            "Timestamp": early,
        },
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": "us-east-1b",
            "SpotPrice": "0.04",
            "Timestamp": early,
        },
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": "us-east-1c",
            "SpotPrice": "n/a",
            "Timestamp": early,
        },
    ]
    assert parse_spot_history(records) == {"m5.large": {"us-east-1a": 0.05, "us-east-1b": 0.04}}


def _pricing_client(pages: list[list[str]], calls: list[dict[str, Any]]) -> Any:
    """A pricing client whose GetProducts answers come from ``pages`` (per request, in order),
    injected with a botocore before-call hook; the request bodies are recorded in ``calls``."""
    client = boto3.client("pricing", region_name="us-east-1", **moto_account.FAKE_CREDENTIALS)
    position = {"page": 0}

    def answer(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        calls.append(json.loads(params["body"]))
        index = position["page"] % len(pages)
        position["page"] += 1
        parsed: dict[str, Any] = {"PriceList": pages[index], "FormatVersion": "aws_v1"}
        if index % 2 == 0:
            parsed["NextToken"] = f"token-{index}"
        return AWSResponse("https://api.pricing.us-east-1.amazonaws.com", 200, {}, None), parsed

    client.meta.events.register("before-call.pricing.GetProducts", answer)
    return client


def test_refresh_on_demand_paginates_both_queries_and_merges() -> None:
    calls: list[dict[str, Any]] = []
    shared = [[_product("m5.large", "0.1000000000")], [_product("c6g.xlarge", "0.2000000000")]]
    client = _pricing_client(shared, calls)
    book = PriceBook("us-east-1")
    assert book.refresh_on_demand(client)
    assert len(calls) == 4  # two pages for shared tenancy, two for bare metal
    assert calls[1]["NextToken"] == "token-0"
    filters = {f["Field"]: f["Value"] for f in calls[0]["Filters"]}
    assert filters == {
        f["Field"]: f["Value"] for f in on_demand_filters("us-east-1", "Shared", "Compute Instance")
    }
    assert filters["operatingSystem"] == "Linux"
    assert filters["capacitystatus"] == "Used"
    metal = {f["Field"]: f["Value"] for f in calls[2]["Filters"]}
    assert metal["productFamily"] == "Compute Instance (bare metal)"
    assert metal["tenancy"] == "Dedicated"
    assert book.on_demand("m5.large") == 0.1
    assert book.on_demand("c6g.xlarge") == 0.2
    assert book.on_demand("m5.xlarge") == pytest.approx(0.192)  # kept from the static table
    assert book.seq == 1
    assert book.refresh_on_demand(client)
    assert book.seq == 1  # same prices: no change


def test_refresh_on_demand_with_no_prices_keeps_the_table(caplog: pytest.LogCaptureFixture) -> None:
    client = _pricing_client([[]], [])
    book = PriceBook("us-east-1")
    with caplog.at_level(logging.WARNING):
        assert not book.refresh_on_demand(client)
        assert not book.refresh_on_demand(client)
    assert book.on_demand("m5.large") == pytest.approx(0.096)
    assert book.seq == 0
    assert len([r for r in caplog.records if "on-demand" in r.getMessage()]) == 1


def test_isolated_vpc_never_calls_the_pricing_api() -> None:
    calls: list[dict[str, Any]] = []
    book = PriceBook("us-east-1", isolated_vpc=True)
    assert not book.refresh_on_demand(_pricing_client([[]], calls))
    assert calls == []


def test_pricing_api_unavailable_keeps_the_static_prices(aws: moto_account.AWSEnv) -> None:
    pricing = aws.client("pricing", config=Config(retries={"max_attempts": 1}))
    book = PriceBook("us-east-1")
    assert not book.refresh_on_demand(pricing)
    assert book.on_demand("m5.large") == pytest.approx(0.096)
    assert book.seq == 0


def test_refresh_spot_from_the_spot_price_history(aws: moto_account.AWSEnv) -> None:
    book = PriceBook("us-east-1")
    assert book.refresh_spot(aws.client("ec2"))
    assert not book.spot_estimated
    assert book.seq == 1
    price = book.spot("m5.large", "us-east-1a")
    assert price is not None and price > 0
    assert book.spot("m5.large", "us-east-1e") is None  # m5.large is not offered there
    assert book.on_demand("m5.large") == pytest.approx(0.096)


def test_spot_history_failure_keeps_the_estimates(
    aws: moto_account.AWSEnv, caplog: pytest.LogCaptureFixture
) -> None:
    ec2 = aws.client("ec2")

    def throttle(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        error = {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."}
        return AWSResponse(aws.endpoint_url, 503, {}, None), {"Error": error}

    ec2.meta.events.register("before-call.ec2.DescribeSpotPriceHistory", throttle)
    book = PriceBook("us-east-1")
    with caplog.at_level(logging.WARNING):
        assert not book.refresh_spot(ec2)
        assert not book.refresh_spot(ec2)
    assert book.spot_estimated
    assert book.spot("m5.large", "us-east-1a") == book.on_demand("m5.large")
    assert len([r for r in caplog.records if "RequestLimitExceeded" in r.getMessage()]) == 1


class _Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 7, 1, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now


def _refresh_in_background(book: PriceBook, pricing: Any, ec2: Any) -> list[str]:
    threads = book.refresh_in_background(lambda: pricing, lambda: ec2)
    for thread in threads:
        thread.join(10)
    return [thread.name for thread in threads]


def test_background_refresh_reads_each_kind_when_due_and_retries_a_failure_sooner(
    aws: moto_account.AWSEnv,
) -> None:
    clock = _Clock()
    pricing_calls: list[dict[str, Any]] = []
    pages = [[_product("m5.large", "0.1000000000")], [_product("c6g.xlarge", "0.2000000000")]]
    pricing = _pricing_client(pages, pricing_calls)
    ec2 = aws.client("ec2")
    failing = {"spot": True}

    def throttle(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not failing["spot"]:
            return None
        error = {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."}
        return AWSResponse(aws.endpoint_url, 503, {}, None), {"Error": error}

    ec2.meta.events.register("before-call.ec2.DescribeSpotPriceHistory", throttle)
    book = PriceBook("us-east-1", now=clock)
    started = _refresh_in_background(book, pricing, ec2)
    assert started == ["refresh on-demand prices", "refresh spot prices"]
    assert book.on_demand("m5.large") == 0.1 and book.spot_estimated  # failed independently
    assert _refresh_in_background(book, pricing, ec2) == []  # nothing due
    failing["spot"] = False
    clock.now += RETRY_INTERVAL
    assert _refresh_in_background(book, pricing, ec2) == ["refresh spot prices"]
    assert not book.spot_estimated
    clock.now += datetime.timedelta(hours=12)
    assert len(_refresh_in_background(book, pricing, ec2)) == 2


def test_background_refresh_in_an_isolated_vpc_reads_spot_prices_only(
    aws: moto_account.AWSEnv,
) -> None:
    calls: list[dict[str, Any]] = []
    book = PriceBook("us-east-1", isolated_vpc=True)
    started = _refresh_in_background(book, _pricing_client([[]], calls), aws.client("ec2"))
    assert started == ["refresh spot prices"] and calls == []
    assert not book.spot_estimated
