"""Machine type prices from Cloud Billing Catalog SKUs, the packaged fallback, and the fake's SKUs
agreeing with the packaged table."""

from __future__ import annotations

import json

import pytest
from google.cloud import billing_v1

from karpenter_gcp.catalog import offline_machine_types, packaged_prices
from karpenter_gcp.instancetype import MachineType
from karpenter_gcp.pricing import COMPUTE_SERVICE, GCPPricing, family_key, rates, sku_rate
from karpenter_gcp.testing.billing import fit, skus

C3 = MachineType("c3-standard-4", 4, 16384, ("us-central1-a",))
E2 = MachineType("e2-standard-4", 4, 16384, ("us-central1-a",))


def _sku(description: str, usage: str = "OnDemand", region: str = "us-central1", **price):
    unit = {"units": "0", "nanos": 31_611_000} | price
    return billing_v1.Sku.from_json(
        json.dumps(
            {
                "description": description,
                "category": {"resourceFamily": "Compute", "usageType": usage},
                "serviceRegions": [region],
                "pricingInfo": [{"pricingExpression": {"tieredRates": [{"unitPrice": unit}]}}],
            }
        )
    )


@pytest.mark.parametrize(
    ("description", "key"),
    [
        ("N2 Instance Core running in Americas", ("n2", "Core")),
        ("Spot Preemptible N2 Instance Ram running in EMEA", ("n2", "Ram")),
        ("N2D AMD Instance Core running in Americas", ("n2d", "Core")),
        ("T2A Arm Instance Ram running in Americas", ("t2a", "Ram")),
        ("N1 Predefined Instance Core running in Americas", ("n1", "Core")),
        ("Compute optimized Core running in Americas", ("c2", "Core")),
        ("Memory-optimized Instance Ram running in Americas", ("m1", "Ram")),
        ("N2 Custom Instance Core running in Americas", None),
        ("Commitment v1: N2 Cpu in Americas for 1 Year", None),
        ("Nvidia Tesla A100 GPU running in Americas", None),
    ],
)
def test_family_of_sku_descriptions(description, key):
    assert family_key(description) == key


def test_sku_rate_reads_unit_price_usage_and_region():
    assert sku_rate(_sku("N2 Instance Core running in Americas", units="1"), "us-central1") == (
        "n2", "Core", "on-demand", 1.031611,
    )  # fmt: skip
    spot = _sku("Spot Preemptible N2 Instance Ram running in Americas", "Preemptible")
    assert sku_rate(spot, "us-central1")[:3] == ("n2", "Ram", "spot")
    assert sku_rate(spot, "europe-west4") is None
    assert (
        sku_rate(_sku("N2 Instance Core running in Americas", "Commit1Yr"), "us-central1") is None
    )


def test_rates_need_both_core_and_ram():
    found = rates(
        [
            _sku("N2 Instance Core running in Americas"),
            _sku("N2 Instance Ram running in Americas", nanos=4_237_000),
            _sku("C3 Instance Core running in Americas"),
        ],
        "us-central1",
    )
    assert found == {("n2", "on-demand"): (0.031611, 0.004237)}


class _Billing:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.parents: list[str] = []

    def list_skus(self, parent):
        self.parents.append(parent)
        if isinstance(self.answer, Exception):
            raise self.answer
        return iter(self.answer)


def test_live_prices_replace_the_packaged_ones_for_families_the_api_prices():
    billing = _Billing(
        [
            _sku("E2 Instance Core running in Americas", nanos=21_811_590),
            _sku("E2 Instance Ram running in Americas", nanos=2_923_530),
        ]
    )
    pricing = GCPPricing("us-central1", billing)
    assert pricing.price("on-demand", E2, "us-central1-a") == 0.13402  # packaged, before a read
    assert pricing.source == "packaged table"
    seq = pricing.seq
    assert pricing.refresh()
    assert billing.parents == [COMPUTE_SERVICE]
    assert pricing.seq != seq and pricing.source == "Cloud Billing Catalog API"
    assert pricing.price("on-demand", E2, "us-central1-a") == round(
        4 * 0.02181159 + 16 * 0.00292353, 6
    )
    assert pricing.price("spot", E2, "us-central1-a") == 0.07735  # no spot SKU: packaged
    assert pricing.price("on-demand", C3, "us-central1-a") == 0.20161  # no C3 SKU: packaged
    unknown = MachineType("x9-standard-4", 4, 16384, ("us-central1-a",))
    assert pricing.price("on-demand", unknown, "us-central1-a") is None  # priced by neither


