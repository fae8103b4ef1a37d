"""Entry point of the AWS provider: registers its record with karpenter-core.

Kept light: boto3 and the provider modules load only when the factory is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from karpenter_aws.nodeclass import NODE_CLASS
from karpenter_aws.settings import FALLBACK_REGION, OPTIONS, configured_region
from karpenter_core.sdk.record import (
    Capability,
    ProviderContext,
    ProviderRecord,
    hookimpl,
    offline_default,
    packaged_file,
    packaged_text,
)

if TYPE_CHECKING:
    from karpenter_aws.conformance import AWSProfile
    from karpenter_aws.convert import AWSConverter
    from karpenter_core.sdk.types import CloudProvider

__all__ = ["karpenter_register_providers"]


def _factory(context: ProviderContext) -> CloudProvider:
    from karpenter_aws.cloudprovider import AWSCloudProvider

    context = offline_default(context, "region", lambda: _offline_region(context))
    return AWSCloudProvider.from_context(context)


def _conformance() -> AWSProfile:
    from karpenter_aws.conformance import AWSProfile

    return AWSProfile()


def _converter() -> AWSConverter:
    from karpenter_aws.convert import AWSConverter

    return AWSConverter()


def _offline_region(context: ProviderContext) -> str:
    """Offline (``karpenter simulate``), no region given: the SDK's, else us-east-1 with a
    warning; live, the clients also ask the node's metadata service."""
    region = configured_region()
    if not region:
        context.logger.warning(
            "no AWS region is configured (--region, AWS_REGION, AWS_DEFAULT_REGION or the AWS "
            "config); using %s",
            FALLBACK_REGION,
        )
    return region or FALLBACK_REGION


def _controllers(context: ProviderContext, provider: CloudProvider) -> Sequence[Any]:
    from karpenter_aws.interruption_controller import InterruptionController
    from karpenter_aws.nodeclass_controller import NodeClassController

    controllers: list[Any] = [NodeClassController(context, provider)]
    if provider.settings.interruption_queue:  # type: ignore[attr-defined]
        controllers.append(InterruptionController(context, provider))
    return controllers


@hookimpl
def karpenter_register_providers() -> list[ProviderRecord]:
    """The AWS provider."""
    return [
        ProviderRecord(
            name="aws",
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
            description="EC2 instances from EC2NodeClasses (spot and on-demand); offline, "
            "a packaged EC2 catalog with public on-demand prices",
            default_scenario=packaged_text("karpenter_aws", "scenarios", "default.yaml"),
            conformance=_conformance,
            cluster_role=packaged_file("karpenter_aws", "rbac", "clusterrole.yaml"),
            convert=_converter,
        )
    ]
