"""Machine type prices: the Cloud Billing Catalog API, with the packaged table as fallback.

Compute Engine's SKUs (service ``6F81-5844-456A``) price a machine family per vCPU hour and per
GiB hour of memory in each region: ``"N2 Instance Core running in Americas"`` and ``"... Instance
Ram ..."`` (category usageType ``OnDemand``), ``"Spot Preemptible N2 Instance Core ..."``
(``Preemptible``); C2 and M1 are ``"Compute optimized"`` and ``"Memory-optimized"``, N1's are
``"N1 Predefined Instance ..."``. A machine type costs its vCPUs times its family's core rate
plus its GiB times the RAM rate (GPUs and local SSDs are priced by SKUs of their own and not
included, as in the packaged table). Custom, sole-tenant and commitment SKUs are skipped;
shared-core types (f1, g1, e2-micro/small/medium), priced by SKUs of their own, and families the
API does not price take the packaged table's price.

``GCPPricing`` reads the region's rates on the SDK's ``RefreshedData``, in the background, and
until the first read answers (or when reads fail) prices from the packaged table.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.catalog import RefreshedData
from karpenter_core.sdk.types import CloudProviderError
from karpenter_gcp.catalog import offline_regions, packaged_prices
from karpenter_gcp.instancetype import SHARED_CORE, MachineType

__all__ = ["COMPUTE_SERVICE", "GCPPricing", "PricingError", "family_key", "rates", "sku_rate"]

COMPUTE_SERVICE = "services/6F81-5844-456A"
"""Compute Engine in the Cloud Billing Catalog."""
_SKU = re.compile(
    r"^(?:Spot Preemptible )?(?P<family>Compute optimized|Memory-optimized|"
    r"[A-Z][A-Z0-9]*(?: AMD| Arm)?(?: Predefined)?)(?: Instance)? (?P<kind>Core|Ram) running in "
)
_ALIASES = {"Compute optimized": "c2", "Memory-optimized": "m1"}
_USAGE = {"OnDemand": wk.CAPACITY_TYPE_ON_DEMAND, "Preemptible": wk.CAPACITY_TYPE_SPOT}
_UNPRICED = SHARED_CORE | {"f1-micro", "g1-small"}
_log = logging.getLogger(__name__)

Rates = dict[tuple[str, str], tuple[float, float]]
"""``(family, capacity type) -> (price per vCPU hour, price per GiB hour)``."""


class PricingError(CloudProviderError):
    """The Cloud Billing Catalog API could not be read, or priced nothing in the region."""


def family_key(description: str) -> tuple[str, str] | None:
    """``(family, "Core" | "Ram")`` of a per-vCPU or per-GiB SKU description, else None."""
    match = _SKU.match(description)
    if match is None:
        return None
    family = match["family"]
    return _ALIASES.get(family) or family.split()[0].lower(), match["kind"]


def sku_rate(sku: Any, region: str) -> tuple[str, str, str, float] | None:
    """``(family, Core | Ram, capacity type, hourly price)`` of a Billing SKU
    (``billing_v1.Sku``) that prices a family's vCPUs or memory in ``region``, else None."""
    key = family_key(sku.description)
    capacity_type = _USAGE.get(sku.category.usage_type)
    if key is None or capacity_type is None or region not in sku.service_regions:
        return None
    if sku.category.resource_family != "Compute" or not sku.pricing_info:
        return None
    tiers = sku.pricing_info[0].pricing_expression.tiered_rates
    if not tiers:
        return None
    price = tiers[-1].unit_price
    return key[0], key[1], capacity_type, int(price.units) + price.nanos / 1e9


def rates(skus: Iterable[Any], region: str) -> Rates:
    """Core and RAM rates by family and capacity type (families with both)."""
    found: dict[tuple[str, str, str], float] = {}
    for sku in skus:
        rate = sku_rate(sku, region)
        if rate is not None:
            found[rate[:3]] = rate[3]
    return {
        (family, capacity_type): (price, found[family, "Ram", capacity_type])
        for (family, kind, capacity_type), price in found.items()
        if kind == "Core" and (family, "Ram", capacity_type) in found
    }


class GCPPricing:
    """Thread-safe prices of one region; ``seq`` changes whenever the prices do."""

    def __init__(self, region: str, client: Any = None) -> None:
        self.region = region
        self._client = client
        self._fallback = packaged_prices(region) if region in offline_regions() else {}
        self._rates: RefreshedData[Rates] = RefreshedData(
            self._read if client is not None else None, what=f"prices of {region}"
        )

    @property
    def seq(self) -> int:
        """A counter that changes whenever the prices do."""
        return self._rates.version

    @property
    def source(self) -> str:
        """Where the prices come from now."""
        return "Cloud Billing Catalog API" if self._rates.latest else "packaged table"

    def price(self, capacity_type: str, mt: MachineType, zone: str) -> float | None:
        """The hourly price of ``mt`` in ``zone`` for ``capacity_type``, None when unknown."""
        live = self._rates.latest
        family = mt.name.split("-")[0]
        rate = live.get((family, capacity_type)) if live and mt.name not in _UNPRICED else None
        if rate is not None:
            return round(mt.vcpus * rate[0] + mt.memory_mib / 1024 * rate[1], 6)
        return self._fallback.get((capacity_type, mt.name, zone))

    def refresh(self) -> bool:
        """Read the region's rates now; True when read (on failure the prices before stay and
        the failure is logged)."""
        return self._rates.try_refresh()

    def refresh_in_background(self) -> threading.Thread | None:
        """Start a read on a daemon thread when the rates are due (see ``RefreshedData``)."""
        return self._rates.refresh_in_background()

    def _read(self) -> Rates:
        try:
            found = rates(self._client.list_skus(parent=COMPUTE_SERVICE), self.region)
        except Exception as error:  # google-api-core's errors and transport failures
            raise PricingError(f"reading Compute Engine SKUs for {self.region}: {error}") from error
        if not found:
            raise PricingError(
                f"the Cloud Billing Catalog prices no machine family in {self.region}"
            )
        _log.info("read core and RAM rates of %d families for %s", len(found), self.region)
        return found
