"""Reading manifests into a Snapshot: documents, validation errors, workload expansion, notes."""

from __future__ import annotations

import copy
import io
import itertools
import json
import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from karpenter_core.apis.requirements import Requirement, Requirements
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import InstanceType, Offering
from karpenter_core.manifests import (
    ManifestError,
    build_snapshot,
    load_default_scenario,
    load_documents,
    parse_documents,
)
from karpenter_core.manifests.fields import client_types
from karpenter_core.manifests.k8s_types import TYPES
from karpenter_core.scheduling.snapshot import Snapshot

FAMILY = "example.com/instance-family"

NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {group: example.com, kind: FakeNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
"""


class FakeNodeClass(BaseModel):
    """A NodeClass with one required field."""

    kind: Literal["FakeNodeClass"] = "FakeNodeClass"
    spec: dict[str, str]


def _instance_type(name: str, family: str) -> InstanceType:
    def labels(**values: str) -> Requirements:
        return Requirements(Requirement(k, False, frozenset((v,))) for k, v in values.items())

    offering = Offering(
        labels(**{"topology.kubernetes.io/zone": "z1", "karpenter.sh/capacity-type": "spot"}), 0.1
    )
    requirements = labels(**{"node.kubernetes.io/instance-type": name, FAMILY: family})
    return InstanceType(name, requirements, [offering], {"cpu": 4000, "pods": 110_000})


class FakeProvider:
    """Two families, m5 and c5; records the NodePools it was asked about."""

    name = "fake"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
        self.asked.append(nodepool.metadata.name or "")
        return [_instance_type("m5.large", "m5"), _instance_type("c5.large", "c5")]

    def supported_node_classes(self) -> list[type[BaseModel]]:
        return [FakeNodeClass]


def _write(tmp_path: Path, text: str, name: str = "pods.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _build(text: str, source: str = "pods.yaml") -> tuple[Snapshot, list[str]]:
    built = build_snapshot(parse_documents(textwrap.dedent(text), source), FakeProvider())
    return built.snapshot, built.notes


def _error(text: str) -> str:
    with pytest.raises(ManifestError) as info:
        _build(text)
    message = str(info.value)
    assert "\n" not in message
    return message


def _deployment(name: str = "web", replicas: str = "", container: str = "") -> str:
    return f"""
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: {name}, namespace: default}}
    spec:
      {replicas}
      template:
        metadata: {{labels: {{app: {name}}}}}
        spec:
          containers:
            - name: app
              {container or "resources: {requests: {cpu: 500m}}"}
    """


def _nodepool_with(requirement: str, extra: str = "") -> str:
    return f"""
    apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {{name: pool}}
    spec:
      template:
        spec:
          nodeClassRef: {{group: example.com, kind: FakeNodeClass, name: default}}
          requirements:
            - {requirement}
      {extra}
    """


# Reading documents


def test_multi_document_files_and_lists_keep_source_and_position(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        kind: ConfigMap
        metadata: {name: a}
        ---
        ---
        apiVersion: v1
        kind: List
        items:
          - {kind: Pod, metadata: {name: p1}}
          - {kind: Node, metadata: {name: n1}}
        """,
    )
    documents = load_documents([path])
    assert [(d.source, d.index, d.item, d.kind, d.name) for d in documents] == [
        (path, 0, None, "ConfigMap", "a"),
        (path, 2, 0, "Pod", "p1"),
        (path, 2, 1, "Node", "n1"),
    ]


def test_typed_list_items_take_the_list_kind() -> None:
    documents = parse_documents("kind: PodList\nitems: [{metadata: {name: p}}]\n", "dump.json")
    assert [(d.kind, d.name) for d in documents] == [("Pod", "p")]


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: Pod\nmetadata: {name: p}\n"))
    [document] = load_documents(["-"])
    assert (document.source, document.kind, document.name) == ("<stdin>", "Pod", "p")


def test_directory_reads_its_yaml_and_json_files_in_order(tmp_path: Path) -> None:
    _write(tmp_path, "kind: Pod\nmetadata: {name: b}\n", "b.yaml")
    _write(tmp_path, '{"kind": "Pod", "metadata": {"name": "a"}}', "a.json")
    _write(tmp_path, "not: read", "notes.txt")
    assert [d.name for d in load_documents([str(tmp_path)])] == ["a", "b"]


