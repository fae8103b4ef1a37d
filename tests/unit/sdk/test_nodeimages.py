"""The SDK's node image requirement: parsed and written by its Kubernetes names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from karpenter_core.sdk.nodeimages import NodeSelectorRequirement


def test_a_requirement_round_trips_and_exists_needs_no_values() -> None:
    text = {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
    assert NodeSelectorRequirement.model_validate(text).model_dump(by_alias=True) == text
    assert NodeSelectorRequirement(key="gpu", operator="Exists").values == []
    with pytest.raises(ValidationError, match="operator"):
        NodeSelectorRequirement.model_validate({"key": "k", "operator": "Like"})
