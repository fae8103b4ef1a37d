"""CustomResourceDefinitions generated from the pydantic API models.

Pydantic's JSON schema is not what the apiserver accepts: it has ``$defs``/``$ref``, ``anyOf`` with
``type: null``, ``const``, titles and ``uniqueItems``. ``structural_schema`` rewrites it into a
structural OpenAPI v3 schema, and ``generate_crd`` wraps that into an ``apiextensions.k8s.io/v1``
CustomResourceDefinition. Kubernetes-only keywords (CEL rules, list and map types, bounds, CRD
defaults) are declared on the models with ``KubeSchema``, either as ``Annotated`` metadata of a
field or type, or as a model's ``json_schema_extra``; provider NodeClass models use the same way.

Choices the rewrite makes:

- ``Optional`` fields are plain optional properties, not ``nullable``: the apiserver prunes a
  ``null`` it may not store, so ``null`` and "absent" mean the same thing, as they do in the models
  (and ``has()`` in CEL rules stays true only for set fields). ``keywords={"nullable": True}`` opts
  a field in.
- Defaults that are empty (``None``, ``""``, ``[]``, ``{}``) are dropped; the apiserver would
  otherwise write them into every object. Other defaults are kept, and
  ``KubeSchema(keywords={"default": ...})`` declares one pydantic cannot (a ``default_factory``).
- ``set[...]`` becomes ``x-kubernetes-list-type: set``; ``Any`` and ``extra="allow"`` models keep
  unknown fields (``x-kubernetes-preserve-unknown-fields``). Unions other than int-or-string,
  tuples and recursive models are refused with a ``CRDSchemaError`` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from pydantic import GetJsonSchemaHandler
    from pydantic_core import CoreSchema

__all__ = [
    "CRDSchemaError",
    "KubeSchema",
    "PrinterColumn",
    "cel",
    "core_crds",
    "generate_crd",
    "structural_schema",
]

CRD_API_VERSION = "apiextensions.k8s.io/v1"

_VALIDATIONS = "x-kubernetes-validations"
_KEYWORDS = frozenset(
    {
        "description",
        "type",
        "format",
        "default",
        "enum",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "nullable",
        "example",
        "anyOf",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        _VALIDATIONS,
    }
)
"""OpenAPI keywords a CRD schema may carry after the rewrite."""

_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]
_NULL = {"type": "null"}
_EMPTY_DEFAULTS: tuple[Any, ...] = (None, "", [], {})


class CRDSchemaError(ValueError):
    """A model uses a construct that has no structural CRD schema."""


def cel(
    rule: str,
    message: str,
    *,
    field_path: str | None = None,
    reason: str | None = None,
) -> dict[str, str]:
    """A CEL validation rule (an ``x-kubernetes-validations`` entry)."""
    validation = {"rule": rule, "message": message}
    if field_path is not None:
        validation["fieldPath"] = field_path
    if reason is not None:
        validation["reason"] = reason
    return validation


@dataclass(frozen=True, eq=False)  # hashed by identity: ``Annotated`` metadata must hash
class KubeSchema:
    """Kubernetes OpenAPI keywords for a field, a type or a model in its CRD schema.

    Use as ``Annotated[T, KubeSchema(...)]`` or ``ConfigDict(json_schema_extra=KubeSchema(...))``.
    ``rules`` are appended to any CEL rules already there; ``keywords`` are raw OpenAPI keywords
    (``maxItems``, ``pattern``, ``default``...). Validation in Python stays the model's job.
    """

    rules: Sequence[Mapping[str, str]] = ()
    list_type: Literal["atomic", "set", "map"] | None = None
    list_map_keys: Sequence[str] = ()
    map_type: Literal["atomic", "granular"] | None = None
    keywords: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, schema: dict[str, Any]) -> None:
        """Add the keywords to ``schema`` in place (pydantic's ``json_schema_extra`` protocol)."""
        schema.update(_fresh(dict(self.keywords)))
        if self.list_type is not None:
            schema["x-kubernetes-list-type"] = self.list_type
        if self.list_map_keys:
            schema["x-kubernetes-list-map-keys"] = list(self.list_map_keys)
        if self.map_type is not None:
            schema["x-kubernetes-map-type"] = self.map_type
        if self.rules:
            schema[_VALIDATIONS] = [*schema.get(_VALIDATIONS, ()), *map(dict, self.rules)]

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        """Pydantic hook: the schema of the annotated type, with the keywords added."""
        schema = dict(handler(core_schema))
        self(schema)
        return schema


@dataclass(frozen=True)
class PrinterColumn:
    """A ``kubectl get`` column (``additionalPrinterColumns`` entry)."""

    name: str
    type: str
    json_path: str
    priority: int = 0
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The CRD form: ``{name, type, jsonPath[, priority][, description]}``."""
        column: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            column["priority"] = self.priority
        if self.description:
            column["description"] = self.description
        return column


def _fresh(value: Any) -> Any:
    """A copy of a JSON-like tree sharing no dict or list (YAML would print shared ones as
    anchors and aliases)."""
    if isinstance(value, Mapping):
        return {key: _fresh(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_fresh(item) for item in value]
    return value


def structural_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Rewrite a pydantic JSON schema into a structural OpenAPI v3 schema (refs inlined)."""
    return _convert(schema, schema.get("$defs", {}), "", frozenset())


def _merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` over ``base``; CEL rules of both are kept."""
    merged = {**base, **overlay}
    if _VALIDATIONS in base and _VALIDATIONS in overlay:
        merged[_VALIDATIONS] = [*base[_VALIDATIONS], *overlay[_VALIDATIONS]]
    return merged


def _flatten(
    node: dict[str, Any], defs: Mapping[str, Any], path: str, seen: frozenset[str]
) -> tuple[dict[str, Any], frozenset[str]]:
    """Inline ``$ref``, one-branch ``allOf`` and optional ``anyOf`` until none is left on top."""
    while True:
        if "$ref" in node:
            name = node.pop("$ref").rsplit("/", 1)[-1]
            if name in seen:
                raise CRDSchemaError(
                    f"{path or '<root>'}: recursive model {name} cannot be inlined"
                )
            seen = seen | {name}
            node = _merge(defs[name], node)
        elif "allOf" in node and len(node["allOf"]) == 1:
            node = _merge(node.pop("allOf")[0], node)
        elif "anyOf" in node or "oneOf" in node:
            key = "anyOf" if "anyOf" in node else "oneOf"
            branches = [b for b in node[key] if b != _NULL]
            if len(branches) == 1:
                node.pop(key)
                node = _merge(branches[0], node)
            elif branches == _INT_OR_STRING and node.get("x-kubernetes-int-or-string"):
                return node, seen
            else:
                raise CRDSchemaError(
                    f"{path or '<root>'}: unions have no structural schema; declare the field's "
                    "schema with pydantic.WithJsonSchema (int-or-string is the one union allowed)"
                )
        else:
            return node, seen


def _prose(text: str) -> str:
    """A docstring as a description: lines of a paragraph joined, paragraphs kept."""
    paragraphs = re.split(r"\n\s*\n", text.strip())
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)


def _convert(
    raw: Mapping[str, Any], defs: Mapping[str, Any], path: str, seen: frozenset[str]
) -> dict[str, Any]:
    node, seen = _flatten(dict(raw), defs, path, seen)
    node.pop("$defs", None)
    node.pop("title", None)
    if "description" in node:
        node["description"] = _prose(node["description"])
    if node.get("type") == "null":
        raise CRDSchemaError(f"{path or '<root>'}: a field that can only be null has no schema")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if not isinstance(node.get(bound, True), bool):
            node[limit] = node[bound]
            node[bound] = True
    if node.pop("uniqueItems", False):
        node.setdefault("x-kubernetes-list-type", "set")
    if "default" in node and any(node["default"] == empty for empty in _EMPTY_DEFAULTS):
        del node["default"]
    extra = node.pop("additionalProperties", None)
    if extra is True:
        node["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(extra, Mapping):
        if "properties" in node:
            raise CRDSchemaError(f"{path}: a map cannot also declare properties")
        node["additionalProperties"] = _convert(extra, defs, f"{path}.*", seen)
    if "properties" in node:
        node["properties"] = {
            name: _convert(value, defs, f"{path}.{name}", seen)
            for name, value in node["properties"].items()
        }
    if "required" in node:
        node["required"] = sorted(node["required"])
    if "prefixItems" in node or not isinstance(node.get("items", {}), Mapping):
        raise CRDSchemaError(f"{path}: tuples have no structural schema; use a list")
    if "items" in node:
        node["items"] = _convert(node["items"], defs, f"{path}[*]", seen)
    if "type" not in node and not node.get("x-kubernetes-int-or-string"):
        node["x-kubernetes-preserve-unknown-fields"] = True  # ``Any``: whatever the user wrote
    unknown = sorted(set(node) - _KEYWORDS)
    if unknown:
        raise CRDSchemaError(f"{path or '<root>'}: keywords not allowed in a CRD schema: {unknown}")
    return node


def generate_crd(
    model: type[BaseModel],
    *,
    group: str,
    kind: str,
    plural: str,
    singular: str | None = None,
    version: str = "v1",
    scope: Literal["Cluster", "Namespaced"] = "Cluster",
    printer_columns: Sequence[PrinterColumn | Mapping[str, Any]] = (),
    short_names: Sequence[str] = (),
    categories: Sequence[str] = (),
) -> dict[str, Any]:
    """A CustomResourceDefinition serving ``model`` (a root object with ``spec``/``status``).

    ``apiVersion``, ``kind`` and ``metadata`` get the schema the apiserver requires of a root
    object; a ``status`` property turns on the status subresource.
    """
    schema = structural_schema(model.model_json_schema(by_alias=True, mode="validation"))
    properties = {
        "apiVersion": {
            "type": "string",
            "description": "The versioned schema of this representation of the object.",
        },
        "kind": {"type": "string", "description": "The REST resource this object represents."},
        "metadata": {"type": "object"},
    }
    properties.update(
        (name, value)
        for name, value in schema.get("properties", {}).items()
        if name not in properties
    )
    root: dict[str, Any] = {"type": "object", "properties": properties}
    if "description" in schema:
        root["description"] = schema["description"]
    required = [name for name in schema.get("required", ()) if name not in ("apiVersion", "kind")]
    if required:
        root["required"] = required
    if _VALIDATIONS in schema:
        root[_VALIDATIONS] = schema[_VALIDATIONS]
    served: dict[str, Any] = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
    }
    if printer_columns:
        served["additionalPrinterColumns"] = [
            c.to_dict() if isinstance(c, PrinterColumn) else dict(c) for c in printer_columns
        ]
    if "status" in properties:
        served["subresources"] = {"status": {}}
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": singular or kind.lower(),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    crd: dict[str, Any] = _fresh(
        {
            "apiVersion": CRD_API_VERSION,
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {
                "group": group,
                "names": names,
                "scope": scope,
                "versions": [served],
            },
        }
    )
    return crd


def core_crds() -> list[dict[str, Any]]:
    """The ``karpenter.sh/v1`` NodePool and NodeClaim CRDs."""
    # Imported here: the models import KubeSchema and cel from this module.
    from karpenter_core.apis.v1.nodeclaim import NODECLAIM_PRINTER_COLUMNS, NodeClaim
    from karpenter_core.apis.v1.nodepool import NODEPOOL_PRINTER_COLUMNS, NodePool

    return [
        generate_crd(
            NodePool,
            group="karpenter.sh",
            kind="NodePool",
            plural="nodepools",
            printer_columns=NODEPOOL_PRINTER_COLUMNS,
            categories=("karpenter",),
        ),
        generate_crd(
            NodeClaim,
            group="karpenter.sh",
            kind="NodeClaim",
            plural="nodeclaims",
            printer_columns=NODECLAIM_PRINTER_COLUMNS,
            categories=("karpenter",),
        ),
    ]
