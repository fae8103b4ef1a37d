"""Launching on EC2: CreateFleet requests and batching, launch templates, instances (moto)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from karpenter_aws import fleet
from karpenter_aws.batcher import Batcher
from karpenter_aws.fleet import (
    FleetBatcher,
    FleetError,
    TemplateOverrides,
    capacity_type_for,
    compatible_instance_types,
    fleet_failure,
    fleet_request,
    launch_template_config,
    offerings_for,
    parse_fleet_response,
)
from karpenter_aws.instances import (
    Instances,
    instance_from_description,
    instance_id_of,
    provider_id,
)
from karpenter_aws.launchtemplates import (
    LaunchTemplateConfig,
    LaunchTemplates,
    block_device_mappings,
    create_request,
    metadata_options,
    template_name,
)
from karpenter_aws.moto_account import AWSEnv
from karpenter_aws.nodeclass import EC2NodeClass, SecurityGroupStatus
from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.cloudprovider.types import (
    CloudProviderError,
    CreateError,
    InstanceType,
    InsufficientCapacity,
    NodeClaimNotFound,
    Offering,
)

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
CLUSTER_TAG = "kubernetes.io/cluster/test-cluster"


def _offering(zone: str, capacity_type: str, price: float, available: bool = True) -> Offering:
    return Offering(
        Requirements.from_labels({wk.TOPOLOGY_ZONE: zone, wk.CAPACITY_TYPE: capacity_type}),
        price,
        available,
    )


def _type(
    name: str,
    price: float,
    cpu: int = 2,
    spot: bool = True,
    zones: tuple[str, ...] = ZONES,
    arch: str = "amd64",
) -> InstanceType:
    offerings = [_offering(z, "on-demand", price) for z in zones]
    if spot:
        offerings += [_offering(z, "spot", price / 3 + i * 0.001) for i, z in enumerate(zones)]
    labels = {wk.INSTANCE_TYPE: name, wk.ARCH: arch}
    return InstanceType(
        name,
        Requirements.from_labels(labels),
        offerings,
        {"cpu": cpu * 1000, "memory": cpu * 4 * 2**30 * 1000, "pods": 110_000},
    )


def _requirements(*terms: dict[str, Any]) -> Requirements:
    return Requirements.from_node_selector(terms)


def _in(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


# Choosing instance types and capacity type


def test_compatible_types_are_the_cheapest_that_fit_cheapest_first() -> None:
    types = [
        _type("c", 0.3),
        _type("a", 0.1, cpu=1),
        _type("b", 0.2),
        _type("d", 0.05, arch="arm64"),
    ]
    chosen = compatible_instance_types(types, _requirements(_in(wk.ARCH, "amd64")), {"cpu": 1500})
    assert [t.name for t in chosen] == ["b", "c"]


def test_compatible_types_are_truncated_to_sixty() -> None:
    types = [_type(f"t{i:03}", 1 + i / 100) for i in range(100)]
    chosen = compatible_instance_types(types, Requirements(), {})
    assert len(chosen) == fleet.MAX_INSTANCE_TYPES == 60
    assert chosen[0].name == "t000" and chosen[-1].name == "t059"


def test_types_without_a_compatible_available_offering_are_left_out() -> None:
    gone = InstanceType(
        "gone",
        Requirements.from_labels({wk.INSTANCE_TYPE: "gone"}),
        [_offering("us-east-1a", "on-demand", 0.01, available=False)],
        {"cpu": 4000},
    )
    elsewhere = _type("elsewhere", 0.02, zones=("us-east-1c",))
    chosen = compatible_instance_types(
        [gone, elsewhere, _type("here", 0.5)],
        _requirements(_in(wk.TOPOLOGY_ZONE, "us-east-1a")),
        {},
    )
    assert [t.name for t in chosen] == ["here"]


def test_spot_when_allowed_and_offered_else_on_demand() -> None:
    both = _requirements(_in(wk.CAPACITY_TYPE, "spot", "on-demand"))
    assert capacity_type_for(both, [_type("a", 0.1)]) == "spot"
    assert capacity_type_for(Requirements(), [_type("a", 0.1)]) == "spot"
    assert capacity_type_for(both, [_type("a", 0.1, spot=False)]) == "on-demand"
    on_demand = _requirements(_in(wk.CAPACITY_TYPE, "on-demand"))
    assert capacity_type_for(on_demand, [_type("a", 0.1)]) == "on-demand"


def test_offerings_for_a_capacity_type_one_per_zone_in_zone_order() -> None:
    kind = _type("m5.large", 0.096)
    spot = offerings_for(
        kind, _requirements(_in(wk.TOPOLOGY_ZONE, "us-east-1c", "us-east-1a")), "spot"
    )
    assert [(o.zone, o.capacity_type) for o in spot] == [
        ("us-east-1a", "spot"),
        ("us-east-1c", "spot"),
    ]


# The request


def test_launch_template_config_has_an_override_per_type_and_zone_with_a_subnet() -> None:
    template = TemplateOverrides(
        "karpenter.k8s.aws/1",
        "ami-1",
        (("m5.large", "us-east-1a"), ("m5.large", "us-east-1d"), ("c5.large", "us-east-1b")),
    )
    config = launch_template_config(template, {"us-east-1a": "subnet-a", "us-east-1b": "subnet-b"})
    assert config == {
        "LaunchTemplateSpecification": {
            "LaunchTemplateName": "karpenter.k8s.aws/1",
            "Version": "$Latest",
        },
        "Overrides": [
            {
                "InstanceType": "m5.large",
                "SubnetId": "subnet-a",
                "ImageId": "ami-1",
                "AvailabilityZone": "us-east-1a",
            },
            {
                "InstanceType": "c5.large",
                "SubnetId": "subnet-b",
                "ImageId": "ami-1",
                "AvailabilityZone": "us-east-1b",
            },
        ],
    }
    assert launch_template_config(template, {"us-east-1e": "subnet-e"}) is None


def test_spot_request() -> None:
    request = fleet_request("spot", [{"x": 1}], {"b": "2", "a": "1"})
    assert request["Type"] == "instant"
    assert request["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 1,
        "DefaultTargetCapacityType": "spot",
    }
    assert request["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    assert "OnDemandOptions" not in request
    assert request["LaunchTemplateConfigs"] == [{"x": 1}]
    assert request["TagSpecifications"] == [
        {"ResourceType": resource, "Tags": [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]}
        for resource in ("instance", "volume", "fleet")
    ]


def test_on_demand_request() -> None:
    request = fleet_request("on-demand", [], {}, count=3)
    assert request["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert "SpotOptions" not in request
    assert request["TargetCapacitySpecification"]["TotalTargetCapacity"] == 3


# The response


def _fleet_error(code: str, instance_type: str = "m5.large", zone: str = "us-east-1a") -> dict:
    return {
        "ErrorCode": code,
        "ErrorMessage": f"{code} for {instance_type}",
        "LaunchTemplateAndOverrides": {
            "Overrides": {"InstanceType": instance_type, "AvailabilityZone": zone, "SubnetId": "s"}
        },
    }


def test_parse_response_reads_instances_and_errors() -> None:
    response = {
        "Instances": [
            {
                "InstanceIds": ["i-1", "i-2"],
                "InstanceType": "c5.large",
                "Lifecycle": "spot",
                "LaunchTemplateAndOverrides": {
                    "Overrides": {
                        "InstanceType": "c5.large",
                        "AvailabilityZone": "us-east-1b",
                        "SubnetId": "subnet-b",
                        "ImageId": "ami-1",
                    }
                },
            }
        ],
        "Errors": [_fleet_error("InsufficientInstanceCapacity")],
    }
    launched, errors = parse_fleet_response(response, "spot")
    assert [i.instance_id for i in launched] == ["i-1", "i-2"]
    assert launched[0] == fleet.LaunchedInstance(
        "i-1", "c5.large", "us-east-1b", "subnet-b", "ami-1", "spot"
    )
    assert errors == [
        FleetError(
            "InsufficientInstanceCapacity",
            "InsufficientInstanceCapacity for m5.large",
            "m5.large",
            "us-east-1a",
            "s",
        )
    ]
    assert errors[0].insufficient_capacity


@pytest.mark.parametrize("code", sorted(fleet.ICE_ERROR_CODES))
def test_only_capacity_errors_mean_insufficient_capacity(code: str) -> None:
    _, errors = parse_fleet_response({"Errors": [_fleet_error(code)]}, "spot")
    error = fleet_failure(errors, "default-x")
    assert isinstance(error, InsufficientCapacity)
    assert code in str(error) and "default-x" in str(error)


def test_other_errors_are_create_errors_with_their_code() -> None:
    _, errors = parse_fleet_response(
        {
            "Errors": [
                _fleet_error("InsufficientInstanceCapacity"),
                _fleet_error("InvalidParameterValue"),
            ]
        },
        "on-demand",
    )
    error = fleet_failure(errors, "default-x")
    assert isinstance(error, CreateError)
    assert error.reason == "InvalidParameterValue"
    assert "InsufficientInstanceCapacity" in error.message


def test_no_instance_and_no_errors_is_insufficient_capacity() -> None:
    # what the last callers of a batched fleet EC2 filled only in part get
    empty = fleet_failure([], "default-x")
    assert isinstance(empty, InsufficientCapacity)
    assert "no instance and no error returned" in str(empty) and "default-x" in str(empty)


# Launch templates


def _node_class(**spec: Any) -> EC2NodeClass:
    return EC2NodeClass.from_manifest(
        {
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test-cluster"}}],
                "securityGroupSelectorTerms": [
                    {"tags": {"karpenter.sh/discovery": "test-cluster"}}
                ],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                **spec,
            },
            "status": {
                "securityGroups": [{"id": "sg-2"}, {"id": "sg-1"}],
                "instanceProfile": "profile-1",
            },
        }
    )


def test_default_block_devices_per_ami_family() -> None:
    assert block_device_mappings(_node_class()) == [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": 20},
        }
    ]
    bottlerocket = _node_class(amiSelectorTerms=[{"alias": "bottlerocket@latest"}])
    assert [
        (m["DeviceName"], m["Ebs"]["VolumeSize"]) for m in block_device_mappings(bottlerocket)
    ] == [
        ("/dev/xvda", 4),
        ("/dev/xvdb", 20),
    ]
    custom = _node_class(amiSelectorTerms=[{"id": "ami-0123456789abcdef0"}], amiFamily="Custom")
    assert block_device_mappings(custom) == []


def test_block_devices_of_the_node_class_rounded_up_to_gib() -> None:
    node_class = _node_class(
        blockDeviceMappings=[
            {
                "deviceName": "/dev/xvda",
                "rootVolume": True,
                "ebs": {"volumeSize": "100G", "volumeType": "gp3", "iops": 4000, "encrypted": True},
            }
        ]
    )
    assert block_device_mappings(node_class) == [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {"Encrypted": True, "Iops": 4000, "VolumeType": "gp3", "VolumeSize": 94},
        }
    ]


def test_template_config_and_request() -> None:
    node_class = _node_class(
        detailedMonitoring=True,
        associatePublicIPAddress=False,
        metadataOptions={"httpPutResponseHopLimit": 2},
    )
    config = LaunchTemplateConfig.build(node_class, "ami-1", "#!/bin/bash\n", {"b": "2", "a": "1"})
    assert config.security_group_ids == ("sg-1", "sg-2")
    assert config.tags == (("a", "1"), ("b", "2"))
    assert metadata_options(node_class)["HttpPutResponseHopLimit"] == 2
    name = template_name(config)
    assert name.startswith("karpenter.k8s.aws/") and name == template_name(
        LaunchTemplateConfig.build(node_class, "ami-1", "#!/bin/bash\n", {"a": "1", "b": "2"})
    )
    assert name != template_name(
        LaunchTemplateConfig.build(node_class, "ami-2", "#!/bin/bash\n", {"a": "1", "b": "2"})
    )
    request = create_request(config, name)
    data = request["LaunchTemplateData"]
    assert data["ImageId"] == "ami-1"
    assert data["IamInstanceProfile"] == {"Name": "profile-1"}
    assert data["NetworkInterfaces"] == [
        {"DeviceIndex": 0, "Groups": ["sg-1", "sg-2"], "AssociatePublicIpAddress": False}
    ]
    assert data["UserData"] == "IyEvYmluL2Jhc2gK"
    assert data["Monitoring"] == {"Enabled": True}
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "HttpPutResponseHopLimit": 2,
        "HttpTokens": "required",
        "InstanceMetadataTags": "disabled",
    }
    assert request["TagSpecifications"] == [
        {
            "ResourceType": "launch-template",
            "Tags": [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}],
        }
    ]


class _Calls:
    """Counts the calls of one EC2 operation (botocore's ``before-call`` event) and keeps their
    parameters (``before-parameter-build``)."""

    def __init__(self, client: Any, operation: str) -> None:
        self.params: list[dict[str, Any]] = []
        self.count = 0
        self._lock = threading.Lock()
        client.meta.events.register(f"before-parameter-build.ec2.{operation}", self._record)
        client.meta.events.register(f"before-call.ec2.{operation}", self._count)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        with self._lock:
            self.params.append(params)

    def _count(self, **_: Any) -> None:
        with self._lock:
            self.count += 1

    def __len__(self) -> int:
        return self.count


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _template_names(aws: AWSEnv) -> set[str]:
    pages = aws.client("ec2").get_paginator("describe_launch_templates").paginate()
    return {t["LaunchTemplateName"] for page in pages for t in page["LaunchTemplates"]}


def test_launch_template_is_created_once_then_found(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    clock = _Clock()
    templates = LaunchTemplates(ec2, "test-cluster", clock)
    templates.ensure(LaunchTemplateConfig.build(_node_class(), "ami-0", "x", {"a": "b"}))
    creates = _Calls(ec2, "CreateLaunchTemplate")
    describes = _Calls(ec2, "DescribeLaunchTemplates")
    tags = {CLUSTER_TAG: "owned", "eks:eks-cluster-name": "test-cluster"}
    config = LaunchTemplateConfig.build(
        _node_class(), aws.images["al2023/x86_64/standard"], "x", tags
    )
    name = templates.ensure(config)
    assert templates.ensure(config) == name
    assert (len(creates), len(describes)) == (1, 1)
    [described] = aws.client("ec2").describe_launch_templates(LaunchTemplateNames=[name])[
        "LaunchTemplates"
    ]
    assert {t["Key"]: t["Value"] for t in described["Tags"]} == tags
    clock.now += timedelta(seconds=59)
    templates.ensure(config)
    assert (len(creates), len(describes)) == (1, 1)
    clock.now += timedelta(minutes=2)
    assert templates.ensure(config) == name
    assert (len(creates), len(describes)) == (1, 2)
    ec2.delete_launch_template(LaunchTemplateName=name)
    templates.invalidate(name)
    templates.ensure(config)
    assert len(creates) == 2


def test_unused_templates_of_the_cluster_are_deleted(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    clock = _Clock()
    tags = {"eks:eks-cluster-name": "test-cluster"}
    image = aws.images["al2023/x86_64/standard"]
    left_over = LaunchTemplateConfig.build(_node_class(), image, "old", tags)
    LaunchTemplates(ec2, "test-cluster", clock).ensure(left_over)
    other_cluster = LaunchTemplateConfig.build(
        _node_class(), image, "x", {"eks:eks-cluster-name": "other"}
    )
    LaunchTemplates(ec2, "other", clock).ensure(other_cluster)
    templates = LaunchTemplates(ec2, "test-cluster", clock)
    used = LaunchTemplateConfig.build(_node_class(), image, "new", tags)
    unused = LaunchTemplateConfig.build(_node_class(), image, "newer", tags)
    templates.ensure(used)
    templates.ensure(unused)
    everything = {template_name(c) for c in (left_over, other_cluster, used, unused)}
    assert _template_names(aws) == everything
    clock.now += timedelta(seconds=40)
    templates.ensure(used)
    assert _template_names(aws) == everything
    clock.now += timedelta(seconds=40)
    templates.ensure(used)
    assert _template_names(aws) == {template_name(other_cluster), template_name(used)}
    assert set(templates._name_locks) == {template_name(used)}  # no lock kept per deleted name


def test_concurrent_ensures_create_one_template(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    creates = _Calls(ec2, "CreateLaunchTemplate")
    templates = LaunchTemplates(ec2, "test-cluster")
    config = LaunchTemplateConfig.build(
        _node_class(), aws.images["al2023/x86_64/standard"], "x", {}
    )
    names = _in_threads(8, lambda _: templates.ensure(config))
    assert len(set(names)) == 1 and len(creates) == 1


def test_launch_template_errors_name_the_template(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    templates = LaunchTemplates(ec2, "test-cluster")
    config = LaunchTemplateConfig.build(_node_class(), "not-an-ami", "x", {})
    _inject(ec2, "CreateLaunchTemplate", _client_error("InvalidAMIID.Malformed", "bad ami"))
    with pytest.raises(CreateError) as caught:
        templates.ensure(config)
    assert caught.value.reason == "InvalidAMIID.Malformed"
    assert template_name(config) in caught.value.message and "bad ami" in caught.value.message


# the generic batcher


class _Recorder:
    """An ``execute`` for ``Batcher`` that keeps each batch and answers with the items doubled."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        return [item * 2 for item in items]


def test_concurrent_adds_are_one_batch_each_with_its_result() -> None:
    recorder = _Recorder()
    batcher = Batcher(recorder, timedelta(milliseconds=100), timedelta(seconds=2), 100)
    assert _in_threads(6, lambda i: batcher.add("k", i)) == [0, 2, 4, 6, 8, 10]
    assert len(recorder.batches) == 1 and sorted(recorder.batches[0]) == list(range(6))


def test_batches_are_per_key_and_at_most_max_items() -> None:
    recorder = _Recorder()
    batcher = Batcher(recorder, timedelta(milliseconds=100), timedelta(seconds=2), 3)
    _in_threads(8, lambda i: batcher.add(i % 2, i))
    sizes = sorted(len(b) for b in recorder.batches)
    assert sizes == [1, 1, 3, 3]
    assert all(len({item % 2 for item in b}) == 1 for b in recorder.batches)


def test_a_batch_waits_for_expected_callers_until_they_add_or_leave() -> None:
    recorder = _Recorder()
    batcher = Batcher(recorder, timedelta(milliseconds=10), timedelta(seconds=5), 100)

    def work(index: int) -> int | None:
        if index == 0:
            return batcher.add("k", 0)
        with batcher.expecting():
            time.sleep(0.2)  # computing its request, far past the idle time
            return batcher.add("k", 1) if index == 1 else None

    start = time.monotonic()
    assert _in_threads(3, work) == [0, 2, None]
    assert recorder.batches == [[0, 1]]
    assert time.monotonic() - start < 2


def test_a_batch_closes_at_max_wait_even_when_callers_are_expected() -> None:
    recorder = _Recorder()
    batcher = Batcher(recorder, timedelta(milliseconds=10), timedelta(milliseconds=100), 100)
    leaving = threading.Event()

    def expected() -> None:
        with batcher.expecting():
            leaving.wait(5)

    thread = threading.Thread(target=expected)
    thread.start()
    start = time.monotonic()
    try:
        assert batcher.add("k", 4) == 8
        assert 0.09 <= time.monotonic() - start < 2
    finally:
        leaving.set()
        thread.join()


def test_a_failed_batch_fails_every_caller() -> None:
    def refuse(items: list[int]) -> list[int]:
        raise CloudProviderError("refused")

    def short(items: list[int]) -> list[int]:
        return items[:1]

    for execute in (refuse, short):
        batcher = Batcher(execute, timedelta(milliseconds=100), timedelta(seconds=2), 100)
        results = _in_threads(3, lambda i, b=batcher: _raised(lambda: b.add("k", i)))
        assert all(isinstance(r, CloudProviderError) for r in results), results


# CreateFleet against moto, batching


def _client_error(code: str, message: str) -> tuple[Any, dict[str, Any]]:
    class _Raw:
        status_code = 400
        headers: dict[str, str] = {}

    return (_Raw(), {"Error": {"Code": code, "Message": message}})


def _inject(client: Any, operation: str, response: tuple[Any, dict[str, Any]]) -> None:
    """Answer ``operation`` with ``response`` instead of calling moto."""
    client.meta.events.register(f"before-call.ec2.{operation}", lambda **_: response)


def _in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    if errors:
        raise errors[0]
    return results


def _fleet_request_for(aws: AWSEnv, ec2: Any, capacity_type: str = "on-demand") -> dict[str, Any]:
    node_class = _node_class()
    node_class.status.security_groups = [SecurityGroupStatus(id=aws.security_group_id)]
    config = LaunchTemplateConfig.build(node_class, aws.images["al2023/x86_64/standard"], "x", {})
    name = LaunchTemplates(ec2, "test-cluster").ensure(config)
    template = TemplateOverrides(
        name, config.image_id, (("m5.large", "us-east-1b"), ("c5.large", "us-east-1a"))
    )
    subnets = dict(aws.subnet_ids)
    return fleet_request(
        capacity_type,
        [launch_template_config(template, subnets)],
        {CLUSTER_TAG: "owned", "karpenter.sh/nodepool": "default"},
    )


def _tags_of(ec2: Any, instance_id: str) -> dict[str, str]:
    [reservation] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return {t["Key"]: t["Value"] for t in reservation["Instances"][0].get("Tags", [])}


def test_a_lone_request_carries_its_own_tags(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    request = _fleet_request_for(aws, ec2, "spot")
    calls = _Calls(ec2, "CreateFleet")
    tags = _Calls(ec2, "CreateTags")
    batcher = FleetBatcher(ec2, timedelta(milliseconds=1), timedelta(milliseconds=50))
    outcome = batcher.launch(request, {"karpenter.sh/nodeclaim": "default-a"}, "spot")
    assert outcome.instance is not None and outcome.errors == ()
    assert (outcome.instance.instance_type, outcome.instance.zone) == ("m5.large", "us-east-1b")
    assert outcome.instance.capacity_type == "spot"
    assert outcome.instance.subnet_id == aws.subnet_ids["us-east-1b"]
    assert (len(calls), len(tags)) == (1, 0)
    assert calls.params[0]["TargetCapacitySpecification"]["TotalTargetCapacity"] == 1
    assert _tags_of(ec2, outcome.instance.instance_id) == {
        CLUSTER_TAG: "owned",
        "karpenter.sh/nodepool": "default",
        "karpenter.sh/nodeclaim": "default-a",
    }


def test_identical_concurrent_requests_become_one_create_fleet(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    request = _fleet_request_for(aws, ec2)
    calls = _Calls(ec2, "CreateFleet")
    batcher = FleetBatcher(ec2, timedelta(milliseconds=200), timedelta(seconds=2))
    outcomes = _in_threads(
        5,
        lambda i: batcher.launch(request, {"karpenter.sh/nodeclaim": f"default-{i}"}, "on-demand"),
    )
    assert len(calls) == 1
    assert calls.params[0]["TargetCapacitySpecification"]["TotalTargetCapacity"] == 5
    sent_tags = {t["Key"] for t in calls.params[0]["TagSpecifications"][0]["Tags"]}
    assert "karpenter.sh/nodeclaim" not in sent_tags
    ids = [o.instance.instance_id for o in outcomes]
    assert len(set(ids)) == 5
    for index, instance_id in enumerate(ids):
        assert _tags_of(ec2, instance_id)["karpenter.sh/nodeclaim"] == f"default-{index}"


def test_tagging_a_batched_instance_is_tried_again_once(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    request = _fleet_request_for(aws, ec2)
    refusals = {"left": 1}

    def refuse_at_first(**_: Any) -> tuple[Any, dict[str, Any]] | None:
        if refusals["left"] == 0:
            return None
        refusals["left"] -= 1
        return _client_error("InvalidInstanceID.NotFound", "not yet")

    tags = _Calls(ec2, "CreateTags")
    ec2.meta.events.register("before-call.ec2.CreateTags", refuse_at_first)
    batcher = FleetBatcher(ec2, timedelta(milliseconds=200), timedelta(seconds=2))

    def launch_two() -> list[Any]:
        return _in_threads(
            2,
            lambda i: batcher.launch(
                request, {"karpenter.sh/nodeclaim": f"default-{i}"}, "on-demand"
            ),
        )

    outcomes = launch_two()
    assert len(tags) == 3  # one refused, then tried again
    for index, outcome in enumerate(outcomes):
        nodeclaim = _tags_of(ec2, outcome.instance.instance_id)["karpenter.sh/nodeclaim"]
        assert nodeclaim == f"default-{index}"
    refusals["left"] = 4
    outcomes = launch_two()
    assert len(tags) == 7  # refused twice each: the instances are still returned, untagged
    for outcome in outcomes:
        assert outcome.instance is not None
        assert "karpenter.sh/nodeclaim" not in _tags_of(ec2, outcome.instance.instance_id)


def test_different_requests_are_not_batched(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    on_demand = _fleet_request_for(aws, ec2)
    spot = _fleet_request_for(aws, ec2, "spot")
    calls = _Calls(ec2, "CreateFleet")
    batcher = FleetBatcher(ec2, timedelta(milliseconds=100), timedelta(seconds=1))
    outcomes = _in_threads(
        2,
        lambda i: batcher.launch(
            (on_demand, spot)[i], {"karpenter.sh/nodeclaim": f"c-{i}"}, ("on-demand", "spot")[i]
        ),
    )
    assert len(calls) == 2
    assert [o.instance.capacity_type for o in outcomes] == ["on-demand", "spot"]


def test_a_short_fleet_leaves_the_last_callers_without_an_instance(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    request = _fleet_request_for(aws, ec2)

    def only_one(params: dict[str, Any], **_: Any) -> None:
        params["TargetCapacitySpecification"]["TotalTargetCapacity"] = 1

    ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", only_one)

    def add_error(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Errors"] = [_fleet_error("InsufficientInstanceCapacity", "c5.large", "us-east-1a")]

    ec2.meta.events.register("after-call.ec2.CreateFleet", add_error)
    batcher = FleetBatcher(ec2, timedelta(milliseconds=200), timedelta(seconds=2))
    outcomes = _in_threads(
        3, lambda i: batcher.launch(request, {"karpenter.sh/nodeclaim": f"n-{i}"}, "on-demand")
    )
    assert sum(o.instance is not None for o in outcomes) == 1
    assert all(o.errors[0].code == "InsufficientInstanceCapacity" for o in outcomes)


def test_api_errors_reach_every_caller(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    request = _fleet_request_for(aws, ec2)
    _inject(ec2, "CreateFleet", _client_error("UnauthorizedOperation", "not allowed"))
    batcher = FleetBatcher(ec2, timedelta(milliseconds=100), timedelta(seconds=1))
    from botocore.exceptions import ClientError

    for result in _in_threads(
        3, lambda i: _raised(lambda: batcher.launch(request, {"n": str(i)}, "on-demand"))
    ):
        assert isinstance(result, ClientError)
        assert result.response["Error"]["Code"] == "UnauthorizedOperation"


def _raised(work: Callable[[], Any]) -> BaseException | None:
    try:
        work()
    except Exception as error:
        return error
    return None


# Instances


def test_instance_from_description() -> None:
    instance = instance_from_description(
        {
            "InstanceId": "i-1",
            "InstanceType": "m5.large",
            "Placement": {"AvailabilityZone": "us-east-1a"},
            "State": {"Name": "running"},
            "ImageId": "ami-1",
            "SubnetId": "subnet-1",
            "SecurityGroups": [{"GroupId": "sg-1", "GroupName": "x"}],
            "InstanceLifecycle": "spot",
            "Tags": [{"Key": "a", "Value": "b"}],
        }
    )
    assert (instance.capacity_type, instance.security_group_ids, instance.tags) == (
        "spot",
        ("sg-1",),
        {"a": "b"},
    )
    assert instance_from_description({"InstanceId": "i-2"}).capacity_type == "on-demand"


def test_provider_ids() -> None:
    assert provider_id("us-east-1a", "i-0abc") == "aws:///us-east-1a/i-0abc"
    assert instance_id_of("aws:///us-east-1a/i-0abc") == "i-0abc"
    for bad in (None, "", "kwok://x", "aws:///us-east-1a/"):
        with pytest.raises(NodeClaimNotFound):
            instance_id_of(bad)


def _run(ec2: Any, aws: AWSEnv, tags: dict[str, str]) -> str:
    return ec2.run_instances(
        ImageId=aws.images["al2023/x86_64/standard"],
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.large",
        SubnetId=aws.subnet_ids["us-east-1a"],
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["Instances"][0]["InstanceId"]


def test_list_get_find_and_terminate(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    ours = _run(
        ec2,
        aws,
        {
            CLUSTER_TAG: "owned",
            "karpenter.sh/nodepool": "default",
            "karpenter.sh/nodeclaim": "default-a",
        },
    )
    _run(ec2, aws, {CLUSTER_TAG: "owned"})
    _run(ec2, aws, {"kubernetes.io/cluster/other": "owned", "karpenter.sh/nodepool": "default"})
    instances = Instances(ec2, "test-cluster")
    assert [i.id for i in instances.list()] == [ours]
    got = instances.get(ours)
    assert (got.zone, got.instance_type, got.state, got.subnet_id) == (
        "us-east-1a",
        "m5.large",
        "running",
        aws.subnet_ids["us-east-1a"],
    )
    assert instances.find_for_nodeclaim("default-a").id == ours
    assert instances.find_for_nodeclaim("default-b") is None
    terminates = _Calls(ec2, "TerminateInstances")
    instances.terminate(ours)
    assert len(terminates) == 1
    assert instances.list() == []
    with pytest.raises(NodeClaimNotFound):
        instances.get(ours)
    with pytest.raises(NodeClaimNotFound):
        instances.terminate(ours)
    assert len(terminates) == 1
    with pytest.raises(NodeClaimNotFound):
        instances.get("i-0123456789abcdef0")


def test_concurrent_lookups_by_nodeclaim_share_one_describe(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    owned = {CLUSTER_TAG: "owned"}
    first = _run(ec2, aws, {**owned, "karpenter.sh/nodeclaim": "n-0"})
    twice = sorted(_run(ec2, aws, {**owned, "karpenter.sh/nodeclaim": "n-2"}) for _ in range(2))
    _run(ec2, aws, {"kubernetes.io/cluster/other": "owned", "karpenter.sh/nodeclaim": "n-1"})
    describes = _Calls(ec2, "DescribeInstances")
    instances = Instances(ec2, "test-cluster", timedelta(milliseconds=200), timedelta(seconds=2))
    names = ["n-0", "n-1", "n-2", "n-3", "n-0"]
    found = _in_threads(5, lambda i: instances.find_for_nodeclaim(names[i]))
    assert [f.id if f else None for f in found] == [first, None, twice[0], None, first]
    assert len(describes) == 1
    [values] = [
        f["Values"]
        for f in describes.params[0]["Filters"]
        if f["Name"] == "tag:karpenter.sh/nodeclaim"
    ]
    assert values == ["n-0", "n-1", "n-2", "n-3"]


def test_lookup_errors_name_the_nodeclaims(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    _inject(ec2, "DescribeInstances", _client_error("RequestLimitExceeded", "slow down"))
    instances = Instances(ec2, "test-cluster", timedelta(milliseconds=100), timedelta(seconds=2))
    results = _in_threads(2, lambda i: _raised(lambda: instances.find_for_nodeclaim(f"n-{i}")))
    for result in results:
        assert isinstance(result, CloudProviderError)
        assert "n-0, n-1" in str(result) and "RequestLimitExceeded: slow down" in str(result)


def test_list_pages_through_many_instances(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    ec2.run_instances(
        ImageId=aws.images["al2023/x86_64/standard"],
        MinCount=30,
        MaxCount=30,
        InstanceType="t3.micro",
        SubnetId=aws.subnet_ids["us-east-1b"],
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": CLUSTER_TAG, "Value": "owned"},
                    {"Key": "karpenter.sh/nodepool", "Value": "default"},
                ],
            }
        ],
    )
    assert len(Instances(ec2, "test-cluster").list()) == 30


class _Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_gets_are_served_from_the_cache_until_it_expires(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    owned = {CLUSTER_TAG: "owned", "karpenter.sh/nodepool": "default"}
    first, second = (_run(ec2, aws, owned) for _ in range(2))
    ticks = _Ticks()
    instances = Instances(ec2, "test-cluster", timedelta(milliseconds=5), monotonic=ticks)
    describes = _Calls(ec2, "DescribeInstances")
    assert {i.id for i in instances.list()} == {first, second}
    assert (instances.get(first).id, instances.get(second).id) == (first, second)
    assert len(describes) == 1  # the list
    ticks.now += 59
    instances.get(first)
    assert len(describes) == 1
    ticks.now += 2
    assert instances.get(first).state == "running"
    assert len(describes) == 2
    assert describes.params[-1]["InstanceIds"] == [first]
    instances.get(first)
    assert len(describes) == 2  # read again, kept again


def test_list_keeps_instances_remembered_while_it_was_listing(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    listed = _run(ec2, aws, {CLUSTER_TAG: "owned", "karpenter.sh/nodepool": "default"})
    launched = _run(ec2, aws, {CLUSTER_TAG: "owned"})  # not yet tagged with its NodePool
    stale = "i-0123456789abcdef0"
    ticks = _Ticks()
    instances = Instances(ec2, "test-cluster", timedelta(milliseconds=5), monotonic=ticks)
    instances.remember(instance_from_description({"InstanceId": stale}))
    ticks.now += 1

    def launch_meanwhile(**_: Any) -> None:
        instances.remember(instance_from_description({"InstanceId": launched}))

    ec2.meta.events.register("before-call.ec2.DescribeInstances", launch_meanwhile)
    assert [i.id for i in instances.list()] == [listed]
    ec2.meta.events.unregister("before-call.ec2.DescribeInstances", launch_meanwhile)
    describes = _Calls(ec2, "DescribeInstances")
    assert instances.get(launched).id == launched
    assert instances.get(listed).id == listed
    assert len(describes) == 0  # both from the cache
    with pytest.raises(NodeClaimNotFound):
        instances.get(stale)  # remembered before the listing: replaced by it, so read again
    assert len(describes) >= 1


def test_concurrent_gets_share_one_describe_and_a_missing_id_fails_its_caller_only(
    aws: AWSEnv,
) -> None:
    ec2 = aws.client("ec2")
    ours = [_run(ec2, aws, {CLUSTER_TAG: "owned"}) for _ in range(3)]
    gone = _run(ec2, aws, {CLUSTER_TAG: "owned"})
    ec2.terminate_instances(InstanceIds=[gone])
    describes = _Calls(ec2, "DescribeInstances")
    instances = Instances(ec2, "test-cluster", timedelta(milliseconds=200), timedelta(seconds=2))
    wanted = [*ours, gone, ours[0]]
    results = _in_threads(5, lambda i: _raised(lambda: instances.get(wanted[i])) or wanted[i])
    assert results[:3] == ours and results[4] == ours[0]
    assert isinstance(results[3], NodeClaimNotFound) and gone in str(results[3])
    assert len(describes) == 1
    assert sorted(describes.params[0]["InstanceIds"]) == sorted({*ours, gone})


def test_an_id_ec2_does_not_know_is_read_alone(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    ours = _run(ec2, aws, {CLUSTER_TAG: "owned"})
    unknown = "i-0123456789abcdef0"
    describes = _Calls(ec2, "DescribeInstances")
    instances = Instances(ec2, "test-cluster", timedelta(milliseconds=200), timedelta(seconds=2))
    wanted = [ours, unknown]
    results = _in_threads(2, lambda i: _raised(lambda: instances.get(wanted[i])) or wanted[i])
    assert results[0] == ours
    assert isinstance(results[1], NodeClaimNotFound) and unknown in str(results[1])
    assert len(describes) == 3  # together (refused for the unknown id), then one each


def test_terminate_reads_the_instance_afresh(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    ours = _run(ec2, aws, {CLUSTER_TAG: "owned", "karpenter.sh/nodepool": "default"})
    instances = Instances(ec2, "test-cluster", timedelta(milliseconds=5))
    instances.list()
    ec2.terminate_instances(InstanceIds=[ours])
    assert instances.get(ours).state == "running"  # the cached view
    terminates = _Calls(ec2, "TerminateInstances")
    with pytest.raises(NodeClaimNotFound):
        instances.terminate(ours)
    assert len(terminates) == 0
    with pytest.raises(NodeClaimNotFound):
        instances.get(ours)
