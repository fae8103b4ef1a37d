"""The karpenter.sh/v1 models: defaults, validation (errors name the field), round trips."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest
from pydantic import ValidationError

from karpenter_core.apis import labels
from karpenter_core.apis.v1 import (
    Budget,
    Condition,
    NodeClaim,
    NodePool,
    Taint,
)
from karpenter_core.apis.v1.nodeclaim import CONDITION_LAUNCHED

REQUIREMENT = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
NODE_CLASS_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "default"},
    "spec": {"template": {"spec": {"requirements": [REQUIREMENT], "nodeClassRef": NODE_CLASS_REF}}},
}
NODECLAIM: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": "default-abcde"},
    "spec": {"requirements": [REQUIREMENT], "nodeClassRef": NODE_CLASS_REF},
}
TEMPLATE = ("spec", "template", "spec")

# A NodePool with every field set, in the form to_manifest writes it.
FULL_NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {
        "name": "general",
        "labels": {"team": "a"},
        "annotations": {"karpenter.sh/nodepool-hash": "123"},
        "uid": "0b7e-11",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "finalizers": [],
        "ownerReferences": [],
    },
    "spec": {
        "template": {
            "metadata": {"labels": {"example.com/team": "a"}, "annotations": {"note": "x"}},
            "spec": {
                "taints": [{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "example.com/init", "value": "", "effect": "NoExecute"}],
                "requirements": [
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["m5.large", "m5.xlarge"],
                        "minValues": 2,
                    },
                    {"key": "example.com/cpus", "operator": "Gt", "values": ["3"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "Exists", "values": []},
                ],
                "nodeClassRef": NODE_CLASS_REF,
                "terminationGracePeriod": "48h",
                "expireAfter": "Never",
            },
        },
        "disruption": {
            "consolidateAfter": "30s",
            "consolidationPolicy": "WhenEmpty",
            "budgets": [
                {"nodes": "20%", "reasons": ["Empty", "Drifted"]},
                {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"},
            ],
        },
        "limits": {"cpu": "1k", "memory": "1000Gi", "nodes": "10"},
        "weight": 50,
    },
    "status": {
        "resources": {"cpu": "1500m", "memory": "16Gi"},
        "nodes": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2024-05-01T10:00:05Z",
                "observedGeneration": 3,
            }
        ],
    },
}


def edited(obj: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with the value at ``path`` replaced."""
    result = copy.deepcopy(obj)
    node: Any = result
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node[path[-1]] = value
    return result


def nodepool_with_requirement(**fields: Any) -> dict[str, Any]:
    return edited(NODEPOOL, (*TEMPLATE, "requirements"), [{**REQUIREMENT, **fields}])


def errors_of(model: type[NodePool] | type[NodeClaim], manifest: dict[str, Any]) -> list[Any]:
    with pytest.raises(ValidationError) as raised:
        model.from_manifest(manifest)
    return raised.value.errors()


# Defaults


def test_nodepool_defaults_match_upstream() -> None:
    nodepool = NodePool.from_manifest(NODEPOOL)
    template = nodepool.spec.template
    assert template.spec.expire_after == "720h"
    assert template.spec.termination_grace_period is None
    assert template.spec.taints == [] and template.spec.startup_taints == []
    assert template.metadata.labels == {}
    disruption = nodepool.spec.disruption
    assert disruption.consolidate_after == "0s"
    assert disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert disruption.budgets == [Budget(nodes="10%")]
    assert disruption.budgets[0].reasons is None
    assert nodepool.spec.weight is None
    assert nodepool.spec.limits == {}
    assert nodepool.status.nodes == 0 and nodepool.status.conditions == []


def test_nodeclaim_defaults() -> None:
    nodeclaim = NodeClaim.from_manifest(NODECLAIM)
    assert nodeclaim.spec.expire_after == "720h"
    assert nodeclaim.spec.resources.requests == {}
    assert nodeclaim.status.provider_id is None and nodeclaim.status.conditions == []


def test_budget_defaults_to_ten_percent() -> None:
    assert Budget().nodes == "10%"


def test_condition_fills_reason_and_transition_time() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    condition = Condition(type=CONDITION_LAUNCHED, status="Unknown")
    assert condition.reason == "Launched"
    assert condition.message == ""
    assert condition.last_transition_time >= before


# Round trips and serialisation


def test_full_manifest_round_trips_unchanged() -> None:
    assert NodePool.from_manifest(FULL_NODEPOOL).to_manifest() == FULL_NODEPOOL


