"""The SDK's kubelet command-line pieces: flags of set values, and taints."""

from __future__ import annotations

from karpenter_core.apis.v1.common import Taint
from karpenter_core.sdk.kubelet import kubelet_flags, taint_text


def test_flags_of_the_set_values_in_order() -> None:
    flags = kubelet_flags(
        ("--max-pods", 110),
        ("--pods-per-core", None),
        ("--cpu-cfs-quota", False),
        ("--cpu-manager-policy", "static"),
        ("--image-gc-high-threshold", 0),
    )
    assert flags == [
        "--max-pods=110",
        "--cpu-cfs-quota=false",
        "--cpu-manager-policy=static",
        "--image-gc-high-threshold=0",
    ]
    assert kubelet_flags() == []


def test_a_taint_as_register_with_taints_takes_it() -> None:
    assert taint_text(Taint(key="gpu", value="true", effect="NoSchedule")) == "gpu=true:NoSchedule"
    assert taint_text(Taint(key="dedicated", effect="NoExecute")) == "dedicated:NoExecute"
