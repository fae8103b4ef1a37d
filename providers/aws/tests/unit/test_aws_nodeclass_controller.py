"""The nodeclass controller's status computation against the moto server (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from karpenter_aws.amis import AMIResolver
from karpenter_aws.instanceprofile import InstanceProfiles
from karpenter_aws.moto_account import DISCOVERY_TAG, AWSEnv
from karpenter_aws.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_aws.nodeclass_controller import (
    NodeClassController,
    kubernetes_minor_version,
    resolve_status,
)
from karpenter_core.cloudprovider.types import CloudProviderError

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CONDITIONS = (
    "SubnetsReady",
    "SecurityGroupsReady",
    "AMIsReady",
    "InstanceProfileReady",
    "ValidationSucceeded",
    "Ready",
)


def node_class(aws: AWSEnv, status: dict[str, Any] | None = None, **spec: Any) -> EC2NodeClass:
    fields: dict[str, Any] = {
        "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: aws.cluster_name}}],
        "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: aws.cluster_name}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": aws.node_role,
    }
    fields.update(spec)
    return EC2NodeClass.from_manifest(
        {
            "metadata": {"name": "default", "uid": "uid-1", "generation": 3},
            "spec": fields,
            "status": status or {},
        }
    )


def resolve(
    aws: AWSEnv, nodeclass: EC2NodeClass, now: datetime = NOW, ec2: Any = None, iam: Any = None
) -> tuple[dict[str, Any], bool]:
    return resolve_status(
        nodeclass,
        ec2=ec2 or aws.client("ec2"),
        amis=AMIResolver(aws.client("ec2"), aws.client("ssm"), lambda: now),
        profiles=InstanceProfiles(iam or aws.client("iam"), aws.cluster_name, aws.region),
        kubernetes_version=aws.kubernetes_version,
        now=now,
    )


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def failing(client: Any, operation: str, code: str, message: str) -> Any:
    """``client`` with ``operation`` refused by AWS (a botocore before-call hook)."""

    def refuse(**_: Any) -> None:
        raise ClientError({"Error": {"Code": code, "Message": message}}, operation)

    client.meta.events.register(
        f"before-call.{client.meta.service_model.service_name}.{operation}", refuse
    )
    return client


def test_resolved_nodeclass_is_ready(aws: AWSEnv) -> None:
    status, failed = resolve(aws, node_class(aws))
    assert not failed
    assert {c: s[0] for c, s in conditions(status).items()} == dict.fromkeys(CONDITIONS, "True")
    assert {c["type"]: c["reason"] for c in status["conditions"]}["Ready"] == "Ready"
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])
    assert all(c["lastTransitionTime"] == "2026-06-01T12:00:00Z" for c in status["conditions"])
    assert {s["id"]: s["zone"] for s in status["subnets"]} == {
        subnet: zone for zone, subnet in aws.subnet_ids.items()
    }
    assert all(s["zoneID"] for s in status["subnets"])
    assert status["securityGroups"] == [
        {"id": aws.security_group_id, "name": aws.security_group_name}
    ]
    assert {a["id"] for a in status["amis"]} == {
        image for key, image in aws.images.items() if key.startswith("al2023/")
    }
    assert status["instanceProfile"].startswith(f"{aws.cluster_name}_")
    assert (
        EC2NodeClass.from_manifest(
            {**node_class(aws).to_manifest(), "status": status}
        ).not_ready_reason()
        is None
    )


def test_nothing_matching_says_what_is_missing(aws: AWSEnv) -> None:
    nodeclass = node_class(
        aws,
        subnetSelectorTerms=[{"tags": {DISCOVERY_TAG: "elsewhere"}}],
        securityGroupSelectorTerms=[{"name": "missing"}],
        amiSelectorTerms=[{"name": "no-such-ami"}],
        amiFamily="AL2023",
    )
    status, failed = resolve(aws, nodeclass)
    assert not failed
    found = conditions(status)
    assert found["SubnetsReady"] == (
        "False",
        "SubnetsNotFound",
        "no subnet matches subnetSelectorTerms",
    )
    assert found["SecurityGroupsReady"] == (
        "False",
        "SecurityGroupsNotFound",
        "no security group matches securityGroupSelectorTerms",
    )
    assert found["AMIsReady"] == ("False", "AMINotFound", "no AMI matches amiSelectorTerms")
    assert found["InstanceProfileReady"][0] == "True"
    assert found["ValidationSucceeded"] == (
        "False",
        "DependenciesNotReady",
        "waiting for SubnetsReady, SecurityGroupsReady, AMIsReady",
    )
    assert found["Ready"][:2] == ("False", "UnhealthyDependents")
    assert "SubnetsReady=False: no subnet matches subnetSelectorTerms" in found["Ready"][2]
    assert status["subnets"] == status["securityGroups"] == status["amis"] == []
    parsed = EC2NodeClass.from_manifest({**nodeclass.to_manifest(), "status": status})
    assert "no AMI matches amiSelectorTerms" in (parsed.not_ready_reason() or "")


def test_unusable_alias_and_missing_profile_are_reported(aws: AWSEnv) -> None:
    nodeclass = node_class(
        aws,
        amiSelectorTerms=[{"alias": "al2@latest"}],
        role=None,
        instanceProfile="absent",
    )
    found = conditions(resolve(aws, nodeclass)[0])
    assert found["AMIsReady"][:2] == ("False", "AMINotFound")
    assert "AL2 AMIs are not published for Kubernetes 1.33 and later" in found["AMIsReady"][2]
    assert found["InstanceProfileReady"] == (
        "False",
        "InstanceProfileNotFound",
        "instance profile 'absent' (spec.instanceProfile) not found",
    )
    ghost = conditions(resolve(aws, node_class(aws, role="ghost"))[0])
    assert "role 'ghost' (spec.role) not found" in ghost["InstanceProfileReady"][2]


def test_transition_time_changes_only_with_the_status(aws: AWSEnv) -> None:
    first, _ = resolve(aws, node_class(aws))
    later = NOW + timedelta(minutes=5)
    same, _ = resolve(aws, node_class(aws, status=first), now=later)
    assert same == first
    broken = node_class(aws, status=first, subnetSelectorTerms=[{"id": "subnet-0000000000"}])
    changed, _ = resolve(aws, broken, now=later)
    stamps = {c["type"]: c["lastTransitionTime"] for c in changed["conditions"]}
    assert stamps["SubnetsReady"] == stamps["Ready"] == "2026-06-01T12:05:00Z"
    assert stamps["AMIsReady"] == "2026-06-01T12:00:00Z"


def test_aws_errors_become_condition_messages_and_keep_earlier_values(aws: AWSEnv) -> None:
    first, _ = resolve(aws, node_class(aws))
    ec2 = failing(aws.client("ec2"), "DescribeSubnets", "UnauthorizedOperation", "not allowed")
    status, failed = resolve(aws, node_class(aws, status=first), ec2=ec2)
    assert failed
    assert conditions(status)["SubnetsReady"] == (
        "False",
        "SubnetsResolutionFailed",
        "describing subnets failed: UnauthorizedOperation: not allowed",
    )
    assert status["subnets"] == first["subnets"]
    assert conditions(status)["Ready"][0] == "False"

    iam = failing(aws.client("iam"), "GetInstanceProfile", "Throttling", "slow down")
    status, failed = resolve(aws, node_class(aws, status=first), iam=iam)
    assert failed
    assert conditions(status)["InstanceProfileReady"] == (
        "False",
        "InstanceProfileResolutionFailed",
        "ensuring the instance profile failed: Throttling: slow down",
    )
    assert status["instanceProfile"] == first["instanceProfile"]


@pytest.mark.parametrize(
    ("info", "expected"),
    [({"major": "1", "minor": "36"}, "1.36"), ({"major": "1", "minor": "30+"}, "1.30")],
)
def test_kubernetes_minor_version(info: dict[str, str], expected: str) -> None:
    assert kubernetes_minor_version(info) == expected


def test_unusable_version_is_an_error() -> None:
    with pytest.raises(CloudProviderError, match="no usable version"):
        kubernetes_minor_version({"major": "", "minor": ""})


class _RecordingCluster:
    """The apiserver calls of the restamp step: one NodeClaim list, the patches recorded."""

    def __init__(self, nodeclaims: list[dict[str, Any]]) -> None:
        self.claims = nodeclaims
        self.patches: list[tuple[str, Any]] = []

    def nodeclaims_using(self, name: str) -> list[dict[str, Any]]:
        return self.claims

    def patch_nodeclaim(self, name: str, body: Any) -> None:
        self.patches.append((name, body))

    def patch(self, name: str, body: Any) -> None:
        self.patches.append((f"ec2nodeclass/{name}", body))


def test_a_hash_version_change_restamps_the_nodeclaims_instead_of_drifting_them(
    aws: AWSEnv,
) -> None:
    """An EC2NodeClass hashed by another version (an earlier release, or upstream Karpenter
    before a cut-over) gives its NodeClaims this version and, unless already drifted, the current
    hash, as upstream's hash controller does."""
    nodeclass = node_class(aws)
    nodeclass.metadata.annotations.update({HASH_ANNOTATION: "1234", HASH_VERSION_ANNOTATION: "v4"})
    old = {HASH_ANNOTATION: "1234", HASH_VERSION_ANNOTATION: "v4"}
    drifted = {"conditions": [{"type": "Drifted", "status": "True"}]}
    cluster = _RecordingCluster(
        [
            {"metadata": {"name": "kept", "annotations": old}},
            {"metadata": {"name": "drifted", "annotations": old}, "status": drifted},
            {
                "metadata": {
                    "name": "current",
                    "annotations": {HASH_VERSION_ANNOTATION: HASH_VERSION},
                }
            },
        ]
    )
    controller = object.__new__(NodeClassController)
    controller._cluster = cluster  # type: ignore[assignment]
    controller._ensure_metadata(nodeclass)

    patches = dict(cluster.patches)
    assert patches["kept"] == {
        "metadata": {
            "annotations": {
                HASH_ANNOTATION: nodeclass_hash(nodeclass.spec),
                HASH_VERSION_ANNOTATION: HASH_VERSION,
            }
        }
    }
    assert patches["drifted"] == {
        "metadata": {"annotations": {HASH_VERSION_ANNOTATION: HASH_VERSION}}
    }
    assert "current" not in patches
    assert patches["ec2nodeclass/default"]["metadata"]["annotations"][HASH_VERSION_ANNOTATION] == (
        HASH_VERSION
    )
