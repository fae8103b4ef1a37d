"""`karpenter simulate` and its input: unknown fields, missing or foreign NodeClasses, provider
options, the AWS region, and how amounts read in messages and the table."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from karpenter_core.cli.main import cli

KWOK_NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  disruption: {consolidateAftr: 1m}
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
"""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        resources: {requests: {cpu: "%s", memory: 1Gi}}
"""

EC2_NODECLASS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-my-cluster
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: my-cluster}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: my-cluster}}]
  kubelt: {maxPods: 20}
"""

AWS_NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}
"""


def _write(tmp_path: Path, *documents: str) -> str:
    path = tmp_path / "input.yaml"
    path.write_text("---".join(textwrap.dedent(d) for d in documents))
    return str(path)


def _simulate(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, ["simulate", *args], env=env)


def _lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


# Unknown fields


def test_unknown_fields_are_warnings_naming_object_and_path(tmp_path: Path) -> None:
    deployment = (DEPLOYMENT % "1").replace(
        "containers:", "nodeSelecter: {a: b}\n      containers:"
    )
    result = _simulate("-f", _write(tmp_path, KWOK_NODEPOOL, deployment))
    assert result.exit_code == 0, result.output
    assert _lines(result.stderr, "warning:") == [
        "warning: NodePool default: unknown field spec.disruption.consolidateAftr",
        "warning: Deployment shop/web: unknown field spec.template.spec.nodeSelecter",
    ]
    assert "1 pod(s), 1 new node(s)" in result.stdout


def test_json_output_carries_the_warnings(tmp_path: Path) -> None:
    result = _simulate("-f", _write(tmp_path, KWOK_NODEPOOL, DEPLOYMENT % "1"), "-o", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["warnings"] == ["NodePool default: unknown field spec.disruption.consolidateAftr"]


def test_strict_refuses_unknown_fields_in_one_line(tmp_path: Path) -> None:
    nodepool = KWOK_NODEPOOL.replace("  template:", "  templte: {}\n  template:")
    pod_typo = (DEPLOYMENT % "1").replace("requests:", "request:")
    path = _write(tmp_path, nodepool, pod_typo)
    result = _simulate("-f", path, "--strict")
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr == (
        f"Error: {path}: NodePool default: unknown fields spec.disruption.consolidateAftr, "
        "spec.templte; other objects with unknown fields: "
        "Deployment shop/web\n"
    )


def test_provider_nodeclass_fields_are_checked(tmp_path: Path) -> None:
    path = _write(tmp_path, AWS_NODEPOOL, EC2_NODECLASS, DEPLOYMENT % "1")
    result = _simulate("-f", path, "--provider", "aws", "--region", "us-east-1")
    assert result.exit_code == 0, result.output
    assert _lines(result.stderr, "warning:") == [
        "warning: EC2NodeClass default: unknown field spec.kubelt"
    ]


def test_objects_as_kubectl_prints_them_have_no_unknown_fields(tmp_path: Path) -> None:
    """Server-set metadata and status, as `kubectl get -o yaml` shows them, are known fields."""
    meta = """
      creationTimestamp: "2025-01-01T00:00:00Z"
      resourceVersion: "42"
      uid: 0c9a1e3e-0000-4000-8000-000000000000
      generation: 1
      managedFields:
      - {apiVersion: v1, fieldsType: FieldsV1, fieldsV1: {f:metadata: {}}, manager: kubectl,
         operation: Update, time: "2025-01-01T00:00:00Z"}"""
    nodepool = KWOK_NODEPOOL.replace("consolidateAftr", "consolidateAfter").replace(
        "metadata: {name: default}", "metadata:\n  name: default" + meta.replace("\n    ", "\n")
    ) + textwrap.dedent("""
    status:
      nodes: 1
      resources: {cpu: "4"}
      conditions:
      - {type: Ready, status: "True", reason: Ready, message: "", observedGeneration: 1,
         lastTransitionTime: "2025-01-01T00:00:00Z"}
    """)
    node = (
        """
    apiVersion: v1
    kind: Node
    metadata:
      name: node-a
      labels: {kubernetes.io/hostname: node-a}"""
        + meta
        + """
    spec: {providerID: "kwok://node-a", podCIDR: 10.0.0.0/24}
    status:
      capacity: {cpu: "4", memory: 16Gi, pods: "110"}
      allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
      conditions:
      - {type: Ready, status: "True", reason: KubeletReady, message: ready,
         lastHeartbeatTime: "2025-01-01T00:00:00Z", lastTransitionTime: "2025-01-01T00:00:00Z"}
      addresses: [{type: InternalIP, address: 10.0.0.1}]
      nodeInfo: {architecture: amd64, operatingSystem: linux, kubeletVersion: v1.33.0,
                 bootID: "", containerRuntimeVersion: "", kernelVersion: "", kubeProxyVersion: "",
                 machineID: "", osImage: "", systemUUID: ""}
    """
    )
    pod = (
        """
    apiVersion: v1
    kind: Pod
    metadata:
      name: web-0
      namespace: shop"""
        + meta
        + """
    spec:
      nodeName: node-a
      containers:
      - name: app
        image: nginx
        resources: {requests: {cpu: 100m}}
        ports: [{containerPort: 80, protocol: TCP}]
      tolerations: [{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute,
                     tolerationSeconds: 300}]
    status:
      phase: Running
      podIP: 10.0.0.5
      conditions: [{type: Ready, status: "True", lastTransitionTime: "2025-01-01T00:00:00Z"}]
      containerStatuses:
      - {name: app, ready: true, restartCount: 0, image: nginx, imageID: "", started: true,
         state: {running: {startedAt: "2025-01-01T00:00:00Z"}}}
    """
    )
    result = _simulate("-f", _write(tmp_path, nodepool, node, pod))
    assert result.exit_code == 0, result.output
    assert _lines(result.stderr, "warning:") == []
    assert "skipped" not in result.stderr  # every object was read


def test_help_says_unknown_fields_warn_and_strict_refuses() -> None:
    text = " ".join(_simulate("--help").output.split())
    assert "is a warning and is ignored; --strict makes it an error" in text
    assert "--strict Refuse manifests with fields their kind does not have" in text


# NodeClasses


def test_a_missing_nodeclass_is_assumed_with_a_note(tmp_path: Path) -> None:
    result = _simulate("-f", _write(tmp_path, KWOK_NODEPOOL, DEPLOYMENT % "1"))
    assert result.exit_code == 0, result.output
    assert _lines(result.stderr, "note:") == [
        "note: NodePool default references KWOKNodeClass default, which is not in the input; "
        "assuming its defaults"
    ]
    assert "1 new node(s)" in result.stdout


def test_a_nodeclass_of_another_provider_serves_no_pods(tmp_path: Path) -> None:
    path = _write(tmp_path, KWOK_NODEPOOL, DEPLOYMENT % "1")
    result = _simulate("-f", path, "--provider", "aws", "--region", "us-east-1", "-o", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["nodeclaims"] == []
    assert report["unschedulable"] == [
        {
            "pod": "shop/web-0",
            "reason": "NodePool default uses KWOKNodeClass (group karpenter.kwok.sh), which "
            "provider aws does not serve; no existing node has room",
        }
    ]


def test_foreign_nodepools_join_the_reasons_of_the_served_ones(tmp_path: Path) -> None:
    foreign = KWOK_NODEPOOL.replace("name: default}", "name: kwok}", 1)
    path = _write(tmp_path, AWS_NODEPOOL, foreign, DEPLOYMENT % "1000")
    result = _simulate("-f", path, "--provider", "aws", "--region", "us-east-1", "-o", "json")
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["unschedulable"]
    assert entry["reason"] == (
        "no instance type has 1000 CPU; NodePool kwok uses KWOKNodeClass (group "
        "karpenter.kwok.sh), which provider aws does not serve"
    )


# Provider options


def test_controller_only_options_are_not_offered_by_simulate() -> None:
    simulate_help = _simulate("--help").output
    controller_help = CliRunner().invoke(cli, ["controller", "--help"]).output
    for flag in ("--aws-cluster-name", "--aws-interruption-queue", "--aws-endpoint-url"):
        assert flag not in simulate_help
        assert flag in controller_help
    assert "--aws-region" in simulate_help
    assert "--azure-vm-memory-overhead-percent" in simulate_help


def test_unprefixed_provider_flags_are_hidden_aliases() -> None:
    simulate_help = _simulate("--help").output

    assert "--region " not in simulate_help
    result = _simulate("--provider", "aws", "--region", "eu west", "-o", "json")
    assert result.exit_code == 1
    assert "--aws-region: 'eu west' is not an AWS region name" in result.output


# The AWS region


@pytest.fixture
def no_aws_config(tmp_path: Path) -> dict[str, str | None]:
    """An environment with no AWS region anywhere."""
    empty = tmp_path / "aws-config"
    empty.write_text("")
    return {
        "AWS_REGION": None,
        "AWS_DEFAULT_REGION": None,
        "AWS_PROFILE": None,
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
    }


def _zones(result: Result) -> set[str]:
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return {claim["zone"] for claim in report["nodeclaims"]}


def test_offline_aws_uses_the_sdk_region(no_aws_config: dict[str, str | None]) -> None:
    env = {**no_aws_config, "AWS_DEFAULT_REGION": "eu-west-1"}
    result = _simulate("--provider", "aws", "-o", "json", env=env)
    zones = _zones(result)
    assert zones and all(zone.startswith("eu-west-1") for zone in zones)
    assert "us-east-1" not in result.stderr


def test_offline_aws_reads_the_region_of_the_config_profile(
    no_aws_config: dict[str, str | None], tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.write_text("[profile team]\nregion = ap-southeast-2\n")
    env = {**no_aws_config, "AWS_CONFIG_FILE": str(config), "AWS_PROFILE": "team"}
    zones = _zones(_simulate("--provider", "aws", "-o", "json", env=env))
    assert zones and all(zone.startswith("ap-southeast-2") for zone in zones)


def test_offline_aws_without_a_region_says_it_uses_us_east_1(
    no_aws_config: dict[str, str | None],
) -> None:
    result = _simulate("--provider", "aws", "-o", "json", env=no_aws_config)
    zones = _zones(result)
    assert zones and all(zone.startswith("us-east-1") for zone in zones)
    note = (
        "no AWS region is configured (--region, AWS_REGION, AWS_DEFAULT_REGION or the AWS "
        "config); using us-east-1"
    )
    assert json.loads(result.stdout)["notes"][0] == note
    table = _simulate("--provider", "aws", env=no_aws_config)
    assert f"note: {note}" in _lines(table.stderr, "note:")


# Amounts


@pytest.mark.parametrize(
    ("cpu", "shown"), [("1000", "1000 CPU"), ("1k", "1000 CPU"), ("1500500m", "1500.5 CPU")]
)
def test_cpu_in_reasons_is_plain_cores(tmp_path: Path, cpu: str, shown: str) -> None:
    result = _simulate("-f", _write(tmp_path, KWOK_NODEPOOL, DEPLOYMENT % cpu), "-o", "json")
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["unschedulable"]
    assert entry["reason"] == f"no instance type has {shown}"


def test_memory_column_rounds_to_binary_units(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 16653484100 bytes less the 10Mi KWOK reserves: 16642998340 allocatable, about 15.5Gi
    entry = {
        "name": "odd.large",
        "offerings": [
            {
                "Price": 0.1,
                "Available": True,
                "Requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-a"]},
                ],
            }
        ],
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": "4", "memory": "16653484100"},
    }
    catalog = tmp_path / "types.json"
    catalog.write_text(json.dumps([entry]))
    monkeypatch.setenv("INSTANCE_TYPES_FILE_PATH", str(catalog))
    deployment = (DEPLOYMENT % "1").replace("memory: 1Gi", "memory: 1536Mi")
    result = _simulate("-f", _write(tmp_path, KWOK_NODEPOOL, deployment))
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()[:2]
    assert header.split()[-1] == "MEMORY"
    assert row.split()[-1] == "1.5Gi/15.5Gi"


def test_a_malformed_nodepool_template_is_one_line_naming_the_field(tmp_path: Path) -> None:
    # Choosing the provider from the input's NodeClasses reads the NodePool before its checks.
    bad = """
    apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      template: [1]
    """
    result = _simulate("-f", _write(tmp_path, bad))
    assert result.exit_code == 1
    assert "NodePool default: spec.template: expected a mapping, got a list" in result.output
    assert "Traceback" not in result.output
