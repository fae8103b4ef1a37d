"""Entry point of the GCP provider: registers its record with karpenter-core."""

from __future__ import annotations

from karpenter_core.sdk.record import ProviderRecord, hookimpl

__all__ = ["karpenter_register_providers"]


@hookimpl
def karpenter_register_providers() -> list[ProviderRecord]:
    """The GCP provider (its record is registered once its parts are in place)."""
    return []