def test_failed_reads_keep_the_prices_before_and_log_once(caplog):
    pricing = GCPPricing("us-central1", _Billing(RuntimeError("403 billing API disabled")))
    assert not pricing.refresh()
    assert "reading Compute Engine SKUs for us-central1: 403" in caplog.text
    assert pricing.price("on-demand", E2, "us-central1-a") == 0.13402
    empty = GCPPricing("us-central1", _Billing([]))
    assert not empty.refresh()
    assert "prices no machine family in us-central1" in caplog.text


def test_background_refresh_and_offline_pricing():
    pricing = GCPPricing("us-central1", _Billing([]))
    thread = pricing.refresh_in_background()
    assert thread is not None
    thread.join(5)
    assert GCPPricing("us-central1").refresh_in_background() is None  # offline: nothing to read
    assert GCPPricing("mars-1").price("on-demand", E2, "mars-1-a") is None


def test_fit_recovers_rates_and_splits_a_single_ratio():
    core, ram = fit([(12, 85, 12 * 0.03 + 85 * 0.004), (12, 170, 12 * 0.03 + 170 * 0.004)])
    assert (core, ram) == (pytest.approx(0.03), pytest.approx(0.004))
    core, ram = fit([(2, 8, 0.1), (4, 16, 0.2)])
    assert 2 * core + 8 * ram == pytest.approx(0.1)


def _sample(region_count: int = 20) -> list[tuple[str, MachineType]]:
    """20 machine types across regions and families (not the shared-core ones)."""
    regions = ["us-central1", "europe-west4", "asia-southeast1", "us-east4", "me-central2"]
    picked = []
    for i in range(region_count):
        region = regions[i % len(regions)]
        rows = [
            mt for mt in offline_machine_types(region) if mt.name not in ("f1-micro", "g1-small")
        ]
        picked.append((region, rows[(i * 7) % len(rows)]))
    return picked


def _agreement(pricing_for) -> float:
    worst = 0.0
    for region, mt in _sample():
        table = packaged_prices(region)
        pricing = pricing_for(region)
        for capacity_type in ("on-demand", "spot"):
            want = table[capacity_type, mt.name, mt.zones[0]]
            got = pricing.price(capacity_type, mt, mt.zones[0])
            worst = max(worst, abs(got - want) / want)
    return worst


def test_twenty_types_priced_from_the_fake_skus_agree_with_the_packaged_table():
    protos = [billing_v1.Sku.from_json(json.dumps(sku)) for sku in skus()]
    assert _agreement(lambda region: _pricing_from(protos, region)) < 0.01


def _pricing_from(protos, region):
    pricing = GCPPricing(region, _Billing(protos))
    assert pricing.refresh()
    return pricing


@pytest.mark.slow
def test_twenty_types_priced_from_the_fake_server_agree_with_the_packaged_table():
    from karpenter_gcp.clients import GCPClients
    from karpenter_gcp.testing import FakeGCE

    with FakeGCE() as fake:
        billing = GCPClients.create(fake.project, endpoint=fake.endpoint).billing
        assert _agreement(lambda region: _pricing_from_client(billing, region)) < 0.01
        assert any("/skus" in request.path for request in fake.requests)


def _pricing_from_client(billing, region):
    pricing = GCPPricing(region, billing)
    assert pricing.refresh()
    return pricing
