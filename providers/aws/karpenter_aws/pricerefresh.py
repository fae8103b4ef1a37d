"""Keeping a live catalog's prices current: on-demand (unless in an isolated VPC) and spot prices
are read again every ``PRICE_REFRESH``, in the background, when the instance types are asked
for and the refresh is due. A failed refresh is logged and the previous prices kept.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from karpenter_aws.clients import AWSClients
from karpenter_aws.pricing import PriceBook

__all__ = ["PRICE_REFRESH", "PriceRefresher"]

log = logging.getLogger("karpenter.aws")

PRICE_REFRESH = timedelta(hours=12)
"""How often on-demand and spot prices are read again (live catalogs only)."""


class PriceRefresher:
    """Reads the prices of ``prices`` again, now or in the background when due."""

    def __init__(
        self,
        prices: PriceBook,
        clients: AWSClients,
        isolated_vpc: bool,
        clock: Callable[[], datetime],
    ) -> None:
        self._prices = prices
        self._clients = clients
        self._isolated_vpc = isolated_vpc
        self._clock = clock
        self._lock = threading.Lock()
        self._due: datetime | None = None

    def refresh(self) -> None:
        """Read on-demand (unless in an isolated VPC) and spot prices now; failures are logged
        and the previous prices kept."""
        with self._lock:
            self._due = self._clock() + PRICE_REFRESH
        if not self._isolated_vpc:
            self._prices.refresh_on_demand(self._clients.pricing)
        self._prices.refresh_spot(self._clients.ec2)

    def refresh_when_due(self) -> None:
        """Start a background refresh (thread ``aws-prices``) when none has run for
        ``PRICE_REFRESH``; return at once."""
        with self._lock:
            due = self._due is None or self._clock() >= self._due
            if due:
                self._due = self._clock() + PRICE_REFRESH
        if due:
            threading.Thread(target=self._refresh_quietly, name="aws-prices", daemon=True).start()

    def _refresh_quietly(self) -> None:
        try:
            self.refresh()
        except Exception as error:  # a background refresh must not die loudly; prices stay
            log.warning("refreshing EC2 prices failed: %s", error)
