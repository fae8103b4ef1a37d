"""Types the ``karpenter.sh/v1`` NodePool and NodeClaim share.

The models read and write the camelCase JSON/YAML of the API (``populate_by_name`` also accepts the
snake_case names). Unknown fields are ignored, as the apiserver prunes them. Every check raises a
pydantic ``ValidationError`` whose ``loc`` names the field; the CRDs carry the same rules in OpenAPI
and CEL form, so an object these models accept is one the apiserver accepts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from fractions import Fraction
from functools import partial
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from karpenter_core.apis.crdgen import KubeSchema, cel
from karpenter_core.apis.duration import parse_duration, parse_nillable_duration
from karpenter_core.apis.labels import (
    LABEL_VALUE_PATTERN,
    QUALIFIED_NAME_PATTERN,
    RESTRICTED_LABEL_DOMAINS,
    RESTRICTED_LABELS,
    WELL_KNOWN_LABELS,
    label_domain,
    label_value_error,
    qualified_name_error,
    restricted_label_error,
)
from karpenter_core.apis.quantity import format_quantity, parse_quantity

__all__ = [
    "CONDITION_READY",
    "DURATION_PATTERN",
    "NILLABLE_DURATION_PATTERN",
    "Condition",
    "Conditions",
    "Duration",
    "KubeModel",
    "KubeObject",
    "LabelValue",
    "NillableDuration",
    "NodeClaimSpecFields",
    "NodeClassReference",
    "NodeSelectorRequirementWithMinValues",
    "ObjectMeta",
    "Operator",
    "OwnerReference",
    "Quantity",
    "Requirements",
    "ResourceList",
    "Taint",
    "restricted_label_rules",
]

CONDITION_READY = "Ready"
"""The root condition of NodePools and NodeClaims: True once every other condition is."""

NILLABLE_DURATION_PATTERN = r"^(([0-9]+(s|m|h))+|Never)$"
DURATION_PATTERN = r"^([0-9]+(s|m|h))+$"
_QUANTITY_PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class KubeModel(BaseModel):
    """Base of the API models: camelCase aliases (snake_case accepted), unknown keys ignored."""

    model_config = ConfigDict(
        populate_by_name=True,
        alias_generator=to_camel,
        extra="ignore",
        use_attribute_docstrings=True,  # field docstrings become CRD descriptions
    )


class KubeObject(KubeModel):
    """A root API object, read from and written to its manifest (a JSON-compatible dict)."""

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any]) -> Self:
        """Validate a manifest (as parsed from YAML or JSON); raises pydantic's ValidationError."""
        return cls.model_validate(obj)

    def to_manifest(self) -> dict[str, Any]:
        """The manifest: camelCase keys, no ``None`` fields, quantities and times as strings."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _checked(error_of: Callable[[str], str | None]) -> AfterValidator:
    """A validator raising the message ``error_of`` returns for a bad string."""

    def check(value: str) -> str:
        error = error_of(value)
        if error is not None:
            raise ValueError(error)
        return value

    return AfterValidator(check)


_QUALIFIED_NAME_SCHEMA = KubeSchema(keywords={"maxLength": 316, "pattern": QUALIFIED_NAME_PATTERN})
_LABEL_VALUE_SCHEMA = KubeSchema(keywords={"maxLength": 63, "pattern": LABEL_VALUE_PATTERN})

LabelValue = Annotated[str, _checked(label_value_error), _LABEL_VALUE_SCHEMA]
"""A label value: empty, or up to 63 alphanumerics, ``-``, ``_`` and ``.``."""


def restricted_label_rules(*, in_map: bool, also: Iterable[str] = ()) -> tuple[dict[str, str], ...]:
    """CEL rules refusing restricted label keys, for a key string or (``in_map``) a label map.

    ``also`` names further well-known keys to refuse in this place (the NodePool label in a
    NodePool).
    """
    subject = "k" if in_map else "self"

    def rule(condition: str) -> str:
        return f"self.all(k, {condition})" if in_map else condition

    rules = []
    for domain in sorted(RESTRICTED_LABEL_DOMAINS):
        allowed = sorted(key for key in WELL_KNOWN_LABELS if label_domain(key) == domain)
        listed = ", ".join(f"'{key}'" for key in allowed)
        subdomain = re.escape("." + domain + "/")
        condition = (
            f"{subject} in [{listed}] || !({subject}.startsWith('{domain}/') || "
            f"{subject}.matches(r'^[^/]*{subdomain}'))"
        )
        rules.append(cel(rule(condition), f'label domain "{domain}" is restricted'))
    for key in (*sorted(also), *sorted(RESTRICTED_LABELS)):
        rules.append(cel(rule(f"{subject} != '{key}'"), f'label "{key}" is restricted'))
    return tuple(rules)


def _whole_units(pattern: str, examples: str, parse: Callable[[str], object]) -> AfterValidator:
    """A duration of whole units matching ``pattern``, which ``parse`` also range-checks."""

    def check(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise ValueError(
                f"{value!r} is not a valid duration: use whole hours, minutes and seconds such as "
                f"{examples}"
            )
        parse(value)  # the range check
        return value

    return AfterValidator(check)


NillableDuration = Annotated[
    str,
    _whole_units(
        NILLABLE_DURATION_PATTERN, "'720h', '30m' or '1h30m', or 'Never'", parse_nillable_duration
    ),
    KubeSchema(keywords={"pattern": NILLABLE_DURATION_PATTERN}),
]
"""A duration of whole ``h``/``m``/``s`` (``"720h"``, ``"1h30m"``) or ``"Never"`` (disabled)."""
Duration = Annotated[
    str,
    _whole_units(DURATION_PATTERN, "'48h', '30m' or '1h30m'", parse_duration),
    KubeSchema(keywords={"pattern": DURATION_PATTERN}),
]
"""A duration of whole ``h``/``m``/``s``, such as ``"48h"``."""


def _quantity(value: Any) -> Fraction:
    quantity = parse_quantity(value)
    if quantity < 0:
        raise ValueError(f"{value!r} is negative: resource quantities must be zero or more")
    return quantity


def _format_quantity(value: Fraction) -> str:
    decimal, binary = format_quantity(value), format_quantity(value, binary=True)
    return binary if len(binary) < len(decimal) else decimal


Quantity = Annotated[
    Fraction,
    PlainValidator(_quantity),
    PlainSerializer(_format_quantity, return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": _QUANTITY_PATTERN,  # strings
            "minimum": 0,  # integers
        }
    ),
]
"""A non-negative resource quantity (``"100m"``, ``"2Gi"``, ``4``), exact as a ``Fraction``.

