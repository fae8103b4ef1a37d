"""``karpenter convert``'s core: v1alpha5 Provisioners and v1beta1 NodePools to v1 NodePools,
upstream v1.x objects checked, workloads' v1alpha5 names reported (pure functions)."""

from typing import Any

import pytest

from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.convert import Finding, convert_objects, pop_field, unsatisfiable
from karpenter_core.convert.nodepool import provisioner_to_v1beta1, seconds, v1beta1_to_v1
from karpenter_core.convert.workloads import check_workload
from tests.unit.scheduling_fixtures import instance_type


def provisioner(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha5",
        "kind": "Provisioner",
        "metadata": {"name": "default"},
        "spec": {"providerRef": {"name": "default"}, **spec},
    }


REF = {"group": "karpenter.example.com", "kind": "ExampleNodeClass", "name": "default"}


def v1beta1_nodepool(**spec: Any) -> dict[str, Any]:
    template = {
        "nodeClassRef": {
            "apiVersion": "karpenter.example.com/v1beta1",
            "kind": "ExampleNodeClass",
            "name": "default",
        },
        "requirements": [],
    }
    template.update(spec.pop("template_spec", {}))
    return {
        "apiVersion": "karpenter.sh/v1beta1",
        "kind": "NodePool",
        "metadata": {"name": "pool", "uid": "1234", "resourceVersion": "7"},
        "spec": {"template": {"spec": template}, **spec},
    }


def converted(
    objs: list[dict[str, Any]], **kwargs: Any
) -> tuple[list[dict[str, Any]], list[Finding]]:
    result = convert_objects(objs, [], **kwargs)
    return [c.obj for c in result.objects], result.findings


def by_field(findings: list[Finding]) -> dict[str, Finding]:
    return {f.field: f for f in findings}


def test_seconds_as_duration() -> None:
    assert [seconds(s) for s in (30, 90, 300, 7200, 2592000, 0)] == [
        "30s",
        "90s",
        "5m",
        "2h",
        "720h",
        "0s",
    ]


def test_provisioner_fields_move_into_the_template_and_limits_lose_resources() -> None:
    taint = {"key": "team", "value": "a", "effect": "NoSchedule"}
    requirement = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
    obj = provisioner(
        labels={"team": "a"},
        annotations={"note": "x"},
        taints=[taint],
        startupTaints=[taint],
        requirements=[requirement],
        limits={"resources": {"cpu": 1000, "memory": "1000Gi"}},
        weight=10,
        ttlSecondsUntilExpired=2592000,
        consolidation={"enabled": True},
    )
    nodepool, findings = provisioner_to_v1beta1(obj)
    assert nodepool is not None
    spec = nodepool["spec"]
    assert spec["template"]["metadata"] == {"labels": {"team": "a"}, "annotations": {"note": "x"}}
    assert spec["template"]["spec"]["taints"] == [taint]
    assert spec["template"]["spec"]["startupTaints"] == [taint]
    assert spec["template"]["spec"]["requirements"] == [requirement]
    assert spec["template"]["spec"]["nodeClassRef"] == {"name": "default"}
    assert spec["limits"] == {"cpu": 1000, "memory": "1000Gi"}
    assert spec["weight"] == 10
    assert spec["disruption"] == {"consolidationPolicy": "WhenUnderutilized", "expireAfter": "720h"}
    assert by_field(findings)["spec.limits.resources"].severity == "note"


