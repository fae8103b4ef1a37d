"""The catalog: the packaged offline data, AKSNodeClass inputs, and the live path through the
fake ARM server."""

from __future__ import annotations

import gzip
import importlib.util
import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from karpenter_azure.catalog import (
    DERIVED,
    REFRESH_INTERVAL,
    Catalog,
    CatalogError,
    offline_regions,
    offline_skus,
    packaged_source,
)
from karpenter_azure.clients import AzureClients
from karpenter_azure.instancetype import (
    LABEL_SKU_GPU_MANUFACTURER,
    REGIONAL_ZONE,
    SKU_LABELS,
)
from karpenter_azure.nodeclass import AKSNodeClass
from karpenter_azure.pricing import PriceBook
from karpenter_azure.settings import AzureSettings
from karpenter_azure.unavailable import UnavailableOfferings
from karpenter_core.apis import labels as wk

GENERATOR = Path(__file__).resolve().parents[2] / "scripts" / "generate_catalog.py"


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("generate_catalog", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_records_its_pinned_source() -> None:
    source = packaged_source()
    assert source["repository"] == "skypilot-org/skypilot-catalog"
    assert source["path"] == "catalogs/v6/azure/vms.csv"
    assert len(source["commit"]) == 40 and len(source["sha256"]) == 64
    assert {"eastus", "westus2", "westcentralus"} <= set(offline_regions())


def test_the_generator_encodes_the_packaged_content_byte_for_byte() -> None:
    raw = resources.files("karpenter_azure").joinpath("data/skus.json.gz").read_bytes()
    assert generator().encode(json.loads(gzip.decompress(raw))) == raw


def test_offline_skus_are_filtered_and_marked_derived() -> None:
    skus = {s.name: s for s in offline_skus("eastus")}
    assert len(skus) > 400
    assert "Standard_D4s_v5" in skus and "Standard_D4ps_v5" in skus
    kept_out = ("Standard_B1s", "Standard_DC4as_v5", "Standard_E8-4ds_v5", "Standard_B2ts_v2")
    assert not set(kept_out) & set(skus)
    assert not any(name.endswith("_Promo") for name in skus)
    assert skus["Standard_D4ps_v5"].architecture == "arm64"
    assert skus["Standard_D4s_v5"].zones == ("1", "2", "3")
    assert skus["Standard_D4s_v5"].derived == DERIVED
    # spot only where the source has a spot price: B-series v1 has none
    assert not skus["Standard_B2ms"].spot and skus["Standard_B2s_v2"].spot
    assert offline_skus("westus")[0].zones == ()


def test_an_unknown_region_is_a_clear_error() -> None:
    with pytest.raises(CatalogError, match=r"no offline VM size data for region 'mars'.*eastus"):
        Catalog.offline(AzureSettings(region="mars"))


def test_offline_instance_types_are_priced_and_labelled() -> None:
    catalog = Catalog.offline(AzureSettings(region="eastus"))
    types = {t.name: t for t in catalog.instance_types()}
    d4 = types["Standard_D4s_v5"]
    prices = {(o.capacity_type, o.zone): o.price for o in d4.offerings}
    assert prices[("on-demand", "eastus-1")] == 0.192
    assert prices[("spot", REGIONAL_ZONE)] == 0.02112
    assert all(set(SKU_LABELS) <= set(t.requirements) for t in types.values())
    gpu = types["Standard_NC24ads_A100_v4"]
    assert gpu.requirements[LABEL_SKU_GPU_MANUFACTURER].values == {"nvidia"}
    assert catalog.instance_types() is catalog.instance_types()


def test_the_aksnodeclass_shapes_capacity() -> None:
    catalog = Catalog.offline(AzureSettings(region="eastus", network_plugin="kubenet"))
    default = {t.name: t for t in catalog.instance_types()}["Standard_D4s_v5"]
    assert default.capacity["pods"] == 110_000
    node_class = AKSNodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {"maxPods": 60, "osDiskSizeGB": 256},
        }
    )
    shaped = {t.name: t for t in catalog.instance_types(node_class)}["Standard_D4s_v5"]
    assert shaped.capacity["pods"] == 60_000
    assert shaped.capacity["ephemeral-storage"] == 256 * 10**9 * 1000


def test_unavailable_marks_rebuild_the_offerings() -> None:
    unavailable = UnavailableOfferings()
    catalog = Catalog.offline(AzureSettings(region="eastus"), unavailable)
    before = catalog.instance_types()
    unavailable.mark("spot", "Standard_D4s_v5", "eastus-2", "ZonalAllocationFailed")
    after = {t.name: t for t in catalog.instance_types()}
    assert after is not before
    d4 = after["Standard_D4s_v5"]
    [gone] = [o for o in d4.offerings if not o.available]
    assert (gone.capacity_type, gone.zone) == ("spot", "eastus-2")
    assert d4.requirements[wk.CAPACITY_TYPE].values == {"on-demand", "spot"}
    # only the marked size is rebuilt; the others are the instance types built before
    untouched = [t for t in before if t.name != "Standard_D4s_v5"]
    assert all(after[t.name] is t for t in untouched)
    assert [t.name for t in before] == list(after)


