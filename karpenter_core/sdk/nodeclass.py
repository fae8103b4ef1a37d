"""NodeClass readiness and conditions, and the wording of a NodeClass manifest's problems."""

from karpenter_core.cloudprovider.nodeclass import (
    NotReady,
    Verdict,
    launchable_node_class,
    node_class_ref_readiness,
    not_ready,
    stamp_conditions,
    validation_problems,
)

__all__ = [
    "NotReady",
    "Verdict",
    "launchable_node_class",
    "node_class_ref_readiness",
    "not_ready",
    "stamp_conditions",
    "validation_problems",
]