@pytest.mark.parametrize(
    ("spec", "disruption", "template_expire"),
    [
        # no consolidation, no ttlSecondsAfterEmpty: nodes were never consolidated
        ({}, {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}, "Never"),
        (
            {"ttlSecondsAfterEmpty": 30, "ttlSecondsUntilExpired": 86400},
            {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"},
            "24h",
        ),
        (
            {"consolidation": {"enabled": True}},
            {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
            "Never",
        ),
    ],
)
def test_v1alpha5_disruption_keeps_its_meaning_in_v1(
    spec: dict[str, Any], disruption: dict[str, Any], template_expire: str
) -> None:
    (nodepool,), _ = converted([provisioner(**spec)])
    assert nodepool["apiVersion"] == "karpenter.sh/v1"
    assert nodepool["spec"]["disruption"] == {**disruption, "budgets": [{"nodes": "10%"}]}
    assert nodepool["spec"]["template"]["spec"]["expireAfter"] == template_expire


def test_missing_ttls_are_written_out_with_a_note_each() -> None:
    _, findings = converted([provisioner()])
    fields = by_field(findings)
    assert "expireAfter Never" in fields["spec.ttlSecondsUntilExpired"].message
    assert "consolidateAfter Never" in fields["spec.consolidation"].message
    assert 'nodes "10%"' in fields["spec.disruption.budgets"].message
    # (no provider here knows the providerRef: that one is a warning)
    assert {f.severity for f in findings if f.field != "spec.providerRef"} == {"note"}


def test_consolidation_with_ttl_after_empty_is_a_warning_saying_what_was_kept() -> None:
    (nodepool,), findings = converted(
        [provisioner(consolidation={"enabled": True}, ttlSecondsAfterEmpty=30)]
    )
    assert nodepool["spec"]["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    assert nodepool["spec"]["disruption"]["consolidateAfter"] == "0s"
    warning = by_field(findings)["spec.ttlSecondsAfterEmpty"]
    assert warning.severity == "warning"
    assert "keeps consolidation" in warning.message and "consolidateAfter: 30s" in warning.message


def test_a_bad_ttl_is_reported_and_ignored() -> None:
    (nodepool,), findings = converted([provisioner(ttlSecondsAfterEmpty="30s")])
    assert (
        "not a whole number of seconds" in by_field(findings)["spec.ttlSecondsAfterEmpty"].message
    )
    assert nodepool["spec"]["disruption"]["consolidateAfter"] == "Never"


def test_inline_provider_is_left_out_with_a_warning() -> None:
    obj = provisioner(provider={"subnetSelector": {"a": "b"}})
    del obj["spec"]["providerRef"]
    objects, findings = converted([obj])
    assert objects == []
    assert "left out of the output" in by_field(findings)["spec.provider"].message


def test_provisioner_findings_name_the_provisioner_fields() -> None:
    _, findings = converted([provisioner(weight=50, requirements=[CAPACITY_TYPES])])
    assert "spec.weight" in by_field(findings)
    # without a provider that knows the reference, v1 lacks group and kind
    assert "group, kind" in by_field(findings)["spec.providerRef"].message


def test_a_provisioner_without_provider_ref_and_no_provider_to_supply_one() -> None:
    obj = provisioner()
    del obj["spec"]["providerRef"]
    _, findings = converted([obj])
    message = by_field(findings)["spec.providerRef"].message
    assert message.startswith("not set, and no installed provider converts NodeClasses")


def test_a_reference_without_kind_is_named_as_such_in_the_note() -> None:
    """A reference without kind (a providerRef's usual form) is named by its name alone."""
    obj = v1beta1_nodepool()
    del obj["spec"]["template"]["spec"]["nodeClassRef"]["kind"]
    _, _, findings = v1beta1_to_v1(obj, "NodePool pool", lambda ref: dict(REF))
    assert by_field(findings)["spec.template.spec.nodeClassRef"].message == (
        "default (no kind) became ExampleNodeClass default (group karpenter.example.com)"
    )


def test_v1beta1_nodepool_to_v1() -> None:
    obj = v1beta1_nodepool(
        template_spec={"kubelet": {"maxPods": 20}, "resources": {"requests": {"cpu": "1"}}},
        disruption={"expireAfter": "168h"},
    )
    nodepool, kubelet, findings = v1beta1_to_v1(obj, "NodePool pool", lambda ref: dict(REF))
    assert kubelet == {"maxPods": 20}
    template_spec = nodepool["spec"]["template"]["spec"]
    assert "kubelet" not in template_spec and "resources" not in template_spec
    assert template_spec["expireAfter"] == "168h"
    assert template_spec["nodeClassRef"] == REF
    assert nodepool["spec"]["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
    }
    assert nodepool["metadata"] == {"name": "pool"}
    fields = by_field(findings)
    assert fields["spec.template.spec.resources"].severity == "warning"
    assert fields["spec.disruption.expireAfter"].severity == "note"
    NodePool.from_manifest(nodepool)


def test_v1beta1_when_empty_keeps_its_consolidate_after_and_budgets() -> None:
    budgets = [{"nodes": "1"}]
    obj = v1beta1_nodepool(
        disruption={
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "5m",
            "budgets": budgets,
        }
    )
    nodepool, _, findings = v1beta1_to_v1(obj, "NodePool pool", lambda ref: dict(REF))
    assert nodepool["spec"]["disruption"] == {
        "consolidationPolicy": "WhenEmpty",
        "consolidateAfter": "5m",
        "budgets": budgets,
    }
    assert findings == []


def test_v1_nodepool_fields_this_project_lacks_are_reported_and_left_out() -> None:
    obj = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "static"},
        "spec": {
            "replicas": 3,
            "template": {"spec": {"nodeClassRef": REF, "requirements": [], "newField": 1}},
            "disruption": {"consolidationPolicy": "Balanced", "consolidateAfter": "1m"},
        },
        "status": {"nodes": 3},
    }
    (nodepool,), findings = converted([obj])
    fields = by_field(findings)
    assert "static NodePools" in fields["spec.replicas"].message
    assert "does not have" in fields["spec.template.spec.newField"].message
    assert "replicas" not in nodepool["spec"]
    assert "newField" not in nodepool["spec"]["template"]["spec"]
    assert "status" not in nodepool
    assert "spec.disruption.consolidationPolicy" not in fields  # Balanced is supported
    NodePool.from_manifest(nodepool)


CAPACITY_TYPES = {
    "key": "karpenter.sh/capacity-type",
    "operator": "In",
    "values": ["spot", "on-demand"],
}


def named(obj: dict[str, Any], name: str) -> dict[str, Any]:
    return {**obj, "metadata": {"name": name}}


def test_weight_on_a_nodepool_of_several_capacity_types_is_explained_as_an_order() -> None:
    _, findings = converted([provisioner(weight=70, requirements=[CAPACITY_TYPES])])
    message = by_field(findings)["spec.weight"].message
    assert "orders NodePools" in message and "topologySpreadConstraint" in message


def test_weights_adding_up_to_100_are_explained_as_an_order() -> None:
    spot = {**CAPACITY_TYPES, "values": ["spot"]}
    objs = [
        named(provisioner(weight=70, requirements=[spot]), "spot"),
        named(provisioner(weight=30, requirements=[spot]), "other"),
    ]
    _, findings = converted(objs)
    assert {f.object for f in findings if f.field == "spec.weight"} == {
        "Provisioner spot",
        "Provisioner other",
    }


def test_a_weight_that_only_orders_is_not_reported() -> None:
    spot = {**CAPACITY_TYPES, "values": ["spot"]}
    objs = [
        named(provisioner(weight=50, requirements=[spot]), "first"),
        named(provisioner(weight=10), "second"),
    ]
    _, findings = converted(objs)
    assert [f for f in findings if f.field == "spec.weight"] == []


def test_kinds_left_out_say_why() -> None:
    objs = [
        {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "o"}},
        {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Machine", "metadata": {"name": "m"}},
        {"apiVersion": "karpenter.sh/v1beta1", "kind": "NodeClaim", "metadata": {"name": "c"}},
        {"apiVersion": "karpenter.example.com/v9", "kind": "Thing", "metadata": {"name": "t"}},
    ]
    objects, findings = converted(objs)
    assert objects == []
    messages = {f.object: f.message for f in findings}
    assert "NodeOverlays are not supported" in messages["NodeOverlay o"]
    assert "left out" in messages["Machine m"]
    assert "simulate reads v1beta1 NodeClaims" in messages["NodeClaim c"]
    assert "not a kind any installed provider converts" in messages["Thing t"]


def test_simulation_reads_v1beta1_nodeclaims_as_v1() -> None:
    claim = {
        "apiVersion": "karpenter.sh/v1beta1",
        "kind": "NodeClaim",
        "metadata": {"name": "c"},
        "spec": {
            "kubelet": {"maxPods": 3},
            "nodeClassRef": {"name": "default"},
            "requirements": [],
        },
    }
    (out,), findings = converted([claim], simulation=True)
    assert out["apiVersion"] == "karpenter.sh/v1" and "kubelet" not in out["spec"]
    assert by_field(findings)["spec.kubelet"].severity == "note"


@pytest.mark.parametrize(
    "spec",
    [5, {"template": 5}, {"template": {"spec": 5}}, {"template": {"spec": {"nodeClassRef": "x"}}}],
)
def test_a_v1_nodepool_with_fields_of_the_wrong_type_is_passed_on_for_validation(
    spec: Any,
) -> None:
    current = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "b"}}
    (out,), _ = converted([{**current, "spec": spec}])
    assert out["spec"] == spec  # the command's validation of the output names the field


