"""The Helm charts carry what `karpenter chart` generates, and values the schema describes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from karpenter_aws.settings import OPTIONS
from karpenter_core.cli.chart import GENERATED_DIRS, chart, chart_files
from karpenter_core.operator.settings import Settings
from karpenter_core.sdk.record import option_env

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "charts"
CHART = CHARTS / "karpenter"
SYNC = "run `make chart` to generate them"


def _committed() -> dict[str, str]:
    return {
        str(path.relative_to(CHARTS)): path.read_text()
        for directory in GENERATED_DIRS
        for path in sorted((CHARTS / directory).glob("*.yaml"))
    }


def test_the_committed_generated_files_are_what_karpenter_chart_writes() -> None:
    generated = chart_files("aws")
    committed = _committed()
    assert sorted(committed) == sorted(generated), SYNC
    stale = [path for path in generated if committed[path] != generated[path]]
    assert not stale, f"{stale} are stale: {SYNC}"


def test_karpenter_chart_replaces_stale_files(tmp_path: Path) -> None:
    stale = tmp_path / "karpenter" / "crds" / "karpenter.sh_provisioners.yaml"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    result = CliRunner().invoke(chart, ["--charts-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert not stale.exists()
    written = {
        str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*.yaml") if p.is_file()
    }
    assert written == chart_files("aws")


def test_the_crd_chart_holds_every_crd_with_the_annotations_value() -> None:
    crds = {p.name for p in (CHART / "crds").glob("*.yaml")}
    templates = sorted((CHARTS / "karpenter-crd" / "templates").glob("*.yaml"))
    assert crds and {p.name for p in templates} == crds
    for path in templates:
        assert "{{- with .Values.additionalAnnotations }}" in path.read_text(), path.name


def test_deployment_sets_only_known_environment_variables() -> None:
    template = (CHART / "templates" / "deployment.yaml").read_text()
    names = set(re.findall(r"- name: ([A-Z_]+)\n", template))
    known = {env for _, env, _ in Settings.options()} | {option_env("aws", o.name) for o in OPTIONS}
    assert {"CLUSTER_NAME", "KARPENTER_AWS_INTERRUPTION_QUEUE", "FEATURE_GATES"} <= names
    assert names - known - {"SYSTEM_NAMESPACE"} == set()


def test_deployment_passes_provider_options_by_their_prefixed_names() -> None:
    template = (CHART / "templates" / "deployment.yaml").read_text()
    names = set(re.findall(r"- name: ([A-Z_]+)\n", template))
    former = {o.env for o in OPTIONS} - {env for _, env, _ in Settings.options()}
    assert names & former == set()
    assert "KARPENTER_AWS_CLUSTER_NAME" in names


def _paths(values: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the values' leaves (an empty map or a list is a leaf)."""
    if isinstance(values, dict) and values and prefix.count(".") < 3:
        return [p for key, value in values.items() for p in _paths(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def _schema_at(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    for key in path.split("."):
        properties = schema.get("properties")
        if properties is None:
            return schema  # a free-form object: its keys are Kubernetes fields
        if key not in properties:
            return None
        schema = properties[key]
    return schema


def test_every_value_is_described_by_the_schema_and_closed_maps_refuse_others() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    missing = [path for path in _paths(values) if _schema_at(schema, path) is None]
    assert not missing, f"values.yaml has keys values.schema.json lacks: {missing}"
    assert schema["additionalProperties"] is False
    assert schema["properties"]["settings"]["additionalProperties"] is False
    gates = schema["properties"]["settings"]["properties"]["featureGates"]
    assert gates["additionalProperties"] is False
    assert gates["properties"]["nodeOverlay"]["const"] is False
