"""The controller's IAM policy allows every AWS API the provider calls, and little else.

The provider's source is scanned with ``ast``: method calls (``ec2.create_fleet(...)``) and
string constants (``get_paginator("describe_instances")``) naming an operation of one of the
services the provider uses become IAM actions (``ec2:CreateFleet``), resolved with botocore's
service models.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import boto3
import pytest

from karpenter_aws import iam

PACKAGE = Path(__file__).resolve().parents[2] / "karpenter_aws"
SERVICES = {
    "ec2": "ec2",
    "ssm": "ssm",
    "sqs": "sqs",
    "iam": "iam",
    "eks": "eks",
    "pricing": "pricing",
}
"""boto3 service name -> IAM action prefix."""
MOTO_ONLY = {"conformance.py", "moto_account.py"}
"""Modules that create a fake account on moto for tests and the conformance suite; the
controller never runs them, so their calls need no permission."""
BATCH_ACTIONS = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}
"""APIs authorized by another API's action."""
IMPLIED = {
    "ec2:RunInstances": "CreateFleet launches through it",
    "ec2:CreateTags": "tags on creation (CreateFleet, CreateLaunchTemplate) need it",
    "iam:PassRole": "AddRoleToInstanceProfile and launching pass the node role",
    "iam:TagInstanceProfile": "CreateInstanceProfile with Tags needs it",
}
"""Allowed actions no source line names: what IAM requires for the calls that are made."""
EXPECTED_AT_LEAST = {
    "ec2:CreateFleet",
    "ec2:TerminateInstances",
    "ec2:CreateLaunchTemplate",
    "ec2:DescribeInstances",
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:GetQueueUrl",
    "ssm:GetParameter",
    "iam:CreateInstanceProfile",
}


def allowed_actions() -> set[str]:
    """Every action the policy allows, as written (``service:Action``, possibly a wildcard)."""
    actions: set[str] = set()
    for statement in json.loads(iam.template())["Statement"]:
        if statement.get("Effect") == "Allow":
            listed = statement.get("Action", [])
            actions.update([listed] if isinstance(listed, str) else listed)
    return actions


@cache
def operations() -> dict[str, dict[str, str]]:
    """For each service: Python method name -> API name (from botocore's models)."""
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    return {
        service: dict(session.client(service).meta.method_to_api_mapping) for service in SERVICES
    }


def _receiver_services(node: ast.AST) -> set[str]:
    """Services named in a call's receiver (``self.clients.ec2``, ``ec2``, ``self._sqs``)."""
    tokens = set(re.split(r"[^a-z0-9]+", ast.unparse(node).lower()))
    return tokens & set(SERVICES)


def _names(tree: ast.AST) -> Iterator[tuple[str, set[str]]]:
    """(name, services the receiver names) for attributes (calls, and methods passed on as
    ``retry(iam.delete_instance_profile, ...)``), paginator names and string constants."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node.attr, _receiver_services(node.value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, set()
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get_paginator"
        ):
            receiver = _receiver_services(node.func.value)
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    yield arg.value, receiver


def called_actions() -> dict[str, set[str]]:
    """IAM action -> the modules calling it."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() in MOTO_ONLY:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, receiver in _names(tree):
            services = [s for s in SERVICES if name in operations()[s]]
            if receiver & set(services):
                services = [s for s in services if s in receiver]
            for service in services:
                action = f"{SERVICES[service]}:{operations()[service][name]}"
                action = BATCH_ACTIONS.get(action, action)
                found.setdefault(action, set()).add(path.relative_to(PACKAGE).as_posix())
    return found


def allows(action: str) -> bool:
    """Whether the policy allows ``action`` (IAM matches actions case-insensitively)."""
    return any(
        fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in allowed_actions()
    )


def test_the_scan_finds_the_provider_calls() -> None:
    found = called_actions()
    missing = EXPECTED_AT_LEAST - set(found)
    assert not missing, f"the source scan no longer sees {sorted(missing)}: is the scan broken?"


def test_every_call_is_allowed() -> None:
    denied = {action: sorted(modules) for action, modules in called_actions().items()}
    denied = {action: modules for action, modules in denied.items() if not allows(action)}
    assert not denied, f"add these to iam/controller-policy.json: {denied}"


def test_nothing_is_allowed_that_is_not_called() -> None:
    called = set(called_actions())
    unused = {
        action
        for action in allowed_actions()
        if "*" not in action and action not in called and action not in IMPLIED
    }
    assert not unused, f"the policy allows actions the provider never calls: {sorted(unused)}"


def test_implied_actions_back_calls_that_are_made() -> None:
    called = set(called_actions())
    assert "ec2:CreateFleet" in called
    assert "iam:CreateInstanceProfile" in called
    assert set(IMPLIED) <= allowed_actions()


def test_template_is_json_with_known_placeholders_only() -> None:
    text = iam.template()
    document = json.loads(text)
    assert document["Version"] == "2012-10-17"
    used = set(re.findall(r"\$\{([^}]*)\}", text))
    assert used == iam.PLACEHOLDERS
    for statement in document["Statement"]:
        assert statement["Effect"] == "Allow"
        assert statement["Resource"]
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            assert action.split(":")[0] in SERVICES.values(), action


def test_wildcard_resources_only_where_iam_has_no_resource_types() -> None:
    """Mutating actions are scoped to ARNs; ``*`` is left to reads that cannot be scoped."""
    for statement in iam.policy_document("c", "us-east-1", "123456789012", "q")["Statement"]:
        if statement["Resource"] == "*":
            actions = statement["Action"]
            for action in [actions] if isinstance(actions, str) else actions:
                verb = action.split(":")[1]
                assert verb.startswith(("Describe", "Get", "List")), action


def test_rendering_fills_every_placeholder() -> None:
    document = iam.policy_document(
        "prod-cluster",
        "cn-north-1",
        "123456789012",
        "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/prod-queue",
    )
    text = json.dumps(document)
    assert "${" not in text
    assert "arn:aws-cn:sqs:cn-north-1:123456789012:prod-queue" in text
    assert "aws:RequestTag/kubernetes.io/cluster/prod-cluster" in text
    assert "arn:aws-cn:iam::123456789012:role/KarpenterNodeRole-prod-cluster" in text
    role = iam.policy_document("c", "us-east-1", "1", "q", node_role="NodeRole")
    assert "arn:aws:iam::1:role/NodeRole" in json.dumps(role)


def test_rendering_refuses_empty_values() -> None:
    with pytest.raises(ValueError, match="CLUSTER_NAME"):
        iam.policy_document("", "us-east-1", "123456789012", "q")


def test_scan_resolves_receivers_and_paginators() -> None:
    source = (
        "def f(clients, ec2):\n"
        "    clients.ec2.get_paginator('describe_subnets')\n"
        "    clients.sqs.delete_message_batch(QueueUrl='u', Entries=[])\n"
        "    ec2.describe_images()\n"
        "    retry(self._iam.delete_instance_profile, InstanceProfileName='p')\n"
    )
    names = list(_names(ast.parse(source)))
    assert ("describe_subnets", {"ec2"}) in names
    assert ("describe_images", {"ec2"}) in names
    assert ("delete_instance_profile", {"iam"}) in names
    assert BATCH_ACTIONS["sqs:DeleteMessageBatch"] == "sqs:DeleteMessage"