def test_a_v1beta1_nodeclaim_whose_spec_is_not_a_map_is_passed_on() -> None:
    claim = {"apiVersion": "karpenter.sh/v1beta1", "kind": "NodeClaim", "metadata": {"name": "c"}}
    (out,), _ = converted([{**claim, "spec": 5}], simulation=True)
    assert out["apiVersion"] == "karpenter.sh/v1" and out["spec"] == 5


def test_v1beta1_kubelet_and_node_class_ref_of_the_wrong_type_are_warnings() -> None:
    pool = v1beta1_nodepool(template_spec={"kubelet": "x", "nodeClassRef": ["default"]})
    _, findings = converted([pool])
    messages = {(f.field, f.message) for f in findings if f.severity == "warning"}
    assert ("spec.template.spec.kubelet", "'x' is not a map of kubelet settings: left out") in (
        messages
    )
    assert (
        "spec.template.spec.nodeClassRef",
        "['default'] is not a reference (a map of group, kind and name): read as none",
    ) in messages


def test_simulation_passes_v1_nodepools_through_unchecked() -> None:
    current = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "b"},
        "spec": {"typo": 1},
    }
    result = convert_objects([provisioner(), current], [], simulation=True)
    assert result.others == [1]
    assert [f for f in result.findings if f.object == "NodePool b"] == []


