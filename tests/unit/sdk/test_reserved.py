"""The SDK's overhead helpers: tiered reservations, kubelet quantities and eviction signals."""

from __future__ import annotations

import math

import pytest

from karpenter_core.sdk.reserved import overrides, quantity_milli, signal_milli, tiered

TIERS = ((4.0, 0.25), (8.0, 0.20), (math.inf, 0.10))


@pytest.mark.parametrize(
    ("amount", "charged"), [(0.0, 0.0), (2.0, 0.5), (4.0, 1.0), (6.0, 1.4), (18.0, 2.8)]
)
def test_tiered_charges_each_part_at_its_tier_rate(amount, charged):
    assert tiered(amount, TIERS) == pytest.approx(charged)


def test_quantities_and_signals_in_thousandths():
    assert quantity_milli("500m") == 500
    assert quantity_milli("1Gi") == 2**30 * 1000
    assert quantity_milli("lots") is None
    assert signal_milli(1000, "5%") == 50_000
    assert signal_milli(999, "0.5%") == 5_000  # rounded up
    assert signal_milli(1000, "100%") == 0
    assert signal_milli(1000, "100Mi") == 100 * 2**20 * 1000
    assert signal_milli(1000, "x%") is None


def test_overrides_keep_quantities_only():
    assert overrides([("cpu", "200m"), ("memory", "nope"), ("pid", "100")]) == {
        "cpu": 200,
        "pid": 100_000,
    }
