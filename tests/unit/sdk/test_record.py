"""The SDK's helpers for the files a provider's record points at, and for an offline context."""

from __future__ import annotations

import pytest
import yaml

from karpenter_core.sdk.record import (
    ProviderContext,
    is_offline,
    offline_default,
    offline_fallback,
    packaged_file,
    packaged_text,
)


def test_packaged_file_and_text_read_the_providers_package() -> None:
    role = yaml.safe_load(packaged_file("karpenter_kwok", "rbac", "clusterrole.yaml").read_text())
    assert role["kind"] == "ClusterRole"
    read = packaged_text("karpenter_aws", "scenarios", "default.yaml")
    documents = [d for d in yaml.safe_load_all(read()) if d]
    assert any(d.get("kind") == "NodePool" for d in documents)


def test_a_context_without_cluster_or_clients_is_offline() -> None:
    assert is_offline(ProviderContext())
    assert not is_offline(ProviderContext(kube_client=object()))
    assert not is_offline(ProviderContext(clients={"ec2": object()}))


def test_an_offline_default_fills_only_a_missing_option_offline() -> None:
    asked: list[str] = []

    def default() -> str:
        asked.append("region")
        return "us-east-1"

    offline = offline_default(ProviderContext(settings={"x": "1"}), "region", default)
    assert offline.settings == {"x": "1", "region": "us-east-1"}
    given = ProviderContext(settings={"region": "eu-west-1"})
    assert offline_default(given, "region", default) is given
    live = ProviderContext(kube_client=object())
    assert offline_default(live, "region", default) is live
    assert asked == ["region"]


def test_an_offline_fallback_is_logged_when_used(caplog: pytest.LogCaptureFixture) -> None:
    offline = offline_fallback(ProviderContext(), "region", "us-central1", "region (--region)")
    assert offline.settings == {"region": "us-central1"}
    assert "no region (--region) is configured; using us-central1" in caplog.text
    given = ProviderContext(settings={"region": "europe-west4"})
    assert offline_fallback(given, "region", "us-central1", "region") is given