def test_other_objects_pass_through_by_position() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
    result = convert_objects([provisioner(), deployment], [])
    assert result.others == [1]
    assert [c.source for c in result.objects] == ["Provisioner default"]


@pytest.mark.parametrize(
    ("key", "operator", "says"),
    [
        ("node.kubernetes.io/instance-type", "In", "matches nothing"),
        ("node.kubernetes.io/instance-type", "NotIn", "excludes nothing"),
        ("karpenter.example.com/family", "In", "matches nothing"),
    ],
)
def test_a_wildcard_no_provider_replaces_is_a_warning_on_its_field(
    key: str, operator: str, says: str
) -> None:
    requirement = {"key": key, "operator": operator, "values": ["m5.large", "t3.*"]}
    (nodepool,), findings = converted([provisioner(requirements=[requirement])])
    assert nodepool["spec"]["template"]["spec"]["requirements"][0] == requirement
    message = by_field(findings)["spec.requirements[0].values"].message
    assert message.startswith(f"t3.*: values are literal, so a wildcard {says}")
    what = "instance types" if key.endswith("instance-type") else "values it meant"
    assert message.endswith(f"list the {what} instead")


def template(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "fields"),
    [
        (
            {
                "kind": "Pod",
                "metadata": {"name": "p", "annotations": {"karpenter.sh/do-not-evict": "true"}},
                "spec": {"nodeSelector": {"karpenter.sh/provisioner-name": "default"}},
            },
            {
                "metadata.annotations[karpenter.sh/do-not-evict]",
                "spec.nodeSelector[karpenter.sh/provisioner-name]",
            },
        ),
        (
            {
                "kind": "Deployment",
                "metadata": {"name": "d"},
                "spec": {
                    "template": template(
                        {
                            "affinity": {
                                "nodeAffinity": {
                                    "requiredDuringSchedulingIgnoredDuringExecution": {
                                        "nodeSelectorTerms": [
                                            {
                                                "matchExpressions": [
                                                    {
                                                        "key": "karpenter.sh/provisioner-name",
                                                        "operator": "In",
                                                        "values": ["a"],
                                                    }
                                                ]
                                            }
                                        ]
                                    },
                                    "preferredDuringSchedulingIgnoredDuringExecution": [
                                        {
                                            "weight": 1,
                                            "preference": {
                                                "matchExpressions": [
                                                    {
                                                        "key": "karpenter.sh/provisioner-name",
                                                        "operator": "Exists",
                                                    }
                                                ]
                                            },
                                        }
                                    ],
                                }
                            },
                            "topologySpreadConstraints": [
                                {"topologyKey": "karpenter.sh/provisioner-name"}
                            ],
                        }
                    )
                },
            },
            {
                "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
                "Execution.nodeSelectorTerms[0].matchExpressions[0].key",
                "spec.template.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuring"
                "Execution[0].preference.matchExpressions[0].key",
                "spec.template.spec.topologySpreadConstraints[0].topologyKey",
            },
        ),
        (
            {
                "kind": "CronJob",
                "metadata": {"name": "c"},
                "spec": {
                    "jobTemplate": {
                        "spec": {"template": template({}, {"karpenter.sh/do-not-evict": "true"})}
                    }
                },
            },
            {"spec.jobTemplate.spec.template.metadata.annotations[karpenter.sh/do-not-evict]"},
        ),
        (
            {
                "kind": "Node",
                "metadata": {
                    "name": "n",
                    "labels": {"karpenter.sh/provisioner-name": "a"},
                    "annotations": {"karpenter.sh/do-not-consolidate": "true"},
                },
            },
            {
                "metadata.annotations[karpenter.sh/do-not-consolidate]",
                "metadata.labels[karpenter.sh/provisioner-name]",
            },
        ),
        ({"kind": "ConfigMap", "metadata": {"name": "x"}}, set()),
    ],
)
def test_workloads_using_v1alpha5_names_are_reported(obj: dict[str, Any], fields: set[str]) -> None:
    findings = check_workload(obj)
    assert {f.field for f in findings} == fields
    assert all(
        "karpenter.sh/nodepool" in f.message or "karpenter.sh/do-not-disrupt" in f.message
        for f in findings
    )


