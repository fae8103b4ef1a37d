"""The controller's RBAC: the core's objects plus the ClusterRole a provider's record ships."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from karpenter_core import rbac
from karpenter_core.cli.rbac import rbac as rbac_command
from karpenter_core.cloudprovider import registry
from karpenter_core.cloudprovider.plugin import API_VERSION, ProviderRecord

ROLE = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: anything
rules:
  - apiGroups: [example.dev]
    resources: [examplenodeclasses]
    verbs: [get, list, watch]
"""


def _record(role: Path | None) -> ProviderRecord:
    return ProviderRecord(
        name="example", factory=lambda _: None, cluster_role=role, api_version=API_VERSION
    )  # type: ignore[arg-type,return-value]


def _by_kind_and_name(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_an_out_of_tree_provider_role_is_published_and_bound(tmp_path: Path) -> None:
    role = tmp_path / "clusterrole.yaml"
    role.write_text(ROLE)
    docs = _by_kind_and_name(rbac.manifests("ops", _record(role)))
    published = docs[("ClusterRole", "karpenter-example")]
    assert published["rules"] == yaml.safe_load(ROLE)["rules"]
    binding = docs[("ClusterRoleBinding", "karpenter-example")]
    assert binding["roleRef"]["name"] == "karpenter-example"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "karpenter", "namespace": "ops"}
    ]
    assert ("ClusterRole", "karpenter") in docs and ("Role", "karpenter") in docs


def test_a_provider_without_a_role_adds_nothing() -> None:
    assert rbac.manifests(provider=_record(None)) == rbac.manifests()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: ClusterRole\nrules: []\n", "rules must be a non-empty list"),
        (ROLE + "---\n" + ROLE, "expected exactly one ClusterRole"),
        ("kind: Role\nrules: [{}]\n", "expected exactly one ClusterRole"),
        ("rules: [\n", "not valid YAML"),
    ],
)
def test_a_bad_role_file_names_the_provider_and_the_file(
    tmp_path: Path, text: str, message: str
) -> None:
    role = tmp_path / "clusterrole.yaml"
    role.write_text(text)
    with pytest.raises(rbac.RBACError, match=message) as caught:
        rbac.manifests(provider=_record(role))
    assert "provider 'example'" in str(caught.value) and str(role) in str(caught.value)


def test_in_tree_providers_ship_their_roles_in_their_own_packages() -> None:
    for name, package in (("kwok", "karpenter_kwok"), ("aws", "karpenter_aws")):
        record = registry.discover().provider(name)
        assert record.cluster_role is not None and package in str(record.cluster_role)
        docs = _by_kind_and_name(rbac.manifests(provider=name))
        assert ("ClusterRoleBinding", f"karpenter-{name}") in docs


def test_cli_prints_core_and_provider_rbac(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    role = tmp_path / "clusterrole.yaml"
    role.write_text(ROLE)
    records = {"example": _record(role)}
    found = SimpleNamespace(provider=lambda name: records[name])
    monkeypatch.setattr("karpenter_core.cli.rbac.discover", lambda: found)
    result = CliRunner().invoke(rbac_command, ["--provider", "example", "--namespace", "ops"])
    assert result.exit_code == 0, result.output
    docs = _by_kind_and_name(list(yaml.safe_load_all(result.output)))
    assert ("ClusterRole", "karpenter") in docs and ("ClusterRole", "karpenter-example") in docs
    assert docs[("ServiceAccount", "karpenter")]["metadata"]["namespace"] == "ops"


def test_cli_without_a_provider_prints_the_core_only() -> None:
    result = CliRunner().invoke(rbac_command, [])
    assert result.exit_code == 0, result.output
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(result.output)}
    assert names == {"karpenter"}


def test_cli_reports_an_unknown_provider_and_a_bad_role_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = CliRunner().invoke(rbac_command, ["--provider", "nope"])
    assert result.exit_code == 1 and "unknown provider 'nope'" in result.output
    role = tmp_path / "clusterrole.yaml"
    role.write_text("kind: Role\n")
    found = SimpleNamespace(provider=lambda name: _record(role))
    monkeypatch.setattr("karpenter_core.cli.rbac.discover", lambda: found)
    result = CliRunner().invoke(rbac_command, ["--provider", "example"])
    assert result.exit_code == 1 and "expected exactly one ClusterRole" in result.output
    assert "Traceback" not in result.output


def test_cli_writes_one_file_per_object(tmp_path: Path) -> None:
    result = CliRunner().invoke(rbac_command, ["--provider", "kwok", "--output-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in tmp_path.iterdir()} == {
        "clusterrole_karpenter.yaml",
        "role_karpenter.yaml",
        "serviceaccount_karpenter.yaml",
        "clusterrolebinding_karpenter.yaml",
        "rolebinding_karpenter.yaml",
        "clusterrole_karpenter-kwok.yaml",
        "clusterrolebinding_karpenter-kwok.yaml",
    }
    written = yaml.safe_load_all((tmp_path / "clusterrole_karpenter-kwok.yaml").read_text())
    assert [d["kind"] for d in written if d] == ["ClusterRole"]
