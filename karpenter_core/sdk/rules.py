"""Validation rules written once for both places they run: a CEL expression the generated CRD
carries (the apiserver checks it) and the same test in Python (the model checks it), with one
message for both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import AfterValidator

from karpenter_core.apis.crdgen import KubeSchema, cel

__all__ = ["Rule", "ruled"]


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule on a field's value (or a model): ``expression`` in CEL over ``self``, ``holds``
    the same test in Python, ``message`` what both say when it fails."""

    expression: str
    message: str
    holds: Callable[[Any], bool]


def ruled(*rules: Rule) -> tuple[AfterValidator, KubeSchema]:
    """The validator (raising the message of each rule that fails) and the CRD's CEL rules of
    ``rules``, for ``Annotated[T, *ruled(...)]``; an unset (None) value passes."""

    def check(value: Any) -> Any:
        if value is not None:
            failed = [rule.message for rule in rules if not rule.holds(value)]
            if failed:
                raise ValueError("; ".join(failed))
        return value

    return AfterValidator(check), KubeSchema(rules=[cel(r.expression, r.message) for r in rules])
