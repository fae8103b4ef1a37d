"""Validators of NodeClass model fields: a field's value is checked by a function that words
the problem (or returns None), and pydantic reports the words against the field's path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import AfterValidator

__all__ = ["checked"]


def checked(check: Callable[[Any], str | None]) -> AfterValidator:
    """A validator raising the message ``check`` returns for a bad value (None passes
    unchecked), for ``Annotated[str, checked(...)]``."""

    def run(value: Any) -> Any:
        if value is not None:
            error = check(value)
            if error is not None:
                raise ValueError(error)
        return value

    return AfterValidator(run)