def test_missing_file() -> None:
    with pytest.raises(ManifestError) as info:
        load_documents(["does-not-exist.yaml"])
    assert str(info.value) == "does-not-exist.yaml: no such file"


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "kind: Pod\nmetadata:\n  name: [unclosed\n")
    with pytest.raises(ManifestError) as info:
        load_documents([path])
    message = str(info.value)
    assert message.startswith(f"{path}: line 4, column 1: invalid YAML: ")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- a\n- b\n", "x.yaml: document 1: expected a Kubernetes object (a mapping), got a list"),
        ("metadata: {name: a}\n", "x.yaml: document 1: kind: missing; every object needs a kind"),
        (
            "kind: Pod\n---\nkind: [Pod]\n",
            "x.yaml: document 2: kind: expected a string, got a list",
        ),
        (
            "kind: List\nitems: [{kind: Pod}, 3]\n",
            "x.yaml: document 1, items[1]: expected a Kubernetes object (a mapping), got 3",
        ),
        (
            "kind: Pod\nmetadata: [a]\n",
            "x.yaml: document 1: metadata: expected a mapping, got a list",
        ),
    ],
)
def test_documents_that_are_not_objects(text: str, expected: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_documents(text, "x.yaml")
    assert str(info.value) == expected


# Validation: one line naming file, object and field


def test_bad_quantity_in_a_deployment() -> None:
    message = _error(_deployment(container="resources: {requests: {cpu: lots}}"))
    assert message.startswith(
        "pods.yaml: Deployment default/web: spec.template.spec.containers[0].resources.requests"
        ".cpu: 'lots' is not a quantity"
    )


def test_negative_quantity_in_a_pod() -> None:
    message = _error(
        """
        kind: Pod
        metadata: {name: p, namespace: team}
        spec:
          containers: [{name: a, resources: {limits: {memory: -1Gi}}}]
        """
    )
    assert message == (
        "pods.yaml: Pod team/p: spec.containers[0].resources.limits.memory: '-1Gi' is negative"
    )


def test_unknown_operator_in_a_nodepool() -> None:
    message = _error(_nodepool_with("{key: example.com/team, operator: Within, values: [a]}"))
    assert message.startswith(
        "pods.yaml: NodePool pool: spec.template.spec.requirements[0].operator: "
        "unknown operator 'Within'"
    )


def test_min_values_larger_than_the_values() -> None:
    message = _error(_nodepool_with(f"{{key: {FAMILY}, operator: In, values: [m5], minValues: 2}}"))
    assert message.startswith(
        "pods.yaml: NodePool pool: spec.template.spec.requirements[0].minValues: minValues 2 is "
        "larger than the 1 value(s)"
    )


@pytest.mark.parametrize(
    ("limit", "problem"), [("-4", "'-4' is negative"), ("many", "'many' is not a quantity")]
)
def test_bad_nodepool_limits(limit: str, problem: str) -> None:
    message = _error(
        _nodepool_with(f"{{key: {FAMILY}, operator: Exists}}", f"limits: {{cpu: '{limit}'}}")
    )
    assert message.startswith(f"pods.yaml: NodePool pool: spec.limits.cpu: {problem}")


def test_instance_type_wildcard_in_a_nodepool_suggests_the_provider_family_label() -> None:
    message = _error(
        _nodepool_with("{key: node.kubernetes.io/instance-type, operator: In, values: ['m5.*']}")
    )
    assert message == (
        "pods.yaml: NodePool pool: spec.template.spec.requirements[0].values: 'm5.*': "
        "node.kubernetes.io/instance-type values are exact instance type names, not patterns; "
        f"to allow a family use an instance-family requirement instead, e.g. `{FAMILY} In [m5]`"
    )


def test_star_instance_type_suggests_dropping_the_requirement() -> None:
    message = _error(
        _nodepool_with("{key: node.kubernetes.io/instance-type, operator: NotIn, values: ['*']}")
    )
    assert "'*': node.kubernetes.io/instance-type values are exact" in message
    assert message.endswith("remove the requirement or use operator Exists")


def test_instance_type_wildcard_in_a_pod_node_selector() -> None:
    message = _error(
        NODEPOOL
        + "---\n"
        + textwrap.dedent(
            """
            kind: Pod
            metadata: {name: p}
            spec:
              nodeSelector: {beta.kubernetes.io/instance-type: c5*}
              containers: [{name: a}]
            """
        )
    )
    assert message.startswith(
        "pods.yaml: Pod default/p: spec.nodeSelector[beta.kubernetes.io/instance-type]: 'c5*': "
    )
    assert message.endswith(f"e.g. `{FAMILY} In [c5]`")


def test_instance_type_wildcard_without_a_catalog_suggests_an_example_label() -> None:
    affinity = """
    kind: Pod
    metadata: {name: p}
    spec:
      containers: [{name: a}]
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: node.kubernetes.io/instance-type, operator: In, values: [r6g.*]}
    """
    message = _error(affinity)
    assert message.startswith(
        "pods.yaml: Pod default/p: spec.affinity.nodeAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
        ".values: 'r6g.*': "
    )
    assert "`karpenter.k8s.aws/instance-family In [r6g]` on AWS" in message


def test_pod_node_affinity_terms_are_validated() -> None:
    message = _error(
        """
        kind: Job
        metadata: {name: batch}
        spec:
          template:
            spec:
              containers: [{name: a}]
              affinity:
                nodeAffinity:
                  preferredDuringSchedulingIgnoredDuringExecution:
                    - weight: 10
                      preference:
                        matchExpressions: [{key: example.com/gpu, operator: Gt, values: [many]}]
        """
    )
    assert message.startswith(
        "pods.yaml: Job default/batch: spec.template.spec.affinity.nodeAffinity."
        "preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0]"
        ".values: operator Gt for key 'example.com/gpu' takes exactly one integer value"
    )


_SPREAD = {
    "maxSkew": 1,
    "minDomains": 2,
    "topologyKey": "topology.kubernetes.io/zone",
    "whenUnsatisfiable": "DoNotSchedule",
    "nodeAffinityPolicy": "Honor",
    "nodeTaintsPolicy": "Ignore",
    "labelSelector": {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", ""]}],
    },
    "matchLabelKeys": ["pod-template-hash"],
}
_TERM = {
    "topologyKey": "kubernetes.io/hostname",
    "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
    "namespaces": ["default"],
    "namespaceSelector": {"matchLabels": {"team": "a"}},
    "matchLabelKeys": ["pod-template-hash"],
}
_AFFINITY = {
    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_TERM]},
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": copy.deepcopy(_TERM)}
        ]
    },
}
_PREFERRED = "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
_REQUIRED = "podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"


