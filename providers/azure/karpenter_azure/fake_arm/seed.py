"""What a fresh fake ARM server holds: resource SKUs, retail prices, AKS node images, a VNet.

The built-in SKU set is small (18 sizes in three regions) and chosen to exercise the provider's
filters: x64 and Arm64, Gen1/Gen2, GPUs, 1-vCPU sizes, a 2-vCPU size with 1 GiB, a
constrained-CPU size, a confidential size, location and zone restrictions and a region without
zones. Capability names
and shapes are those of the Resource SKUs API (api-version 2021-07-01); on-demand prices are
approximate Linux list prices in eastus (other regions are scaled), spot is 20% of on-demand.
They are test data, not a price list.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SUBSCRIPTION_ID = "00000000-0000-0000-0000-00000000a2e1"
TENANT_ID = "00000000-0000-0000-0000-0000000a7e1d"
CLIENT_ID = "00000000-0000-0000-0000-00000000c11d"
CLIENT_SECRET = "fake-arm-secret"
LOCATION = "eastus"
RESOURCE_GROUP = "test-rg"
CLUSTER_NAME = "test-cluster"
NODE_RESOURCE_GROUP = f"MC_{RESOURCE_GROUP}_{CLUSTER_NAME}_{LOCATION}"
VNET_NAME = "aks-vnet-12345678"
SUBNETS = {"aks-subnet": "10.224.0.0/16", "custom-subnet": "10.225.0.0/16"}
REGIONS: dict[str, tuple[str, ...]] = {
    "eastus": ("1", "2", "3"),
    "westus2": ("1", "2", "3"),
    "westcentralus": (),
}
REGION_PRICE_FACTOR = {"eastus": 1.0, "westus2": 1.0, "westcentralus": 1.1}
SPOT_FACTOR = 0.2
LOW_PRIORITY_FACTOR = 0.2
WINDOWS_FACTOR = 1.8
REGION_DISPLAY = {"eastus": "US East", "westus2": "US West 2", "westcentralus": "US West Central"}
PRICES_EFFECTIVE = "2025-06-01T00:00:00Z"

AKS_UBUNTU_COMMUNITY_GALLERY = "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2"
AKS_AZURE_LINUX_COMMUNITY_GALLERY = "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b"
SIG_SUBSCRIPTION_ID = "00000000-0000-0000-0000-000000005169"
GALLERIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # community gallery: (SIG resource group, SIG gallery name, image definitions)
    AKS_UBUNTU_COMMUNITY_GALLERY: (
        "AKS-Ubuntu",
        "AKSUbuntu",
        (
            "2204gen2containerd",
            "2204containerd",
            "2204gen2arm64containerd",
            "2204gen2TLcontainerd",
            "2404gen2containerd",
            "2404containerd",
            "2404gen2arm64containerd",
            "2404gen2TLcontainerd",
        ),
    ),
    AKS_AZURE_LINUX_COMMUNITY_GALLERY: (
        "AKS-AzureLinux",
        "AKSAzureLinux",
        ("V2gen2", "V2", "V2gen2arm64", "V2gen2TL", "V3gen2", "V3", "V3gen2arm64", "V3gen2TL"),
    ),
}
IMAGE_VERSIONS = (("202505.27.0", "2025-05-27T00:00:00Z"), ("202506.10.0", "2025-06-10T00:00:00Z"))
"""Versions every image definition starts with (name, publishedDate), oldest first."""


@dataclass(frozen=True, slots=True)
class SkuSpec:
    """One VM size of the built-in set."""

    name: str
    family: str
    vcpus: int
    memory_gb: float
    price: float
    architecture: str = "x64"
    hyperv_generations: str = "V1,V2"
    gpus: int = 0
    low_priority: bool = True
    premium_io: bool = True
    accelerated_networking: bool = True
    vcpus_available: int | None = None
    confidential: str | None = None


BUILTIN_SKUS: tuple[SkuSpec, ...] = (
    SkuSpec("Standard_B1s", "standardBSFamily", 1, 1, 0.0104, accelerated_networking=False),
    SkuSpec("Standard_A1_v2", "standardAv2Family", 1, 2, 0.043, premium_io=False),
    SkuSpec("Standard_B2ts_v2", "standardBsv2Family", 2, 1, 0.0084),
    SkuSpec("Standard_D2s_v3", "standardDSv3Family", 2, 8, 0.096),
    SkuSpec("Standard_D4s_v3", "standardDSv3Family", 4, 16, 0.192),
    SkuSpec("Standard_D8s_v3", "standardDSv3Family", 8, 32, 0.384),
    SkuSpec("Standard_D16s_v3", "standardDSv3Family", 16, 64, 0.768),
    SkuSpec("Standard_D2s_v5", "standardDSv5Family", 2, 8, 0.096),
    SkuSpec("Standard_D4s_v5", "standardDSv5Family", 4, 16, 0.192),
    SkuSpec("Standard_D2ps_v5", "standardDPSv5Family", 2, 8, 0.077, "Arm64", "V2"),
    SkuSpec("Standard_D4ps_v5", "standardDPSv5Family", 4, 16, 0.154, "Arm64", "V2"),
    SkuSpec("Standard_E2s_v3", "standardESv3Family", 2, 16, 0.126),
    SkuSpec("Standard_E4-2s_v3", "standardESv3Family", 4, 32, 0.252, vcpus_available=2),
    SkuSpec("Standard_F2s_v2", "standardFSv2Family", 2, 4, 0.0846),
    SkuSpec("Standard_F4s_v2", "standardFSv2Family", 4, 8, 0.169),
    SkuSpec("Standard_NC4as_T4_v3", "Standard NCASv3_T4 Family", 4, 28, 0.526, gpus=1),
    SkuSpec("Standard_NC6s_v3", "standardNCSv3Family", 6, 112, 3.06, gpus=1),
    SkuSpec(
        "Standard_DC2as_v5",
        "standardDCASv5Family",
        2,
        8,
        0.109,
        hyperv_generations="V2",
        confidential="SNP",
    ),
)
RESTRICTIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("Standard_D16s_v3", "westcentralus"): {"type": "Location"},
    ("Standard_NC6s_v3", "westus2"): {"type": "Zone", "zones": ["3"]},
}
"""(size, region) -> a restriction "NotAvailableForSubscription" puts on the size there."""


def _capabilities(spec: SkuSpec) -> list[dict[str, str]]:
    values: dict[str, str] = {
        "MaxResourceVolumeMB": str(spec.vcpus * 8192 if spec.premium_io else spec.vcpus * 10240),
        "OSVhdSizeMB": "1047552",
        "vCPUs": str(spec.vcpus),
        "MemoryPreservingMaintenanceSupported": "True",
        "HyperVGenerations": spec.hyperv_generations,
        "MemoryGB": f"{spec.memory_gb:g}",
        "MaxDataDiskCount": str(min(64, spec.vcpus * 4)),
        "CpuArchitectureType": spec.architecture,
        "LowPriorityCapable": str(spec.low_priority),
        "PremiumIO": str(spec.premium_io),
        "VMDeploymentTypes": "IaaS",
        "vCPUsAvailable": str(spec.vcpus_available or spec.vcpus),
        "vCPUsPerCore": "1" if spec.architecture == "Arm64" else "2",
        "EphemeralOSDiskSupported": str(spec.premium_io),
        "EncryptionAtHostSupported": "True",
        "CapacityReservationSupported": "True",
        "AcceleratedNetworkingEnabled": str(spec.accelerated_networking),
        "RdmaEnabled": "False",
        "MaxNetworkInterfaces": str(max(2, min(8, spec.vcpus))),
    }
    if spec.gpus:
        values["GPUs"] = str(spec.gpus)
    if spec.confidential:
        values["ConfidentialComputingType"] = spec.confidential
    return [{"name": name, "value": value} for name, value in values.items()]


def _restrictions(spec: SkuSpec, location: str) -> list[dict[str, Any]]:
    restriction = RESTRICTIONS.get((spec.name, location))
    if restriction is None:
        return []
    zones = restriction.get("zones")
    info: dict[str, Any] = {"locations": [location]}
    if zones:
        info["zones"] = zones
    return [
        {
            "type": restriction["type"],
            "values": zones if zones else [location],
            "restrictionInfo": info,
            "reasonCode": "NotAvailableForSubscription",
        }
    ]


def resource_sku(spec: SkuSpec, location: str, zones: Iterable[str]) -> dict[str, Any]:
    """The Resource SKUs API's record of ``spec`` in ``location`` (one location per record, as
    the API answers a location filter)."""
    zone_list = sorted(zones)
    info: dict[str, Any] = {"location": location, "zones": zone_list, "zoneDetails": []}
    return {
        "resourceType": "virtualMachines",
        "name": spec.name,
        "tier": "Standard",
        "size": spec.name.removeprefix("Standard_"),
        "family": spec.family,
        "locations": [location],
        "locationInfo": [info],
        "capabilities": _capabilities(spec),
        "restrictions": _restrictions(spec, location),
    }


def builtin_skus() -> list[dict[str, Any]]:
    """Every built-in size in every region of ``REGIONS``."""
    return [
        resource_sku(spec, location, zones)
        for location, zones in REGIONS.items()
        for spec in BUILTIN_SKUS
    ]


def _meter_id(*parts: str) -> str:
    return str(uuid.UUID(hashlib.sha256("/".join(parts).encode()).hexdigest()[:32]))


def price_item(
    arm_sku_name: str,
    location: str,
    price: float,
    *,
    series: str,
    variant: str = "",
    windows: bool = False,
) -> dict[str, Any]:
    """One Retail Prices API item for a VM size: ``variant`` is ``""``, ``"Spot"`` or
    ``"Low Priority"`` (appended to skuName and meterName, as the API does); ``series`` names
    the product (``DSv3`` is "Virtual Machines DSv3 Series")."""
    short = arm_sku_name.removeprefix("Standard_").replace("_", " ")
    sku_name = f"{short} {variant}".strip()
    product = f"Virtual Machines {series} Series" + (" Windows" if windows else "")
    product_id = "DZH" + hashlib.sha256(product.encode()).hexdigest()[:9].upper()
    return {
        "currencyCode": "USD",
        "tierMinimumUnits": 0.0,
        "retailPrice": round(price, 6),
        "unitPrice": round(price, 6),
        "armRegionName": location,
        "location": REGION_DISPLAY.get(location, location),
        "effectiveStartDate": PRICES_EFFECTIVE,
        "meterId": _meter_id(product, sku_name, location),
        "meterName": sku_name,
        "productId": product_id,
        "skuId": f"{product_id}/{hashlib.sha256(sku_name.encode()).hexdigest()[:4].upper()}",
        "productName": product,
        "skuName": sku_name,
        "serviceName": "Virtual Machines",
        "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute",
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        "isPrimaryMeterRegion": True,
        "armSkuName": arm_sku_name,
    }


def builtin_prices() -> list[dict[str, Any]]:
    """Retail price items of the built-in sizes: Linux on-demand, Spot and Low Priority, and
    Windows on-demand (the rows a provider must skip are there too)."""
    items = []
    for location in REGIONS:
        factor = REGION_PRICE_FACTOR[location]
        for spec in BUILTIN_SKUS:
            base = spec.price * factor
            series = spec.family.removeprefix("standard").removeprefix("Standard ")
            series = series.removesuffix("Family").strip()
            items.append(price_item(spec.name, location, base, series=series))
            if spec.low_priority:
                for variant, share in (
                    ("Spot", SPOT_FACTOR),
                    ("Low Priority", LOW_PRIORITY_FACTOR),
                ):
                    items.append(
                        price_item(
                            spec.name, location, base * share, series=series, variant=variant
                        )
                    )
            items.append(
                price_item(spec.name, location, base * WINDOWS_FACTOR, series=series, windows=True)
            )
    return items


def image_definition_traits(definition: str) -> tuple[str, str]:
    """(architecture, Hyper-V generation) of an AKS image definition, read from its name
    (``2204gen2arm64containerd`` is Arm64 V2, ``V3`` is x64 V1)."""
    lowered = definition.lower()
    return ("Arm64" if "arm64" in lowered else "x64", "V2" if "gen2" in lowered else "V1")


def sku_capability(sku: Mapping[str, Any], name: str) -> str | None:
    """A capability's value from a Resource SKUs record, or None."""
    for capability in sku.get("capabilities") or ():
        if capability.get("name") == name:
            return str(capability.get("value"))
    return None
