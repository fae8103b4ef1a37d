"""Resource SKUs records to ``Sku`` records, and upstream's filters."""

from __future__ import annotations

from typing import Any

import pytest
from azure.mgmt.compute.models import ResourceSku

from karpenter_azure.skus import from_resource_sku, parse_size, read_skus, skip_reason


def record(
    name: str,
    vcpus: int = 4,
    memory_gib: float = 16,
    *,
    zones: tuple[str, ...] = ("1", "2", "3"),
    location: str = "eastus",
    restrictions: list[dict[str, Any]] | None = None,
    **capabilities: str,
) -> dict[str, Any]:
    """A Resource SKUs record in the shape the API returns (api-version 2021-07-01)."""
    caps = {
        "vCPUs": str(vcpus),
        "MemoryGB": str(memory_gib),
        "CpuArchitectureType": "x64",
        "HyperVGenerations": "V1,V2",
        "LowPriorityCapable": "True",
        "AcceleratedNetworkingEnabled": "True",
        "PremiumIO": "True",
        **capabilities,
    }
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "size": name.removeprefix("Standard_"),
        "family": "standardDSv5Family",
        "locations": [location],
        "locationInfo": [{"location": location, "zones": list(zones), "zoneDetails": []}],
        "capabilities": [{"name": k, "value": v} for k, v in caps.items()],
        "restrictions": restrictions or [],
    }


@pytest.mark.parametrize(
    ("name", "family", "series", "version", "accelerator", "constrained"),
    [
        ("Standard_D4s_v5", "D", "Ds_v5", "5", "", None),
        ("Standard_NC24ads_A100_v4", "N", "NCads_v4", "4", "A100", None),
        ("Standard_D2", "D", "D", "1", "", None),
        ("Standard_E8-4ds_v5", "E", "Eds_v5", "5", "", 4),
        ("Standard_M176ds_3_v3", "M", "Mds_v3", "3", "3", None),
        ("Standard_DS11-1_v2", "D", "DS_v2", "2", "", 1),
    ],
)
def test_size_names_parse_into_upstreams_parts(
    name: str, family: str, series: str, version: str, accelerator: str, constrained: int | None
) -> None:
    size = parse_size(name)
    assert size is not None
    assert (size.family, size.series, size.version_number) == (family, series, version)
    assert (size.accelerator, size.constrained_cpus) == (accelerator, constrained)


def test_a_record_becomes_a_sku_with_zones_spot_and_capabilities() -> None:
    sku = from_resource_sku(
        record(
            "Standard_D4ps_v5",
            CpuArchitectureType="Arm64",
            HyperVGenerations="V2",
            EphemeralOSDiskSupported="True",
            MaxResourceVolumeMB="153600",
            CachedDiskBytes="107374182400",
        ),
        "eastus",
    )
    assert sku is not None
    assert (sku.vcpus, sku.memory_gib, sku.architecture) == (4, 16.0, "arm64")
    assert sku.zones == ("1", "2", "3")
    assert sku.spot and sku.accelerated_networking and sku.premium_io
    assert sku.hyperv_generations == ("V2",)
    assert sku.ephemeral_os_max_gb == 150
    assert sku.encryption_at_host is None


def test_models_of_azure_mgmt_compute_read_like_their_json() -> None:
    raw = record("Standard_D2s_v5", 2, 8, LowPriorityCapable="False")
    from_model = from_resource_sku(ResourceSku(raw), "eastus")
    assert from_model == from_resource_sku(raw, "eastus")
    assert from_model is not None and not from_model.spot


def test_zone_restrictions_remove_zones_and_location_restrictions_the_size() -> None:
    zonal = from_resource_sku(
        record(
            "Standard_D2s_v5",
            2,
            8,
            restrictions=[
                {
                    "type": "Zone",
                    "values": ["eastus"],
                    "restrictionInfo": {"locations": ["eastus"], "zones": ["2"]},
                    "reasonCode": "NotAvailableForSubscription",
                }
            ],
        ),
        "eastus",
    )
    assert zonal is not None and zonal.zones == ("1", "3")
    located = from_resource_sku(
        record(
            "Standard_D2s_v5",
            2,
            8,
            restrictions=[
                {
                    "type": "Location",
                    "values": ["eastus"],
                    "restrictionInfo": {"locations": ["eastus"]},
                    "reasonCode": "NotAvailableForSubscription",
                }
            ],
        ),
        "eastus",
    )
    assert located is not None
    assert skip_reason(located) == "restricted in the location for the subscription"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (record("Standard_B1s", 1, 1), "not supported by AKS"),
        (record("Standard_D1_v2", 1, 3.5), "fewer than 2 vCPUs"),
        (record("Standard_B2ts_v2", 2, 1), "less than 3.5 GiB of memory"),
        (record("Standard_E8-4ds_v5", 8, 64), "constrained vCPUs"),
        (record("Standard_DC4as_v5", 4, 16), "confidential"),
        (record("Standard_EC4as_v5", 4, 32), "confidential"),
        (record("Standard_D4s_v5", 4, 16, GPUs="1"), "GPUs of an unknown maker"),
        (record("Standard_D4s_v5"), None),
        (record("Standard_NC4as_T4_v3", 4, 28, GPUs="1"), None),
    ],
)
def test_upstreams_filters(raw: dict[str, Any], reason: str | None) -> None:
    sku = from_resource_sku(raw, "eastus")
    assert sku is not None
    assert skip_reason(sku) == reason


def test_only_virtual_machine_records_of_the_location_count() -> None:
    disk = {**record("Premium_LRS"), "resourceType": "disks"}
    elsewhere = record("Standard_D8s_v5", 8, 32, location="westus2")
    kept = read_skus(
        [disk, record("Standard_D4s_v5"), record("Standard_B1s", 1, 1), elsewhere], "eastus"
    )
    assert [s.name for s in kept] == ["Standard_D4s_v5"]
