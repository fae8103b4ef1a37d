"""What a provider's NodeClass converter (``ProviderRecord.convert``) builds on."""

from karpenter_core.cloudprovider.convert import (
    Converted,
    Finding,
    NodeClassConverter,
    NodeClassVariant,
    describe,
    pop_field,
)
from karpenter_core.convert.nodepool import metadata
from karpenter_core.manifests.fields import model_schema, unknown_fields

__all__ = [
    "Converted",
    "Finding",
    "NodeClassConverter",
    "NodeClassVariant",
    "describe",
    "metadata",
    "model_schema",
    "pop_field",
    "unknown_fields",
]
