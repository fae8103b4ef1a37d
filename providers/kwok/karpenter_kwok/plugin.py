"""Entry point of the kwok provider: registers its record with karpenter-core.

Kept light: the provider module (and the Kubernetes client it imports) loads only when the
factory is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from karpenter_core.sdk.record import (
    Capability,
    ProviderContext,
    ProviderOption,
    ProviderRecord,
    hookimpl,
    packaged_file,
)
from karpenter_kwok.catalog import CATALOG_ENV, CATALOG_OPTION
from karpenter_kwok.faults import ERRORS_ENV, ERRORS_OPTION, FAULTS_ENV, FAULTS_OPTION
from karpenter_kwok.nodeclass import NODE_CLASS

if TYPE_CHECKING:
    from karpenter_core.sdk.types import CloudProvider
    from karpenter_kwok.conformance import KWOKProfile

__all__ = ["karpenter_register_providers"]


def _factory(context: ProviderContext) -> CloudProvider:
    from karpenter_kwok.cloudprovider import KWOKCloudProvider

    return KWOKCloudProvider.from_context(context)


def _conformance() -> KWOKProfile:
    from karpenter_kwok.conformance import KWOKProfile

    return KWOKProfile()


@hookimpl
def karpenter_register_providers() -> list[ProviderRecord]:
    """The kwok provider."""
    return [
        ProviderRecord(
            name="kwok",
            api_version=2,
            factory=_factory,
            node_classes=[NODE_CLASS],
            options=[
                ProviderOption(
                    name=CATALOG_OPTION,
                    help="JSON instance-type catalog in upstream KWOK's format "
                    "(default: the generated 144-type matrix)",
                    env=CATALOG_ENV,
                ),
                ProviderOption(
                    name=FAULTS_OPTION,
                    help="a file of offerings ('<instance-type> <zone> <capacity-type>' per "
                    "line) the fake cloud refuses for lack of capacity, read again when it "
                    "changes (fault injection for tests)",
                    env=FAULTS_ENV,
                    simulate=False,
                ),
                ProviderOption(
                    name=ERRORS_OPTION,
                    help="a file of provider operations ('create', 'delete', 'get' or 'list' per "
                    "line) that fail as throttled while listed, read again when it changes "
                    "(fault injection for tests)",
                    env=ERRORS_ENV,
                    simulate=False,
                ),
            ],
            capabilities=frozenset(
                {Capability.SPOT, Capability.REPAIR, Capability.OFFLINE_CATALOG}
            ),
            description="Fake nodes in a KWOK cluster, from a generated instance-type catalog",
            conformance=_conformance,
            cluster_role=packaged_file("karpenter_kwok", "rbac", "clusterrole.yaml"),
        )
    ]
