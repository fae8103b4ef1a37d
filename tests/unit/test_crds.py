"""CRD generation: golden files, structural schemas, CEL rules, printer columns, the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Literal

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, Field

from karpenter_core.apis.crdgen import (
    CRDSchemaError,
    KubeSchema,
    PrinterColumn,
    cel,
    core_crds,
    generate_crd,
)
from karpenter_core.apis.v1.common import Quantity
from karpenter_core.cli.crds import FILE_HEADER, crd_filename, crds, render_crd
from karpenter_core.cloudprovider.crds import provider_crds

CRD_DIR = Path(__file__).resolve().parents[2] / "karpenter_core" / "crds"
REGENERATE = "karpenter crds --core-only --output-dir karpenter_core/crds"

# Keywords a structural schema node may carry (apiextensions.k8s.io/v1 JSONSchemaProps, less the
# ones the apiserver refuses or that make no sense here).
ALLOWED_KEYWORDS = {
    "description",
    "type",
    "format",
    "default",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "nullable",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
}


def by_kind() -> dict[str, dict[str, Any]]:
    return {crd["spec"]["names"]["kind"]: crd for crd in core_crds()}


def root_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[*]")


def rules_at(schema: dict[str, Any], path: str) -> dict[str, str]:
    """CEL rule -> message of the node at ``path``."""
    node = dict(walk(schema))[path]
    return {rule["rule"]: rule["message"] for rule in node.get("x-kubernetes-validations", [])}


def structural_violations(crd: dict[str, Any]) -> list[str]:
    problems = []
    for path, node in walk(root_schema(crd)):
        where = path or "<root>"
        unknown = set(node) - ALLOWED_KEYWORDS
        if unknown:
            problems.append(
                f"{where}: keywords the apiserver refuses or pydantic leaked: {unknown}"
            )
        if node.get("type") == "null" or isinstance(node.get("type"), list):
            problems.append(f"{where}: type {node['type']!r}")
        if "anyOf" in node and node["anyOf"] != [{"type": "integer"}, {"type": "string"}]:
            problems.append(f"{where}: anyOf other than int-or-string: {node['anyOf']}")
        if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
            problems.append(f"{where}: anyOf without x-kubernetes-int-or-string")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: properties together with additionalProperties")
        if not isinstance(node.get("items", {}), dict):
            problems.append(f"{where}: array-form items")
        if not (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ):
            problems.append(f"{where}: no type")
        if node.get("x-kubernetes-list-type") == "map":
            required = set(node["items"].get("required", ()))
            missing = set(node["x-kubernetes-list-map-keys"]) - required
            if missing:
                problems.append(f"{where}: list-map keys {missing} are not required")
        for rule in node.get("x-kubernetes-validations", []):
            if not rule.get("rule") or not rule.get("message"):
                problems.append(f"{where}: CEL rule without rule or message: {rule}")
    return problems


# Golden files


@pytest.mark.parametrize("crd", core_crds(), ids=crd_filename)
def test_golden_file_matches_generator(crd: dict[str, Any]) -> None:
    path = CRD_DIR / crd_filename(crd)
    expected = FILE_HEADER + render_crd(crd)
    assert path.is_file(), f"{path} is missing; regenerate with: {REGENERATE}"
    assert path.read_text() == expected, (
        f"{path.name} is stale: the models changed; regenerate with: {REGENERATE}"
    )


def test_no_stale_golden_files() -> None:
    expected = {crd_filename(crd) for crd in core_crds()}
    assert {path.name for path in CRD_DIR.glob("*.yaml")} == expected


def test_golden_files_parse_back_to_the_generated_crds() -> None:
    for crd in core_crds():
        assert yaml.safe_load((CRD_DIR / crd_filename(crd)).read_text()) == crd


# Structure


@pytest.mark.parametrize("crd", core_crds(), ids=crd_filename)
def test_schema_is_structural(crd: dict[str, Any]) -> None:
    assert structural_violations(crd) == []


def test_structural_check_catches_pydantic_leftovers() -> None:
    crd = by_kind()["NodePool"]
    spec = root_schema(crd)["properties"]["spec"]["properties"]
    spec["weight"] = {"anyOf": [{"type": "integer"}, {"type": "null"}], "title": "Weight"}
    spec["limits"]["properties"] = {"cpu": {"type": "string"}}
    spec["budgets"] = {"type": "array", "items": {"$ref": "#/$defs/Budget"}, "uniqueItems": True}
    problems = "\n".join(structural_violations(crd))
    for leak in ("title", "$ref", "uniqueItems", "anyOf other", "additionalProperties"):
        assert leak in problems


@pytest.mark.parametrize("crd", core_crds(), ids=crd_filename)
def test_crd_metadata(crd: dict[str, Any]) -> None:
    kind = crd["spec"]["names"]["kind"]
    plural = kind.lower() + "s"
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.karpenter.sh"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        "categories": ["karpenter"],
    }
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    root = root_schema(crd)
    assert root["required"] == ["spec"]
    assert root["properties"]["metadata"] == {"type": "object"}


def test_printer_columns_as_upstream() -> None:
    crds_ = by_kind()
    columns = {
        kind: [
            (c["name"], c["jsonPath"])
            for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
            if not c.get("priority")
        ]
        for kind, crd in crds_.items()
    }
    ready = '.status.conditions[?(@.type=="Ready")].status'
    assert columns["NodeClaim"] == [
        ("Type", r".metadata.labels.node\.kubernetes\.io/instance-type"),
        ("Capacity", r".metadata.labels.karpenter\.sh/capacity-type"),
        ("Zone", r".metadata.labels.topology\.kubernetes\.io/zone"),
        ("Node", ".status.nodeName"),
        ("Ready", ready),
        ("Age", ".metadata.creationTimestamp"),
    ]
    assert columns["NodePool"] == [
        ("NodeClass", ".spec.template.spec.nodeClassRef.name"),
        ("Nodes", ".status.nodes"),
        ("Ready", ready),
        ("Age", ".metadata.creationTimestamp"),
    ]


def test_defaults_as_upstream() -> None:
    spec = root_schema(by_kind()["NodePool"])["properties"]["spec"]["properties"]
    disruption = spec["disruption"]
    assert disruption["default"] == {"consolidateAfter": "0s"}
    assert disruption["properties"]["consolidateAfter"]["default"] == "0s"
    assert disruption["properties"]["consolidationPolicy"]["default"] == "WhenEmptyOrUnderutilized"
    assert disruption["properties"]["budgets"]["default"] == [{"nodes": "10%"}]
    template_spec = spec["template"]["properties"]["spec"]["properties"]
    assert template_spec["expireAfter"]["default"] == "720h"
    assert "default" not in template_spec["taints"]  # empty defaults are not written


def test_bounds_keep_cel_cost_down() -> None:
    spec = root_schema(by_kind()["NodePool"])["properties"]["spec"]
    nodes = dict(walk(spec))
    assert nodes[".template.spec.requirements"]["maxItems"] == 100
    assert nodes[".template.spec.requirements[*].key"]["maxLength"] == 316
    assert nodes[".template.spec.requirements[*].values[*]"]["maxLength"] == 63
    assert nodes[".template.metadata.labels"]["maxProperties"] == 100
    assert nodes[".disruption.budgets"]["maxItems"] == 50
    assert nodes[".disruption.budgets[*].reasons"]["x-kubernetes-list-type"] == "set"


# CEL rules


def test_requirement_rules_on_both_kinds() -> None:
    for kind, path in (
        ("NodePool", ".spec.template.spec.requirements[*]"),
        ("NodeClaim", ".spec.requirements[*]"),
    ):
        messages = set(rules_at(root_schema(by_kind()[kind]), path).values())
        assert messages == {
            "requirements with operator 'In' must have a value defined",
            "requirements with operator 'Exists' or 'DoesNotExist' must not have values",
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive "
            "integer value",
            "requirements with 'minValues' must have at least that many values specified in the "
            "'values' field",
        }, kind
        key_messages = set(rules_at(root_schema(by_kind()[kind]), path + ".key").values())
        assert key_messages == {
            'label domain "karpenter.sh" is restricted',
            'label "kubernetes.io/hostname" is restricted',
        }, kind


def test_nodepool_restricts_its_own_label() -> None:
    schema = root_schema(by_kind()["NodePool"])
    requirements = rules_at(schema, ".spec.template.spec.requirements")
    assert requirements == {
        "self.all(x, x.key != 'karpenter.sh/nodepool')": 'label "karpenter.sh/nodepool" is restricted'
    }
    template_labels = set(rules_at(schema, ".spec.template.metadata.labels").values())
    assert template_labels == {
        'label domain "karpenter.sh" is restricted',
        'label "karpenter.sh/nodepool" is restricted',
        'label "kubernetes.io/hostname" is restricted',
    }


def test_restricted_domain_rule_allows_well_known_keys() -> None:
    schema = root_schema(by_kind()["NodePool"])
    (rule,) = [
        rule
        for rule, message in rules_at(schema, ".spec.template.metadata.labels").items()
        if "domain" in message
    ]
    assert "'karpenter.sh/capacity-type'" in rule and "'karpenter.sh/nodepool'" in rule
    assert r"\.karpenter\.sh/" in rule  # subdomains are restricted too


def test_budget_and_immutability_rules() -> None:
    nodepool = root_schema(by_kind()["NodePool"])
    assert rules_at(nodepool, ".spec.disruption.budgets[*]") == {
        "has(self.schedule) == has(self.duration)": "'schedule' must be set with 'duration'"
    }
    assert rules_at(nodepool, ".spec.template.spec.nodeClassRef") == {
        "self.group == oldSelf.group": "nodeClassRef.group is immutable",
        "self.kind == oldSelf.kind": "nodeClassRef.kind is immutable",
    }
    nodeclaim = root_schema(by_kind()["NodeClaim"])
    assert rules_at(nodeclaim, ".spec") == {"self == oldSelf": "spec is immutable"}
    assert rules_at(nodeclaim, ".spec.nodeClassRef") == {}


# The generic generator, as a provider's NodeClass would use it


class ExampleSubnet(BaseModel):
    """A subnet selector."""

    model_config = ConfigDict(
        json_schema_extra=KubeSchema(rules=(cel("has(self.id) || has(self.tags)", "id or tags"),))
    )

    id: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)


class ExampleNodeClassSpec(BaseModel):
    """What the example provider launches with."""

    image: Literal["standard"] = "standard"
    zones: set[str] = Field(default_factory=set)
    subnets: Annotated[
        list[ExampleSubnet],
        Field(max_length=30),
        KubeSchema(list_type="atomic", rules=(cel("size(self) > 0", "subnets are needed"),)),
    ]
    max_pods: Quantity | None = None
    user_data: dict[str, Any] | None = None
    tuning: Any = None


class ExampleNodeClass(BaseModel):
    """An example NodeClass."""

    model_config = ConfigDict(populate_by_name=True)

    api_version: str = Field(default="example.dev/v1", alias="apiVersion")
    kind: str = "ExampleNodeClass"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ExampleNodeClassSpec
    status: dict[str, str] = Field(default_factory=dict)


def example_crd() -> dict[str, Any]:
    return generate_crd(
        ExampleNodeClass,
        group="example.dev",
        kind="ExampleNodeClass",
        plural="examplenodeclasses",
        version="v1beta1",
        printer_columns=(
            PrinterColumn("Image", "string", ".spec.image", description="the image"),
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ),
        short_names=("exnc",),
        categories=("karpenter",),
    )


def test_generic_generator_rewrites_pydantic_schema() -> None:
    crd = example_crd()
    assert structural_violations(crd) == []
    assert crd["metadata"]["name"] == "examplenodeclasses.example.dev"
    assert crd["spec"]["names"]["shortNames"] == ["exnc"]
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1beta1"
    assert version["additionalPrinterColumns"] == [
        {"name": "Image", "type": "string", "jsonPath": ".spec.image", "description": "the image"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    spec = root_schema(crd)["properties"]["spec"]
    assert spec["description"] == "What the example provider launches with."
    properties = spec["properties"]
    assert properties["image"] == {"type": "string", "enum": ["standard"], "default": "standard"}
    assert properties["zones"] == {
        "type": "array",
        "items": {"type": "string"},
        "x-kubernetes-list-type": "set",
    }
    subnets = properties["subnets"]
    assert subnets["maxItems"] == 30 and subnets["x-kubernetes-list-type"] == "atomic"
    assert subnets["x-kubernetes-validations"] == [
        {"rule": "size(self) > 0", "message": "subnets are needed"}
    ]
    item = subnets["items"]
    assert item["x-kubernetes-validations"] == [
        {"rule": "has(self.id) || has(self.tags)", "message": "id or tags"}
    ]
    assert item["properties"]["id"] == {"type": "string"}  # Optional: not nullable, no default
    assert item["properties"]["tags"] == {
        "type": "object",
        "additionalProperties": {"type": "string"},
    }
    assert properties["max_pods"]["x-kubernetes-int-or-string"] is True
    assert properties["user_data"]["x-kubernetes-preserve-unknown-fields"] is True
    assert properties["tuning"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert root_schema(crd)["required"] == ["spec"]
    assert version["subresources"] == {"status": {}}


def test_generated_crd_shares_no_nodes() -> None:
    crd = example_crd()
    seen: set[int] = set()

    def visit(value: Any) -> None:
        if isinstance(value, dict | list):
            assert id(value) not in seen, "a shared node would be printed as a YAML alias"
            seen.add(id(value))
            for item in value.values() if isinstance(value, dict) else value:
                visit(item)

    visit(crd)
    assert "&id" not in render_crd(crd)


class Union(BaseModel):
    value: int | list[str]


class Tree(BaseModel):
    children: list[Tree] = Field(default_factory=list)


class Pair(BaseModel):
    pair: tuple[int, str]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (Union, "unions have no structural schema"),
        (Tree, "recursive model Tree"),
        (Pair, "tuples have no structural schema"),
    ],
)
def test_unsupported_models_are_refused(model: type[BaseModel], message: str) -> None:
    with pytest.raises(CRDSchemaError, match=message):
        generate_crd(model, group="example.dev", kind="Thing", plural="things")


# Provider CRDs


def test_provider_crds_come_from_discovered_node_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    from karpenter_core.cloudprovider import registry

    node_class = SimpleNamespace(
        model=ExampleNodeClass,
        group="example.dev",
        version="v1",
        kind="ExampleNodeClass",
        plural="examplenodeclasses",
        printer_columns=(),
        short_names=("exnc",),
    )
    records = {"example": SimpleNamespace(node_classes=(node_class,))}
    monkeypatch.setattr(registry, "discover", lambda: SimpleNamespace(records=records))
    (crd,) = provider_crds()
    assert crd["metadata"]["name"] == "examplenodeclasses.example.dev"
    assert crd["spec"]["names"]["categories"] == ["karpenter"]
    assert crd["spec"]["names"]["shortNames"] == ["exnc"]


# The command


def test_cli_prints_core_crds_as_multi_document_yaml() -> None:
    result = CliRunner().invoke(crds, ["--core-only"])
    assert result.exit_code == 0, result.output
    assert list(yaml.safe_load_all(result.output)) == core_crds()


def test_cli_includes_provider_crds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("karpenter_core.cli.crds.provider_crds", lambda: [example_crd()])
    result = CliRunner().invoke(crds, [])
    assert result.exit_code == 0, result.output
    kinds = [doc["spec"]["names"]["kind"] for doc in yaml.safe_load_all(result.output)]
    assert kinds == ["NodePool", "NodeClaim", "ExampleNodeClass"]


def test_cli_writes_one_file_per_crd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("karpenter_core.cli.crds.provider_crds", lambda: [example_crd()])
    out = tmp_path / "crds"
    result = CliRunner().invoke(crds, ["--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in out.iterdir()) == [
        "example.dev_examplenodeclasses.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodepools.yaml",
    ]
    assert (out / "karpenter.sh_nodepools.yaml").read_text() == (
        CRD_DIR / "karpenter.sh_nodepools.yaml"
    ).read_text()


def test_cli_reports_a_bad_provider_model_without_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken() -> list[dict[str, Any]]:
        raise CRDSchemaError("spec.value: unions have no structural schema")

    monkeypatch.setattr("karpenter_core.cli.crds.provider_crds", broken)
    result = CliRunner().invoke(crds, [])
    assert result.exit_code == 1
    assert "Error: cannot generate a CRD: spec.value: unions" in result.output
    assert "Traceback" not in result.output


def test_cli_reports_an_unwritable_output_dir_without_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(crds, ["--core-only", "--output-dir", str(blocker / "crds")])
    assert result.exit_code == 1
    assert result.output == f"Error: cannot write {blocker / 'crds'}: Not a directory\n"
