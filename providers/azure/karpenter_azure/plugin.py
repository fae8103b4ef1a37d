"""Entry point of the Azure provider: registers its record with karpenter-core.

Kept light: the Azure SDK and the provider modules load only when the factory is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from karpenter_azure.nodeclass import NODE_CLASS
from karpenter_azure.settings import FALLBACK_REGION, OPTIONS
from karpenter_core.sdk.record import (
    Capability,
    ProviderContext,
    ProviderRecord,
    hookimpl,
    offline_fallback,
    packaged_file,
    packaged_text,
)

if TYPE_CHECKING:
    from karpenter_azure.conformance import AzureProfile
    from karpenter_core.sdk.types import CloudProvider

__all__ = ["karpenter_register_providers"]


def _factory(context: ProviderContext) -> CloudProvider:
    from karpenter_azure.cloudprovider import AzureCloudProvider

    where = "Azure location (--region, LOCATION)"
    context = offline_fallback(context, "region", FALLBACK_REGION, where)
    return AzureCloudProvider.from_context(context)


def _conformance() -> AzureProfile:
    from karpenter_azure.conformance import AzureProfile

    return AzureProfile()


def _controllers(context: ProviderContext, provider: CloudProvider) -> Sequence[Any]:
    from karpenter_azure.nodeclass_controller import NodeClassController

    return [NodeClassController.for_provider(context, provider)]


@hookimpl
def karpenter_register_providers() -> list[ProviderRecord]:
    """The Azure provider."""
    return [
        ProviderRecord(
            name="azure",
            api_version=2,
            factory=_factory,
            node_classes=[NODE_CLASS],
            options=OPTIONS,
            controllers=_controllers,
            capabilities=frozenset(
                {
                    Capability.SPOT,
                    Capability.DRIFT,
                    Capability.REPAIR,
                    Capability.OFFLINE_CATALOG,
                }
            ),
            description="Azure VMs from AKSNodeClasses (spot and on-demand); offline, a packaged "
            "catalog of every VM size with on-demand and spot prices",
            default_scenario=packaged_text("karpenter_azure", "scenarios", "default.yaml"),
            conformance=_conformance,
            cluster_role=packaged_file("karpenter_azure", "rbac", "clusterrole.yaml"),
        )
    ]
