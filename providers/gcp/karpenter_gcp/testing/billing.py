"""Cloud Billing Catalog SKU JSON for the fake, derived from the packaged catalog.

For each region and machine family of the packaged catalog, the per-vCPU and per-GiB rates
(on-demand and spot) are fitted to the packaged prices by least squares; a family whose types
all have one memory-per-vCPU ratio (e2-standard, g2) has its price split between the two with
the least-norm rates (any split prices those types the same). The SKUs are written as the
Billing API returns them (``units``/``nanos`` unit prices, ``usageType`` OnDemand or
Preemptible), so ``karpenter_gcp.pricing`` prices machine types from them as from the real API.
"""

from __future__ import annotations

import hashlib
from typing import Any

from karpenter_gcp.catalog import offline_machine_types, offline_regions, packaged_prices
from karpenter_gcp.instancetype import SHARED_CORE
from karpenter_gcp.pricing import COMPUTE_SERVICE

__all__ = ["fit", "skus"]

_GEO = {"us": "Americas", "northamerica": "Americas", "southamerica": "Americas"}
_GEO |= {"europe": "EMEA", "me": "EMEA", "africa": "EMEA", "asia": "APAC", "australia": "APAC"}
_UNPRICED = SHARED_CORE | {"f1-micro", "g1-small"}


def fit(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least-squares ``(core, ram)`` rates with ``vcpus * core + gib * ram ~ price`` over
    ``(vcpus, gib, price)`` points (least-norm when the points have one gib/vcpu ratio)."""
    sxx = sum(x * x for x, _, _ in points)
    sxy = sum(x * y for x, y, _ in points)
    syy = sum(y * y for _, y, _ in points)
    sxp = sum(x * p for x, _, p in points)
    syp = sum(y * p for _, y, p in points)
    det = sxx * syy - sxy * sxy
    if abs(det) > 1e-9 * sxx * syy:
        return (syy * sxp - sxy * syp) / det, (sxx * syp - sxy * sxp) / det
    ratio, per_vcpu = sxy / sxx, sxp / sxx
    core = per_vcpu / (1 + ratio * ratio)
    return core, core * ratio


def _sku(family: str, kind: str, usage: str, region: str, price: float) -> dict[str, Any]:
    spot = "Spot Preemptible " if usage == "Preemptible" else ""
    geo = _GEO.get(region.split("-")[0], "Americas")
    description = f"{spot}{family.upper()} Instance {kind} running in {geo}"
    sku_id = hashlib.sha256(f"{description} {region}".encode()).hexdigest()[:12].upper()
    sku_id = "-".join((sku_id[:4], sku_id[4:8], sku_id[8:]))
    nanos = round(price * 1e9)
    return {
        "name": f"{COMPUTE_SERVICE}/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": "CPU" if kind == "Core" else "RAM",
            "usageType": usage,
        },
        "serviceRegions": [region],
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": "h" if kind == "Core" else "GiBy.h",
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {
                                "currencyCode": "USD",
                                "units": str(nanos // 10**9),
                                "nanos": nanos % 10**9,
                            },
                        }
                    ],
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-01-01T00:00:00Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL", "regions": [region]},
    }


def _region_skus(region: str) -> list[dict[str, Any]]:
    prices = packaged_prices(region)
    points: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for mt in offline_machine_types(region):
        if mt.name in _UNPRICED:
            continue
        for capacity_type, usage in (("on-demand", "OnDemand"), ("spot", "Preemptible")):
            price = prices.get((capacity_type, mt.name, mt.zones[0]))
            if price is not None:
                key = (mt.name.split("-")[0], usage)
                points.setdefault(key, []).append((mt.vcpus, mt.memory_mib / 1024, price))
    out = []
    for (family, usage), found in sorted(points.items()):
        core, ram = fit(found)
        out.append(_sku(family, "Core", usage, region, core))
        out.append(_sku(family, "Ram", usage, region, ram))
    return out


def skus() -> list[dict[str, Any]]:
    """Compute Engine SKU JSON: per region and family of the packaged catalog, the core and RAM
    rates, on-demand and spot."""
    return [sku for region in offline_regions() for sku in _region_skus(region)]
