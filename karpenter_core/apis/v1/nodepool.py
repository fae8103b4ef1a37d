"""The ``karpenter.sh/v1`` NodePool: a template for nodes, with limits and a disruption policy."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from karpenter_core.apis import labels as wk
from karpenter_core.apis.crdgen import KubeSchema, PrinterColumn, cel
from karpenter_core.apis.v1.common import (
    CONDITION_READY,
    Conditions,
    KubeModel,
    KubeObject,
    LabelValue,
    NillableDuration,
    NodeClaimSpecFields,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ObjectMeta,
    Requirements,
    ResourceList,
    restricted_label_rules,
)

__all__ = [
    "CONDITION_NODE_CLASS_READY",
    "CONDITION_VALIDATION_SUCCEEDED",
    "NODEPOOL_PRINTER_COLUMNS",
    "Budget",
    "ConsolidationPolicy",
    "Disruption",
    "DisruptionReason",
    "NodeClaimTemplate",
    "NodeClaimTemplateMetadata",
    "NodeClaimTemplateSpec",
    "NodePool",
    "NodePoolSpec",
    "NodePoolStatus",
]

# Condition types. Ready is True once both are.
CONDITION_VALIDATION_SUCCEEDED = "ValidationSucceeded"
CONDITION_NODE_CLASS_READY = "NodeClassReady"

NODEPOOL_PRINTER_COLUMNS = (
    PrinterColumn("NodeClass", "string", ".spec.template.spec.nodeClassRef.name"),
    PrinterColumn("Nodes", "string", ".status.nodes"),
    PrinterColumn("Ready", "string", f'.status.conditions[?(@.type=="{CONDITION_READY}")].status'),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    PrinterColumn("Weight", "integer", ".spec.weight", priority=1),
    PrinterColumn("CPU", "string", ".status.resources.cpu", priority=1),
    PrinterColumn("Memory", "string", ".status.resources.memory", priority=1),
)
"""``kubectl get nodepools`` columns (``-o wide`` adds those of priority 1)."""

ConsolidationPolicy = Literal["WhenEmptyOrUnderutilized", "WhenEmpty", "Balanced"]
DisruptionReason = Literal["Underutilized", "Empty", "Drifted"]

_BUDGET_NODES_PATTERN = r"^((100|[0-9]{1,2})%|[0-9]+)$"
_CRON_PATTERN = (
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)"
    r"|[^\s]+\s+[^\s]+\s+[^\s]+\s+[^\s]+\s+[^\s]+)$"
)
_BUDGET_DURATION_PATTERN = r"^(([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?$"


def _matching(pattern: str, message: str) -> AfterValidator:
    def check(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise ValueError(f"{value!r} {message}")
        return value

    return AfterValidator(check)


def _unique_reasons(reasons: list[str] | None) -> list[str] | None:
    if reasons is not None and len(set(reasons)) != len(reasons):
        raise ValueError("reasons must not repeat a reason")
    return reasons


class Budget(KubeModel):
    """How many of the NodePool's nodes may be disrupted at once, optionally on a schedule."""

    model_config = ConfigDict(
        json_schema_extra=KubeSchema(
            rules=(
                cel(
                    "has(self.schedule) == has(self.duration)",
                    "'schedule' must be set with 'duration'",
                ),
            )
        )
    )

    reasons: (
        Annotated[
            list[DisruptionReason],
            Field(max_length=50),
            AfterValidator(_unique_reasons),
            KubeSchema(list_type="set"),
        ]
        | None
    ) = None
    """The disruption reasons the budget limits (Underutilized, Empty, Drifted); unset means all."""
    nodes: Annotated[
        str,
        _matching(_BUDGET_NODES_PATTERN, "is not a node count or a percentage from 0% to 100%"),
        KubeSchema(keywords={"pattern": _BUDGET_NODES_PATTERN}),
    ] = "10%"
    """How many nodes may be disrupted at once: a count, or a percentage of the NodePool's nodes
    (rounded up)."""
    schedule: (
        Annotated[
            str,
            _matching(
                _CRON_PATTERN, "is not a cron schedule (five fields, or @daily and the like)"
            ),
            KubeSchema(keywords={"pattern": _CRON_PATTERN}),
        ]
        | None
    ) = None
    """When the budget becomes active, as a cron schedule in UTC; unset means always."""
    duration: (
        Annotated[
            str,
            _matching(
                _BUDGET_DURATION_PATTERN,
                "is not a budget duration: use hours and minutes such as '8h', '30m' or '1h30m'",
            ),
            KubeSchema(keywords={"pattern": _BUDGET_DURATION_PATTERN}),
        ]
        | None
    ) = None
    """How long the budget stays active after each schedule hit (hours and minutes)."""

    @model_validator(mode="after")
    def _schedule_with_duration(self) -> Self:
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("schedule and duration must be set together")
        return self


def _default_budgets() -> list[Budget]:
    return [Budget(nodes="10%")]


