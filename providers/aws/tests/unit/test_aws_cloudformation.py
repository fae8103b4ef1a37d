"""The CloudFormation template: cfn-lint, its policy against the provider's, its rules against
the events the provider acts on; then deployed into moto's CloudFormation, where the provider
runs on the stack's resources (the node role in the instance profile it creates, the queue
receiving a spot interruption through the stack's EventBridge rule).
"""

from __future__ import annotations

import json
import re
import runpy
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.api import ManualArgs, lint, lint_file
from cfnlint.decode import decode_str

from karpenter_aws import cloudformation, iam, moto_account
from karpenter_aws.amis import AMIResolver
from karpenter_aws.cloudprovider import AWSCloudProvider
from karpenter_aws.instanceprofile import InstanceProfiles
from karpenter_aws.interruption import NO_OP, parse_message
from karpenter_aws.interruption_controller import InterruptionController
from karpenter_aws.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_aws.nodeclass_controller import resolve_status
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.operator.events import EventRecorder

TEMPLATE = Path(cloudformation.__file__).with_name(cloudformation.TEMPLATE_FILE)
POLICY_SIZE_LIMIT = 6144
"""IAM's limit on a managed policy document, in characters other than whitespace."""
CFN_TO_PLACEHOLDER = {
    "${AWS::Partition}": "${AWS_PARTITION}",
    "${AWS::Region}": "${AWS_REGION}",
    "${AWS::AccountId}": "${AWS_ACCOUNT_ID}",
    "${ClusterName}": "${CLUSTER_NAME}",
    "${KarpenterInterruptionQueue.QueueName}": "${INTERRUPTION_QUEUE}",
    "${KarpenterNodeRole}": "${NODE_ROLE}",
}
"""The template's variables and the controller-policy.json placeholders they fill."""
MOTO_SKIPS = {"AWS::SQS::QueuePolicy"}
"""Resource types moto's CloudFormation does not build (it warns and goes on)."""
TYPES = ["m5.large", "c5.large"]


def parsed_template() -> dict[str, Any]:
    template, matches = decode_str(cloudformation.template())
    assert not matches, matches
    assert template is not None
    return dict(template)


def resources(kind: str | None = None) -> dict[str, dict[str, Any]]:
    found = parsed_template()["Resources"]
    return {name: r for name, r in found.items() if kind is None or r["Type"] == kind}


def compact_size(document: dict[str, Any]) -> int:
    return len(json.dumps(document, separators=(",", ":")))


def _event(source: str, detail_type: str, detail: dict[str, Any]) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "0b4c7e0e-5b7a-4b1c-9d1e-3f2a1b0c9d8e",
            "source": source,
            "detail-type": detail_type,
            "time": "2026-01-01T00:00:00Z",
            "detail": detail,
        }
    )


INSTANCE = "i-0123456789abcdef0"
EVENTS_ACTED_ON = {
    ("aws.ec2", "EC2 Spot Instance Interruption Warning"): {
        "instance-id": INSTANCE,
        "instance-action": "terminate",
    },
    ("aws.ec2", "EC2 Instance Rebalance Recommendation"): {"instance-id": INSTANCE},
    ("aws.ec2", "EC2 Instance State-change Notification"): {
        "instance-id": INSTANCE,
        "state": "stopping",
    },
    ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"): {
        "instance-id": INSTANCE
    },
    ("aws.health", "AWS Health Event"): {
        "service": "EC2",
        "eventTypeCategory": "scheduledChange",
        "affectedEntities": [{"entityValue": INSTANCE}],
    },
}
"""One event of each kind the interruption controller acts on, by (source, detail-type)."""


# -- the template -----------------------------------------------------------------------------


@pytest.mark.slow
def test_cfn_lint_finds_nothing_in_any_partition() -> None:
    regions = ["us-east-1", "cn-north-1", "us-gov-west-1"]
    matches = lint_file(TEMPLATE, config=ManualArgs(regions=regions))
    assert [str(match) for match in matches] == []


@pytest.mark.slow
def test_cfn_lint_reports_a_broken_template() -> None:
    """The linter the test above trusts does see this template's kind of mistakes."""
    broken = cloudformation.template().replace(
        "!GetAtt KarpenterInterruptionQueue.Arn", "!GetAtt KarpenterInterruptionQueue.Nope", 1
    )
    assert any("Nope" in str(match) for match in lint(broken, regions=["us-east-1"]))