@pytest.mark.slow
def test_live_sizes_and_prices_come_from_the_arm_apis() -> None:
    from karpenter_azure.fake_arm import FakeARM

    with FakeARM() as fake:
        settings = AzureSettings(
            region="eastus",
            subscription_id="00000000-0000-0000-0000-00000000a2e1",
            arm_endpoint_url=fake.url,
            arm_ca_bundle=fake.ca_file,
        )
        clients = AzureClients(
            settings, {"credential": fake.credential(), "compute": fake.compute_client()}
        )
        catalog = Catalog.live(settings, clients, UnavailableOfferings())
        assert catalog.is_live
        names = {t.name for t in catalog.instance_types()}
        assert "Standard_D4s_v5" in names and "Standard_D4ps_v5" in names
        # kept out: AKS-restricted, 1 GiB, constrained vCPUs, confidential
        assert not names & {"Standard_B1s", "Standard_B2ts_v2", "Standard_E4-2s_v3"}
        assert not any(name.startswith("Standard_DC") for name in names)
        catalog.prices.refresh(catalog.prices_url, catalog._price_getter)
        assert catalog.prices.source == "Retail Prices API"
        d4 = {t.name: t for t in catalog.instance_types()}["Standard_D4s_v5"]
        assert {o.price for o in d4.offerings if o.capacity_type == "on-demand"} == {0.192}


@pytest.mark.slow
def test_a_failed_sku_refresh_keeps_the_sizes_read_before() -> None:
    from karpenter_azure.fake_arm import FakeARM

    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    with FakeARM() as fake:
        settings = AzureSettings(
            region="eastus",
            subscription_id="00000000-0000-0000-0000-00000000a2e1",
            arm_endpoint_url=fake.url,
            arm_ca_bundle=fake.ca_file,
        )
        compute = fake.compute_client(retry_total=0)
        clients = AzureClients(settings, {"credential": fake.credential(), "compute": compute})
        catalog = Catalog.live(settings, clients, UnavailableOfferings(), lambda: now[0])
        before = [t.name for t in catalog.instance_types()]
        fake.fail_requests(500, path="/skus")
        now[0] += REFRESH_INTERVAL
        assert [t.name for t in catalog.instance_types()] == before
        fresh = Catalog.live(settings, clients, UnavailableOfferings(), lambda: now[0])
        with pytest.raises(CatalogError, match="reading VM sizes in eastus"):
            fresh.instance_types()


SAMPLE_CSV = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,Generation
Standard_D2ps_v5,,,2.0,8,,0.077,0.00847,eastus,V2
Standard_D2s_v5,,,2.0,8,,0.096,0.01056,eastus,"V1,V2"
Standard_D2s_v5,,,2.0,8,,0.112,0.01241,westus,"V1,V2"
Standard_D2_v2_Promo,,,2.0,7,,0.029,,eastus,V1
Standard_B2ms,,,2.0,8,,0.0832,,westus,"V1,V2"
Standard_NC4as_T4_v3,T4,1,4.0,28,T4,0.526,0.062699,eastus,"V1,V2"
"""


def test_the_generator_builds_and_pins_the_source(tmp_path: Path) -> None:
    import hashlib

    csv_path = tmp_path / "vms.csv"
    csv_path.write_text(SAMPLE_CSV)
    digest = hashlib.sha256(SAMPLE_CSV.encode()).hexdigest()
    out = tmp_path / "skus.json.gz"
    script = generator()
    args = ["--csv", str(csv_path), "--commit", "c0ffee", "--sha256", digest]
    assert script.main([*args, "--output", str(out)]) == 0
    first = out.read_bytes()
    assert script.main([*args, "--output", str(out)]) == 0
    assert out.read_bytes() == first
    data = json.loads(gzip.decompress(first))
    assert data["source"]["sha256"] == digest and data["source"]["commit"] == "c0ffee"
    sizes = {entry[0]: entry for entry in data["sizes"]}
    assert "Standard_D2_v2_Promo" not in sizes
    assert sizes["Standard_D2ps_v5"][5] == "arm64"
    assert sizes["Standard_B2ms"][6] is False  # first-generation B-series below 12 vCPUs
    assert sizes["Standard_NC4as_T4_v3"][3] == 1
    assert data["regions"]["eastus"]["zones"] == ["1", "2", "3"]
    assert data["regions"]["westus"]["zones"] == []


def test_the_generator_refuses_a_copy_with_another_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv_path = tmp_path / "vms.csv"
    csv_path.write_text(SAMPLE_CSV)
    args = ["--csv", str(csv_path), "--commit", "c0ffee", "--sha256", "0" * 64]
    assert generator().main([*args, "--output", str(tmp_path / "out.gz")]) == 1
    assert "expected 000" in capsys.readouterr().err
    assert not (tmp_path / "out.gz").exists()


@pytest.mark.slow
def test_without_packaged_prices_the_first_price_read_is_waited_for() -> None:
    from karpenter_azure.fake_arm import FakeARM

    with FakeARM() as fake:
        settings = AzureSettings(
            region="eastus",
            subscription_id="00000000-0000-0000-0000-00000000a2e1",
            arm_ca_bundle=fake.ca_file,
        )
        compute = fake.compute_client()
        catalog = Catalog(
            settings,
            "eastus",
            PriceBook("eastus", {}, {}, "no packaged prices"),
            UnavailableOfferings(),
            compute=lambda: compute,
            prices_url=fake.prices_url,
        )
        d4 = {t.name: t for t in catalog.instance_types()}["Standard_D4s_v5"]
        assert catalog.prices.source == "Retail Prices API"
        assert any(o.available for o in d4.offerings)
