"""``karpenter convert`` with the AWS provider: AWSNodeTemplate and v1beta1 EC2NodeClass to v1,
kubelet settings moved from NodePools, AWS checks, and the command on a manifest as older EKS
guides wrote it (converted, then simulated)."""

import json
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from karpenter_aws.convert import ROLE_PLACEHOLDER, AWSConverter
from karpenter_aws.nodeclass import EC2NodeClass
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cli.convert import convert
from karpenter_core.cli.simulate import simulate
from karpenter_core.convert import Finding, convert_objects
from karpenter_core.manifests.fields import model_schema, unknown_fields

GUIDE = """
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: default
spec:
  requirements:
    - key: karpenter.sh/capacity-type
      operator: In
      values: ["spot", "on-demand"]
    - key: node.kubernetes.io/instance-type
      operator: In
      values: ["m5.*", "c5.*"]
  limits:
    resources:
      cpu: 1000
  providerRef:
    name: default
  weight: 70
  consolidation:
    enabled: true
  ttlSecondsAfterEmpty: 30
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata:
  name: default
spec:
  subnetSelector:
    karpenter.sh/discovery: my-cluster
  securityGroupSelector:
    karpenter.sh/discovery: my-cluster
"""

GUIDE_WITHOUT_REF = """
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: default
spec:
  requirements:
    - key: node.kubernetes.io/instance-type
      operator: In
      values: [m5.large, m5.xlarge, c5.large]
    - key: karpenter.sh/capacity-type
      operator: In
      values: [spot, on-demand]
  limits:
    resources:
      cpu: 1000
  weight: 70
  consolidation:
    enabled: true
  ttlSecondsAfterEmpty: 30
"""
"""The Provisioner of an EKS guide that names no providerRef (no AWSNodeTemplate either)."""

INFLATE = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: inflate}}
  template:
    metadata: {labels: {app: inflate}}
    spec:
      containers:
        - name: inflate
          image: public.ecr.aws/eks-distro/kubernetes/pause:3.7
          resources: {requests: {cpu: "1"}}
