"""Writing the files commands produce (``crds --output-dir``, ``rbac --output-dir``, ``chart``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8) so that a reader, or a run that fails or is stopped
    half-way, sees the old file or the new one, never part of it: the text goes to a temporary
    file in the same directory, which then replaces ``path`` (keeping its permissions, or the
    umask's for a new file). An ``OSError`` names ``path``, not the temporary file."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, _mode(path))
        os.replace(temporary, path)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename in (None, temporary):
            error.filename = str(path)
        raise


def _mode(path: Path) -> int:
    """The permissions ``path`` has, or those a new file gets under the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
