"""Entry point of the GCP provider: registers its record with karpenter-core.

Kept light: the Google libraries and the provider modules load only when the factory is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from karpenter_core.sdk.record import (
    Capability,
    ProviderContext,
    ProviderRecord,
    hookimpl,
    offline_fallback,
    packaged_file,
    packaged_text,
)
from karpenter_gcp.nodeclass import NODE_CLASS
from karpenter_gcp.settings import FALLBACK_REGION, OPTIONS

if TYPE_CHECKING:
    from karpenter_core.sdk.types import CloudProvider
    from karpenter_gcp.conformance import GCPProfile

__all__ = ["karpenter_register_providers"]


def _factory(context: ProviderContext) -> CloudProvider:
    from karpenter_gcp.cloudprovider import GCPCloudProvider

    where = "GCP region (--region, CLUSTER_LOCATION)"
    context = offline_fallback(context, "region", FALLBACK_REGION, where)
    return GCPCloudProvider.from_context(context)


def _conformance() -> GCPProfile:
    from karpenter_gcp.conformance import GCPProfile

    return GCPProfile()


def _controllers(context: ProviderContext, provider: CloudProvider) -> Sequence[Any]:
    """The GCENodeClass status controller, and the preemption controller unless turned off."""
    from karpenter_gcp.cloudprovider import GCPCloudProvider
    from karpenter_gcp.nodeclass_controller import NodeClassController
    from karpenter_gcp.preemption import PreemptionController

    controllers: list[Any] = [NodeClassController.for_provider(context, provider)]
    if isinstance(provider, GCPCloudProvider) and provider.settings.interruption:
        controllers.append(
            PreemptionController(
                context,
                provider.clients,
                provider.settings.project_id,
                provider.zones,
                provider.unavailable,
            )
        )
    return controllers


@hookimpl
def karpenter_register_providers() -> list[ProviderRecord]:
    """The GCP provider."""
    return [
        ProviderRecord(
            name="gcp",
            api_version=2,
            factory=_factory,
            node_classes=[NODE_CLASS],
            options=OPTIONS,
            controllers=_controllers,
            capabilities=frozenset(
                {
                    Capability.SPOT,
                    Capability.INTERRUPTION,
                    Capability.DRIFT,
                    Capability.REPAIR,
                    Capability.OFFLINE_CATALOG,
                }
            ),
            description="Compute Engine instances for GKE from GCENodeClasses (spot and "
            "on-demand); offline, a packaged catalog of every machine type with on-demand and "
            "spot prices",
            default_scenario=packaged_text("karpenter_gcp", "scenarios", "default.yaml"),
            conformance=_conformance,
            cluster_role=packaged_file("karpenter_gcp", "rbac", "clusterrole.yaml"),
        )
    ]
