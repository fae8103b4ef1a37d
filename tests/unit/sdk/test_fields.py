"""The SDK's field validators: a check's words become the field's validation error."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, ValidationError

from karpenter_core.sdk.fields import checked


def _short(value: str) -> str | None:
    return None if len(value) <= 3 else f"{value!r} is longer than 3 characters"


class Spec(BaseModel):
    name: Annotated[str | None, checked(_short)] = None


def test_a_good_value_and_none_pass() -> None:
    assert Spec(name="abc").name == "abc"
    assert Spec(name=None).name is None


def test_a_bad_value_fails_with_the_checks_words() -> None:
    with pytest.raises(ValidationError, match="'abcd' is longer than 3 characters"):
        Spec(name="abcd")