def test_the_controller_policy_is_the_providers_policy() -> None:
    """The stack's managed policy is controller-policy.json (whose actions a source scan keeps
    equal to the API calls the provider makes), CloudFormation's variables in its placeholders."""
    [policy] = resources("AWS::IAM::ManagedPolicy").values()
    text = policy["Properties"]["PolicyDocument"]["Fn::Sub"]
    for variable, placeholder in CFN_TO_PLACEHOLDER.items():
        text = text.replace(variable, placeholder)
    assert json.loads(text) == json.loads(iam.template())
    assert policy["Properties"]["ManagedPolicyName"] == {
        "Fn::Sub": "KarpenterControllerPolicy-${ClusterName}"
    }


def _longest_cluster_name(partition: str) -> int:
    """The longest cluster name whose controller policy fits IAM's limit in every region of
    ``partition`` that botocore knows."""
    regions = boto3.session.Session().get_available_regions("ec2", partition_name=partition)
    region = max(regions, key=len)

    def size(length: int) -> int:
        name = "c" * length  # the stack names its queue after the cluster
        return compact_size(iam.policy_document(name, region, "123456789012", name))

    length = 1
    while size(length + 1) <= POLICY_SIZE_LIMIT:
        length += 1
    return length


def test_the_cluster_name_limit_keeps_the_policy_within_iams_limit() -> None:
    parameter = parsed_template()["Parameters"]["ClusterName"]
    assert _longest_cluster_name("aws") == parameter["MaxLength"] == 43
    # the template's comment and docs/aws.md give the shorter limits of the other partitions
    assert _longest_cluster_name("aws-cn") == 38
    assert _longest_cluster_name("aws-us-gov") == 33
    assert f"{parameter['MaxLength']} characters" in parameter["ConstraintDescription"]


def test_the_cluster_name_pattern_takes_eks_cluster_names_only() -> None:
    pattern = re.compile(parsed_template()["Parameters"]["ClusterName"]["AllowedPattern"])
    for name in ("my-cluster", "prod_eu_1", "0cluster"):
        assert pattern.fullmatch(name), name
    for name in ("-cluster", "my cluster", "a/b", "cluster.prod", ""):
        assert not pattern.fullmatch(name), name


def test_the_rules_route_exactly_the_events_the_provider_acts_on() -> None:
    routed = set()
    for rule in resources("AWS::Events::Rule").values():
        pattern = rule["Properties"]["EventPattern"]
        [source], [detail_type] = pattern["source"], pattern["detail-type"]
        routed.add((source, detail_type))
        [target] = rule["Properties"]["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": ["KarpenterInterruptionQueue", "Arn"]}
    assert routed == set(EVENTS_ACTED_ON)
    for (source, detail_type), detail in EVENTS_ACTED_ON.items():
        message = parse_message(_event(source, detail_type, detail))
        assert message is not None and message.kind != NO_OP, detail_type
        assert message.instance_ids == (INSTANCE,)


def test_the_stack_has_a_node_role_and_no_instance_profile() -> None:
    assert {r["Type"] for r in resources().values()} == {
        "AWS::IAM::Role",
        "AWS::IAM::ManagedPolicy",
        "AWS::SQS::Queue",
        "AWS::SQS::QueuePolicy",
        "AWS::Events::Rule",
    }
    role = resources("AWS::IAM::Role")["KarpenterNodeRole"]["Properties"]
    assert role["RoleName"] == {"Fn::Sub": "KarpenterNodeRole-${ClusterName}"}
    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": {"Fn::Sub": "ec2.${AWS::URLSuffix}"}}
    assert sorted(arn["Fn::Sub"].rsplit("/", 1)[-1] for arn in role["ManagedPolicyArns"]) == [
        "AmazonEC2ContainerRegistryPullOnly",
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonSSMManagedInstanceCore",
    ]
    queue = resources("AWS::SQS::Queue")["KarpenterInterruptionQueue"]["Properties"]
    assert queue == {
        "QueueName": {"Ref": "ClusterName"},
        "MessageRetentionPeriod": 300,
        "SqsManagedSseEnabled": True,
    }