def _pod_spec_with(**fields: object) -> str:
    """A Deployment whose pod spec also has ``fields`` (written as JSON, which is YAML)."""
    extra = "".join(f"\n          {name}: {json.dumps(value)}" for name, value in fields.items())
    return _deployment(container="resources: {requests: {cpu: 500m}}" + extra)


_DELETE = object()


def _with(base: dict, path: str, value: object) -> dict:
    """A deep copy of ``base`` with the dotted ``path`` (list indices as digits) set or deleted."""
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = out
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return out


def test_valid_spread_constraints_and_pod_affinity_are_accepted() -> None:
    snapshot, _ = _build(_pod_spec_with(topologySpreadConstraints=[_SPREAD], affinity=_AFFINITY))
    assert [len(pod.topology_spread) for pod in snapshot.pending] == [1]


@pytest.mark.parametrize(
    ("path", "value", "field", "problem"),
    [
        ("maxSkew", 0, "maxSkew", "must be at least 1, got 0"),
        ("maxSkew", "2", "maxSkew", "expected an integer, got '2'"),
        ("maxSkew", _DELETE, "maxSkew", "expected an integer, got null"),
        ("minDomains", 0, "minDomains", "must be at least 1, got 0"),
        ("minDomains", 1.5, "minDomains", "expected an integer, got 1.5"),
        ("topologyKey", _DELETE, "topologyKey", "expected a non-empty string, got null"),
        ("topologyKey", "", "topologyKey", "expected a non-empty string, got ''"),
        (
            "whenUnsatisfiable",
            "Never",
            "whenUnsatisfiable",
            "expected one of DoNotSchedule, ScheduleAnyway, got 'Never'",
        ),
        (
            "nodeAffinityPolicy",
            "honor",
            "nodeAffinityPolicy",
            "expected one of Honor, Ignore, got 'honor'",
        ),
        ("nodeTaintsPolicy", True, "nodeTaintsPolicy", "expected one of Honor, Ignore, got True"),
        ("labelSelector", ["app"], "labelSelector", "expected a mapping, got a list"),
        (
            "labelSelector.matchLabels.app",
            1,
            "labelSelector.matchLabels[app]",
            "expected a string, got 1; quote it",
        ),
        (
            "labelSelector.matchExpressions.0.operator",
            "in",
            "labelSelector.matchExpressions[0].operator",
            "expected one of In, NotIn, Exists, DoesNotExist, got 'in'",
        ),
        (
            "labelSelector.matchExpressions.0.key",
            _DELETE,
            "labelSelector.matchExpressions[0].key",
            "expected a non-empty string, got null",
        ),
        (
            "labelSelector.matchExpressions.0.values",
            [],
            "labelSelector.matchExpressions[0].values",
            "operator In needs at least one value",
        ),
        (
            "labelSelector.matchExpressions.0.values",
            "a",
            "labelSelector.matchExpressions[0].values",
            "expected a list, got 'a'",
        ),
        (
            "labelSelector.matchExpressions.0.values.1",
            2,
            "labelSelector.matchExpressions[0].values[1]",
            "expected a string, got 2; quote it",
        ),
        (
            "labelSelector.matchExpressions.0.operator",
            "Exists",
            "labelSelector.matchExpressions[0].values",
            "operator Exists takes no values",
        ),
        ("matchLabelKeys", "app", "matchLabelKeys", "expected a list, got 'app'"),
        ("matchLabelKeys.0", 7, "matchLabelKeys[0]", "expected a non-empty string, got 7"),
    ],
)
def test_bad_topology_spread_constraints(
    path: str, value: object, field: str, problem: str
) -> None:
    message = _error(_pod_spec_with(topologySpreadConstraints=[_with(_SPREAD, path, value)]))
    assert message.startswith(
        "pods.yaml: Deployment default/web: "
        f"spec.template.spec.topologySpreadConstraints[0].{field}: {problem}"
    ), message