def test_model_round_trips_through_its_manifest() -> None:
    nodepool = NodePool.from_manifest(NODEPOOL)
    assert NodePool.from_manifest(nodepool.to_manifest()) == nodepool
    nodeclaim = NodeClaim.from_manifest(NODECLAIM)
    assert NodeClaim.from_manifest(nodeclaim.to_manifest()) == nodeclaim


def test_manifest_is_camel_case_without_nulls() -> None:
    manifest = NodePool.from_manifest(NODEPOOL).to_manifest()
    assert manifest["apiVersion"] == "karpenter.sh/v1" and manifest["kind"] == "NodePool"
    spec = manifest["spec"]["template"]["spec"]
    assert spec["nodeClassRef"] == NODE_CLASS_REF
    assert spec["expireAfter"] == "720h"
    assert "terminationGracePeriod" not in spec  # None is left out
    assert "weight" not in manifest["spec"]
    assert manifest["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}]


def test_snake_case_names_are_accepted() -> None:
    claim = NodeClaim.model_validate(
        {
            "spec": {
                "requirements": [{"key": "a.io/b", "operator": "Exists", "min_values": 3}],
                "node_class_ref": NODE_CLASS_REF,
                "expire_after": "1h",
            },
            "status": {"provider_id": "kwok://x"},
        }
    )
    assert claim.spec.requirements[0].min_values == 3
    assert claim.spec.expire_after == "1h"
    assert claim.status.provider_id == "kwok://x"
    assert claim.to_manifest()["status"]["providerID"] == "kwok://x"


def test_unknown_fields_are_ignored() -> None:
    manifest = edited(NODEPOOL, ("spec", "replicas"), 3)
    manifest = edited(manifest, ("metadata", "managedFields"), [{"manager": "kubectl"}])
    nodepool = NodePool.from_manifest(manifest)
    assert "replicas" not in nodepool.to_manifest()["spec"]


def test_quantities_are_exact_and_written_as_strings() -> None:
    manifest = edited(
        NODEPOOL, ("spec", "limits"), {"cpu": "1.5", "memory": "16Gi", "pods": 110, "gpu": "1e3"}
    )
    limits = NodePool.from_manifest(manifest).spec.limits
    assert limits == {
        "cpu": Fraction(3, 2),
        "memory": Fraction(16 * 2**30),
        "pods": Fraction(110),
        "gpu": Fraction(1000),
    }
    written = NodePool.from_manifest(manifest).to_manifest()["spec"]["limits"]
    assert written == {"cpu": "1500m", "memory": "16Gi", "pods": "110", "gpu": "1k"}


def test_nodeclaim_status_round_trips() -> None:
    manifest = edited(
        NODECLAIM,
        ("status",),
        {
            "nodeName": "node-a",
            "providerID": "kwok://node-a",
            "imageID": "img-1",
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
            "lastPodEventTime": "2024-05-01T10:00:00Z",
            "conditions": [],
        },
    )
    nodeclaim = NodeClaim.from_manifest(manifest)
    assert nodeclaim.status.allocatable["cpu"] == Fraction(39, 10)
    assert nodeclaim.status.last_pod_event_time == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert nodeclaim.to_manifest()["status"] == manifest["status"]


# Validation: each error names the field


INVALID_NODEPOOLS = [
    pytest.param(
        nodepool_with_requirement(values=[]),
        (*TEMPLATE, "requirements", 0, "values"),
        "operator 'In' needs at least one value",
        id="in-without-values",
    ),
    pytest.param(
        nodepool_with_requirement(operator="Exists"),
        (*TEMPLATE, "requirements", 0, "values"),
        "operator 'Exists' takes no values",
        id="exists-with-values",
    ),
    pytest.param(
        nodepool_with_requirement(operator="Gt", values=["a"]),
        (*TEMPLATE, "requirements", 0, "values"),
        "exactly one non-negative integer",
        id="gt-not-an-integer",
    ),
    pytest.param(
        nodepool_with_requirement(operator="Lte", values=["1", "2"]),
        (*TEMPLATE, "requirements", 0, "values"),
        "exactly one non-negative integer",
        id="lte-two-values",
    ),
    pytest.param(
        nodepool_with_requirement(values=["amd64"], minValues=2),
        (*TEMPLATE, "requirements", 0, "minValues"),
        "minValues is 2 but only 1 values",
        id="min-values-above-values",
    ),
    pytest.param(
        nodepool_with_requirement(minValues=51),
        (*TEMPLATE, "requirements", 0, "minValues"),
        "less than or equal to 50",
        id="min-values-above-50",
    ),
    pytest.param(
        nodepool_with_requirement(operator="Like"),
        (*TEMPLATE, "requirements", 0, "operator"),
        "'In', 'NotIn'",
        id="unknown-operator",
    ),
    pytest.param(
        nodepool_with_requirement(key="karpenter.sh/team"),
        (*TEMPLATE, "requirements", 0, "key"),
        "label 'karpenter.sh/team' is restricted",
        id="restricted-domain-key",
    ),
    pytest.param(
        nodepool_with_requirement(key="sub.karpenter.sh/team"),
        (*TEMPLATE, "requirements", 0, "key"),
        "is restricted",
        id="restricted-subdomain-key",
    ),
    pytest.param(
        nodepool_with_requirement(key="kubernetes.io/hostname"),
        (*TEMPLATE, "requirements", 0, "key"),
        "label 'kubernetes.io/hostname' is restricted",
        id="hostname-key",
    ),
    pytest.param(
        nodepool_with_requirement(key="karpenter.sh/nodepool"),
        (*TEMPLATE, "requirements"),
        "requirements[0]: label 'karpenter.sh/nodepool' is restricted",
        id="nodepool-key-in-a-nodepool",
    ),
    pytest.param(
        nodepool_with_requirement(key="Team Name"),
        (*TEMPLATE, "requirements", 0, "key"),
        "label key 'Team Name' has an invalid name",
        id="key-not-a-qualified-name",
    ),
    pytest.param(
        nodepool_with_requirement(values=["a b"]),
        (*TEMPLATE, "requirements", 0, "values", 0),
        "label value 'a b' is invalid",
        id="bad-value",
    ),
    pytest.param(
        edited(NODEPOOL, (*TEMPLATE, "requirements"), [REQUIREMENT] * 101),
        (*TEMPLATE, "requirements"),
        "at most 100 items",
        id="too-many-requirements",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "template", "metadata", "labels"), {"karpenter.sh/x": "y"}),
        ("spec", "template", "metadata", "labels"),
        "label 'karpenter.sh/x' is restricted",
        id="restricted-template-label",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "template", "metadata", "labels"), {labels.NODEPOOL: "y"}),
        ("spec", "template", "metadata", "labels"),
        "label 'karpenter.sh/nodepool' is restricted",
        id="nodepool-template-label",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "template", "metadata", "labels"), {"team": "a b"}),
        ("spec", "template", "metadata", "labels", "team"),
        "label value 'a b' is invalid",
        id="bad-template-label-value",
    ),
    pytest.param(
        edited(NODEPOOL, (*TEMPLATE, "expireAfter"), "30d"),
        (*TEMPLATE, "expireAfter"),
        "'30d' is not a valid duration",
        id="expire-after-days",
    ),
    pytest.param(
        edited(NODEPOOL, (*TEMPLATE, "terminationGracePeriod"), "Never"),
        (*TEMPLATE, "terminationGracePeriod"),
        "'Never' is not a valid duration",
        id="termination-grace-period-never",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "disruption", "consolidateAfter"), "1.5h"),
        ("spec", "disruption", "consolidateAfter"),
        "not a valid duration",
        id="fractional-consolidate-after",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "disruption", "consolidationPolicy"), "Always"),
        ("spec", "disruption", "consolidationPolicy"),
        "'WhenEmptyOrUnderutilized', 'WhenEmpty' or 'Balanced'",
        id="unknown-policy",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "disruption", "budgets"), [{"nodes": "1", "schedule": "@daily"}]),
        ("spec", "disruption", "budgets", 0),
        "schedule and duration must be set together",
        id="schedule-without-duration",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "disruption", "budgets"), [{"nodes": "1", "duration": "1h"}]),
        ("spec", "disruption", "budgets", 0),
        "schedule and duration must be set together",
        id="duration-without-schedule",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "disruption", "budgets"), [{"nodes": "101%"}]),
        ("spec", "disruption", "budgets", 0, "nodes"),
        "not a node count or a percentage",
        id="budget-over-100-percent",
    ),
    pytest.param(
        edited(
            NODEPOOL,
            ("spec", "disruption", "budgets"),
            [{"nodes": "1", "schedule": "every day", "duration": "1h"}],
        ),
        ("spec", "disruption", "budgets", 0, "schedule"),
        "not a cron schedule",
        id="budget-bad-cron",
    ),
    pytest.param(
        edited(
            NODEPOOL,
            ("spec", "disruption", "budgets"),
            [{"nodes": "1", "schedule": "@daily", "duration": "90s"}],
        ),
        ("spec", "disruption", "budgets", 0, "duration"),
        "not a budget duration",
        id="budget-duration-in-seconds",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "disruption", "budgets"), [{"reasons": ["Empty", "Empty"]}]),
        ("spec", "disruption", "budgets", 0, "reasons"),
        "must not repeat",
        id="budget-repeated-reason",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "disruption", "budgets"), [{"reasons": ["Expired"]}]),
        ("spec", "disruption", "budgets", 0, "reasons", 0),
        "'Underutilized', 'Empty' or 'Drifted'",
        id="budget-unknown-reason",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "disruption", "budgets"), [{"nodes": "1"}] * 51),
        ("spec", "disruption", "budgets"),
        "at most 50 items",
        id="too-many-budgets",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "weight"), 0),
        ("spec", "weight"),
        "greater than or equal to 1",
        id="weight-0",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "weight"), 101),
        ("spec", "weight"),
        "less than or equal to 100",
        id="weight-101",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "limits"), {"cpu": "-1"}),
        ("spec", "limits", "cpu"),
        "negative",
        id="negative-limit",
    ),
    pytest.param(
        edited(NODEPOOL, ("spec", "limits"), {"memory": "lots"}),
        ("spec", "limits", "memory"),
        "'lots' is not a quantity",
        id="limit-not-a-quantity",
    ),
    pytest.param(
        edited(NODEPOOL, (*TEMPLATE, "taints"), [{"key": "a", "effect": "Sometimes"}]),
        (*TEMPLATE, "taints", 0, "effect"),
        "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'",
        id="taint-effect",
    ),
    pytest.param(
        edited(NODEPOOL, (*TEMPLATE, "taints"), [{"key": "", "effect": "NoSchedule"}]),
        (*TEMPLATE, "taints", 0, "key"),
        "taint key '' has an empty name",
        id="taint-empty-key",
    ),
    pytest.param(
        edited(NODEPOOL, (*TEMPLATE, "taints"), [{"key": "a", "effect": "NoSchedule"}] * 2),
        (*TEMPLATE, "taints"),
        "taint a:NoSchedule is repeated",
        id="duplicate-taint",
    ),
    pytest.param(
        edited(
            edited(NODEPOOL, (*TEMPLATE, "taints"), [{"key": "a", "effect": "NoSchedule"}]),
            (*TEMPLATE, "startupTaints"),
            [{"key": "a", "value": "other", "effect": "NoSchedule"}],
        ),
        (*TEMPLATE, "startupTaints"),
        "taint a:NoSchedule is repeated",
        id="taint-repeated-as-startup-taint",
    ),
    pytest.param(
        edited(NODEPOOL, (*TEMPLATE, "nodeClassRef", "group"), "karpenter.kwok.sh/v1alpha1"),
        (*TEMPLATE, "nodeClassRef", "group"),
        "without a version",
        id="versioned-node-class-group",
    ),
    pytest.param(
        edited(NODEPOOL, (*TEMPLATE, "nodeClassRef", "name"), ""),
        (*TEMPLATE, "nodeClassRef", "name"),
        "at least 1 character",
        id="empty-node-class-name",
    ),
    pytest.param(
        edited(NODEPOOL, ("kind",), "NodeClaim"),
        ("kind",),
        "'NodePool'",
        id="wrong-kind",
    ),
    pytest.param(
        edited(
            NODEPOOL,
            ("status", "conditions"),
            [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}],
        ),
        ("status", "conditions"),
        "condition type 'Ready' appears more than once",
        id="duplicate-condition",
    ),
    pytest.param(
        edited(NODEPOOL, ("status", "conditions"), [{"type": "Ready", "status": "Yes"}]),
        ("status", "conditions", 0, "status"),
        "'True', 'False' or 'Unknown'",
        id="condition-status",
    ),
]


