"""``karpenter convert``: manifests of older Karpenter APIs (v1alpha5 Provisioners, v1beta1
NodePools) and upstream v1.x objects to this project's v1 NodePools and NodeClasses.

Pure: data in, converted objects and findings out. Providers convert their own NodeClass kinds
through ``ProviderRecord.convert`` (a ``NodeClassConverter``).
"""

from karpenter_core.cloudprovider.convert import (
    Converted,
    Finding,
    NodeClassConverter,
    NodeClassVariant,
    describe,
    pop_field,
)
from karpenter_core.convert.catalog import unsatisfiable
from karpenter_core.convert.documents import (
    Conversion,
    convert_objects,
    input_field,
    needs_conversion,
)

__all__ = [
    "Conversion",
    "Converted",
    "Finding",
    "NodeClassConverter",
    "NodeClassVariant",
    "convert_objects",
    "describe",
    "input_field",
    "needs_conversion",
    "pop_field",
    "unsatisfiable",
]