@pytest.mark.parametrize(
    ("path", "value", "field", "problem"),
    [
        ("podAffinity", ["x"], "podAffinity", "expected a mapping, got a list"),
        (
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            _TERM,
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            "expected a list, got a mapping",
        ),
        (
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0.topologyKey",
            _DELETE,
            f"{_REQUIRED}.topologyKey",
            "expected a non-empty string, got null",
        ),
        (
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0.namespaces",
            "default",
            f"{_REQUIRED}.namespaces",
            "expected a list, got 'default'",
        ),
        (
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0.namespaces.0",
            None,
            f"{_REQUIRED}.namespaces[0]",
            "expected a non-empty string, got null",
        ),
        (
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0.namespaceSelector",
            "team=a",
            f"{_REQUIRED}.namespaceSelector",
            "expected a mapping, got 'team=a'",
        ),
        (
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0.namespaceSelector"
            ".matchLabels.team",
            None,
            f"{_REQUIRED}.namespaceSelector.matchLabels[team]",
            "expected a string, got null; quote it",
        ),
        (
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0.labelSelector"
            ".matchExpressions.0.operator",
            "Gt",
            f"{_REQUIRED}.labelSelector.matchExpressions[0].operator",
            "expected one of In, NotIn, Exists, DoesNotExist, got 'Gt'",
        ),
        (
            "podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0.matchLabelKeys",
            [""],
            f"{_REQUIRED}.matchLabelKeys[0]",
            "expected a non-empty string, got ''",
        ),
        (
            "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.0.weight",
            0,
            f"{_PREFERRED}.weight",
            "must be at least 1, got 0",
        ),
        (
            "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.0.weight",
            101,
            f"{_PREFERRED}.weight",
            "must be at most 100, got 101",
        ),
        (
            "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.0.weight",
            _DELETE,
            f"{_PREFERRED}.weight",
            "expected an integer, got null",
        ),
        (
            "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.0.podAffinityTerm",
            _DELETE,
            f"{_PREFERRED}.podAffinityTerm.topologyKey",
            "expected a non-empty string, got null",
        ),
        (
            "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.0.podAffinityTerm"
            ".labelSelector.matchExpressions.0.values",
            ["x"],
            f"{_PREFERRED}.podAffinityTerm.labelSelector.matchExpressions[0].values",
            "operator Exists takes no values",
        ),
    ],
)
def test_bad_pod_affinity(path: str, value: object, field: str, problem: str) -> None:
    message = _error(_pod_spec_with(affinity=_with(_AFFINITY, path, value)))
    assert message.startswith(
        f"pods.yaml: Deployment default/web: spec.template.spec.affinity.{field}: {problem}"
    ), message