@pytest.mark.parametrize(("manifest", "loc", "message"), INVALID_NODEPOOLS)
def test_invalid_nodepool_error_names_the_field(
    manifest: dict[str, Any], loc: tuple[str | int, ...], message: str
) -> None:
    errors = errors_of(NodePool, manifest)
    assert [error["loc"] for error in errors] == [loc]
    assert message in errors[0]["msg"]


def test_required_fields_are_reported() -> None:
    manifest = copy.deepcopy(NODEPOOL)
    del manifest["spec"]["template"]["spec"]["nodeClassRef"]
    del manifest["spec"]["template"]["spec"]["requirements"]
    locs = {error["loc"] for error in errors_of(NodePool, manifest)}
    assert locs == {(*TEMPLATE, "nodeClassRef"), (*TEMPLATE, "requirements")}
    assert {error["loc"] for error in errors_of(NodePool, {"kind": "NodePool"})} == {("spec",)}


@pytest.mark.parametrize(
    "requirement",
    [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        {"key": "notkarpenter.sh/x", "operator": "Exists"},
        {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
        {"key": "example.com/cpus", "operator": "Gte", "values": ["0"]},
        {"key": "example.com/x", "operator": "NotIn", "values": ["a"]},
        {"key": "example.com/x", "operator": "DoesNotExist"},
        {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 5},
    ],
)
def test_valid_requirements_are_accepted(requirement: dict[str, Any]) -> None:
    manifest = edited(NODEPOOL, (*TEMPLATE, "requirements"), [requirement])
    (parsed,) = NodePool.from_manifest(manifest).spec.template.spec.requirements
    assert parsed.key == requirement["key"]


def test_nodeclaims_may_require_the_nodepool_label() -> None:
    manifest = edited(
        NODECLAIM,
        ("spec", "requirements"),
        [{"key": labels.NODEPOOL, "operator": "In", "values": ["default"]}],
    )
    assert NodeClaim.from_manifest(manifest).spec.requirements[0].key == labels.NODEPOOL


def test_nodeclaims_may_not_require_the_hostname() -> None:
    manifest = edited(
        NODECLAIM,
        ("spec", "requirements"),
        [{"key": labels.HOSTNAME, "operator": "In", "values": ["node-a"]}],
    )
    errors = errors_of(NodeClaim, manifest)
    assert errors[0]["loc"] == ("spec", "requirements", 0, "key")


def test_nodeclaim_requests_must_not_be_negative() -> None:
    manifest = edited(NODECLAIM, ("spec", "resources"), {"requests": {"cpu": "-100m"}})
    errors = errors_of(NodeClaim, manifest)
    assert errors[0]["loc"] == ("spec", "resources", "requests", "cpu")


def test_taint_model_validates_directly() -> None:
    assert Taint(key="example.com/gpu", effect="NoSchedule").value == ""
    with pytest.raises(ValidationError) as raised:
        Taint(key="example.com/gpu", value="a/b", effect="NoSchedule")
    assert raised.value.errors()[0]["loc"] == ("value",)


# Labels


@pytest.mark.parametrize(
    ("key", "restricted"),
    [
        (labels.NODEPOOL, False),
        (labels.CAPACITY_TYPE, False),
        (labels.TOPOLOGY_ZONE, False),
        ("karpenter.sh/anything", True),
        ("team.karpenter.sh/x", True),
        ("karpenter.shop/x", False),
        (labels.HOSTNAME, True),
        ("example.com/team", False),
        ("team", False),
    ],
)
def test_restricted_labels(key: str, restricted: bool) -> None:
    assert (labels.restricted_label_error(key) is not None) is restricted


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("team", True),
        ("example.com/team", True),
        ("a.b-c.d/E_f.g", True),
        ("x/" + "a" * 63, True),
        ("x/" + "a" * 64, False),
        ("/team", False),
        ("Example.com/team", False),
        ("example.com/", False),
        ("-team", False),
        ("a/b/c", False),
        ("a" * 254 + "/b", False),
    ],
)
def test_qualified_names(key: str, valid: bool) -> None:
    assert (labels.qualified_name_error(key) is None) is valid


def test_well_known_and_normalized_labels() -> None:
    assert labels.INSTANCE_TYPE in labels.WELL_KNOWN_LABELS
    assert labels.HOSTNAME not in labels.WELL_KNOWN_LABELS
    assert labels.NORMALIZED_LABELS["failure-domain.beta.kubernetes.io/zone"] == (
        labels.TOPOLOGY_ZONE
    )
    assert labels.NORMALIZED_LABELS["beta.kubernetes.io/instance-type"] == labels.INSTANCE_TYPE
    assert set(labels.NORMALIZED_LABELS.values()) <= labels.WELL_KNOWN_LABELS
    assert labels.node_class_label_key("karpenter.kwok.sh", "KWOKNodeClass") == (
        "karpenter.kwok.sh/kwoknodeclass"
    )
