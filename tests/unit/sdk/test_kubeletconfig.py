"""The SDK's upstream kubelet settings model: its checks and the CRD keywords they carry."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from karpenter_core.apis.crdgen import structural_schema
from karpenter_core.sdk.kubeletconfig import (
    KubeletConfiguration,
    explicit_nulls,
    keys_in,
    listed,
    matching,
)


def test_settings_parse_by_their_kubelet_names() -> None:
    config = KubeletConfiguration.model_validate(
        {
            "maxPods": 110,
            "systemReserved": {"cpu": "100m", "memory": "1Gi"},
            "evictionSoft": {"memory.available": "5%"},
            "evictionSoftGracePeriod": {"memory.available": "1m30s"},
            "cpuCFSQuota": False,
        }
    )
    assert config.max_pods == 110
    assert config.system_reserved == {"cpu": "100m", "memory": "1Gi"}
    assert config.cpu_cfs_quota is False


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"systemReserved": {"gpu": "1"}}, "valid keys for systemReserved are"),
        ({"kubeReserved": {"cpu": "-1"}}, "'-1' is not a non-negative resource quantity"),
        ({"evictionHard": {"memory.available": "5 %"}}, "is not a quantity or a percentage"),
        ({"evictionSoft": {"memory.available": "5%"}}, "have no evictionSoftGracePeriod"),
        ({"evictionSoftGracePeriod": {"memory.available": "1m"}}, "have no evictionSoft"),
        (
            {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60},
            "imageGCHighThresholdPercent (50) must be greater than imageGCLowThresholdPercent (60)",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_problem(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        KubeletConfiguration.model_validate(settings)


def test_the_crd_schema_carries_the_rules() -> None:
    schema = structural_schema(KubeletConfiguration.model_json_schema(by_alias=True))
    rules = [rule["message"] for rule in schema["x-kubernetes-validations"]]
    assert "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod" in rules
    reserved = schema["properties"]["systemReserved"]
    assert reserved["x-kubernetes-validations"][0]["rule"] == (
        "self.all(x, x in ['cpu', 'memory', 'ephemeral-storage', 'pid'])"
    )
    assert "pattern" in reserved["additionalProperties"]


def test_the_helpers() -> None:
    assert listed(("a", "b")) == "'a', 'b'"
    assert matching("[a-z]+", "a word")("abc") is None
    assert matching("[a-z]+", "a word")("ab1") == "'ab1' is not a word"
    assert explicit_nulls({"a": 1}, ("b_c", "bC")) == {"a": 1, "bC": None}
    assert explicit_nulls({"b_c": 2}, ("b_c", "bC")) == {"b_c": 2}
    _, schema = keys_in(("x",), "m")
    assert schema.rules[0]["message"] == "valid keys for m are ['x']"
