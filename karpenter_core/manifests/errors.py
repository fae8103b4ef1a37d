"""The one error the manifest reader raises for a user mistake."""

from __future__ import annotations

__all__ = ["ManifestError", "one_line"]


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
        parts = (one_line(part) for part in (source, obj, field, self.message))
        super().__init__(": ".join(part for part in parts if part))


def one_line(text: str) -> str:
    """``text`` with each character that is not printable (line breaks among them: ``\\n``,
    ``\\x85``, ``\\u2028``) written as its escape, so that it stays on one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
