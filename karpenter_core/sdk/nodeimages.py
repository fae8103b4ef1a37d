"""What a NodeClass's status says of each node image it resolved: the node label requirements
an instance type must meet to boot it (architecture, GPU, VM generation...)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from karpenter_core.apis.crdgen import KubeSchema
from karpenter_core.apis.v1.common import KubeModel

__all__ = ["NodeSelectorRequirement"]


class NodeSelectorRequirement(KubeModel):
    """A requirement on node labels (an instance type must meet it to use the image)."""

    key: str
    """The label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    """How the label relates to the values."""
    values: Annotated[list[str], KubeSchema(list_type="atomic")] = Field(default_factory=list)
    """The values for In, NotIn, Gt and Lt."""
