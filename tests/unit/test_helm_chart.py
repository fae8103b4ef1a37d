"""The Helm chart carries the same CRDs and RBAC as the packages, and only real settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from karpenter_aws.settings import OPTIONS
from karpenter_core.cli.rbac import rbac
from karpenter_core.operator.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "karpenter"
SYNC = "run `make chart` to copy them"

SOURCES = {
    CHART / "crds" / "karpenter.sh_nodepools.yaml": ROOT
    / "karpenter_core/crds/karpenter.sh_nodepools.yaml",
    CHART / "crds" / "karpenter.sh_nodeclaims.yaml": ROOT
    / "karpenter_core/crds/karpenter.sh_nodeclaims.yaml",
    CHART / "crds" / "karpenter.k8s.aws_ec2nodeclasses.yaml": ROOT
    / "providers/aws/karpenter_aws/crds/karpenter.k8s.aws_ec2nodeclasses.yaml",
}
RBAC_DIR = CHART / "files" / "rbac"


@pytest.mark.parametrize("copy", sorted(SOURCES), ids=lambda p: str(p.relative_to(CHART)))
def test_chart_copies_match_their_source(copy: Path) -> None:
    assert copy.read_text() == SOURCES[copy].read_text(), f"{copy} is stale: {SYNC}"


def test_chart_holds_every_crd() -> None:
    assert {p.name for p in (CHART / "crds").iterdir()} == {
        p.name for p in SOURCES if p.parent.name == "crds"
    }


def test_deployment_sets_only_known_environment_variables() -> None:
    template = (CHART / "templates" / "deployment.yaml").read_text()
    names = set(re.findall(r"- name: ([A-Z_]+)\n", template))
    known = {env for _, env, _ in Settings.options()} | {o.env for o in OPTIONS if o.env}
    assert "CLUSTER_NAME" in names and "INTERRUPTION_QUEUE" in names
    assert names - known - {"SYSTEM_NAMESPACE"} == set()


def test_chart_rbac_is_what_karpenter_rbac_writes_for_aws(tmp_path: Path) -> None:
    result = CliRunner().invoke(rbac, ["--provider", "aws", "--output-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = {p.name: p.read_text() for p in tmp_path.iterdir()}
    copied = {p.name: p.read_text() for p in RBAC_DIR.iterdir()}
    assert copied == written, f"{RBAC_DIR} is stale: {SYNC}"


def _rbac_objects() -> list[tuple[str, str]]:
    """(kind, name) of what templates/rbac.yaml renders: the document after each file's
    header, without those its regexMatch filter drops."""
    template = (CHART / "templates" / "rbac.yaml").read_text()
    dropped = re.search(r'regexMatch "([^"]+)"', template)
    assert dropped and '.Files.Glob "files/rbac/*.yaml"' in template, (
        "templates/rbac.yaml no longer has the expected shape"
    )
    objects = []
    for path in sorted(RBAC_DIR.glob("*.yaml")):
        doc = path.read_text().split("\n---\n")[1]
        if not re.search(dropped.group(1), doc):
            obj = yaml.safe_load(doc)
            objects.append((obj["kind"], obj["metadata"]["name"]))
    return objects


def _template_objects() -> list[tuple[str, str]]:
    """(kind, name) of the other templates (their kind and name lines are literal)."""
    objects = []
    for path in sorted((CHART / "templates").glob("*.yaml")):
        if path.name == "rbac.yaml":
            continue
        text = path.read_text()
        kind = re.search(r"^kind: (\w+)$", text, re.M)
        name = re.search(r"^  name: ([\w-]+)$", text, re.M)
        assert kind and name, f"{path.name}: no literal kind and name"
        objects.append((kind.group(1), name.group(1)))
    return objects


def test_every_rendered_object_is_unique_and_the_service_account_carries_the_annotations() -> None:
    objects = _rbac_objects() + _template_objects()
    assert len(objects) == len(set(objects)), sorted(objects)
    assert ("ServiceAccount", "karpenter") in _template_objects()
    assert ("ClusterRoleBinding", "karpenter-aws") in _rbac_objects()
    assert ("ClusterRole", "karpenter") in _rbac_objects()
    service_account = (CHART / "templates" / "serviceaccount.yaml").read_text()
    assert "serviceAccount.annotations" in service_account


def test_values_parse_and_the_deployment_requires_a_cluster_name() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["settings"]["clusterName"] == ""
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert re.search(r"if not \.Values\.settings\.clusterName \}\}\n\{\{- fail ", deployment)
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["apiVersion"] == "v2"
