"""Checks of the manifest fields the simulation reads, raising ``DecodeError`` naming the field.

Kubernetes' apiserver validates objects before anything reads them; manifests read from files get
these checks instead, so a typo is reported with its path rather than surfacing as a crash.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import QuantityError, parse_quantity
from karpenter_core.apis.requirements import Operator, Requirement, RequirementError
from karpenter_core.cloudprovider.types import InstanceType
from karpenter_core.disruption.budgets import schedule_error
from karpenter_core.scheduling.snapshot import DecodeError, describe_value
from karpenter_core.scheduling.taints import EFFECTS

__all__ = [
    "check_budget_schedules",
    "check_node",
    "check_pod_metadata",
    "check_pod_spec",
    "check_quantities",
    "check_requirements",
    "from_validation_error",
    "is_pattern",
    "mapping",
    "sequence",
]

_WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
_POLICIES = ("Honor", "Ignore")
# Enumerated topology spread fields: (field, allowed values, required).
_SPREAD_CHOICES = (
    ("whenUnsatisfiable", _WHEN_UNSATISFIABLE, True),
    ("nodeAffinityPolicy", _POLICIES, False),
    ("nodeTaintsPolicy", _POLICIES, False),
)
# Label selector operators, and whether each takes values.
_SELECTOR_OPERATORS = {"In": True, "NotIn": True, "Exists": False, "DoesNotExist": False}
_TOLERATION_OPERATORS = ("Equal", "Exists")
_OPERATORS = frozenset(o.value for o in Operator)
_WILDCARD = re.compile(r"[*?]+")
_FAMILY_SUFFIX = "/instance-family"
_AWS_FAMILY = "karpenter.k8s.aws/instance-family"
_FAMILY_END = re.compile(r"[.\-*?]")


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    """``value`` as a mapping (None is empty); else ``DecodeError``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DecodeError(path, f"expected a mapping, got {describe_value(value)}")
    return value


