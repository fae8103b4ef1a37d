"""What a conversion produces: converted objects, their comments, and findings about the input."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "Converted",
    "Finding",
    "NodeClassConverter",
    "NodeClassVariant",
    "Severity",
    "describe",
    "pop_field",
]

Severity = Literal["warning", "note"]
"""``warning``: the manifest is probably wrong or something was not kept; ``note``: a decision
that was not one-to-one, for the record."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing to tell the user about one field of one object."""

    object: str
    """``Kind name`` (``Provisioner default``)."""
    field: str
    """The field's path in the input object (``spec.ttlSecondsAfterEmpty``), "" for the whole."""
    message: str
    severity: Severity = "warning"

    def line(self) -> str:
        """``warning: Provisioner default: spec.weight: ...``."""
        where = f"{self.object}: {self.field}: " if self.field else f"{self.object}: "
        return f"{self.severity}: {where}{self.message}"


@dataclass(slots=True)
class Converted:
    """A converted object, ready for ``kubectl apply``, and the comments that explain it."""

    obj: dict[str, Any]
    source: str
    """The input object it was made from (``Provisioner default``); for a placeholder, the first
    input object it was written for."""
    comments: list[str] = field(default_factory=list)
    placeholder: bool = False
    """Written for input objects that named no NodeClass, not converted from ``source``: its
    comments say what to fill in, and findings about it name it (it is in no input)."""


@dataclass(frozen=True, slots=True)
class NodeClassVariant:
    """One NodeClass to make from an input NodeClass: v1 moved kubelet settings from NodePools
    to NodeClasses, so NodePools sharing a NodeClass with different kubelet settings split it."""

    name: str
    kubelet: Mapping[str, Any] | None
    nodepools: tuple[str, ...] = ()
    """The NodePools that reference this variant."""


class NodeClassConverter(Protocol):
    """What a provider contributes to ``karpenter convert``: its NodeClass kinds, old and new.

    Every method is pure: data in, data out.
    """

    def handles(self, api_version: str, kind: str) -> bool:
        """Whether this provider converts or checks objects of that apiVersion and kind."""
        ...

    def node_class_ref(self, ref: Mapping[str, Any]) -> dict[str, str] | None:
        """The v1 ``nodeClassRef`` (group, kind, name) for an older reference (a v1alpha5
        ``providerRef`` or a v1beta1 ``nodeClassRef`` with ``apiVersion``), or None when the
        reference is not to this provider's kinds."""
        ...

    def convert(
        self, obj: Mapping[str, Any], variants: Sequence[NodeClassVariant]
    ) -> tuple[list[Converted], list[Finding]]:
        """The v1 NodeClass for each variant of ``obj`` (at least one), and what was decided."""
        ...

    def check_nodepool(self, nodepool: Mapping[str, Any], source: str) -> list[Finding]:
        """What is wrong with a v1 NodePool that references this provider's NodeClass."""
        ...

    def v1alpha5_defaults(self, nodepool: Mapping[str, Any]) -> list[tuple[dict[str, Any], str]]:
        """Requirements v1alpha5 added to a Provisioner that lacked them (and v1 does not), each
        with why, for the v1 NodePool made from that Provisioner."""
        ...

    def wildcard_replacement(self, requirement: Mapping[str, Any]) -> dict[str, Any] | None:
        """For an ``In`` or ``NotIn`` requirement whose values hold a wildcard (``m5.*``), the
        requirement (same operator) that selects what it meant, or None."""
        ...

    def default_node_class(self) -> tuple[dict[str, Any], list[str]]:
        """The v1 NodeClass for NodePools whose input named none (a v1alpha5 Provisioner
        without ``providerRef``), as the provider's getting-started guide writes it, with
        ``${PLACEHOLDER}`` values to fill in; and comments explaining its values."""
        ...


def describe(obj: Mapping[str, Any]) -> str:
    """``Kind name`` of a manifest (``Kind namespace/name`` when namespaced)."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name") or "(unnamed)"
    namespace = metadata.get("namespace")
    return f"{obj.get('kind')} {namespace}/{name}" if namespace else f"{obj.get('kind')} {name}"


def pop_field(obj: dict[str, Any], path: str) -> Any:
    """Remove the field at a path (``spec.x[2].y``, as ``unknown_fields`` gives them); return its
    value, or None when there is none."""
    node: Any = obj
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    for part in parts[:-1]:
        if part.startswith("["):
            index = int(part[1:-1])
            node = node[index] if isinstance(node, list) and index < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node.pop(parts[-1], None) if isinstance(node, dict) and parts else None