def test_the_module_prints_the_template(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_module("karpenter_aws.cloudformation", run_name="__main__")
    assert capsys.readouterr().out == TEMPLATE.read_text(encoding="utf-8")


# -- deployed into moto's CloudFormation ------------------------------------------------------


@dataclass(frozen=True)
class Stack:
    """The deployed stack: its outputs and the resources CloudFormation reports."""

    outputs: dict[str, str]
    resources: dict[str, dict[str, Any]]
    """Logical id -> the resource summary (type, physical id, status)."""
    skipped: list[dict[str, Any]]
    """Summaries moto lists without a logical id: resources it did not build."""


@pytest.fixture
def moto_cfn_policy_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto 5.2 passes an ``AWS::IAM::ManagedPolicy``'s ``PolicyDocument`` through
    ``json.dumps``, so a JSON string (what CloudFormation accepts, and what this template gives)
    becomes a quoted string IAM refuses as malformed. The server runs in this process: its
    handler is given the parsed document, as CloudFormation passes it to IAM."""
    from moto.iam.models import ManagedPolicy

    create: Callable[..., Any] = ManagedPolicy.create_from_cloudformation_json.__func__

    def with_parsed_document(
        cls: type, name: str, cfn: dict[str, Any], account_id: str, region: str, **kwargs: Any
    ) -> Any:
        properties = cfn.get("Properties", {})
        if isinstance(properties.get("PolicyDocument"), str):
            document = json.loads(properties["PolicyDocument"])
            cfn = {**cfn, "Properties": {**properties, "PolicyDocument": document}}
        return create(cls, name, cfn, account_id, region, **kwargs)

    monkeypatch.setattr(
        ManagedPolicy, "create_from_cloudformation_json", classmethod(with_parsed_document)
    )


@pytest.fixture
def stack(aws: moto_account.AWSEnv, moto_cfn_policy_strings: None) -> Stack:
    """The template deployed for the seeded cluster; the node role and queue the seeded account
    has are removed first, so that everything below uses the stack's."""
    aws.client("iam").delete_role(RoleName=aws.node_role)
    aws.client("sqs").delete_queue(QueueUrl=aws.queue_url)
    cfn = aws.client("cloudformation")
    name = f"Karpenter-{aws.cluster_name}"
    with pytest.warns(UserWarning, match="AWS::SQS::QueuePolicy"):
        cfn.create_stack(
            StackName=name,
            TemplateBody=cloudformation.template(),
            Parameters=[{"ParameterKey": "ClusterName", "ParameterValue": aws.cluster_name}],
            Capabilities=["CAPABILITY_NAMED_IAM"],
        )
        [described] = cfn.describe_stacks(StackName=name)["Stacks"]
        summaries = cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]
    assert described["StackStatus"] == "CREATE_COMPLETE"
    return Stack(
        outputs={o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]},
        resources={s["LogicalResourceId"]: s for s in summaries if s["LogicalResourceId"]},
        skipped=[s for s in summaries if not s["LogicalResourceId"]],
    )


