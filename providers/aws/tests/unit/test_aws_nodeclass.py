"""The EC2NodeClass model: validation (with the field named), defaults, helpers, hash and CRD."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from karpenter_aws.nodeclass import (
    CONDITION_TYPES,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    NODE_CLASS,
    AMIStatus,
    EC2NodeClass,
    MetadataOptions,
    nodeclass_hash,
    validation_problems,
)
from karpenter_core.sdk.crds import crd_file, crd_path, node_class_crd
from karpenter_core.sdk.nodeclass import NotReady

REGENERATE = "regenerate it with: python -m karpenter_core.sdk.crds aws"
GiB = 1024**3

CRD_PATH = crd_path(NODE_CLASS)


def manifest(**spec: Any) -> dict[str, Any]:
    """A valid EC2NodeClass manifest, with ``spec`` fields replaced (None removes one)."""
    base: dict[str, Any] = {
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test-cluster"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test-cluster"}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole",
    }
    base.update(spec)
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {key: value for key, value in base.items() if value is not None},
    }


def parse(**spec: Any) -> EC2NodeClass:
    return EC2NodeClass.from_manifest(manifest(**spec))


def errors(**spec: Any) -> list[dict[str, Any]]:
    with pytest.raises(ValidationError) as raised:
        parse(**spec)
    return raised.value.errors()


def single_error(**spec: Any) -> tuple[tuple[str | int, ...], str]:
    found = errors(**spec)
    assert len(found) == 1, found
    return tuple(found[0]["loc"]), found[0]["msg"]


def test_validation_problems_name_each_field() -> None:
    with pytest.raises(ValidationError) as raised:
        parse(role=None, subnetSelectorTerms=[])
    problems = validation_problems(raised.value)
    assert "spec.subnetSelectorTerms" in problems and "; " in problems


# Valid objects and defaults


def test_minimal_object_and_defaults() -> None:
    node_class = parse()
    spec = node_class.spec
    assert spec.metadata_options == MetadataOptions(
        http_endpoint="enabled",
        http_protocol_ipv6="disabled",
        http_put_response_hop_limit=1,
        http_tokens="required",
    )
    assert spec.ami_family is None
    assert spec.tags == {}
    assert spec.block_device_mappings == []
    assert spec.kubelet is None
    assert spec.instance_profile is None
    assert node_class.status.subnets == []
    assert node_class.status.conditions == []


def test_manifest_round_trip_keeps_upstream_field_names() -> None:
    full = manifest(
        amiSelectorTerms=[{"tags": {"team": "*"}, "owner": "self"}, {"ssmParameter": "/my/ami"}],
        amiFamily="AL2023",
        associatePublicIPAddress=True,
        detailedMonitoring=True,
        instanceStorePolicy="RAID0",
        userData="#!/bin/bash\necho hi\n",
        tags={"team": "a"},
        blockDeviceMappings=[
            {
                "deviceName": "/dev/xvda",
                "rootVolume": True,
                "ebs": {
                    "volumeSize": "100Gi",
                    "volumeType": "gp3",
                    "iops": 3000,
                    "throughput": 125,
                    "encrypted": True,
                    "kmsKeyID": "arn:aws:kms:us-east-1:111122223333:key/abc",
                    "snapshotID": "snap-0123",
                    "deleteOnTermination": True,
                },
            }
        ],
        metadataOptions={"httpProtocolIPv6": "enabled", "httpPutResponseHopLimit": 2},
        kubelet={
            "clusterDNS": ["10.100.0.10"],
            "maxPods": 110,
            "podsPerCore": 4,
            "systemReserved": {"cpu": "100m", "memory": "100Mi"},
            "kubeReserved": {"cpu": "200m", "ephemeral-storage": "1Gi"},
            "evictionHard": {"memory.available": "5%"},
            "evictionSoft": {"nodefs.available": "10%"},
            "evictionSoftGracePeriod": {"nodefs.available": "1m30s"},
            "evictionMaxPodGracePeriod": 60,
            "imageGCHighThresholdPercent": 85,
            "imageGCLowThresholdPercent": 80,
            "cpuCFSQuota": True,
        },
    )
    full["status"] = {
        "subnets": [{"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az1"}],
        "securityGroups": [{"id": "sg-1", "name": "nodes"}],
        "amis": [
            {
                "id": "ami-1",
                "name": "al2023",
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                ],
            }
        ],
        "instanceProfile": "profile",
    }
    node_class = EC2NodeClass.from_manifest(full)
    out = node_class.to_manifest()
    assert out["spec"]["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "enabled",
        "httpPutResponseHopLimit": 2,
        "httpTokens": "required",
    }
    for key, value in full["spec"].items():
        if key != "metadataOptions":
            assert out["spec"][key] == value, key
    assert out["status"]["subnets"] == full["status"]["subnets"]
    assert out["status"]["amis"][0]["deprecated"] is False
    assert node_class.status.subnets[0].zone_id == "use1-az1"
    assert node_class.spec.kubelet is not None
    assert node_class.spec.kubelet.cpu_cfs_quota is True
    assert node_class.spec.block_device_mappings[0].ebs is not None
    assert node_class.spec.block_device_mappings[0].ebs.kms_key_id.startswith("arn:")


def test_snake_case_names_are_accepted_too() -> None:
    node_class = EC2NodeClass(
        spec={
            "subnet_selector_terms": [{"id": "subnet-0abc"}],
            "security_group_selector_terms": [{"name": "nodes"}],
            "ami_selector_terms": [{"id": "ami-0123"}],
            "ami_family": "Bottlerocket",
            "instance_profile": "profile",
        }
    )
    assert node_class.spec.instance_profile == "profile"
    assert node_class.resolved_ami_family() == "Bottlerocket"


@pytest.mark.parametrize(
    "terms",
    [
        [{"tags": {"Name": "*"}}],
        [{"id": "subnet-0123abc"}],
        [{"tags": {"a": "b", "c": "d"}}, {"id": "subnet-1"}],
    ],
)
def test_valid_subnet_terms(terms: list[dict[str, Any]]) -> None:
    assert len(parse(subnetSelectorTerms=terms).spec.subnet_selector_terms) == len(terms)


@pytest.mark.parametrize(
    "terms",
    [[{"tags": {"a": "*"}}], [{"id": "sg-0abc"}], [{"name": "default"}, {"id": "sg-1"}]],
)
def test_valid_security_group_terms(terms: list[dict[str, Any]]) -> None:
    assert parse(securityGroupSelectorTerms=terms).spec.security_group_selector_terms


@pytest.mark.parametrize(
    ("terms", "family"),
    [
        ([{"alias": "al2@latest"}], None),
        ([{"alias": "al2023@v20240625"}], None),
        ([{"alias": "bottlerocket@v1.20.0"}], None),
        ([{"alias": "windows2019@latest"}], None),
        ([{"alias": "windows2022@latest"}], None),
        ([{"alias": "windows2025@latest"}], None),
        ([{"alias": "al2023@latest"}], "AL2023"),
        ([{"alias": "al2023@latest"}], "Custom"),
        ([{"tags": {"a": "b"}, "name": "my-ami-*", "owner": "self"}], "Custom"),
        ([{"id": "ami-0abc"}, {"ssmParameter": "/path"}], "AL2"),
    ],
)
def test_valid_ami_terms(terms: list[dict[str, Any]], family: str | None) -> None:
    assert parse(amiSelectorTerms=terms, amiFamily=family).spec.ami_selector_terms


# Invalid objects: every error names the field


INVALID: list[tuple[dict[str, Any], tuple[str | int, ...], str]] = [
    ({"subnetSelectorTerms": []}, ("spec", "subnetSelectorTerms"), "at least 1"),
    ({"subnetSelectorTerms": None}, ("spec", "subnetSelectorTerms"), "required"),
    (
        {"subnetSelectorTerms": [{"id": "subnet-1"}] * 31},
        ("spec", "subnetSelectorTerms"),
        "at most 30",
    ),
    ({"subnetSelectorTerms": [{}]}, ("spec", "subnetSelectorTerms", 0), "expected at least one"),
    (
        {"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]},
        ("spec", "subnetSelectorTerms", 0),
        "'id' is mutually exclusive",
    ),
    (
        {"subnetSelectorTerms": [{"id": "sg-1"}]},
        ("spec", "subnetSelectorTerms", 0, "id"),
        "subnet id",
    ),
    (
        {"subnetSelectorTerms": [{"tags": {"a": ""}}]},
        ("spec", "subnetSelectorTerms", 0, "tags"),
        "empty tag keys or values",
    ),
    (
        {"subnetSelectorTerms": [{"tags": {}}]},
        ("spec", "subnetSelectorTerms", 0, "tags"),
        "at least 1",
    ),
    (
        {"subnetSelectorTerms": [{"tags": {str(i): "x" for i in range(21)}}]},
        ("spec", "subnetSelectorTerms", 0, "tags"),
        "at most 20",
    ),
    ({"securityGroupSelectorTerms": []}, ("spec", "securityGroupSelectorTerms"), "at least 1"),
    (
        {"securityGroupSelectorTerms": [{"id": "sg-1", "name": "x"}]},
        ("spec", "securityGroupSelectorTerms", 0),
        "'id' is mutually exclusive",
    ),
    (
        {"securityGroupSelectorTerms": [{"name": "x", "tags": {"a": "b"}}]},
        ("spec", "securityGroupSelectorTerms", 0),
        "'name' is mutually exclusive",
    ),
    (
        {"securityGroupSelectorTerms": [{"id": "subnet-1"}]},
        ("spec", "securityGroupSelectorTerms", 0, "id"),
        "security group id",
    ),
    ({"amiSelectorTerms": []}, ("spec", "amiSelectorTerms"), "at least 1"),
    (
        {"amiSelectorTerms": [{"id": "ami-1"}] * 31, "amiFamily": "AL2"},
        ("spec", "amiSelectorTerms"),
        "at most 30",
    ),
    (
        {"amiSelectorTerms": [{"alias": "al2023"}]},
        ("spec", "amiSelectorTerms", 0, "alias"),
        "improperly formatted",
    ),
    (
        {"amiSelectorTerms": [{"alias": "ubuntu@latest"}]},
        ("spec", "amiSelectorTerms", 0, "alias"),
        "not supported",
    ),
    (
        {"amiSelectorTerms": [{"alias": "AL2023@latest"}]},
        ("spec", "amiSelectorTerms", 0, "alias"),
        "not supported",
    ),
    (
        {"amiSelectorTerms": [{"alias": "windows2022@v1"}]},
        ("spec", "amiSelectorTerms", 0, "alias"),
        "only specify version 'latest'",
    ),
    (
        {"amiSelectorTerms": [{"alias": "windows2022@latest@v1"}]},
        ("spec", "amiSelectorTerms", 0, "alias"),
        "only specify version 'latest'",
    ),
    (
        {"amiSelectorTerms": [{"alias": "al2023@" + "v" * 30}]},
        ("spec", "amiSelectorTerms", 0, "alias"),
        "at most 30",
    ),
    (
        {"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]},
        ("spec", "amiSelectorTerms"),
        "must be the only term",
    ),
    (
        {"amiSelectorTerms": [{"alias": "al2023@latest", "owner": "self"}]},
        ("spec", "amiSelectorTerms", 0),
        "'alias' is mutually exclusive",
    ),
    (
        {"amiSelectorTerms": [{"id": "ami-1", "name": "x"}], "amiFamily": "AL2"},
        ("spec", "amiSelectorTerms", 0),
        "'id' is mutually exclusive",
    ),
    (
        {"amiSelectorTerms": [{"owner": ""}], "amiFamily": "AL2"},
        ("spec", "amiSelectorTerms", 0, "owner"),
        "at least 1",
    ),
    (
        {"amiSelectorTerms": [{"owner": "self"}], "amiFamily": "AL2"},
        ("spec", "amiSelectorTerms", 0),
        "expected at least one, got none, ['alias', 'tags', 'id', 'name', 'ssmParameter']",
    ),
    (
        {"amiSelectorTerms": [{"id": "ami-1"}]},
        ("spec", "amiFamily"),
        "must specify amiFamily",
    ),
    (
        {"amiSelectorTerms": [{"alias": "al2023@latest"}], "amiFamily": "Bottlerocket"},
        ("spec", "amiFamily"),
        "'AL2023' or 'Custom'",
    ),
    (
        {"amiSelectorTerms": [{"id": "ami-1"}], "amiFamily": "Ubuntu"},
        ("spec", "amiFamily"),
        "AL2",
    ),
    ({"role": None}, ("spec", "instanceProfile"), "exactly one of ['role', 'instanceProfile']"),
    (
        {"instanceProfile": "profile"},
        ("spec", "instanceProfile"),
        "exactly one of ['role', 'instanceProfile']",
    ),
    ({"role": ""}, ("spec", "role"), "role cannot be empty"),
    (
        {"role": None, "instanceProfile": ""},
        ("spec", "instanceProfile"),
        "instanceProfile cannot be empty",
    ),
    ({"tags": {"": "x"}}, ("spec", "tags"), "empty tag keys"),
    ({"tags": {"kubernetes.io/cluster/test": "owned"}}, ("spec", "tags"), "restricted"),
    ({"tags": {"karpenter.sh/nodepool": "x"}}, ("spec", "tags"), "restricted"),
    ({"tags": {"karpenter.sh/nodeclaim": "x"}}, ("spec", "tags"), "restricted"),
    ({"tags": {"karpenter.k8s.aws/ec2nodeclass": "x"}}, ("spec", "tags"), "restricted"),
    ({"tags": {"eks:eks-cluster-name": "x"}}, ("spec", "tags"), "restricted"),
    (
        {"blockDeviceMappings": [{"ebs": {"volumeSize": "1Gi"}}] * 51},
        ("spec", "blockDeviceMappings"),
        "at most 50",
    ),
    (
        {
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                {"deviceName": "/dev/xvdb", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
            ]
        },
        ("spec", "blockDeviceMappings"),
        "only one blockDeviceMappings with rootVolume",
    ),
    (
        {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]},
        ("spec", "blockDeviceMappings", 0, "ebs"),
        "snapshotID or volumeSize",
    ),
    (
        {"blockDeviceMappings": [{"ebs": {"volumeSize": "20Gi", "volumeType": "gp4"}}]},
        ("spec", "blockDeviceMappings", 0, "ebs", "volumeType"),
        "gp3",
    ),
    (
        {"blockDeviceMappings": [{"ebs": {"volumeSize": "20"}}]},
        ("spec", "blockDeviceMappings", 0, "ebs", "volumeSize"),
        "volume size",
    ),
    (
        {"blockDeviceMappings": [{"ebs": {"volumeSize": "65T"}}]},
        ("spec", "blockDeviceMappings", 0, "ebs", "volumeSize"),
        "volume size",
    ),
    (
        {"blockDeviceMappings": [{"ebs": {"volumeSize": "Ti"}}]},
        ("spec", "blockDeviceMappings", 0, "ebs", "volumeSize"),
        "volume size",
    ),
    (
        {"metadataOptions": {"httpTokens": "sometimes"}},
        ("spec", "metadataOptions", "httpTokens"),
        "required",
    ),
    (
        {"metadataOptions": {"httpPutResponseHopLimit": 65}},
        ("spec", "metadataOptions", "httpPutResponseHopLimit"),
        "64",
    ),
    (
        {"metadataOptions": {"httpEndpoint": "on"}},
        ("spec", "metadataOptions", "httpEndpoint"),
        "enabled",
    ),
    ({"instanceStorePolicy": "RAID1"}, ("spec", "instanceStorePolicy"), "RAID0"),
    ({"kubelet": {"maxPods": -1}}, ("spec", "kubelet", "maxPods"), "greater than or equal"),
    (
        {"kubelet": {"systemReserved": {"gpu": "1"}}},
        ("spec", "kubelet", "systemReserved"),
        "valid keys for systemReserved",
    ),
    (
        {"kubelet": {"kubeReserved": {"cpu": "-100m"}}},
        ("spec", "kubelet", "kubeReserved", "cpu"),
        "non-negative resource quantity",
    ),
    (
        {"kubelet": {"evictionHard": {"memory.free": "5%"}}},
        ("spec", "kubelet", "evictionHard"),
        "valid keys for evictionHard",
    ),
    (
        {"kubelet": {"evictionHard": {"memory.available": "lots"}}},
        ("spec", "kubelet", "evictionHard", "memory.available"),
        "percentage",
    ),
    (
        {"kubelet": {"evictionSoft": {"memory.available": "5%"}}},
        ("spec", "kubelet", "evictionSoftGracePeriod"),
        "have no evictionSoftGracePeriod",
    ),
    (
        {"kubelet": {"evictionSoftGracePeriod": {"memory.available": "1m"}}},
        ("spec", "kubelet", "evictionSoftGracePeriod"),
        "have no evictionSoft",
    ),
    (
        {
            "kubelet": {
                "evictionSoft": {"memory.available": "5%"},
                "evictionSoftGracePeriod": {"memory.available": "a minute"},
            }
        },
        ("spec", "kubelet", "evictionSoftGracePeriod", "memory.available"),
        "duration",
    ),
    (
        {"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}},
        ("spec", "kubelet", "imageGCLowThresholdPercent"),
        "must be greater than",
    ),
    (
        {"kubelet": {"imageGCHighThresholdPercent": 101}},
        ("spec", "kubelet", "imageGCHighThresholdPercent"),
        "less than or equal to 100",
    ),
]


@pytest.mark.parametrize(("spec", "loc", "message"), INVALID)
def test_invalid_objects_name_the_field(
    spec: dict[str, Any], loc: tuple[str | int, ...], message: str
) -> None:
    found_loc, found_message = single_error(**spec)
    assert found_loc == loc
    assert message in found_message


def test_wrong_api_version_is_refused() -> None:
    bad = manifest()
    bad["apiVersion"] = "karpenter.k8s.aws/v1beta1"
    with pytest.raises(ValidationError) as raised:
        EC2NodeClass.from_manifest(bad)
    assert raised.value.errors()[0]["loc"] == ("apiVersion",)


# Helpers


@pytest.mark.parametrize(
    ("terms", "family", "alias", "resolved"),
    [
        ([{"alias": "al2023@latest"}], None, ("AL2023", "latest"), "AL2023"),
        ([{"alias": "al2@v20240703"}], None, ("AL2", "v20240703"), "AL2"),
        ([{"alias": "bottlerocket@1.20.3"}], None, ("Bottlerocket", "1.20.3"), "Bottlerocket"),
        ([{"alias": "windows2025@latest"}], None, ("Windows2025", "latest"), "Windows2025"),
        ([{"alias": "al2023@latest"}], "Custom", ("AL2023", "latest"), "Custom"),
        ([{"id": "ami-1"}], "Bottlerocket", None, "Bottlerocket"),
    ],
)
def test_alias_and_resolved_family(
    terms: list[dict[str, Any]],
    family: str | None,
    alias: tuple[str, str] | None,
    resolved: str,
) -> None:
    node_class = parse(amiSelectorTerms=terms, amiFamily=family)
    assert node_class.alias() == alias
    assert node_class.resolved_ami_family() == resolved


def _condition(kind: str, status: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": kind if status == "True" else "NotReady",
        "message": message,
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }


def test_not_ready_reason() -> None:
    node_class = parse()
    assert node_class.not_ready_reason() == "the EC2NodeClass has no Ready condition yet"
    ready = manifest()
    ready["status"] = {"conditions": [_condition("Ready", "True")]}
    assert EC2NodeClass.from_manifest(ready).not_ready_reason() is None
    waiting = manifest()
    waiting["status"] = {
        "conditions": [
            _condition("SubnetsReady", "False", "no subnets matched"),
            _condition("Ready", "False", "SubnetsReady=False"),
        ]
    }
    assert EC2NodeClass.from_manifest(waiting).not_ready_reason() == "SubnetsReady=False"
    unknown = manifest()
    unknown["status"] = {"conditions": [{**_condition("Ready", "Unknown"), "reason": "Waiting"}]}
    assert EC2NodeClass.from_manifest(unknown).not_ready_reason() == "Waiting"
    assert EC2NodeClass.from_manifest(unknown).not_ready() == NotReady("Waiting", unknown=True)
    assert node_class.not_ready() == NotReady(
        "the EC2NodeClass has no Ready condition yet", unknown=True
    )
    assert EC2NodeClass.from_manifest(waiting).not_ready() == NotReady(
        "SubnetsReady=False", unknown=False
    )
    older = copy.deepcopy(ready)
    older["metadata"]["generation"] = 3
    older["status"]["conditions"][0]["observedGeneration"] = 2
    stale = EC2NodeClass.from_manifest(older).not_ready()
    assert stale is not None and not stale.unknown and "generation 3" in stale.reason
    older["status"]["conditions"][0]["observedGeneration"] = 3
    assert EC2NodeClass.from_manifest(older).not_ready() is None
    assert CONDITION_TYPES == (
        "SubnetsReady",
        "SecurityGroupsReady",
        "AMIsReady",
        "InstanceProfileReady",
        "ValidationSucceeded",
    )


def _mapping(
    device: str, size: str | None, root: bool = False, delete_on_termination: bool | None = None
) -> dict[str, Any]:
    ebs: dict[str, Any] = {"volumeSize": size} if size else {"snapshotID": "snap-1"}
    if delete_on_termination is not None:
        ebs["deleteOnTermination"] = delete_on_termination
    return {"deviceName": device, "rootVolume": root, "ebs": ebs}


@pytest.mark.parametrize(
    ("mappings", "terms", "family", "size"),
    [
        ([], [{"alias": "al2023@latest"}], None, None),
        ([_mapping("/dev/xvda", "100Gi")], [{"alias": "al2023@latest"}], None, 100 * GiB),
        ([_mapping("/dev/xvda", "100Gi")], [{"alias": "bottlerocket@latest"}], None, None),
        (
            [_mapping("/dev/xvda", "4Gi"), _mapping("/dev/xvdb", "1Ti")],
            [{"alias": "bottlerocket@latest"}],
            None,
            1024 * GiB,
        ),
        (
            [_mapping("/dev/xvda", "50G", root=True), _mapping("/dev/xvdb", "1Ti")],
            [{"alias": "bottlerocket@latest"}],
            None,
            50 * 10**9,
        ),
        (
            [_mapping("/dev/sdf", "30Gi"), _mapping("/dev/sdg", "2T")],
            [{"id": "ami-1"}],
            "Custom",
            2 * 10**12,
        ),
        ([_mapping("/dev/sda1", "64Gi")], [{"alias": "windows2022@latest"}], None, 64 * GiB),
        ([_mapping("/dev/xvda", None)], [{"alias": "al2@latest"}], None, None),
    ],
)
def test_root_volume_size(
    mappings: list[dict[str, Any]],
    terms: list[dict[str, Any]],
    family: str | None,
    size: int | None,
) -> None:
    node_class = parse(blockDeviceMappings=mappings, amiSelectorTerms=terms, amiFamily=family)
    assert node_class.root_volume_size() == size


def test_status_ami_requirements() -> None:
    ami = AMIStatus.model_validate(
        {
            "id": "ami-1",
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"},
            ],
        }
    )
    assert ami.requirements[1].values == []
    assert ami.deprecated is False


# Drift hash


def test_hash_constants() -> None:
    assert HASH_ANNOTATION == "karpenter.k8s.aws/ec2nodeclass-hash"
    assert HASH_VERSION_ANNOTATION == "karpenter.k8s.aws/ec2nodeclass-hash-version"
    assert HASH_VERSION


def test_hash_is_stable() -> None:
    first = nodeclass_hash(parse().spec)
    assert first == nodeclass_hash(parse().spec)
    assert first.isdigit()


@pytest.mark.parametrize(
    "change",
    [
        {"subnetSelectorTerms": [{"id": "subnet-9"}]},
        {"securityGroupSelectorTerms": [{"name": "other"}]},
        {"amiSelectorTerms": [{"alias": "al2023@v20240807"}]},
        {"amiFamily": "AL2023"},
        {"metadataOptions": {"httpEndpoint": "enabled", "httpTokens": "required"}},
        {
            "metadataOptions": {
                "httpEndpoint": "enabled",
                "httpProtocolIPv6": "disabled",
                "httpPutResponseHopLimit": 1,
                "httpTokens": "required",
            }
        },
        {"tags": {}},
        {"blockDeviceMappings": []},
    ],
)
def test_hash_ignores_selector_terms_and_explicit_defaults(change: dict[str, Any]) -> None:
    assert nodeclass_hash(parse(**change).spec) == nodeclass_hash(parse().spec)


def test_hash_ignores_order_of_tags_and_block_devices() -> None:
    devices = [_mapping("/dev/xvda", "20Gi"), _mapping("/dev/xvdb", "100Gi")]
    one = parse(tags={"a": "1", "b": "2"}, blockDeviceMappings=devices)
    other = parse(tags={"b": "2", "a": "1"}, blockDeviceMappings=devices[::-1])
    assert nodeclass_hash(one.spec) == nodeclass_hash(other.spec)


@pytest.mark.parametrize(
    "change",
    [
        {"role": "OtherRole"},
        {"role": None, "instanceProfile": "profile"},
        {"userData": "#!/bin/bash\necho hi"},
        {"tags": {"team": "a"}},
        {"blockDeviceMappings": [_mapping("/dev/xvda", "100Gi")]},
        {"metadataOptions": {"httpTokens": "optional"}},
        {"kubelet": {"maxPods": 20}},
        {"kubelet": {"clusterDNS": ["10.0.0.10"]}},
        {"associatePublicIPAddress": True},
        {"detailedMonitoring": True},
        {"instanceStorePolicy": "RAID0"},
        {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]},
        {"amiFamily": "Custom"},
    ],
)
def test_hash_changes_with_launch_settings(change: dict[str, Any]) -> None:
    assert nodeclass_hash(parse(**change).spec) != nodeclass_hash(parse().spec)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({}, {"kubelet": {"cpuCFSQuota": False}}),
        ({"kubelet": {"cpuCFSQuota": True}}, {"kubelet": {"cpuCFSQuota": False}}),
        ({}, {"associatePublicIPAddress": False}),
        ({"associatePublicIPAddress": True}, {"associatePublicIPAddress": False}),
        ({}, {"detailedMonitoring": False}),
        (
            {"blockDeviceMappings": [_mapping("/dev/xvda", "20Gi")]},
            {"blockDeviceMappings": [_mapping("/dev/xvda", "20Gi", delete_on_termination=False)]},
        ),
        (
            {"blockDeviceMappings": [_mapping("/dev/xvda", "20Gi", delete_on_termination=True)]},
            {"blockDeviceMappings": [_mapping("/dev/xvda", "20Gi", delete_on_termination=False)]},
        ),
        ({}, {"kubelet": {"maxPods": 0}}),
    ],
)
def test_hash_counts_false_and_zero_as_set(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert nodeclass_hash(parse(**before).spec) != nodeclass_hash(parse(**after).spec)


def test_hash_keeps_defaults_the_model_fills_in() -> None:
    unset = parse(blockDeviceMappings=[_mapping("/dev/xvda", "20Gi")])
    explicit = parse(
        blockDeviceMappings=[{**_mapping("/dev/xvda", "20Gi"), "rootVolume": False}],
        metadataOptions=MetadataOptions().model_dump(mode="json", by_alias=True),
    )
    assert nodeclass_hash(unset.spec) == nodeclass_hash(explicit.spec)


def test_hash_tells_kubelet_settings_apart() -> None:
    hashes = {
        nodeclass_hash(parse(kubelet=kubelet).spec)
        for kubelet in (
            {"maxPods": 20},
            {"maxPods": 30},
            {"podsPerCore": 20},
            {"kubeReserved": {"cpu": "100m"}},
            {"systemReserved": {"cpu": "100m"}},
        )
    }
    assert len(hashes) == 5


# CRD


def test_golden_crd_matches_generator() -> None:
    assert CRD_PATH.is_file(), f"{CRD_PATH} is missing; {REGENERATE}"
    assert CRD_PATH.read_text() == crd_file("aws", NODE_CLASS), (
        f"{CRD_PATH.name} is stale; {REGENERATE}"
    )
    assert yaml.safe_load(CRD_PATH.read_text()) == node_class_crd(NODE_CLASS)


def _spec_schema() -> dict[str, Any]:
    version = node_class_crd(NODE_CLASS)["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_crd_names_columns_and_rules() -> None:
    generated = node_class_crd(NODE_CLASS)
    assert generated["metadata"]["name"] == "ec2nodeclasses.karpenter.k8s.aws"
    names = generated["spec"]["names"]
    assert names["kind"] == "EC2NodeClass"
    assert names["shortNames"] == ["ec2nc", "ec2ncs"]
    assert names["categories"] == ["karpenter"]
    version = generated["spec"]["versions"][0]
    assert version["name"] == "v1"
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Ready", "Age", "Role"]
    spec = _spec_schema()
    assert set(spec["required"]) == {
        "subnetSelectorTerms",
        "securityGroupSelectorTerms",
        "amiSelectorTerms",
    }
    messages = {rule["message"] for rule in spec["x-kubernetes-validations"]}
    assert "must specify exactly one of ['role', 'instanceProfile']" in messages
    assert "must specify amiFamily if amiSelectorTerms does not contain an alias" in messages
    properties = spec["properties"]
    assert properties["metadataOptions"]["default"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    assert properties["subnetSelectorTerms"]["maxItems"] == 30
    assert properties["blockDeviceMappings"]["maxItems"] == 50
    ebs = properties["blockDeviceMappings"]["items"]["properties"]["ebs"]["properties"]
    assert set(ebs) >= {"kmsKeyID", "snapshotID", "volumeSize", "volumeType"}
    assert ebs["volumeType"]["enum"] == ["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"]
    tag_messages = {rule["message"] for rule in properties["tags"]["x-kubernetes-validations"]}
    assert "tag contains a restricted tag matching kubernetes.io/cluster/" in tag_messages
    alias = properties["amiSelectorTerms"]["items"]["properties"]["alias"]
    assert alias["maxLength"] == 30
    assert len(alias["x-kubernetes-validations"]) == 3


def test_crd_has_no_unexpected_defaults() -> None:
    """Of the spec's own fields, only metadataOptions has a default."""
    properties = _spec_schema()["properties"]
    defaulted = sorted(name for name, prop in properties.items() if "default" in prop)
    assert defaulted == ["metadataOptions"]