def test_unsatisfiable_requirements_against_a_catalog() -> None:
    catalog = [instance_type("c-2", 2, 4, 0.1), instance_type("arm-2", 2, 4, 0.1, arch="arm64")]

    def pool(*requirements: dict[str, Any]) -> dict[str, Any]:
        return {"spec": {"template": {"spec": {"requirements": list(requirements)}}}}

    arch = {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
    assert unsatisfiable(pool(arch), "NodePool a", catalog, "the test catalog") is None
    size = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2"]}
    finding = unsatisfiable(pool(arch, size), "NodePool a", catalog, "the test catalog")
    assert finding is not None and "no instance type in the test catalog" in finding.message
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["nowhere"]}
    assert unsatisfiable(pool(zone), "NodePool a", catalog, "the test catalog") is not None


def test_pop_field_and_finding_line() -> None:
    obj = {"spec": {"items": [{"a": 1, "b": 2}], "x": 3}}
    assert pop_field(obj, "spec.items[0].a") == 1
    assert pop_field(obj, "spec.x") == 3
    assert pop_field(obj, "spec.missing.y") is None
    assert obj == {"spec": {"items": [{"b": 2}]}}
    assert Finding("NodePool a", "spec.x", "bad").line() == "warning: NodePool a: spec.x: bad"


def test_a_karpenter_object_without_a_name_is_left_out() -> None:
    obj = provisioner()
    del obj["metadata"]
    objects, findings = converted([obj])
    assert objects == []
    assert [(f.object, f.field) for f in findings] == [("Provisioner (unnamed)", "metadata.name")]