def test_moto_builds_the_stack(aws: moto_account.AWSEnv, stack: Stack) -> None:
    """Every resource but the queue policy is built; what each holds is checked in the service
    that owns it."""
    template = resources()
    built = {name: template[name]["Type"] for name in stack.resources}
    assert {r["Type"] for r in template.values()} - set(built.values()) == MOTO_SKIPS
    assert len(stack.skipped) == len(MOTO_SKIPS)
    assert all(r["ResourceStatus"] == "CREATE_COMPLETE" for r in stack.resources.values())
    cluster, queue_name = aws.cluster_name, aws.cluster_name
    assert stack.outputs == {
        "NodeRoleName": f"KarpenterNodeRole-{cluster}",
        "NodeRoleArn": f"arn:aws:iam::{aws.account_id}:role/KarpenterNodeRole-{cluster}",
        "ControllerPolicyArn": (
            f"arn:aws:iam::{aws.account_id}:policy/KarpenterControllerPolicy-{cluster}"
        ),
        "InterruptionQueueName": queue_name,
        "InterruptionQueueArn": f"arn:aws:sqs:{aws.region}:{aws.account_id}:{queue_name}",
    }

    iam_client = aws.client("iam")
    role = iam_client.get_role(RoleName=stack.outputs["NodeRoleName"])["Role"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "ec2.amazonaws.com"
    }
    # moto reads a role's ManagedPolicyArns and attaches nothing (AWS attaches the four)
    attached = iam_client.list_attached_role_policies(RoleName=role["RoleName"])
    assert attached["AttachedPolicies"] == []

    policy = iam_client.get_policy(PolicyArn=stack.outputs["ControllerPolicyArn"])["Policy"]
    version = iam_client.get_policy_version(
        PolicyArn=policy["Arn"], VersionId=policy["DefaultVersionId"]
    )["PolicyVersion"]
    assert version["Document"] == iam.policy_document(
        cluster, aws.region, aws.account_id, queue_name
    )

    sqs = aws.client("sqs")
    queue_url = sqs.get_queue_url(QueueName=stack.outputs["InterruptionQueueName"])["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["QueueArn"] == stack.outputs["InterruptionQueueArn"]
    assert (attributes["MessageRetentionPeriod"], attributes["SqsManagedSseEnabled"]) == (
        "300",
        "true",
    )
    assert "Policy" not in attributes  # the skipped queue policy; moto delivers without it

    events = aws.client("events")
    routed = set()
    for logical, resource in template.items():
        if resource["Type"] != "AWS::Events::Rule":
            continue
        rule = stack.resources[logical]["PhysicalResourceId"]
        pattern = json.loads(events.describe_rule(Name=rule)["EventPattern"])
        routed.add((pattern["source"][0], pattern["detail-type"][0]))
        [target] = events.list_targets_by_rule(Rule=rule)["Targets"]
        assert target["Arn"] == stack.outputs["InterruptionQueueArn"]
    assert routed == set(EVENTS_ACTED_ON)


def _narrowed_ec2(aws: moto_account.AWSEnv) -> Any:
    """An EC2 client whose instance-type reads see ``TYPES`` only (moto answers ~1,400 types
    in seconds otherwise)."""
    ec2 = aws.client("ec2")

    def narrow(params: dict[str, Any], **_: Any) -> None:
        params.setdefault("Filters", []).append({"Name": "instance-type", "Values": TYPES})

    def narrow_prices(params: dict[str, Any], **_: Any) -> None:
        params["InstanceTypes"] = TYPES

    for operation in ("DescribeInstanceTypes", "DescribeInstanceTypeOfferings"):
        ec2.meta.events.register(f"before-parameter-build.ec2.{operation}", narrow)
    ec2.meta.events.register("before-parameter-build.ec2.DescribeSpotPriceHistory", narrow_prices)
    return ec2


def _resolved_node_class(aws: moto_account.AWSEnv, role: str) -> dict[str, Any]:
    """An EC2NodeClass naming ``role``, with the status the nodeclass controller resolves (which
    creates its instance profile)."""
    manifest: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "uid": "uid-nc", "generation": 1},
        "spec": {
            "role": role,
            "subnetSelectorTerms": [{"tags": {moto_account.DISCOVERY_TAG: aws.cluster_name}}],
            "securityGroupSelectorTerms": [
                {"tags": {moto_account.DISCOVERY_TAG: aws.cluster_name}}
            ],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
        },
    }
    node_class = EC2NodeClass.from_manifest(manifest)
    status, failed = resolve_status(
        node_class,
        ec2=aws.client("ec2"),
        amis=AMIResolver(aws.client("ec2"), aws.client("ssm")),
        profiles=InstanceProfiles(aws.client("iam"), aws.cluster_name, aws.region),
        kubernetes_version=aws.kubernetes_version,
        now=datetime.now(UTC),
    )
    assert not failed
    manifest["status"] = status
    manifest["metadata"]["annotations"] = {
        HASH_ANNOTATION: nodeclass_hash(node_class.spec),
        HASH_VERSION_ANNOTATION: HASH_VERSION,
    }
    return manifest


class RecordingKube:
    """The part of ``KubeClient`` an ``EventRecorder`` sends through; keeps the reasons."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def create_event(self, involved: dict[str, Any], event_type: str, reason: str, *_: Any) -> dict:
        self.reasons.append(reason)
        return {}


class FakeCluster:
    """The interruption controller's apiserver calls, answered from memory."""

    def __init__(self, nodeclaims: list[dict[str, Any]]) -> None:
        self._nodeclaims = nodeclaims
        self.deleted: list[str] = []

    def nodeclaims(self) -> list[dict[str, Any]]:
        return self._nodeclaims

    def node_uid(self, name: str) -> str | None:
        return None

    def delete_nodeclaim(self, name: str) -> bool:
        self.deleted.append(name)
        return True


