"""The SDK's rules written once: the model checks what the CRD's CEL checks, with one message."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, ValidationError

from karpenter_core.apis.crdgen import structural_schema
from karpenter_core.sdk.rules import Rule, ruled

_SHORT = Rule("size(self) <= 3", "at most 3 characters", lambda value: len(value) <= 3)
_LOWER = Rule("self.lowerAscii() == self", "lower case only", lambda value: value.islower())


class Spec(BaseModel):
    name: Annotated[str, *ruled(_SHORT, _LOWER)] | None = None


def test_a_value_every_rule_holds_for_and_none_pass() -> None:
    assert Spec(name="abc").name == "abc"
    assert Spec().name is None


def test_each_failing_rule_says_its_message() -> None:
    with pytest.raises(ValidationError, match="at most 3 characters; lower case only"):
        Spec(name="ABCD")
    with pytest.raises(ValidationError, match="lower case only") as raised:
        Spec(name="AB")
    assert "at most 3" not in str(raised.value)


def test_the_crd_schema_carries_the_rules_as_cel() -> None:
    schema = structural_schema(Spec.model_json_schema(by_alias=True))
    assert schema["properties"]["name"]["x-kubernetes-validations"] == [
        {"rule": "size(self) <= 3", "message": "at most 3 characters"},
        {"rule": "self.lowerAscii() == self", "message": "lower case only"},
    ]
