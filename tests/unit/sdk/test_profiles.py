"""The SDK's conformance-profile helpers: the environment overlay and NodeClass manifests."""

from __future__ import annotations

import os

import pytest

from karpenter_core.sdk.profiles import (
    TRANSITION_TIME,
    EnvironOverlay,
    condition,
    is_ready,
    respecified,
)


def test_the_overlay_restores_what_each_name_had_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KARPENTER_TEST_KEPT", "before")
    monkeypatch.delenv("KARPENTER_TEST_NEW", raising=False)
    overlay = EnvironOverlay()
    overlay.set({"KARPENTER_TEST_KEPT": "during", "KARPENTER_TEST_NEW": "x"})
    overlay.set({"KARPENTER_TEST_KEPT": "again"})
    assert os.environ["KARPENTER_TEST_KEPT"] == "again"
    overlay.restore()
    assert os.environ["KARPENTER_TEST_KEPT"] == "before"
    assert "KARPENTER_TEST_NEW" not in os.environ
    os.environ["KARPENTER_TEST_KEPT"] = "later"
    overlay.restore()  # forgotten: restores nothing again
    assert os.environ["KARPENTER_TEST_KEPT"] == "later"


def test_a_condition_as_a_manifest_has_it() -> None:
    assert condition("Ready", False, "SubnetsNotFound", "no subnet", 3) == {
        "type": "Ready",
        "status": "False",
        "reason": "SubnetsNotFound",
        "message": "no subnet",
        "lastTransitionTime": TRANSITION_TIME,
        "observedGeneration": 3,
    }
    assert "observedGeneration" not in condition("Ready", True, "Ready")


def test_ready_and_a_respecified_copy() -> None:
    manifest = {
        "metadata": {"name": "default", "generation": 2},
        "spec": {"a": 1},
        "status": {"conditions": [condition("Ready", True, "Ready")]},
    }
    changed = respecified(manifest)
    changed["spec"]["a"] = 2
    assert changed["metadata"]["generation"] == 3
    assert manifest["spec"] == {"a": 1} and manifest["metadata"]["generation"] == 2
    assert is_ready(manifest)
    assert not is_ready({"status": {"conditions": [condition("Ready", False, "No")]}})
    assert not is_ready({"metadata": {}})
    assert respecified({"metadata": {}})["metadata"]["generation"] == 2
