"""Helpers to show the end of a process log in error messages."""

from __future__ import annotations

from pathlib import Path


def tail(path: Path, lines: int = 25) -> str:
    """Last ``lines`` lines of a log file, or a note that it is missing."""
    if not path.is_file():
        return f"(no log at {path})"
    with path.open("rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - 64 * 1024))
        text = handle.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])
