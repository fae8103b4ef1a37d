"""Structured JSON logs, with context (controller, nodepool, nodeclaim) bound per reconcile.

Libraries log with the standard ``logging`` module and pass fields through ``extra``; the
application edge installs ``JSONFormatter``. ``bind(nodeclaim=...)`` adds fields to every record
logged in the current context (thread or task) until the block ends.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, TextIO

__all__ = ["JSONFormatter", "bind", "configure", "context"]

_CONTEXT: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "karpenter_log_context", default=MappingProxyType({})
)
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": 40}
# Attributes every LogRecord has; anything else came from ``extra``.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def context() -> Mapping[str, Any]:
    """The fields bound in the current context."""
    return _CONTEXT.get()


@contextlib.contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every log record (and metric label lookups) inside the block."""
    token = _CONTEXT.set(MappingProxyType({**_CONTEXT.get(), **fields}))
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, bound context, extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_CONTEXT.get())
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str = "info", stream: TextIO | None = None) -> None:
    """Send every ``karpenter`` log record to ``stream`` (stderr) as JSON at ``level``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("karpenter").setLevel(_LEVELS.get(level.lower(), logging.INFO))
