"""The CRDs of the NodeClass kinds providers publish.

``karpenter_core.apis.crdgen`` turns a pydantic model into a CRD and knows nothing of providers;
this module runs provider discovery and hands each ``NodeClassInfo`` a record lists to it.
"""

from __future__ import annotations

from typing import Any

from karpenter_core.apis.crdgen import generate_crd
from karpenter_core.cloudprovider import registry
from karpenter_core.cloudprovider.plugin import NodeClassInfo, ProviderRecord

__all__ = ["node_class_crd", "node_class_crds", "provider_crds"]


def provider_crds() -> list[dict[str, Any]]:
    """CRDs of the NodeClasses that discovered providers publish."""
    records = registry.discover().records
    return [crd for name in sorted(records) for crd in node_class_crds(records[name])]


def node_class_crds(record: ProviderRecord) -> list[dict[str, Any]]:
    """CRDs of the NodeClasses one provider's record publishes."""
    return [node_class_crd(node_class) for node_class in record.node_classes]


def node_class_crd(info: NodeClassInfo) -> dict[str, Any]:
    """The CRD of one NodeClass kind, as its ``NodeClassInfo`` describes it."""
    return generate_crd(
        info.model,
        group=info.group,
        kind=info.kind,
        plural=info.plural,
        version=info.version,
        printer_columns=info.printer_columns,
        short_names=info.short_names,
        categories=("karpenter",),
    )
