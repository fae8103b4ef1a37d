"""The warnings a provider logs while a command builds it offline (a default it assumed, a
region it could not serve), kept to be shown as the command's notes."""

from __future__ import annotations

import logging

__all__ = ["WarningCollector", "collecting_logger"]


class WarningCollector(logging.Handler):
    """Keeps the messages of WARNING and above."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def collecting_logger(name: str, collector: WarningCollector) -> logging.Logger:
    """The logger ``name``, sending its records to ``collector`` only (not to the root's
    handlers, so nothing reaches the command's output twice)."""
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.handlers = [collector]
    return logger