def test_node_affinity_preference_weight_is_at_most_100() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 500, "preference": {"matchExpressions": []}}
            ]
        }
    }
    assert _error(_pod_spec_with(affinity=affinity)) == (
        "pods.yaml: Deployment default/web: spec.template.spec.affinity.nodeAffinity."
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight: must be at most 100, got 500"
    )


def test_pydantic_errors_become_camel_case_paths() -> None:
    message = _error(_nodepool_with(f"{{key: {FAMILY}, operator: Exists}}", "weight: 0"))
    assert message == (
        "pods.yaml: NodePool pool: spec.weight: Input should be greater than or equal to 1 (got 0)"
    )


def test_pydantic_missing_field() -> None:
    message = _error(
        """
        kind: NodePool
        metadata: {name: pool}
        spec: {template: {spec: {requirements: []}}}
        """
    )
    assert message == (
        "pods.yaml: NodePool pool: spec.template.spec.nodeClassRef: missing; this field is required"
    )


def test_invalid_nodeclaim() -> None:
    message = _error(
        """
        apiVersion: karpenter.sh/v1
        kind: NodeClaim
        metadata: {name: claim}
        spec:
          nodeClassRef: {group: example.com, kind: FakeNodeClass, name: default}
          requirements: [{key: example.com/team, operator: In, values: ["a b"]}]
        """
    )
    assert message.startswith("pods.yaml: NodeClaim claim: spec.requirements[0].values[0]: ")


def test_invalid_node_class_is_checked_with_the_provider_model() -> None:
    message = _error("kind: FakeNodeClass\nmetadata: {name: default}\nspec: {size: [1]}\n")
    assert message.startswith("pods.yaml: FakeNodeClass default: spec.size: Input should be")


def test_negative_node_allocatable() -> None:
    message = _error("kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '-1'}}\n")
    assert message == "pods.yaml: Node n1: status.allocatable.cpu: '-1' is negative"


@pytest.mark.parametrize(
    ("spec", "field", "problem"),
    [
        ("replicas: '3'", "spec.replicas", "expected a non-negative integer, got '3'"),
        ("replicas: -1", "spec.replicas", "expected a non-negative integer, got -1"),
    ],
)
def test_bad_replicas(spec: str, field: str, problem: str) -> None:
    assert (
        _error(_deployment(replicas=spec))
        == f"pods.yaml: Deployment default/web: {field}: {problem}"
    )


def test_unquoted_label_value() -> None:
    message = _error(
        "kind: Pod\nmetadata: {name: p, labels: {critical: true}}\nspec: {containers: [{}]}\n"
    )
    assert message == (
        "pods.yaml: Pod default/p: metadata.labels[critical]: expected a string, got True; quote it"
    )


@pytest.mark.parametrize(
    ("requirements", "got"),
    [("wide", "'wide'"), ("{key: x}", "a mapping"), ("5", "5")],
)
def test_nodepool_requirements_that_are_not_a_list(requirements: str, got: str) -> None:
    message = _error(
        f"""
        kind: NodePool
        metadata: {{name: pool}}
        spec:
          template:
            spec:
              nodeClassRef: {{group: example.com, kind: FakeNodeClass, name: default}}
              requirements: {requirements}
        """
    )
    assert message == (
        f"pods.yaml: NodePool pool: spec.template.spec.requirements: expected a list, got {got}"
    )


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet"])
def test_workload_without_a_pod_template(kind: str) -> None:
    message = _error(f"kind: {kind}\nmetadata: {{name: web}}\nspec: {{replicas: 2}}\n")
    assert message == (
        f"pods.yaml: {kind} default/web: spec.template: missing; a {kind} needs a pod template"
    )


def test_pod_without_containers() -> None:
    message = _error("kind: Pod\nmetadata: {name: p}\nspec: {}\n")
    assert (
        message == "pods.yaml: Pod default/p: spec.containers: a pod needs at least one container"
    )


def test_object_without_a_name() -> None:
    message = _error("kind: Deployment\nmetadata: {namespace: x}\n")
    assert (
        message
        == "pods.yaml: Deployment (document 1): metadata.name: missing; every object needs a name"
    )


