"""The NodeClaims the core creates, built alike by provisioning and by disruption (pure).

Provisioning creates one for each new NodeClaim the scheduler plans; disruption creates its
replacements the same way, so a replacement is the NodeClaim provisioning would have launched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirement
from karpenter_core.apis.v1.hashing import HASH_VERSION, nodepool_hash
from karpenter_core.controllers.objects import quantities, taint_list

if TYPE_CHECKING:
    from karpenter_core.cloudprovider.types import InstanceType
    from karpenter_core.scheduling.scheduler import NewNodeClaim

__all__ = ["nodeclaim_manifest"]


def nodeclaim_manifest(
    claim: NewNodeClaim, nodepool: Mapping[str, Any], instance_types: Sequence[InstanceType]
) -> dict[str, Any]:
    """The NodeClaim to create for a scheduled claim, shaped as upstream's.

    ``instance_types`` are the options the launch may choose from (cheapest first); they become
    the ``node.kubernetes.io/instance-type`` In requirement.
    """
    meta = nodepool.get("metadata") or {}
    template = (nodepool.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    template_spec = template.get("spec") or {}
    requirements = claim.requirements.copy()
    requirements.add(Requirement(wk.NODEPOOL, False, frozenset({claim.nodepool})))
    requirements.add(
        Requirement(wk.INSTANCE_TYPE, False, frozenset(it.name for it in instance_types))
    )
    selector = [
        r for r in requirements.node_selector() if str(r["key"]) not in wk.RESTRICTED_LABELS
    ]
    node_labels = {**template_meta.get("labels", {}), **claim.labels, **requirements.labels()}
    for key in wk.RESTRICTED_LABELS:
        node_labels.pop(key, None)
    node_labels[wk.NODEPOOL] = claim.nodepool
    spec: dict[str, Any] = {
        "requirements": selector,
        "resources": {"requests": quantities(claim.requests)},
        "nodeClassRef": dict(template_spec.get("nodeClassRef") or claim.node_class_ref),
        "expireAfter": template_spec.get("expireAfter", "720h"),
    }
    if template_spec.get("taints"):
        spec["taints"] = taint_list(template_spec["taints"])
    if template_spec.get("startupTaints"):
        spec["startupTaints"] = taint_list(template_spec["startupTaints"])
    if template_spec.get("terminationGracePeriod"):
        spec["terminationGracePeriod"] = template_spec["terminationGracePeriod"]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "generateName": f"{claim.nodepool}-",
            # On at creation: the lifecycle can launch at once, without a write to add it first.
            "finalizers": [wk.TERMINATION_FINALIZER],
            "labels": node_labels,
            "annotations": {
                **template_meta.get("annotations", {}),
                wk.NODEPOOL_HASH: nodepool_hash(nodepool),
                wk.NODEPOOL_HASH_VERSION: HASH_VERSION,
            },
            "ownerReferences": [
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "name": str(meta.get("name")),
                    "uid": str(meta.get("uid")),
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
