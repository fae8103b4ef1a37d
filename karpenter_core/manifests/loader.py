"""Reading Kubernetes manifests: files, directories or stdin; multi-document YAML and Lists."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from karpenter_core.manifests.errors import ManifestError
from karpenter_core.scheduling.snapshot import describe_value

__all__ = ["STDIN", "Document", "load_default_scenario", "load_documents", "parse_documents"]

STDIN = "-"
"""The path that means standard input."""

_STDIN_NAME = "<stdin>"
_EXTENSIONS = (".yaml", ".yml", ".json")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_NAMESPACED = frozenset(
    {
        "ConfigMap",
        "CronJob",
        "DaemonSet",
        "Deployment",
        "Job",
        "PersistentVolumeClaim",
        "Pod",
        "PodDisruptionBudget",
        "ReplicaSet",
        "Secret",
        "Service",
        "StatefulSet",
    }
)
"""Kinds shown as ``namespace/name`` even when the manifest leaves the namespace out."""


@dataclass(frozen=True, slots=True)
class Document:
    """One Kubernetes object and where it came from.

    ``index`` is the position of its YAML document in the file (from 0); ``item`` is its position
    in a List's ``items`` (None when the document is the object itself).
    """

    source: str
    index: int
    obj: dict[str, Any]
    item: int | None = None

    @property
    def kind(self) -> str:
        """The object's kind."""
        return str(self.obj["kind"])

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The object's metadata (empty if absent)."""
        return self.obj.get("metadata") or {}

    @property
    def name(self) -> str:
        """``metadata.name`` ("" if absent)."""
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        """``metadata.namespace``, "default" when absent."""
        return str(self.metadata.get("namespace") or "default")

    def describe(self) -> str:
        """``Kind namespace/name`` (``Kind name`` if cluster-scoped), or its document number."""
        where = _where(self.index, self.item)
        if not self.name:
            return f"{self.kind} ({where})"
        if self.kind in _NAMESPACED or self.metadata.get("namespace"):
            return f"{self.kind} {self.namespace}/{self.name}"
        return f"{self.kind} {self.name}"

    def error(self, field: str, message: str) -> ManifestError:
        """A ``ManifestError`` about ``field`` (a JSON path, may be "") of this object."""
        return ManifestError(self.source, self.describe(), field, message)


def load_documents(paths: Sequence[str]) -> list[Document]:
    """Read every object in ``paths`` ("-" is stdin; a directory means its YAML and JSON files).

    Raises ``ManifestError`` for a missing or unreadable file, invalid YAML, or a document that is
    not a Kubernetes object.
    """
    documents: list[Document] = []
    for path in paths:
        for source, text in _read(path):
            documents.extend(parse_documents(text, source))
    return documents


def load_default_scenario(text: str | None = None) -> list[Document]:
    """A provider's default scenario ``text``, else the embedded one (a NodePool, its
    KWOKNodeClass and a burst of pods)."""
    if text is None:
        scenario = resources.files("karpenter_core").joinpath("scenarios", "default.yaml")
        text = scenario.read_text(encoding="utf-8")
    return parse_documents(text, "default scenario")


def parse_documents(text: str, source: str) -> list[Document]:
    """The objects in YAML (or JSON) ``text``; ``source`` names it in errors."""
    documents: list[Document] = []
    try:
        for index, obj in enumerate(yaml.load_all(text, Loader=_LOADER)):
            if obj is None:
                continue
            documents.extend(_objects(source, index, obj))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = err.problem or err.context or "cannot be parsed"
        raise ManifestError(source, where, "", f"invalid YAML: {problem}") from None
    except yaml.YAMLError as err:
        raise ManifestError(source, "", "", f"invalid YAML: {err}") from None
    return documents


def _read(path: str) -> Iterator[tuple[str, str]]:
    if path == STDIN:
        yield _STDIN_NAME, sys.stdin.read()
        return
    target = Path(path)
    if target.is_dir():
        files = sorted(p for p in target.iterdir() if p.suffix in _EXTENSIONS and p.is_file())
        if not files:
            raise ManifestError(path, "", "", "directory has no .yaml, .yml or .json files")
        for file in files:
            yield str(file), _read_file(file, str(file))
        return
    yield path, _read_file(target, path)


def _read_file(target: Path, source: str) -> str:
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(source, "", "", "no such file") from None
    except UnicodeDecodeError:
        raise ManifestError(source, "", "", "not UTF-8 text (expected YAML or JSON)") from None
    except OSError as err:
        raise ManifestError(source, "", "", err.strerror or str(err)) from None


def _objects(
    source: str, index: int, obj: Any, item: int | None = None, list_kind: str = ""
) -> Iterator[Document]:
    where = _where(index, item)
    if not isinstance(obj, dict):
        raise ManifestError(
            source,
            where,
            "",
            f"expected a Kubernetes object (a mapping), got {describe_value(obj)}",
        )
    if "kind" not in obj and list_kind:
        obj = {**obj, "kind": list_kind}
    kind = obj.get("kind")
    if not kind:
        raise ManifestError(source, where, "kind", "missing; every object needs a kind")
    if not isinstance(kind, str):
        raise ManifestError(source, where, "kind", f"expected a string, got {describe_value(kind)}")
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise ManifestError(
            source, where, "metadata", f"expected a mapping, got {describe_value(metadata)}"
        )
    for key in ("name", "namespace"):
        value = (metadata or {}).get(key)
        if value is not None and not isinstance(value, str):
            raise ManifestError(
                source, where, f"metadata.{key}", f"expected a string, got {describe_value(value)}"
            )
    if kind == "List" or (kind.endswith("List") and "items" in obj):
        if item is not None:
            raise ManifestError(source, where, "kind", f"a {kind} inside a List is not supported")
        items = obj.get("items") or []
        if not isinstance(items, list):
            raise ManifestError(
                source, where, "items", f"expected a list, got {describe_value(items)}"
            )
        element_kind = "" if kind == "List" else kind.removesuffix("List")
        for position, element in enumerate(items):
            yield from _objects(source, index, element, position, element_kind)
        return
    yield Document(source, index, obj, item)


def _where(index: int, item: int | None) -> str:
    return f"document {index + 1}" + (f", items[{item}]" if item is not None else "")