def test_duplicate_nodepool() -> None:
    message = _error(NODEPOOL + "---" + NODEPOOL)
    assert message == (
        "pods.yaml: NodePool default: metadata.name: NodePool default is defined twice "
        "(first in pods.yaml, document 1)"
    )


def test_unsatisfiable_nodepool_is_not_an_error() -> None:
    snapshot, _ = _build(_nodepool_with(f"{{key: {FAMILY}, operator: In, values: [z9]}}"))
    assert [p.metadata.name for p in snapshot.nodepools] == ["pool"]


# Building the snapshot


def test_nodepools_get_instance_types_from_the_provider() -> None:
    provider = FakeProvider()
    documents = parse_documents(NODEPOOL + "---" + NODEPOOL.replace("default", "second", 1), "x")
    built = build_snapshot(documents, provider)
    snapshot = built.snapshot
    assert provider.asked == ["default", "second"]
    assert [p.metadata.name for p in snapshot.nodepools] == ["default", "second"]
    assert {k: [t.name for t in v] for k, v in snapshot.instance_types.items()} == {
        "default": ["m5.large", "c5.large"],
        "second": ["m5.large", "c5.large"],
    }
    assert built.notes == [
        f"NodePool {name} references FakeNodeClass default, which is not in the input; "
        "assuming its defaults"
        for name in ("default", "second")
    ]


def test_deployment_expands_into_ordered_owned_pods() -> None:
    snapshot, _ = _build(
        _deployment(replicas="replicas: 3")
        + "---"
        + _deployment("api").replace("namespace: default", "namespace: team")
    )
    pods = snapshot.pending
    assert [p.key for p in pods] == [
        "default/web-0",
        "default/web-1",
        "default/web-2",
        "team/api-0",
    ]
    assert all(a.created < b.created for a, b in itertools.pairwise(pods))
    assert {(p.owner_kind, p.owner_name) for p in pods[:3]} == {("Deployment", "web")}
    assert pods[0].labels == {"app": "web"}
    assert pods[0].requests == {"cpu": 500, "pods": 1000}
    assert pods[0].requests is not pods[1].requests


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet"])
def test_replicated_kinds(kind: str) -> None:
    snapshot, _ = _build(_deployment(replicas="replicas: 2").replace("Deployment", kind))
    assert [(p.name, p.owner_kind) for p in snapshot.pending] == [("web-0", kind), ("web-1", kind)]


def test_statefulset_claim_templates_become_claims() -> None:
    snapshot, _ = _build(
        """
        kind: StatefulSet
        metadata: {name: db}
        spec:
          replicas: 2
          template:
            spec:
              containers: [{name: a}]
              volumes:
                - {name: data, emptyDir: {}}
                - {name: logs, persistentVolumeClaim: {claimName: shared}}
          volumeClaimTemplates:
            - metadata: {name: data}
              spec: {storageClassName: fast}
        ---
        kind: PersistentVolumeClaim
        metadata: {name: data-db-0}
        spec: {volumeName: pv-0}
        """
    )
    assert [p.volume_claims for p in snapshot.pending] == [
        ("shared", "data-db-0"),
        ("shared", "data-db-1"),
    ]
    claims = [(c["metadata"]["name"], c["spec"]) for c in snapshot.persistent_volume_claims]
    assert claims == [
        ("data-db-0", {"volumeName": "pv-0"}),
        ("data-db-1", {"storageClassName": "fast"}),
    ]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("", 1),
        ("parallelism: 4", 4),
        ("parallelism: 4\n  completions: 2", 2),
        ("completions: 3", 1),
        ("parallelism: 0", 0),
        ("parallelism: 4\n  suspend: true", 0),
    ],
)
def test_job_pods(spec: str, expected: int) -> None:
    job = (
        f"kind: Job\nmetadata: {{name: j}}\nspec:\n  {spec}\n"
        "  template:\n    spec: {containers: [{}]}\n"
    )
    snapshot, _ = _build(job)
    assert [p.name for p in snapshot.pending] == [f"j-{i}" for i in range(expected)]


def test_job_counts_succeeded_completions() -> None:
    job = (
        "kind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 4\n  completions: 5\n"
        "  template: {spec: {containers: [{}]}}\nstatus: {succeeded: 3}\n"
    )
    assert len(_build(job)[0].pending) == 2


