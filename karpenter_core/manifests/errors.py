"""The one error the manifest reader raises for a user mistake."""

from __future__ import annotations

__all__ = ["ManifestError"]


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
