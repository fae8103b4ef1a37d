"""Drift checks (pure) and the order ``drift_reason`` runs them in."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_aws.drift import (
    DRIFT_AMI,
    DRIFT_NODECLASS,
    DRIFT_SECURITY_GROUP,
    DRIFT_SUBNET,
    drift_reason,
)
from karpenter_aws.instances import Instance
from karpenter_aws.instancetype import BuildOptions, instance_type
from karpenter_aws.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.types import InstanceType, NodeClaimNotFound

M5_LARGE = {
    "InstanceType": "m5.large",
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 8192},
    "SupportedUsageClasses": ["on-demand", "spot"],
}


def node_class(**status: Any) -> EC2NodeClass:
    return EC2NodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole",
                "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
            },
            "status": {
                "subnets": [{"id": "subnet-1", "zone": "us-east-1a"}],
                "securityGroups": [{"id": "sg-1"}, {"id": "sg-2"}],
                "amis": [
                    {
                        "id": "ami-new",
                        "requirements": [{"key": wk.ARCH, "operator": "In", "values": ["amd64"]}],
                    }
                ],
                **status,
            },
        }
    )


def claim(nc: EC2NodeClass, *, hashed: str | None = None, image: str = "ami-new") -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {
                "name": "default-abcde",
                "labels": {wk.INSTANCE_TYPE: "m5.large"},
                "annotations": {
                    HASH_ANNOTATION: hashed if hashed is not None else nodeclass_hash(nc.spec),
                    HASH_VERSION_ANNOTATION: HASH_VERSION,
                },
            },
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"},
            },
            "status": {"providerID": "aws:///us-east-1a/i-1", "imageID": image},
        }
    )


def instance(subnet: str = "subnet-1", groups: tuple[str, ...] = ("sg-2", "sg-1")) -> Instance:
    return Instance(
        "i-1", "m5.large", "us-east-1a", "running", "ami-new", subnet, groups, "spot", {}
    )


def types(_: EC2NodeClass) -> list[InstanceType]:
    built = instance_type(M5_LARGE, BuildOptions(), {"us-east-1a": ""})
    assert built is not None
    return [built]


def reason(nc: EC2NodeClass, nodeclaim: NodeClaim, found: Instance, live: bool = True) -> str:
    return drift_reason(nodeclaim, nc, live=live, instance_types=types, instance=lambda: found)


def test_a_matching_instance_has_not_drifted() -> None:
    nc = node_class()
    assert reason(nc, claim(nc), instance()) == ""


def test_each_drift_and_the_first_that_applies() -> None:
    nc = node_class()
    stale = claim(nc, hashed="0")
    assert reason(nc, stale, instance(subnet="subnet-9")) == DRIFT_NODECLASS
    assert reason(nc, claim(nc, image="ami-old"), instance(groups=("sg-1",))) == DRIFT_AMI
    assert reason(nc, claim(nc), instance(groups=("sg-1",), subnet="x")) == DRIFT_SECURITY_GROUP
    assert reason(nc, claim(nc), instance(subnet="subnet-9")) == DRIFT_SUBNET


def test_offline_only_the_node_class_hash_counts() -> None:
    nc = node_class()
    assert reason(nc, claim(nc, hashed="0"), instance(), live=False) == DRIFT_NODECLASS
    assert reason(nc, claim(nc, image="ami-old"), instance(subnet="x"), live=False) == ""


def test_another_hash_version_is_not_node_class_drift() -> None:
    nc = node_class()
    nodeclaim = claim(nc, hashed="0")
    nodeclaim.metadata.annotations[HASH_VERSION_ANNOTATION] = "older"
    assert reason(nc, nodeclaim, instance()) == ""


def test_unresolved_status_parts_do_not_drift() -> None:
    nc = node_class(subnets=[], securityGroups=[], amis=[])
    assert reason(nc, claim(nc, image="ami-old"), instance(groups=(), subnet="x")) == ""


def test_a_gone_instance_has_no_instance_drift() -> None:
    nc = node_class()

    def gone() -> Instance:
        raise NodeClaimNotFound("i-1 is gone")

    assert drift_reason(claim(nc), nc, live=True, instance_types=types, instance=gone) == ""


@pytest.mark.parametrize("missing", ["image", "type"])
def test_ami_drift_needs_the_image_and_instance_type(missing: str) -> None:
    nc = node_class()
    nodeclaim = claim(nc, image="ami-old")
    if missing == "image":
        nodeclaim.status.image_id = None
    else:
        nodeclaim.metadata.labels[wk.INSTANCE_TYPE] = "unknown.large"
    assert reason(nc, nodeclaim, instance()) == ""