Written back as the shorter of its decimal and binary forms (``2Gi``, ``1500m``, ``20G``).
"""
ResourceName = Annotated[str, _checked(partial(qualified_name_error, what="resource name"))]
ResourceList = dict[ResourceName, Quantity]
"""Resource name to quantity, e.g. ``{"cpu": "4", "memory": "16Gi"}``."""


class OwnerReference(KubeModel):
    """An object this one belongs to (garbage-collected with it)."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    """The part of Kubernetes object metadata Karpenter reads and writes."""

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)


TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(KubeModel):
    """A node taint: pods that do not tolerate it are kept off (or evicted, for NoExecute)."""

    key: Annotated[
        str,
        _checked(partial(qualified_name_error, what="taint key")),
        KubeSchema(keywords={"minLength": 1, "maxLength": 316, "pattern": QUALIFIED_NAME_PATTERN}),
    ]
    """The taint key, a qualified name such as example.com/dedicated."""
    value: Annotated[
        str, _checked(partial(label_value_error, what="taint value")), _LABEL_VALUE_SCHEMA
    ] = ""
    """The taint value (may be empty)."""
    effect: TaintEffect
    """NoSchedule, PreferNoSchedule or NoExecute."""
    time_added: datetime | None = None
    """When a NoExecute taint was added."""


Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]
_BOUND_OPERATORS = ("Gt", "Lt", "Gte", "Lte")
_NO_VALUE_OPERATORS = ("Exists", "DoesNotExist")
_REQUIREMENT_RULES = (
    cel(
        "self.operator != 'In' || (has(self.values) && size(self.values) > 0)",
        "requirements with operator 'In' must have a value defined",
        field_path=".values",
    ),
    cel(
        "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) "
        "|| size(self.values) == 0",
        "requirements with operator 'Exists' or 'DoesNotExist' must not have values",
        field_path=".values",
    ),
    cel(
        "!(self.operator in ['Gt', 'Lt', 'Gte', 'Lte']) || (has(self.values) "
        "&& size(self.values) == 1 && self.values[0].matches('^[0-9]+$'))",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive "
        "integer value",
        field_path=".values",
    ),
    cel(
        "self.operator != 'In' || !has(self.minValues) "
        "|| (has(self.values) && size(self.values) >= self.minValues)",
        "requirements with 'minValues' must have at least that many values specified in the "
        "'values' field",
        field_path=".minValues",
    ),
)


class NodeSelectorRequirementWithMinValues(KubeModel):
    """A node label requirement, with the least number of distinct values to keep (minValues)."""

    model_config = ConfigDict(json_schema_extra=KubeSchema(rules=_REQUIREMENT_RULES))

    key: Annotated[
        str,
        _checked(qualified_name_error),
        _checked(restricted_label_error),
        KubeSchema(
            keywords={"maxLength": 316, "pattern": QUALIFIED_NAME_PATTERN},
            rules=restricted_label_rules(in_map=False),
        ),
    ]
    """The node label the requirement constrains."""
    operator: Operator
    """In, NotIn, Exists, DoesNotExist, or the integer comparisons Gt, Lt, Gte, Lte."""
    values: Annotated[list[LabelValue], KubeSchema(list_type="atomic")] = Field(
        default_factory=list, validate_default=True
    )
    """At least one value for In; none for Exists and DoesNotExist; one integer for Gt, Lt, Gte and
    Lte."""
    min_values: int | None = Field(default=None, ge=1, le=50)
    """The least number of distinct values of this label that the launch decision must keep open
    (for flexibility, e.g. over instance types)."""

    @field_validator("values")
    @classmethod
    def _values_fit_operator(cls, values: list[str], info: ValidationInfo) -> list[str]:
        operator = info.data.get("operator")
        if operator == "In" and not values:
            raise ValueError("operator 'In' needs at least one value")
        if operator in _NO_VALUE_OPERATORS and values:
            raise ValueError(f"operator {operator!r} takes no values")
        if operator in _BOUND_OPERATORS and (
            len(values) != 1 or not re.fullmatch(r"[0-9]+", values[0])
        ):
            raise ValueError(f"operator {operator!r} needs exactly one non-negative integer value")
        return values

    @field_validator("min_values")
    @classmethod
    def _enough_values(cls, min_values: int | None, info: ValidationInfo) -> int | None:
        values = info.data.get("values")
        if (
            min_values is not None
            and info.data.get("operator") == "In"
            and values is not None
            and len(values) < min_values
        ):
            raise ValueError(
                f"minValues is {min_values} but only {len(values)} values are listed; "
                "operator 'In' needs at least minValues values"
            )
        return min_values


Requirements = Annotated[
    list[NodeSelectorRequirementWithMinValues],
    Field(max_length=100),
    KubeSchema(list_type="atomic"),
]
"""At most 100 node requirements."""


def _group(group: str) -> str:
    if "/" in group:
        raise ValueError(
            f"group {group!r} must be an API group without a version, e.g. 'karpenter.kwok.sh'"
        )
    return group


class NodeClassReference(KubeModel):
    """The provider-specific NodeClass object a NodePool or NodeClaim launches with."""

    group: Annotated[
        str,
        Field(min_length=1),
        AfterValidator(_group),
        KubeSchema(keywords={"pattern": "^[^/]*$"}),
    ]
    """The API group of the NodeClass, without a version."""
    kind: str = Field(min_length=1)
    """The kind of the NodeClass."""
    name: str = Field(min_length=1)
    """The name of the NodeClass object."""


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(KubeModel):
    """An observation of one aspect of the object's state."""

    type: Annotated[
        str, _checked(partial(qualified_name_error, what="condition type")), _QUALIFIED_NAME_SCHEMA
    ]
    """The condition type, e.g. Ready."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str = Field(min_length=1, max_length=1024, pattern=_REASON_PATTERN)
    """A CamelCase word for why the status is what it is."""
    message: str = Field(default="", max_length=32768)
    """A human-readable explanation."""
    last_transition_time: datetime
    """When the status last changed."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The object's metadata.generation the condition was set for."""

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        """Built in Python, the reason defaults to the type and the transition time to now."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if not data.get("reason"):
            data["reason"] = data.get("type")
        if data.get("lastTransitionTime") is None and data.get("last_transition_time") is None:
            data["lastTransitionTime"] = datetime.now(UTC).replace(microsecond=0)
        return data


def _unique_condition_types(conditions: list[Condition]) -> list[Condition]:
    seen: set[str] = set()
    for condition in conditions:
        if condition.type in seen:
            raise ValueError(f"condition type {condition.type!r} appears more than once")
        seen.add(condition.type)
    return conditions


Conditions = Annotated[
    list[Condition],
    AfterValidator(_unique_condition_types),
    KubeSchema(list_type="map", list_map_keys=("type",)),
]
"""Status conditions, at most one per type."""


def _check_taints(taints: Iterable[Taint], seen: set[tuple[str, str]]) -> None:
    for taint in taints:
        if (taint.key, taint.effect) in seen:
            raise ValueError(
                f"taint {taint.key}:{taint.effect} is repeated; a key and effect may appear once "
                "across taints and startupTaints"
            )
        seen.add((taint.key, taint.effect))


class NodeClaimSpecFields(KubeModel):
    """What a NodeClaim's spec and a NodePool's template spec have in common."""

    taints: Annotated[list[Taint], KubeSchema(list_type="atomic")] = Field(default_factory=list)
    """Taints of the node."""
    startup_taints: Annotated[list[Taint], KubeSchema(list_type="atomic")] = Field(
        default_factory=list
    )
    """Taints the node starts with and something on it is expected to remove (e.g. a DaemonSet);
    pods need not tolerate them to be scheduled."""
    requirements: Requirements
    """Requirements on the node's labels; the NodeClaim's node satisfies all of them."""
    node_class_ref: NodeClassReference
    """The provider-specific NodeClass to launch with."""
    termination_grace_period: Duration | None = None
    """How long a node may drain once deletion starts before it is removed regardless of pod
    disruption budgets and do-not-disrupt annotations; unset means no limit."""
    expire_after: NillableDuration = "720h"
    """How long after creation a node is replaced, or Never."""

    @field_validator("taints")
    @classmethod
    def _unique_taints(cls, taints: list[Taint]) -> list[Taint]:
        _check_taints(taints, set())
        return taints

    @field_validator("startup_taints")
    @classmethod
    def _unique_startup_taints(cls, startup: list[Taint], info: ValidationInfo) -> list[Taint]:
        _check_taints(startup, {(t.key, t.effect) for t in info.data.get("taints", ())})
        return startup
