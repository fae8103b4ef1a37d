"""Registration: the Node of a launched NodeClaim, made to carry what the NodeClaim says (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpenter_core.apis import labels as wk

__all__ = ["registered_node"]


def _taint_id(taint: Mapping[str, Any]) -> tuple[str, str]:
    return str(taint.get("key")), str(taint.get("effect"))


def registered_node(nodeclaim: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch registering ``node`` for ``nodeclaim``: its labels and annotations, its
    taints and startup taints (added once), the unregistered taint removed, the termination
    finalizer, and the ``karpenter.sh/registered`` label. The node's resourceVersion is the
    precondition, as the lists are replaced whole."""
    claim_meta = nodeclaim.get("metadata") or {}
    claim_spec = nodeclaim.get("spec") or {}
    meta = node.get("metadata") or {}
    labels = {**(claim_meta.get("labels") or {}), wk.NODE_REGISTERED: "true"}
    annotations = dict(claim_meta.get("annotations") or {})
    taints = [
        dict(t)
        for t in (node.get("spec") or {}).get("taints") or ()
        if _taint_id(t) != (wk.UNREGISTERED_TAINT_KEY, wk.UNREGISTERED_TAINT_EFFECT)
    ]
    present = {_taint_id(t) for t in taints}
    for taint in [*(claim_spec.get("taints") or ()), *(claim_spec.get("startupTaints") or ())]:
        if _taint_id(taint) not in present:
            taints.append({k: v for k, v in taint.items() if k in ("key", "value", "effect")})
            present.add(_taint_id(taint))
    finalizers = list(meta.get("finalizers") or ())
    if wk.TERMINATION_FINALIZER not in finalizers:
        finalizers.append(wk.TERMINATION_FINALIZER)
    return {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": labels,
            "annotations": annotations,
            "finalizers": finalizers,
        },
        "spec": {"taints": taints},
    }