@pytest.fixture
def interruption_running() -> Iterator[Callable[[InterruptionController], None]]:
    """Starts a controller's loop in a thread; stops and joins it at teardown."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(controller: InterruptionController) -> None:
        thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)


def test_the_provider_runs_on_the_stacks_resources(
    aws: moto_account.AWSEnv,
    stack: Stack,
    interruption_running: Callable[[InterruptionController], None],
) -> None:
    """The provider, configured with the stack's outputs: the instance profile it creates holds
    the stack's node role and its instance launches with it; a spot interruption sent through
    EventBridge reaches the stack's queue by its rule, and the controller deletes the NodeClaim
    and marks the offering unavailable."""
    role = stack.outputs["NodeRoleName"]
    node_class = _resolved_node_class(aws, role)
    profile = node_class["status"]["instanceProfile"]
    [holder] = aws.client("iam").get_instance_profile(InstanceProfileName=profile)[
        "InstanceProfile"
    ]["Roles"]
    assert holder["Arn"] == stack.outputs["NodeRoleArn"]

    context = ProviderContext(
        settings={
            "cluster-name": aws.cluster_name,
            "region": aws.region,
            "isolated-vpc": "true",
            "interruption-queue": stack.outputs["InterruptionQueueName"],
        },
        node_classes=lambda kind, name: (
            EC2NodeClass.from_manifest(node_class)
            if (kind, name) == ("EC2NodeClass", "default")
            else None
        ),
        clients={
            "ec2": _narrowed_ec2(aws),
            "eks": aws.client("eks"),
            "sqs": aws.client("sqs"),
            "iam": aws.client("iam"),
        },
        kube_client=object(),
        events=EventRecorder(RecordingKube()),  # type: ignore[arg-type]
    )
    provider = AWSCloudProvider.from_context(context)
    created = provider.create(
        NodeClaim.from_manifest(
            {
                "metadata": {"name": "default-abcde", "labels": {wk.NODEPOOL: "default"}},
                "spec": {
                    "requirements": [
                        {"key": wk.INSTANCE_TYPE, "operator": "In", "values": TYPES},
                        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "default",
                    },
                },
            }
        )
    )
    instance_id = (created.status.provider_id or "").rsplit("/", 1)[-1]
    [instance] = list(moto_account.instances(aws))
    assert instance["InstanceId"] == instance_id
    [template] = aws.client("ec2").describe_launch_templates()["LaunchTemplates"]
    data = aws.client("ec2").describe_launch_template_versions(
        LaunchTemplateId=template["LaunchTemplateId"]
    )["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["IamInstanceProfile"] == {"Name": profile}

    sqs = aws.client("sqs")
    queue_url = sqs.get_queue_url(QueueName=stack.outputs["InterruptionQueueName"])["QueueUrl"]
    events = aws.client("events")
    for detail_type, detail in (
        ("EC2 AMI State Change", {"ImageId": "ami-0123", "State": "available"}),
        ("EC2 Spot Instance Interruption Warning", {"instance-id": instance_id}),
    ):
        events.put_events(
            Entries=[{"Source": "aws.ec2", "DetailType": detail_type, "Detail": json.dumps(detail)}]
        )

    # the rules let the spot warning through, not the AMI event
    [message] = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=0)["Messages"]
    assert json.loads(message["Body"])["detail-type"] == "EC2 Spot Instance Interruption Warning"

    controller = InterruptionController(context, provider, wait_seconds=1)
    cluster = FakeCluster([created.to_manifest()])
    controller._cluster = cluster  # type: ignore[assignment]
    offering = (
        created.metadata.labels[wk.INSTANCE_TYPE],
        created.metadata.labels[wk.TOPOLOGY_ZONE],
    )
    interruption_running(controller)
    deadline = time.monotonic() + 15
    while not cluster.deleted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.deleted == ["default-abcde"]
    instance_type, zone = offering
    assert ("spot", zone) in provider.unavailable.snapshot()[instance_type]
