"""Shared handling of botocore errors: which to catch, their code, and a readable message."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

AWS_ERRORS: tuple[type[Exception], ...] = (ClientError, BotoCoreError)
"""The botocore exceptions an AWS call can raise."""


def error_code(error: BaseException) -> str:
    """The AWS error code of a ``ClientError`` (``""`` for any other error)."""
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code") or "")
    return ""


def describe_error(action: str, error: BaseException) -> str:
    """``<action>: <Code>: <Message>`` for a ``ClientError``, ``<action>: <error>`` otherwise."""
    if not isinstance(error, ClientError) or not error_code(error):
        return f"{action}: {error}"
    detail = error.response.get("Error", {})
    message = str(detail.get("Message") or "")
    return f"{action}: {detail['Code']}: {message}" if message else f"{action}: {detail['Code']}"
