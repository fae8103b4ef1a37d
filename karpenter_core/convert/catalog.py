"""Whether any instance type of a provider's catalog satisfies a NodePool's requirements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from karpenter_core.apis.requirements import RequirementError, Requirements
from karpenter_core.cloudprovider.convert import Finding
from karpenter_core.cloudprovider.types import InstanceType

__all__ = ["unsatisfiable"]


def unsatisfiable(
    nodepool: Mapping[str, Any], source: str, instance_types: Sequence[InstanceType], where: str
) -> Finding | None:
    """A finding when no instance type (with an offering) of ``instance_types``, the catalog of
    ``where`` (``the us-east-1 catalog``), satisfies the NodePool's requirements."""
    spec = nodepool.get("spec") or {}
    terms = ((spec.get("template") or {}).get("spec") or {}).get("requirements") or []
    try:
        requirements = Requirements.from_node_selector(terms)
    except (RequirementError, TypeError, ValueError, KeyError):
        return None  # a malformed requirement is reported when the NodePool is applied
    for instance_type in instance_types:
        if instance_type.requirements.compatible(requirements) is not None:
            continue
        if any(o.requirements.intersects(requirements) is None for o in instance_type.offerings):
            return None
    return Finding(
        source,
        "spec.template.spec.requirements",
        f"no instance type in {where} satisfies these requirements: the NodePool would "
        "launch nothing",
    )