"""


def template(name: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1alpha1",
        "kind": "AWSNodeTemplate",
        "metadata": {"name": name},
        "spec": {"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, **spec},
    }


def ec2nodeclass_v1beta1(name: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1beta1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": "KarpenterNodeRole-x",
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            **spec,
        },
    }


def nodepool_v1beta1(
    name: str, node_class: str = "default", **template_spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1beta1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {"nodeClassRef": {"name": node_class}, "requirements": [], **template_spec}
            }
        },
    }


def run(*objs: dict[str, Any]) -> tuple[dict[tuple[str, str], dict[str, Any]], list[Finding]]:
    result = convert_objects(list(objs), [AWSConverter()])
    out = {(c.obj["kind"], c.obj["metadata"]["name"]): c.obj for c in result.objects}
    for obj in out.values():
        (NodePool if obj["kind"] == "NodePool" else EC2NodeClass).model_validate(obj)
    return out, result.findings


def finding(findings: list[Finding], obj: str, field: str) -> Finding:
    return next(f for f in findings if f.object == obj and f.field == field)


def test_aws_node_template_selectors_become_terms() -> None:
    obj = template(
        subnetSelector={"aws-ids": "subnet-1, subnet-2"},
        securityGroupSelector={"karpenter.sh/discovery": "c", "aws::ids": "sg-1"},
        amiSelector={"aws::name": "my-ami-*", "aws::owners": "self,123456789012", "team": "a"},
        amiFamily="AL2023",
        instanceProfile="KarpenterNodeInstanceProfile",
        userData="#!/bin/bash",
        tags={"env": "prod"},
        detailedMonitoring=True,
    )
    out, findings = run(obj)
    spec = out["EC2NodeClass", "default"]["spec"]
    assert spec["subnetSelectorTerms"] == [{"id": "subnet-1"}, {"id": "subnet-2"}]
    assert spec["securityGroupSelectorTerms"] == [
        {"id": "sg-1"},
        {"tags": {"karpenter.sh/discovery": "c"}},
    ]
    assert spec["amiSelectorTerms"] == [
        {"name": "my-ami-*", "tags": {"team": "a"}, "owner": "self"},
        {"name": "my-ami-*", "tags": {"team": "a"}, "owner": "123456789012"},
    ]
    assert spec["amiFamily"] == "AL2023"  # selector terms without an alias keep the family
    assert spec["instanceProfile"] == "KarpenterNodeInstanceProfile" and "role" not in spec
    assert (spec["userData"], spec["tags"], spec["detailedMonitoring"]) == (
        "#!/bin/bash",
        {"env": "prod"},
        True,
    )
    assert finding(findings, "AWSNodeTemplate default", "spec.amiSelector").severity == "note"


def test_a_selector_that_is_not_a_tag_map_is_reported() -> None:
    result = convert_objects(
        [template(amiSelector=["ami-1"], instanceProfile="p")], [AWSConverter()]
    )
    warning = finding(result.findings, "AWSNodeTemplate default", "spec.amiSelector")
    assert "expected a map of tags" in warning.message


def test_ami_ids_become_id_terms() -> None:
    out, _ = run(
        template(amiSelector={"aws::ids": "ami-1,ami-2"}, amiFamily="Custom", instanceProfile="p")
    )
    spec = out["EC2NodeClass", "default"]["spec"]
    assert spec["amiSelectorTerms"] == [{"id": "ami-1"}, {"id": "ami-2"}]
    assert spec["amiFamily"] == "Custom"


@pytest.mark.parametrize(
    ("family", "alias", "end_of_life"),
    [
        (None, "al2@latest", True),
        ("AL2", "al2@latest", True),
        ("AL2023", "al2023@latest", False),
        ("Bottlerocket", "bottlerocket@latest", False),
        ("Windows2022", "windows2022@latest", False),
    ],
)
def test_ami_family_becomes_an_alias_with_a_drift_warning(
    family: str | None, alias: str, end_of_life: bool
) -> None:
    out, findings = run(template(**({"amiFamily": family} if family else {})))
    spec = out["EC2NodeClass", "default"]["spec"]
    assert spec["amiSelectorTerms"] == [{"alias": alias}] and "amiFamily" not in spec
    warning = finding(findings, "AWSNodeTemplate default", "spec.amiSelectorTerms")
    assert warning.severity == "warning" and "@latest drifts" in warning.message
    assert ("end of life" in warning.message) is end_of_life


def test_a_family_v1_lacks_is_a_warning() -> None:
    result = convert_objects([template(amiFamily="Ubuntu")], [AWSConverter()])
    warning = finding(result.findings, "AWSNodeTemplate default", "spec.amiFamily")
    assert "Ubuntu has no alias in v1" in warning.message


def test_v1beta1_selector_terms_without_family_get_al2_written_out() -> None:
    out, findings = run(ec2nodeclass_v1beta1(amiSelectorTerms=[{"id": "ami-1"}]))
    assert out["EC2NodeClass", "default"]["spec"]["amiFamily"] == "AL2"
    assert "end of life" in finding(findings, "EC2NodeClass default", "spec.amiFamily").message


def test_missing_role_gets_a_placeholder_and_a_warning() -> None:
    out, findings = run(template())
    assert out["EC2NodeClass", "default"]["spec"]["role"] == ROLE_PLACEHOLDER
    warning = finding(findings, "AWSNodeTemplate default", "spec.role")
    assert warning.severity == "warning" and ROLE_PLACEHOLDER in warning.message


def test_launch_template_is_reported_and_left_out() -> None:
    out, findings = run(template(launchTemplate="my-template", instanceProfile="p"))
    assert "launchTemplate" not in out["EC2NodeClass", "default"]["spec"]
    assert "left out" in finding(findings, "AWSNodeTemplate default", "spec.launchTemplate").message


def test_old_imds_hop_limit_is_written_out_unless_set() -> None:
    out, findings = run(
        ec2nodeclass_v1beta1("a"),
        ec2nodeclass_v1beta1("b", metadataOptions={"httpPutResponseHopLimit": 1}),
    )
    assert out["EC2NodeClass", "a"]["spec"]["metadataOptions"] == {"httpPutResponseHopLimit": 2}
    assert out["EC2NodeClass", "b"]["spec"]["metadataOptions"] == {"httpPutResponseHopLimit": 1}
    fields = {(f.object, f.field) for f in findings}
    assert ("EC2NodeClass a", "spec.metadataOptions.httpPutResponseHopLimit") in fields
    assert ("EC2NodeClass b", "spec.metadataOptions.httpPutResponseHopLimit") not in fields


def test_kubelet_moves_to_the_node_class_and_splits_it_when_nodepools_differ() -> None:
    out, findings = run(
        nodepool_v1beta1("a", kubelet={"maxPods": 20}),
        nodepool_v1beta1("b", kubelet={"maxPods": 50}),
        nodepool_v1beta1("c", kubelet={"maxPods": 20}),
        ec2nodeclass_v1beta1(),
    )
    assert out["EC2NodeClass", "default"]["spec"]["kubelet"] == {"maxPods": 20}
    assert out["EC2NodeClass", "default-b"]["spec"]["kubelet"] == {"maxPods": 50}
    refs = {
        n: out["NodePool", n]["spec"]["template"]["spec"]["nodeClassRef"]["name"] for n in "abc"
    }
    assert refs == {"a": "default", "b": "default-b", "c": "default"}
    assert "kubelet" not in out["NodePool", "a"]["spec"]["template"]["spec"]
    assert (
        "copy default-b"
        in finding(findings, "NodePool b", "spec.template.spec.nodeClassRef.name").message
    )


def test_a_provisioner_kubelet_reaches_the_node_template() -> None:
    provisioner = {
        "apiVersion": "karpenter.sh/v1alpha5",
        "kind": "Provisioner",
        "metadata": {"name": "default"},
        "spec": {"providerRef": {"name": "default"}, "kubeletConfiguration": {"maxPods": 30}},
    }
    out, _ = run(provisioner, template(instanceProfile="p"))
    assert out["EC2NodeClass", "default"]["spec"]["kubelet"] == {"maxPods": 30}
    ref = out["NodePool", "default"]["spec"]["template"]["spec"]["nodeClassRef"]
    assert ref == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


@pytest.mark.parametrize(
    ("requirements", "added"),
    [
        (
            [],
            {
                ("karpenter.sh/capacity-type", "In", ("on-demand",)),
                ("kubernetes.io/arch", "In", ("amd64",)),
                ("karpenter.k8s.aws/instance-category", "In", ("c", "m", "r")),
                ("karpenter.k8s.aws/instance-generation", "Gt", ("2",)),
            },
        ),
        (
            [
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
                {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
            ],
            {("karpenter.sh/capacity-type", "In", ("on-demand",))},
        ),
        (
            [
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["t"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            ],
            {
                ("kubernetes.io/arch", "In", ("amd64",)),
                ("karpenter.k8s.aws/instance-generation", "Gt", ("2",)),
            },
        ),
    ],
)
def test_v1alpha5_requirement_defaults_are_written_out(
    requirements: list[dict[str, Any]], added: set[tuple[str, str, tuple[str, ...]]]
) -> None:
    provisioner = {
        "apiVersion": "karpenter.sh/v1alpha5",
        "kind": "Provisioner",
        "metadata": {"name": "default"},
        "spec": {"providerRef": {"name": "default"}, "requirements": requirements},
    }
    out, findings = run(provisioner, template(instanceProfile="p"))
    written = out["NodePool", "default"]["spec"]["template"]["spec"]["requirements"]
    assert {
        (r["key"], r["operator"], tuple(r["values"])) for r in written[len(requirements) :]
    } == added
    notes = [f for f in findings if f.field == "spec.requirements"]
    assert len(notes) == len(added) and all("v1alpha5 defaulted" in f.message for f in notes)


def test_v1beta1_nodepools_get_no_requirement_defaults() -> None:
    out, _ = run(nodepool_v1beta1("a"), ec2nodeclass_v1beta1())
    assert out["NodePool", "a"]["spec"]["template"]["spec"]["requirements"] == []


def test_kubelet_for_a_node_class_not_in_the_input_is_a_warning() -> None:
    _, findings = run(nodepool_v1beta1("a", node_class="elsewhere", kubelet={"maxPods": 20}))
    warning = finding(findings, "NodePool a", "kubelet")
    assert "EC2NodeClass elsewhere" in warning.message and '"maxPods": 20' in warning.message


def test_v1_node_class_fields_this_project_lacks_are_reported() -> None:
    obj = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "x"},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@v20240807"}],
            "role": "r",
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            "capacityReservationSelectorTerms": [{"id": "cr-1"}],
        },
    }
    out, findings = run(obj)
    assert "capacityReservationSelectorTerms" not in out["EC2NodeClass", "x"]["spec"]
    assert (
        "does not have"
        in finding(findings, "EC2NodeClass x", "spec.capacityReservationSelectorTerms").message
    )
    assert [f for f in findings if f.object == "EC2NodeClass x"][1:] == []


def test_reserved_capacity_is_reported() -> None:
    pool = nodepool_v1beta1(
        "a",
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "spot"]}
        ],
    )
    _, findings = run(pool)
    assert (
        "capacity reservations"
        in finding(findings, "NodePool a", "spec.template.spec.requirements[0].values").message
    )


def test_wildcards_become_instance_families_only_when_each_value_is_one() -> None:
    converter = AWSConverter()
    key = "node.kubernetes.io/instance-type"
    assert converter.wildcard_replacement(
        {"key": key, "operator": "In", "values": ["m5.*", "c5.*", "m5.*"]}
    ) == {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"]}
    assert (
        converter.wildcard_replacement(
            {"key": key, "operator": "In", "values": ["m5.large", "c5.*"]}
        )
        is None
    )
    result = convert_objects(
        [
            nodepool_v1beta1(
                "a", requirements=[{"key": key, "operator": "In", "values": ["m5.large", "c5.*"]}]
            )
        ],
        [AWSConverter()],
    )
    warning = finding(result.findings, "NodePool a", "spec.template.spec.requirements[0].values")
    assert "list the instance types" in warning.message


def provisioner(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha5",
        "kind": "Provisioner",
        "metadata": {"name": name},
        "spec": {"requirements": [], **spec},
    }


DEFAULT_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


def test_a_provisioner_without_provider_ref_gets_a_default_ec2nodeclass_to_fill_in() -> None:
    result = convert_objects([yaml.safe_load(GUIDE_WITHOUT_REF)], [AWSConverter()])
    placeholder, converted_pool = result.objects
    assert placeholder.placeholder and placeholder.source == "Provisioner default"
    nodepool = NodePool.model_validate(converted_pool.obj)
    ref = nodepool.spec.template.spec.node_class_ref
    assert (ref.group, ref.kind, ref.name) == ("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert nodepool.spec.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert nodepool.spec.weight == 70
    # the EC2NodeClass of upstream's getting-started guide, which this project's model accepts
    assert placeholder.obj == {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-${CLUSTER_NAME}",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "${CLUSTER_NAME}"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "${CLUSTER_NAME}"}}],
        },
    }
    EC2NodeClass.model_validate(placeholder.obj)
    assert unknown_fields(placeholder.obj, model_schema(EC2NodeClass)) == []
    assert placeholder.comments[0].startswith(
        "written for Provisioner default, which names no NodeClass: fill in ${CLUSTER_NAME}"
    )
    warning = finding(result.findings, "Provisioner default", "spec.providerRef")
    assert warning.severity == "warning"
    assert warning.message.startswith(
        "names no NodeClass, and a v1 NodePool needs one: the output references EC2NodeClass "
        "default, written out with placeholders to fill in before applying (${CLUSTER_NAME})"
    )
    assert not any("None" in f.message for f in result.findings)


def test_one_default_ec2nodeclass_however_many_provisioners_lack_a_provider_ref() -> None:
    objs = [
        provisioner("a"),
        provisioner("b", kubeletConfiguration={"maxPods": 20}),
        provisioner("c", providerRef={"name": "custom"}),
        template("custom", instanceProfile="p"),
        provisioner("d"),
    ]
    out, findings = run(*objs)
    assert sorted(name for kind, name in out if kind == "EC2NodeClass") == [
        "custom",
        "default",
        "default-b",  # b's kubelet settings differ: its copy of default
    ]
    refs = {
        name: obj["spec"]["template"]["spec"]["nodeClassRef"]["name"]
        for (kind, name), obj in out.items()
        if kind == "NodePool"
    }
    assert refs == {"a": "default", "b": "default-b", "c": "custom", "d": "default"}
    assert out[("EC2NodeClass", "default-b")]["spec"]["kubelet"] == {"maxPods": 20}
    assert "kubelet" not in out[("EC2NodeClass", "default")]["spec"]
    warned = {
        f.object for f in findings if f.field == "spec.providerRef" and f.severity == "warning"
    }
    assert warned == {
        "Provisioner a",
        "Provisioner b",
        "Provisioner d",
    }


def test_a_node_template_named_default_is_used_rather_than_a_second_default() -> None:
    result = convert_objects(
        [provisioner("a"), template("default", instanceProfile="p")], [AWSConverter()]
    )
    (node_class,) = [c for c in result.objects if c.obj["kind"] == "EC2NodeClass"]
    assert not node_class.placeholder and node_class.source == "AWSNodeTemplate default"
    assert node_class.obj["spec"]["instanceProfile"] == "p"
    (pool,) = [c.obj for c in result.objects if c.obj["kind"] == "NodePool"]
    assert pool["spec"]["template"]["spec"]["nodeClassRef"] == DEFAULT_REF
    warning = finding(result.findings, "Provisioner a", "spec.providerRef")
    assert "which the input's AWSNodeTemplate default becomes" in warning.message


def documents_by_name(text: str) -> dict[str, str]:
    """Each YAML document of ``convert``'s output (comments included) by its object's name."""
    return {
        yaml.safe_load(doc)["metadata"]["name"]: doc for doc in text.split("---\n") if doc.strip()
    }


def test_findings_on_a_default_ec2nodeclass_are_comments_on_it(tmp_path: Any) -> None:
    path = tmp_path / "old.yaml"
    web = provisioner("web", kubeletConfiguration={"maxPods": 20})
    batch = provisioner("batch", kubeletConfiguration={"podsPerCore": -3})
    path.write_text(yaml.safe_dump_all([web, batch]))
    result = CliRunner().invoke(convert, ["-f", str(path), "--region", "us-east-1"])
    assert result.exit_code == 0, result.output
    # batch's kubelet settings are in the copy default-batch, which does not validate: the
    # warning names that output object (it is in no input) and is a comment on it
    assert (
        "warning: EC2NodeClass default-batch: spec.kubelet.podsPerCore: the output EC2NodeClass, "
        "written for Provisioner batch, does not validate"
    ) in result.stderr
    docs = documents_by_name(result.stdout)
    assert "# warning: spec.kubelet.podsPerCore:" in docs["default-batch"]
    assert "# written for Provisioner batch, which names no NodeClass" in docs["default-batch"]
    assert "# written for Provisioner web, which names no NodeClass" in docs["default"]
    assert not any("podsPerCore" in docs[name] for name in ("default", "web", "batch"))


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"requirements": 5}, "spec.requirements", "Input should be a valid list (got 5)"),
        ({"requirements": "x"}, "spec.requirements", "Input should be a valid list (got 'x')"),
        ({"providerRef": []}, "spec.providerRef", "[] is not a reference"),
        ({"providerRef": "x"}, "spec.providerRef", "'x' is not a reference"),
        (
            {"kubeletConfiguration": "x"},
            "spec.kubeletConfiguration",
            "'x' is not a map of kubelet settings: left out",
        ),
    ],
)
def test_provisioner_fields_of_the_wrong_type_are_warnings_naming_them(
    tmp_path: Any, spec: dict[str, Any], field: str, message: str
) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(provisioner("p", **spec)))
    result = CliRunner().invoke(convert, ["-f", str(path), "--region", "us-east-1"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert any(
        line.startswith(f"warning: Provisioner p: {field}: ") and message in line for line in lines
    ), lines


def test_a_v1beta1_nodeclaim_whose_reference_is_not_a_map_is_passed_on() -> None:
    claim = {
        "apiVersion": "karpenter.sh/v1beta1",
        "kind": "NodeClaim",
        "metadata": {"name": "c"},
        "spec": {"nodeClassRef": "x", "requirements": []},
    }
    result = convert_objects([claim], [AWSConverter()], simulation=True)
    (out,) = result.objects
    assert out.obj["spec"]["nodeClassRef"] == "x"  # simulate's reading of it names the field


def test_instance_type_wildcards_in_not_in_become_instance_families() -> None:
    key = "node.kubernetes.io/instance-type"
    requirement = {"key": key, "operator": "NotIn", "values": ["t3.*", "t2.*"]}
    out, findings = run(provisioner("a", providerRef={"name": "x"}, requirements=[requirement]))
    requirements = out[("NodePool", "a")]["spec"]["template"]["spec"]["requirements"]
    assert requirements[0] == {
        "key": "karpenter.k8s.aws/instance-family",
        "operator": "NotIn",
        "values": ["t3", "t2"],
    }
    message = finding(findings, "Provisioner a", "spec.requirements[0].values").message
    assert message.startswith("t3.*, t2.*: values are literal, so a wildcard excludes nothing")


def test_eks_guide_manifest_converts_with_its_three_warnings(tmp_path: Any) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(GUIDE)
    result = CliRunner().invoke(convert, ["-f", str(path), "--region", "us-east-1"])
    assert result.exit_code == 0, result.output
    warnings = result.stderr.splitlines()
    wildcard = "warning: Provisioner default: spec.requirements[1].values: m5.*, c5.*: values"
    assert any(line.startswith(wildcard) for line in warnings)
    assert any("karpenter.k8s.aws/instance-family In [m5, c5]" in line for line in warnings)
    assert any(
        line.startswith(
            "warning: Provisioner default: spec.ttlSecondsAfterEmpty: set "
            "together with spec.consolidation.enabled"
        )
        for line in warnings
    )
    assert any(
        line.startswith("warning: Provisioner default: spec.weight: 70 orders NodePools")
        for line in warnings
    )
    assert not any("does not validate" in line or "no instance type" in line for line in warnings)
    objs = {o["kind"]: o for o in yaml.safe_load_all(result.stdout)}
    nodepool = NodePool.model_validate(objs["NodePool"])
    EC2NodeClass.model_validate(objs["EC2NodeClass"])
    assert nodepool.spec.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert nodepool.spec.weight == 70
    assert "# note: spec.ttlSecondsUntilExpired: not set" in result.stdout


def test_convert_json_is_a_list(tmp_path: Any) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(GUIDE)
    result = CliRunner().invoke(convert, ["-f", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [item["kind"] for item in listed["items"]] == ["NodePool", "EC2NodeClass"]
    assert "note: Provisioner default: spec.limits.resources" in result.stderr


def test_a_nodepool_no_catalog_instance_type_satisfies(tmp_path: Any) -> None:
    pool = nodepool_v1beta1(
        "a",
        requirements=[
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["zz9"]}
        ],
    )
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump_all([pool, ec2nodeclass_v1beta1()]))
    result = CliRunner().invoke(convert, ["-f", str(path), "--region", "eu-west-1"])
    assert result.exit_code == 0, result.output
    assert (
        "warning: NodePool a: spec.template.spec.requirements: no instance type in the aws "
        "catalog (eu-west-1) satisfies"
    ) in result.stderr


def test_catalog_findings_on_a_provisioner_name_its_fields(tmp_path: Any) -> None:
    provisioner = {
        "apiVersion": "karpenter.sh/v1alpha5",
        "kind": "Provisioner",
        "metadata": {"name": "default"},
        "spec": {
            "providerRef": {"name": "default"},
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["zz9"]}
            ],
        },
    }
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump_all([provisioner, template(instanceProfile="p")]))
    result = CliRunner().invoke(convert, ["-f", str(path), "--region", "us-east-1"])
    assert result.exit_code == 0, result.output
    assert "warning: Provisioner default: spec.requirements: no instance type" in result.stderr


def test_a_region_without_a_catalog_is_a_note(tmp_path: Any) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(GUIDE)
    result = CliRunner().invoke(convert, ["-f", str(path), "--region", "mars-1"])
    assert result.exit_code == 0, result.output
    expected = "note: provider aws: catalog not checked: no offline instance type data for region"
    assert f"{expected} 'mars-1'" in result.stderr


def test_input_without_karpenter_objects_is_an_error(tmp_path: Any) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(INFLATE)
    result = CliRunner().invoke(convert, ["-f", str(path)])
    assert result.exit_code == 1 and "no Karpenter objects" in result.stderr


def test_simulate_reads_the_guide_manifest_by_converting_it(tmp_path: Any) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(GUIDE + "---" + INFLATE)
    result = CliRunner().invoke(
        simulate, ["-f", str(path), "--provider", "aws", "--region", "us-east-1", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["summary"]["pods"] == 4 and report["unschedulable"] == []
    assert report["nodeclaims"] and all(
        claim["instance_type"].split(".")[0] in ("m5", "c5") for claim in report["nodeclaims"]
    )
    assert any(
        note.startswith("Provisioner default (karpenter.sh/v1alpha5) read as NodePool")
        for note in report["notes"]
    )
    assert any(
        note.startswith("AWSNodeTemplate default (karpenter.k8s.aws/v1alpha1) read as")
        for note in report["notes"]
    )
    assert any("spec.weight" in warning for warning in report["warnings"])


def test_guide_provisioner_without_provider_ref_converts_and_simulates(tmp_path: Any) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(GUIDE_WITHOUT_REF)
    result = CliRunner().invoke(convert, ["-f", str(old), "--region", "us-east-1"])
    assert result.exit_code == 0, result.output
    assert (
        "warning: Provisioner default: spec.providerRef: names no NodeClass, and a v1 NodePool "
        "needs one: the output references EC2NodeClass default, written out with placeholders"
    ) in result.stderr
    assert "does not validate" not in result.stderr and "None" not in result.stderr
    documents = result.stdout.split("---\n")[1:]
    # the EC2NodeClass's comments say whom it is for, not the Provisioner's findings again
    assert documents[0].startswith("# written for Provisioner default, which names no")
    assert "spec.weight" not in documents[0]
    assert documents[1].startswith("# from Provisioner default\n")
    objs = {o["kind"]: o for o in yaml.safe_load_all(result.stdout)}
    assert objs["NodePool"]["spec"]["template"]["spec"]["nodeClassRef"] == DEFAULT_REF
    EC2NodeClass.model_validate(objs["EC2NodeClass"])
    converted = tmp_path / "v1.yaml"
    converted.write_text(result.stdout)
    workload = tmp_path / "inflate.yaml"
    workload.write_text(INFLATE)
    args = ["--provider", "aws", "--region", "us-east-1", "-o", "json"]
    for files in (
        ["-f", str(converted), "-f", str(workload)],
        ["-f", str(old), "-f", str(workload)],
    ):
        simulated = CliRunner().invoke(simulate, [*files, *args])
        assert simulated.exit_code == 0, simulated.output
        report = json.loads(simulated.stdout)
        assert report["summary"]["pods"] == 4 and report["unschedulable"] == []
        placed = [pod for claim in report["nodeclaims"] for pod in claim["pods"]]
        assert sorted(placed) == [f"default/inflate-{i}" for i in range(4)]
    assert any(
        note.startswith(
            "EC2NodeClass default (karpenter.k8s.aws/v1) added for Provisioner default, which "
            "names no NodeClass"
        )
        for note in report["notes"]
    )
    assert any("spec.providerRef: names no NodeClass" in w for w in report["warnings"])


def test_simulate_without_provider_prices_with_the_provider_of_the_node_classes(
    tmp_path: Any,
) -> None:
    # The guide's Provisioner (no providerRef) and a Deployment, simulated as given: the NodePool
    # it becomes references EC2NodeClass, so the AWS provider prices it, and says so.
    old = tmp_path / "old.yaml"
    old.write_text(GUIDE_WITHOUT_REF + "---" + INFLATE)
    result = CliRunner().invoke(simulate, ["-f", str(old), "--region", "us-east-1", "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["provider"] == "aws"
    assert report["summary"]["pods"] == 4 and report["unschedulable"] == []
    assert (
        "provider aws: the input's NodeClasses are its own (--provider chooses another)"
        in (report["notes"])
    )
    chosen = CliRunner().invoke(simulate, ["-f", str(old), "--provider", "kwok", "-o", "json"])
    assert chosen.exit_code == 0, chosen.output
    kept = json.loads(chosen.stdout)
    assert kept["provider"] == "kwok" and len(kept["unschedulable"]) == 4


def test_simulate_still_checks_v1_objects_given_next_to_old_ones(tmp_path: Any) -> None:
    current = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "b"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [],
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "default",
                    },
                }
            },
            "disruption": {"consolidateAftr": "1m"},
        },
    }
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump_all([nodepool_v1beta1("a"), current, ec2nodeclass_v1beta1()]))
    args = ["-f", str(path), "--provider", "aws", "--region", "us-east-1"]
    strict = CliRunner().invoke(simulate, [*args, "--strict"])
    assert strict.exit_code == 1
    assert "NodePool b" in strict.stderr and "consolidateAftr" in strict.stderr
    lenient = CliRunner().invoke(simulate, args)
    assert lenient.exit_code == 0, lenient.output
    assert "NodePool b: unknown field spec.disruption.consolidateAftr" in lenient.stderr