def sequence(value: Any, path: str) -> Sequence[Any]:
    """``value`` as a list (None is empty); else ``DecodeError``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise DecodeError(path, f"expected a list, got {describe_value(value)}")
    return value


def _string(value: Any, path: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        hint = "; quote it" if isinstance(value, bool | int | float) else ""
        raise DecodeError(path, f"expected a non-empty string, got {describe_value(value)}{hint}")
    return value


def _integer(
    value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(path, f"expected an integer, got {describe_value(value)}")
    if minimum is not None and value < minimum:
        raise DecodeError(path, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise DecodeError(path, f"must be at most {maximum}, got {value}")
    return value


def _text(value: Any, path: str) -> str:
    """A string, possibly empty (a label value); a number or null suggests quoting."""
    if not isinstance(value, str):
        hint = "; quote it" if isinstance(value, bool | int | float) or value is None else ""
        raise DecodeError(path, f"expected a string, got {describe_value(value)}{hint}")
    return value


def _strings(value: Any, path: str) -> list[str]:
    """A list of non-empty strings (None is empty)."""
    return [_string(v, f"{path}[{i}]", required=True) for i, v in enumerate(sequence(value, path))]


def _choice(value: Any, path: str, choices: Sequence[str], *, required: bool = True) -> None:
    if (value is not None or required) and value not in choices:
        raise DecodeError(
            path, f"expected one of {', '.join(choices)}, got {describe_value(value)}"
        )


def _string_map(value: Any, path: str, *, label_values: bool = False) -> Mapping[str, str]:
    """A map of strings, e.g. labels; ``label_values`` also checks keys and values are labels."""
    out = mapping(value, path)
    for key, item in out.items():
        field = f"{path}[{key}]"
        _text(item, field)
        if label_values:
            problem = wk.qualified_name_error(str(key)) or wk.label_value_error(item)
            if problem:
                raise DecodeError(field, problem)
    return out


def check_quantities(value: Any, path: str) -> None:
    """Each entry of a resource list is a non-negative quantity."""
    for name, raw in mapping(value, path).items():
        field = f"{path}.{name}"
        try:
            amount = parse_quantity(raw)
        except QuantityError as err:
            raise DecodeError(field, str(err)) from None
        if amount < 0:
            raise DecodeError(field, f"{raw!r} is negative")


def check_requirements(
    terms: Any, path: str, instance_types: Sequence[InstanceType], *, min_values: bool = False
) -> None:
    """Node selector requirements: known operators, sensible values, exact instance types.

    ``min_values`` allows the NodePool field ``minValues`` and checks an ``In`` requirement lists
    at least that many values. ``instance_types`` (the provider's catalog, possibly empty) inform
    the hint given for an instance-type wildcard.
    """
    for i, term in enumerate(sequence(terms, path)):
        at = f"{path}[{i}]"
        term = mapping(term, at)
        key = _string(term.get("key"), f"{at}.key", required=True)
        operator = _string(term.get("operator"), f"{at}.operator", required=True)
        values = [
            _value(v, f"{at}.values[{j}]")
            for j, v in enumerate(sequence(term.get("values"), f"{at}.values"))
        ]
        floor = term.get("minValues")
        if floor is not None:
            if not min_values:
                raise DecodeError(f"{at}.minValues", "only NodePool requirements take minValues")
            floor = _integer(floor, f"{at}.minValues", minimum=1)
        try:
            requirement = Requirement.new(key, operator, values, floor)
        except RequirementError as err:
            field = "operator" if operator not in _OPERATORS else "values"
            raise DecodeError(f"{at}.{field}", str(err)) from None
        if requirement.key == wk.INSTANCE_TYPE:
            _check_exact_instance_types(values, f"{at}.values", instance_types)
        if floor is not None and operator == Operator.IN and floor > len(set(values)):
            raise DecodeError(
                f"{at}.minValues",
                f"minValues {floor} is larger than the {len(set(values))} value(s) listed for "
                f"{key!r}; list at least {floor} values or lower minValues",
            )


def check_budget_schedules(disruption: Any, path: str) -> None:
    """Each disruption budget's cron schedule is one croniter reads and that fires (a budget
    whose schedule cannot be used allows no disruption at all)."""
    budgets = sequence(mapping(disruption, path).get("budgets"), f"{path}.budgets")
    for i, budget in enumerate(budgets):
        schedule = mapping(budget, f"{path}.budgets[{i}]").get("schedule")
        problem = schedule_error(schedule) if isinstance(schedule, str) else None
        if problem is not None:
            raise DecodeError(f"{path}.budgets[{i}].schedule", problem)


def is_pattern(value: str) -> bool:
    """Whether an instance-type value holds a shell wildcard (``*`` or ``?``)."""
    return _WILDCARD.search(value) is not None


def _value(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DecodeError(path, f"expected a string, got {describe_value(value)}")
    return str(value)


def _check_exact_instance_types(
    values: Sequence[str], path: str, instance_types: Sequence[InstanceType]
) -> None:
    for value in values:
        if is_pattern(value):
            raise DecodeError(
                path,
                f"{value!r}: {wk.INSTANCE_TYPE} values are exact instance type names, not "
                f"patterns; {_wildcard_hint(value, instance_types)}",
            )


def _wildcard_hint(pattern: str, instance_types: Sequence[InstanceType]) -> str:
    """Suggest the instance-family requirement that selects what ``pattern`` was meant to."""
    if _WILDCARD.fullmatch(pattern):
        return "to allow any instance type, remove the requirement or use operator Exists"
    label = next(
        (key for it in instance_types for key in it.requirements if key.endswith(_FAMILY_SUFFIX)),
        None,
    )
    families = sorted(
        {
            family
            for it in instance_types
            if label is not None
            and label in it.requirements
            and fnmatch.fnmatchcase(it.name, pattern)
            for family in it.requirements[label].values
        }
    )
    guess = _FAMILY_END.split(pattern, maxsplit=1)[0]
    if not families and guess:
        families = [guess]
    if not families:
        return "select on the provider's instance labels (family, size, cpu) instead"
    example = f"`{label or _AWS_FAMILY} In [{', '.join(families)}]`"
    if label is None:
        example += " on AWS, or your provider's instance-family label"
    return f"to allow a family use an instance-family requirement instead, e.g. {example}"


def check_pod_spec(spec: Any, path: str, instance_types: Sequence[InstanceType]) -> None:
    """The fields of a pod spec the scheduler reads have the right shapes and values."""
    spec = mapping(spec, path)
    containers = sequence(spec.get("containers"), f"{path}.containers")
    if not containers:
        raise DecodeError(f"{path}.containers", "a pod needs at least one container")
    for field in ("containers", "initContainers"):
        for i, container in enumerate(sequence(spec.get(field), f"{path}.{field}")):
            _check_container(container, f"{path}.{field}[{i}]")
    check_quantities(spec.get("overhead"), f"{path}.overhead")
    selector = _string_map(spec.get("nodeSelector"), f"{path}.nodeSelector")
    for key, value in selector.items():
        if wk.NORMALIZED_LABELS.get(key, key) == wk.INSTANCE_TYPE:
            _check_exact_instance_types([value], f"{path}.nodeSelector[{key}]", instance_types)
    _string(spec.get("nodeName"), f"{path}.nodeName")
    if spec.get("priority") is not None:
        _integer(spec["priority"], f"{path}.priority")
    for i, toleration in enumerate(sequence(spec.get("tolerations"), f"{path}.tolerations")):
        _check_toleration(toleration, f"{path}.tolerations[{i}]")
    for i, volume in enumerate(sequence(spec.get("volumes"), f"{path}.volumes")):
        at = f"{path}.volumes[{i}]"
        claim = mapping(
            mapping(volume, at).get("persistentVolumeClaim"), f"{at}.persistentVolumeClaim"
        )
        if claim:
            _string(claim.get("claimName"), f"{at}.persistentVolumeClaim.claimName", required=True)
        ephemeral = mapping(volume.get("ephemeral"), f"{at}.ephemeral")
        if ephemeral:
            _string(volume.get("name"), f"{at}.name", required=True)
            template = f"{at}.ephemeral.volumeClaimTemplate"
            claim_spec = mapping(
                mapping(ephemeral.get("volumeClaimTemplate"), template).get("spec"),
                f"{template}.spec",
            )
            _string(claim_spec.get("storageClassName"), f"{template}.spec.storageClassName")
    for i, constraint in enumerate(
        sequence(spec.get("topologySpreadConstraints"), f"{path}.topologySpreadConstraints")
    ):
        _check_spread(constraint, f"{path}.topologySpreadConstraints[{i}]")
    _check_affinity(spec.get("affinity"), f"{path}.affinity", instance_types)


def _check_container(container: Any, path: str) -> None:
    container = mapping(container, path)
    resources = mapping(container.get("resources"), f"{path}.resources")
    check_quantities(resources.get("requests"), f"{path}.resources.requests")
    check_quantities(resources.get("limits"), f"{path}.resources.limits")
    for i, port in enumerate(sequence(container.get("ports"), f"{path}.ports")):
        host_port = mapping(port, f"{path}.ports[{i}]").get("hostPort")
        if host_port is not None:
            _integer(host_port, f"{path}.ports[{i}].hostPort", minimum=0)


def _check_toleration(toleration: Any, path: str) -> None:
    toleration = mapping(toleration, path)
    operator = toleration.get("operator") or "Equal"
    if operator not in _TOLERATION_OPERATORS:
        raise DecodeError(
            f"{path}.operator",
            f"expected Equal or Exists, got {describe_value(toleration['operator'])}",
        )
    effect = toleration.get("effect") or ""
    if effect and effect not in EFFECTS:
        raise DecodeError(
            f"{path}.effect", f"expected one of {', '.join(EFFECTS)}, got {describe_value(effect)}"
        )


def _check_affinity(affinity: Any, path: str, instance_types: Sequence[InstanceType]) -> None:
    affinity = mapping(affinity, path)
    node = mapping(affinity.get("nodeAffinity"), f"{path}.nodeAffinity")
    required_path = f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = mapping(node.get("requiredDuringSchedulingIgnoredDuringExecution"), required_path)
    terms = sequence(required.get("nodeSelectorTerms"), f"{required_path}.nodeSelectorTerms")
    for i, term in enumerate(terms):
        at = f"{required_path}.nodeSelectorTerms[{i}]"
        expressions = mapping(term, at).get("matchExpressions")
        check_requirements(expressions, f"{at}.matchExpressions", instance_types)
    preferred_path = f"{path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, preference in enumerate(
        sequence(node.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred_path)
    ):
        at = f"{preferred_path}[{i}]"
        preference = mapping(preference, at)
        if preference.get("weight") is not None:
            _integer(preference["weight"], f"{at}.weight", minimum=1, maximum=100)
        expressions = mapping(preference.get("preference"), f"{at}.preference").get(
            "matchExpressions"
        )
        check_requirements(expressions, f"{at}.preference.matchExpressions", instance_types)
    for kind in ("podAffinity", "podAntiAffinity"):
        _check_pod_affinity(affinity.get(kind), f"{path}.{kind}")


def _check_spread(constraint: Any, path: str) -> None:
    constraint = mapping(constraint, path)
    _integer(constraint.get("maxSkew"), f"{path}.maxSkew", minimum=1)
    if constraint.get("minDomains") is not None:
        _integer(constraint["minDomains"], f"{path}.minDomains", minimum=1)
    _string(constraint.get("topologyKey"), f"{path}.topologyKey", required=True)
    for field, choices, required in _SPREAD_CHOICES:
        _choice(constraint.get(field), f"{path}.{field}", choices, required=required)
    _check_label_selector(constraint.get("labelSelector"), f"{path}.labelSelector")
    _strings(constraint.get("matchLabelKeys"), f"{path}.matchLabelKeys")


def _check_pod_affinity(affinity: Any, path: str) -> None:
    """A podAffinity or podAntiAffinity: required terms and weighted preferred terms."""
    affinity = mapping(affinity, path)
    field = "requiredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(sequence(affinity.get(field), f"{path}.{field}")):
        _check_pod_affinity_term(term, f"{path}.{field}[{i}]")
    field = "preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(sequence(affinity.get(field), f"{path}.{field}")):
        at = f"{path}.{field}[{i}]"
        item = mapping(item, at)
        _integer(item.get("weight"), f"{at}.weight", minimum=1, maximum=100)
        _check_pod_affinity_term(item.get("podAffinityTerm"), f"{at}.podAffinityTerm")


def _check_pod_affinity_term(term: Any, path: str) -> None:
    term = mapping(term, path)
    _string(term.get("topologyKey"), f"{path}.topologyKey", required=True)
    _check_label_selector(term.get("labelSelector"), f"{path}.labelSelector")
    _check_label_selector(term.get("namespaceSelector"), f"{path}.namespaceSelector")
    _strings(term.get("namespaces"), f"{path}.namespaces")
    _strings(term.get("matchLabelKeys"), f"{path}.matchLabelKeys")


def _check_label_selector(selector: Any, path: str) -> None:
    """matchLabels is a label map; each matchExpression has a key, operator and fitting values."""
    selector = mapping(selector, path)
    _string_map(selector.get("matchLabels"), f"{path}.matchLabels", label_values=True)
    expressions = f"{path}.matchExpressions"
    for i, expression in enumerate(sequence(selector.get("matchExpressions"), expressions)):
        at = f"{expressions}[{i}]"
        expression = mapping(expression, at)
        _string(expression.get("key"), f"{at}.key", required=True)
        operator: Any = expression.get("operator")
        _choice(operator, f"{at}.operator", tuple(_SELECTOR_OPERATORS))
        values = [
            _text(v, f"{at}.values[{j}]")
            for j, v in enumerate(sequence(expression.get("values"), f"{at}.values"))
        ]
        if _SELECTOR_OPERATORS[operator] != bool(values):
            need = "takes no values" if values else "needs at least one value"
            raise DecodeError(f"{at}.values", f"operator {operator} {need}")


def check_pod_metadata(meta: Mapping[str, Any], path: str) -> None:
    """Labels and annotations are string maps; owner references are mappings."""
    _string_map(meta.get("labels"), f"{path}.labels", label_values=True)
    _string_map(meta.get("annotations"), f"{path}.annotations")
    for i, owner in enumerate(sequence(meta.get("ownerReferences"), f"{path}.ownerReferences")):
        mapping(owner, f"{path}.ownerReferences[{i}]")


def check_node(obj: Mapping[str, Any]) -> None:
    """A Node's labels, taints and capacity."""
    _string_map(mapping(obj.get("metadata"), "metadata").get("labels"), "metadata.labels")
    spec = mapping(obj.get("spec"), "spec")
    for i, taint in enumerate(sequence(spec.get("taints"), "spec.taints")):
        at = f"spec.taints[{i}]"
        taint = mapping(taint, at)
        _string(taint.get("key"), f"{at}.key", required=True)
        if taint.get("effect") not in EFFECTS:
            raise DecodeError(
                f"{at}.effect",
                f"expected one of {', '.join(EFFECTS)}, got {describe_value(taint.get('effect'))}",
            )
    status = mapping(obj.get("status"), "status")
    check_quantities(status.get("capacity"), "status.capacity")
    check_quantities(status.get("allocatable"), "status.allocatable")


def from_validation_error(err: ValidationError) -> DecodeError:
    """The first error of a pydantic ``ValidationError`` as a ``DecodeError`` on its JSON path."""
    errors = err.errors(include_url=False)
    first = errors[0]
    path = ""
    for part in first["loc"]:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" in part or part.startswith(("function-", "tagged-union")):
            continue
        else:
            path += f".{part}" if path else str(part)
    message = str(first["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if first["type"] == "missing":
        message = "missing; this field is required"
    shown = repr(first.get("input"))
    if first["type"] != "missing" and not isinstance(first.get("input"), dict | list):
        message += "" if shown in message else f" (got {shown})"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return DecodeError(path, message)
