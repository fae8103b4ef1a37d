"""The one error the manifest reader raises for a user mistake."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ManifestError", "describe_value"]


class ManifestError(Exception):
    """A manifest cannot be used; ``str()`` is one line naming the file, the object and the field.

    ``source`` is the file ("<stdin>" for standard input), ``obj`` describes the object
    (``Deployment default/web`` or ``document 2``), ``field`` is its JSON path; the last two may be
    empty when the problem is with the whole file or object.
    """

    def __init__(self, source: str, obj: str, field: str, message: str) -> None:
        self.source = source
        self.obj = obj
        self.field = field
        self.message = " ".join(message.split())
        super().__init__(": ".join(part for part in (source, obj, field, self.message) if part))


def describe_value(value: Any) -> str:
    """A short description of a parsed YAML value for messages: ``a mapping``, ``'text'``, ``3``."""
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)