def test_daemonset_is_a_template_not_pending_pods() -> None:
    snapshot, _ = _build(_deployment("agent").replace("Deployment", "DaemonSet"))
    assert snapshot.pending == []
    [daemon] = snapshot.daemonsets
    assert (daemon.name, daemon.is_daemon(), daemon.requests["cpu"]) == ("agent", True, 500)


def test_pods_bound_to_nodes_and_pods_not_pending() -> None:
    snapshot, notes = _build(
        """
        kind: Node
        metadata: {name: n1}
        status: {allocatable: {cpu: "4", pods: "110"}}
        ---
        kind: Pod
        metadata: {name: bound}
        spec: {nodeName: n1, containers: [{resources: {requests: {cpu: "1"}}}]}
        ---
        kind: Pod
        metadata: {name: elsewhere}
        spec: {nodeName: gone, containers: [{}]}
        ---
        kind: Pod
        metadata:
          name: ds-pod
          ownerReferences: [{kind: DaemonSet, name: ds, controller: true}]
        spec: {containers: [{}]}
        ---
        kind: Pod
        metadata: {name: mirror, annotations: {kubernetes.io/config.mirror: abc}}
        spec: {containers: [{}]}
        ---
        kind: Pod
        metadata: {name: done}
        spec: {containers: [{}]}
        status: {phase: Succeeded}
        ---
        kind: Pod
        metadata: {name: waiting}
        spec: {containers: [{}]}
        status: {phase: Pending}
        """
    )
    assert [p.key for p in snapshot.pending] == ["default/waiting"]
    [node] = snapshot.nodes
    assert [p.key for p in node.pods] == ["default/bound"]
    assert node.requested()["cpu"] == 1000
    assert notes == [
        "skipped Pod default/ds-pod: a DaemonSet or mirror pod with no node is not pending",
        "skipped Pod default/mirror: a DaemonSet or mirror pod with no node is not pending",
        "skipped Pod default/done: it has finished (Succeeded)",
        "skipped Pod default/elsewhere: bound to node gone, which is not in the input",
    ]


def test_cluster_dump_does_not_expand_workloads_twice() -> None:
    snapshot, notes = _build(
        """
        kind: List
        items:
          - kind: Deployment
            metadata: {name: web}
            spec: {replicas: 3, template: {spec: {containers: [{}]}}}
          - kind: ReplicaSet
            metadata:
              name: web-5d8f
              ownerReferences: [{kind: Deployment, name: web, controller: true}]
            spec: {replicas: 3, template: {spec: {containers: [{}]}}}
          - kind: Pod
            metadata:
              name: web-5d8f-abcde
              ownerReferences: [{kind: ReplicaSet, name: web-5d8f, controller: true}]
            spec: {containers: [{}]}
          - kind: Deployment
            metadata: {name: api}
            spec: {replicas: 2, template: {spec: {containers: [{}]}}}
          - kind: ReplicaSet
            metadata:
              name: api-7c9
              ownerReferences: [{kind: Deployment, name: api, controller: true}]
            spec: {replicas: 2, template: {spec: {containers: [{}]}}}
        """
    )
    assert [p.name for p in snapshot.pending] == ["web-5d8f-abcde", "api-0", "api-1"]
    assert notes == [
        "skipped Deployment default/web: its pods are in the input",
        "skipped ReplicaSet default/web-5d8f: its pods are in the input",
        "skipped ReplicaSet default/api-7c9: its owner Deployment default/api is expanded",
    ]


def test_other_kinds_are_kept_or_noted() -> None:
    snapshot, notes = _build(
        """
        kind: PodDisruptionBudget
        metadata: {name: pdb}
        ---
        kind: PersistentVolume
        metadata: {name: pv}
        ---
        kind: StorageClass
        metadata: {name: fast}
        ---
        kind: ConfigMap
        metadata: {name: settings, namespace: team}
        ---
        kind: EC2NodeClass
        metadata: {name: default}
        ---
        kind: FakeNodeClass
        metadata: {name: default}
        spec: {size: big}
        ---
        apiVersion: karpenter.sh/v1
        kind: NodeClaim
        metadata: {name: claim}
        spec:
          nodeClassRef: {group: example.com, kind: FakeNodeClass, name: default}
          requirements: []
        """
    )
    assert [p["metadata"]["name"] for p in snapshot.pdbs] == ["pdb"]
    assert [p["metadata"]["name"] for p in snapshot.persistent_volumes] == ["pv"]
    assert [p["metadata"]["name"] for p in snapshot.storage_classes] == ["fast"]
    assert [c.metadata.name for c in snapshot.nodeclaims] == ["claim"]
    assert snapshot.nodeclasses == [FakeNodeClass(spec={"size": "big"})]
    assert notes == [
        "skipped ConfigMap team/settings: not used by the simulation",
        "skipped EC2NodeClass default: not a NodeClass of the fake provider "
        "(it reads FakeNodeClass)",
    ]


