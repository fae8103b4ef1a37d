"""The SDK's NodeClass CRD writer: the files shipped in the providers are what it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from karpenter_core.cloudprovider import registry
from karpenter_core.sdk import crds
from karpenter_core.sdk.record import API_VERSION, NodeClassInfo, ProviderRecord


@pytest.mark.parametrize("provider", ["aws", "azure", "gcp", "kwok"])
def test_the_shipped_crds_are_what_the_writer_writes(provider: str) -> None:
    record = registry.discover().records[provider]
    assert record.node_classes
    for info in record.node_classes:
        path = crds.crd_path(info)
        assert path.name == f"{info.group}_{info.plural}.yaml"
        assert path.read_text(encoding="utf-8") == crds.crd_file(provider, info), (
            f"{path} is stale; regenerate it with python -m karpenter_core.sdk.crds {provider}"
        )


def test_write_crds_writes_each_kind_into_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kwok = registry.discover().records["kwok"]
    info: NodeClassInfo = kwok.node_classes[0]
    monkeypatch.setattr(crds, "crd_path", lambda i: tmp_path / "crds" / f"{i.plural}.yaml")
    record = ProviderRecord(
        name="kwok", factory=kwok.factory, node_classes=[info], api_version=API_VERSION
    )
    (written,) = crds.write_crds(record)
    assert written == tmp_path / "crds" / "kwoknodeclasses.yaml"
    text = written.read_text(encoding="utf-8")
    assert text.startswith("# Generated from karpenter_kwok.nodeclass: ")
    assert text == crds.crd_file("kwok", info)


def test_main_names_an_unknown_provider(capsys: pytest.CaptureFixture[str]) -> None:
    assert crds.main(["nosuch"]) == 2
    err = capsys.readouterr().err
    assert "unknown provider(s): nosuch" in err and "kwok" in err
    assert crds.main([]) == 2