class Disruption(KubeModel):
    """When and how Karpenter may remove or replace the NodePool's nodes."""

    consolidate_after: NillableDuration = "0s"
    """How long a node must have had no pod added or removed before it may be consolidated, or
    Never."""
    consolidation_policy: ConsolidationPolicy = "WhenEmptyOrUnderutilized"
    """Which nodes consolidation may remove: WhenEmptyOrUnderutilized (any move that saves),
    WhenEmpty (only empty nodes) or Balanced (a move only when its share of the NodePool's cost
    saved is at least half its share of the NodePool's disruption cost)."""
    budgets: Annotated[
        list[Budget],
        KubeSchema(list_type="atomic", keywords={"default": [{"nodes": "10%"}]}),
    ] = Field(default_factory=_default_budgets, max_length=50)
    """Limits on how many nodes may be disrupted at once; the most restrictive active one wins."""


_NODEPOOL_LABEL_ERROR = (
    f"label {wk.NODEPOOL!r} is restricted: Karpenter sets it to the NodePool's name"
)


def _template_labels(values: dict[str, str]) -> dict[str, str]:
    for key in values:
        error = wk.qualified_name_error(key) or wk.restricted_label_error(key)
        if error is None and key == wk.NODEPOOL:
            error = _NODEPOOL_LABEL_ERROR
        if error is not None:
            raise ValueError(error)
    return values


class NodeClaimTemplateMetadata(KubeModel):
    """Labels and annotations every NodeClaim (and node) of the NodePool gets."""

    labels: Annotated[
        dict[str, LabelValue],
        Field(max_length=100),
        AfterValidator(_template_labels),
        KubeSchema(
            map_type="atomic",
            rules=restricted_label_rules(in_map=True, also=(wk.NODEPOOL,)),
        ),
    ] = Field(default_factory=dict)
    """Labels of the nodes; keys in the karpenter.sh domain (but its well-known ones) and
    kubernetes.io/hostname are refused."""
    annotations: Annotated[dict[str, str], KubeSchema(map_type="granular")] = Field(
        default_factory=dict
    )
    """Annotations of the nodes."""


class NodeClaimTemplateSpec(NodeClaimSpecFields):
    """The spec of the NodeClaims the NodePool launches (resource requests come from pods)."""

    requirements: Annotated[
        Requirements,
        KubeSchema(
            rules=(
                cel(
                    f"self.all(x, x.key != '{wk.NODEPOOL}')",
                    f'label "{wk.NODEPOOL}" is restricted',
                ),
            )
        ),
    ]
    node_class_ref: Annotated[
        NodeClassReference,
        KubeSchema(
            rules=(
                cel("self.group == oldSelf.group", "nodeClassRef.group is immutable"),
                cel("self.kind == oldSelf.kind", "nodeClassRef.kind is immutable"),
            )
        ),
    ]

    @field_validator("requirements")
    @classmethod
    def _no_nodepool_requirement(
        cls, requirements: list[NodeSelectorRequirementWithMinValues]
    ) -> list[NodeSelectorRequirementWithMinValues]:
        for index, requirement in enumerate(requirements):
            if requirement.key == wk.NODEPOOL:
                raise ValueError(f"requirements[{index}]: {_NODEPOOL_LABEL_ERROR}")
        return requirements


class NodeClaimTemplate(KubeModel):
    """The template of the NodeClaims the NodePool launches."""

    metadata: NodeClaimTemplateMetadata = Field(default_factory=NodeClaimTemplateMetadata)
    """Labels and annotations of the NodeClaims and their nodes."""
    spec: NodeClaimTemplateSpec
    """The spec of the NodeClaims."""


class NodePoolSpec(KubeModel):
    """What nodes the NodePool may launch, how many, and how they are disrupted."""

    template: NodeClaimTemplate
    """What the NodePool's NodeClaims look like."""
    disruption: Annotated[
        Disruption, KubeSchema(keywords={"default": {"consolidateAfter": "0s"}})
    ] = Field(default_factory=Disruption)
    """How the NodePool's nodes are consolidated and disrupted."""
    limits: ResourceList = Field(default_factory=dict)
    """The most the NodePool's nodes may add up to, per resource (the nodes resource counts nodes)."""
    weight: int | None = Field(default=None, ge=1, le=100)
    """Priority among NodePools, 1 to 100; higher weights are tried first, unset counts as 0."""


class NodePoolStatus(KubeModel):
    """What the NodePool has launched, and whether it is ready to launch more."""

    resources: ResourceList = Field(default_factory=dict)
    """The resources of the NodePool's nodes, added up."""
    nodes: int = 0
    """How many nodes the NodePool has."""
    conditions: Conditions = Field(default_factory=list)
    """ValidationSucceeded, NodeClassReady and Ready."""


class NodePool(KubeObject):
    """A pool of nodes Karpenter launches for pending pods and keeps cheap."""

    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodePool"] = "NodePool"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodePoolSpec
    status: NodePoolStatus = Field(default_factory=NodePoolStatus)
