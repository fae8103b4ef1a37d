"""Fields of a manifest that its kind does not have: a typo the simulation would otherwise ignore.

An object is compared with a structural OpenAPI schema, as the apiserver's strict field validation
does. The ``karpenter.sh`` kinds and the providers' NodeClasses use the schema of their CRD (made
from the same pydantic models); ``metadata`` and the core Kubernetes kinds use the API types of
the Kubernetes client (``kubernetes.client``), copied into ``k8s_types`` so that checking needs
no import of that large package: a field newer than that client reads as unknown. After upgrading
the client, ``write_types()`` writes ``k8s_types`` again (then ``ruff format`` it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from pprint import pformat
from typing import Any

from pydantic import BaseModel

from karpenter_core.apis.crdgen import structural_schema
from karpenter_core.manifests.k8s_types import TYPES

__all__ = [
    "CORE_KINDS",
    "client_types",
    "core_schema",
    "model_schema",
    "unknown_fields",
    "write_types",
]

Schema = Mapping[str, Any]

CORE_KINDS = (
    "DaemonSet",
    "Deployment",
    "Job",
    "Node",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodDisruptionBudget",
    "ReplicaSet",
    "StatefulSet",
    "StorageClass",
)
"""The core kinds the simulation reads; their ``v1`` types are in ``k8s_types``."""

_ANY: Schema = {"x-kubernetes-preserve-unknown-fields": True}
_LIST = re.compile(r"List\[(.+)\]")
_MAP = re.compile(r"Dict\[str, (.+)\]")


def unknown_fields(obj: Mapping[str, Any], schema: Schema) -> list[str]:
    """The paths (``spec.template.spec.containers[0].resource``) of fields ``schema`` lacks."""
    return list(_unknown(obj, schema, ""))


def _unknown(value: Any, schema: Schema, path: str) -> Iterator[str]:
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                yield from _unknown(item, properties[key], f"{path}.{key}" if path else str(key))
            elif isinstance(extra, Mapping):
                yield from _unknown(item, extra, f"{path}[{key}]")
            elif properties is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{path}.{key}" if path else str(key)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from _unknown(item, schema["items"], f"{path}[{index}]")


@cache
def model_schema(model: type[BaseModel]) -> Schema:
    """The schema of a root object served by a CRD made from ``model`` (its ``metadata`` that of
    Kubernetes' ObjectMeta)."""
    schema = structural_schema(model.model_json_schema(by_alias=True, mode="validation"))
    properties = {
        **schema.get("properties", {}),
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": _type_schema("V1ObjectMeta"),
    }
    return {"type": "object", "properties": properties}


def core_schema(api_version: str, kind: str) -> Schema | None:
    """The schema of a core kind the simulation reads (``apps/v1`` ``Deployment``), else None."""
    if kind not in CORE_KINDS or api_version.rpartition("/")[2] != "v1":
        return None
    return _type_schema(f"V1{kind}")


@cache
def _type_schema(type_name: str) -> Schema:
    """A structural schema for a client type (``V1PodSpec``, ``List[V1Container]``,
    ``Dict[str, str]``, ``str``)."""
    if match := _LIST.fullmatch(type_name):
        return {"type": "array", "items": _type_schema(match[1])}
    if match := _MAP.fullmatch(type_name):
        return {"type": "object", "additionalProperties": _type_schema(match[1])}
    fields = TYPES.get(type_name)
    if fields is None:
        return _ANY  # a scalar, or ``object`` (int-or-string, free-form JSON)
    return {
        "type": "object",
        "properties": {name: _type_schema(kind) for name, kind in fields.items()},
    }


def client_types() -> dict[str, dict[str, str]]:
    """The types of ``metadata`` and of ``CORE_KINDS`` in the installed Kubernetes client, each
    as its fields (JSON name) and their types."""
    from kubernetes import client

    types: dict[str, dict[str, str]] = {}
    pending = ["V1ObjectMeta", *(f"V1{kind}" for kind in CORE_KINDS)]
    while pending:
        name = pending.pop()
        model = getattr(client, name, None)
        if name in types or not isinstance(getattr(model, "openapi_types", None), dict):
            continue
        attributes: dict[str, str] = model.attribute_map  # type: ignore[union-attr]
        openapi: dict[str, str] = model.openapi_types  # type: ignore[union-attr]
        types[name] = {attributes[attr]: kind for attr, kind in sorted(openapi.items())}
        for kind in openapi.values():
            pending.extend(re.findall(r"\w+", kind))
    return dict(sorted(types.items()))


def write_types() -> Path:
    """Write ``k8s_types`` from the installed Kubernetes client; return its path."""
    from kubernetes import __version__

    target = Path(__file__).with_name("k8s_types.py")
    target.write_text(
        f'"""API types of the Kubernetes client {__version__}, for ``fields``.\n\n'
        'Generated by ``karpenter_core.manifests.fields.write_types()``; do not edit.\n"""\n\n'
        f"TYPES: dict[str, dict[str, str]] = {pformat(client_types(), width=99)}\n",
        encoding="utf-8",
    )
    return target
