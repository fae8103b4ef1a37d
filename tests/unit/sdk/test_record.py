"""The SDK's helpers for the files a provider's record points at."""

from __future__ import annotations

import yaml

from karpenter_core.sdk.record import packaged_file, packaged_text


def test_packaged_file_and_text_read_the_providers_package() -> None:
    role = yaml.safe_load(packaged_file("karpenter_kwok", "rbac", "clusterrole.yaml").read_text())
    assert role["kind"] == "ClusterRole"
    read = packaged_text("karpenter_aws", "scenarios", "default.yaml")
    documents = [d for d in yaml.safe_load_all(read()) if d]
    assert any(d.get("kind") == "NodePool" for d in documents)