def test_default_scenario() -> None:
    documents = load_default_scenario()
    assert [d.kind for d in documents] == ["NodePool", "KWOKNodeClass", "Deployment"]
    nodepool = NodePool.from_manifest(documents[0].obj)
    assert nodepool.spec.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    built = build_snapshot(documents, FakeProvider())
    snapshot, notes = built.snapshot, built.notes
    assert len(snapshot.pending) == 50
    assert {p.requests["cpu"] for p in snapshot.pending} == {2000}
    assert notes == [
        "skipped KWOKNodeClass default: not a NodeClass of the fake provider "
        "(it reads FakeNodeClass)"
    ]


# Fields the kinds do not have


def test_unknown_fields_are_warnings_per_object_and_path() -> None:
    nodeclass = "apiVersion: example.com/v1\nkind: FakeNodeClass\nmetadata: {name: default}\n"
    documents = parse_documents(
        NODEPOOL.replace("spec:\n  template:", "spec:\n  limts: {cpu: '1'}\n  template:")
        + "---\n"
        + nodeclass
        + "spec: {}\nspek: {a: b}\n"
        + "---"
        + textwrap.dedent(_deployment(container="resource: {requests: {cpu: '1'}}")),
        "x.yaml",
    )
    built = build_snapshot(documents, FakeProvider())
    assert built.warnings == [
        "NodePool default: unknown field spec.limts",
        "FakeNodeClass default: unknown field spek",
        "Deployment default/web: unknown field spec.template.spec.containers[0].resource",
    ]
    assert len(built.snapshot.pending) == 1


def test_strict_makes_unknown_fields_one_error_naming_the_object() -> None:
    documents = parse_documents(
        NODEPOOL.replace("spec:\n  template:", "spec:\n  limts: {cpu: '1'}\n  template:"), "x.yaml"
    )
    with pytest.raises(ManifestError) as info:
        build_snapshot(documents, FakeProvider(), strict=True)
    assert str(info.value) == "x.yaml: NodePool default: unknown field spec.limts"


def test_a_nodepool_of_another_providers_nodeclass_is_left_out() -> None:
    other = NODEPOOL.replace("name: default", "name: other", 1).replace(
        "{group: example.com, kind: FakeNodeClass", "{group: karpenter.kwok.sh, kind: KWOKNodeClass"
    )
    provider = FakeProvider()
    built = build_snapshot(parse_documents(NODEPOOL + "---" + other, "x.yaml"), provider)
    assert provider.asked == ["default"]
    assert [p.metadata.name for p in built.snapshot.nodepools] == ["default"]
    assert built.unserved == {
        "other": "NodePool other uses KWOKNodeClass (group karpenter.kwok.sh), which provider "
        "fake does not serve"
    }


def test_the_core_types_table_matches_the_installed_kubernetes_client() -> None:
    """``k8s_types`` is what ``write_types()`` makes of the installed client (regenerate it after
    upgrading the client)."""
    assert client_types() == TYPES
    assert TYPES["V1PodSpec"]["nodeSelector"] == "Dict[str, str]"


def test_the_input_node_classes_fill_the_providers_read_view_before_it_is_asked() -> None:
    node_class = """
apiVersion: example.com/v1
kind: FakeNodeClass
metadata: {name: default}
spec: {size: large}
"""
    view: dict[tuple[str, str], Any] = {}
    seen: list[Any] = []

    class Reading(FakeProvider):
        def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
            seen.append(view.get(("FakeNodeClass", "default")))
            return super().get_instance_types(nodepool)

    documents = parse_documents(NODEPOOL + "---" + node_class, "x.yaml")
    built = build_snapshot(documents, Reading(), node_class_view=view)
    assert [getattr(n, "spec", None) for n in seen] == [{"size": "large"}]
    assert list(view.values()) == built.snapshot.nodeclasses
