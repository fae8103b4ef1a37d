"""The AWS cloud provider end to end against moto, with EC2NodeClasses from a read view.

The EC2 client handed to the provider narrows DescribeInstanceTypes to a few types (moto
answers ~1,400 in seconds); moto's CreateFleet gaps (first override only, no Errors) are filled
with botocore event handlers on the same client, never in provider code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from karpenter_aws import moto_account
from karpenter_aws.amis import AMIResolver
from karpenter_aws.cloudprovider import AWSCloudProvider
from karpenter_aws.cluster import cluster_dns_ip
from karpenter_aws.launcher import launch_tags, node_labels
from karpenter_aws.moto_account import AWSEnv
from karpenter_aws.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import (
    CloudProvider,
    CloudProviderError,
    CreateError,
    InsufficientCapacity,
    NodeClaimNotFound,
    NodeClassNotReady,
    RepairPolicy,
)

TYPES = ["m5.large", "c5.large", "m5.xlarge", "c5.xlarge", "m6g.large", "r5.large", "t3.micro"]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# -- the provider's EC2NodeClass read view --------------------------------------------------------


class NodeClassView:
    """The ``ProviderContext.node_classes`` read view, as the controller's informer cache gives
    it: the manifests in ``objects`` (name -> manifest), decoded on each lookup (so a test may
    change one in place); ``lookups`` counts the calls."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.lookups = 0

    def __call__(self, kind: str, name: str) -> EC2NodeClass | None:
        self.lookups += 1
        manifest = self.objects.get(name)
        if kind != "EC2NodeClass" or manifest is None:
            return None
        try:
            return EC2NodeClass.from_manifest(copy.deepcopy(manifest))
        except ValidationError:  # the informer logs and leaves out what it cannot decode
            return None


@pytest.fixture
def node_classes() -> NodeClassView:
    return NodeClassView()


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


class Calls:
    """Counts an EC2 operation (``before-call``) and keeps its parameters."""

    def __init__(self, client: Any, operation: str) -> None:
        self.params: list[dict[str, Any]] = []
        self.count = 0
        self._lock = threading.Lock()
        client.meta.events.register(f"before-parameter-build.ec2.{operation}", self._record)
        client.meta.events.register(f"before-call.ec2.{operation}", self._count)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        with self._lock:
            self.params.append(copy.deepcopy(params))

    def _count(self, **_: Any) -> None:
        with self._lock:
            self.count += 1

    def overrides(self, index: int = -1) -> list[tuple[str, str]]:
        return [
            (o["InstanceType"], o["AvailabilityZone"])
            for config in self.params[index]["LaunchTemplateConfigs"]
            for o in config["Overrides"]
        ]


def narrowed_ec2(aws: AWSEnv) -> Any:
    ec2 = aws.client("ec2")

    def narrow(params: dict[str, Any], **_: Any) -> None:
        params.setdefault("Filters", []).append({"Name": "instance-type", "Values": TYPES})

    def narrow_prices(params: dict[str, Any], **_: Any) -> None:
        params["InstanceTypes"] = TYPES

    for operation in ("DescribeInstanceTypes", "DescribeInstanceTypeOfferings"):
        ec2.meta.events.register(f"before-parameter-build.ec2.{operation}", narrow)
    ec2.meta.events.register("before-parameter-build.ec2.DescribeSpotPriceHistory", narrow_prices)
    return ec2


def node_class_manifest(aws: AWSEnv, **spec: Any) -> dict[str, Any]:
    """A Ready EC2NodeClass for the seeded account, its AMIs resolved by the real resolver."""
    subnets = aws.client("ec2").describe_subnets(SubnetIds=aws.subnet_list)["Subnets"]
    manifest: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "uid": "uid-nc", "generation": 1},
        "spec": {
            "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": aws.cluster_name}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": aws.cluster_name}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "tags": {"team": "platform"},
            **spec,
        },
    }
    node_class = EC2NodeClass.from_manifest(manifest)
    amis = AMIResolver(aws.client("ec2"), aws.client("ssm")).resolve(
        node_class, aws.kubernetes_version
    )
    manifest["status"] = {
        "subnets": [
            {"id": s["SubnetId"], "zone": s["AvailabilityZone"], "zoneID": s["AvailabilityZoneId"]}
            for s in subnets
        ],
        "securityGroups": [{"id": aws.security_group_id, "name": aws.security_group_name}],
        "amis": [a.model_dump(mode="json", by_alias=True, exclude_none=True) for a in amis],
        "instanceProfile": "test-cluster_profile",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    manifest["metadata"]["annotations"] = {
        HASH_ANNOTATION: nodeclass_hash(node_class.spec),
        HASH_VERSION_ANNOTATION: HASH_VERSION,
    }
    return manifest


class Env:
    """A provider against moto with an EC2NodeClass view, and handles on what it calls."""

    def __init__(self, aws: AWSEnv, node_classes: NodeClassView, **settings: str) -> None:
        self.aws = aws
        self.node_classes = node_classes
        self.clock = Clock()
        self.ec2 = narrowed_ec2(aws)
        node_classes.objects.clear()
        node_classes.objects["default"] = node_class_manifest(aws)
        self.fleets = Calls(self.ec2, "CreateFleet")
        self.templates = Calls(self.ec2, "CreateLaunchTemplate")
        context = ProviderContext(
            settings={
                "cluster-name": aws.cluster_name,
                "region": aws.region,
                "isolated-vpc": "true",
                "fleet-batch-idle-duration": "20ms",
                "fleet-batch-max-duration": "500ms",
                **settings,
            },
            node_classes=node_classes,
            clock=self.clock,
            clients={"ec2": self.ec2, "eks": aws.client("eks"), "pricing": aws.client("pricing")},
        )
        self.provider = AWSCloudProvider.from_context(context)

    def node_class(self) -> dict[str, Any]:
        return self.node_classes.objects["default"]

    def instance(self, instance_id: str) -> dict[str, Any]:
        [reservation] = self.aws.client("ec2").describe_instances(InstanceIds=[instance_id])[
            "Reservations"
        ]
        instance: dict[str, Any] = reservation["Instances"][0]
        return instance


@pytest.fixture
def env(aws: AWSEnv, node_classes: NodeClassView) -> Env:
    return Env(aws, node_classes)


def claim(
    name: str = "default-abcde",
    *requirements: dict[str, Any],
    requests: dict[str, str] | None = None,
    node_class: str = "default",
    group: str = "karpenter.k8s.aws",
) -> NodeClaim:
    return NodeClaim.from_manifest(
        {
            "metadata": {
                "name": name,
                "labels": {wk.NODEPOOL: "default", "team": "a"},
                "annotations": {"karpenter.sh/nodepool-hash": "1"},
            },
            "spec": {
                "requirements": list(requirements) or [_in(wk.INSTANCE_TYPE, *TYPES)],
                "nodeClassRef": {"group": group, "kind": "EC2NodeClass", "name": node_class},
                "resources": {"requests": requests or {}},
                "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
            },
        }
    )


def _in(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def nodepool(node_class: str = "default", group: str = "karpenter.k8s.aws") -> NodePool:
    return NodePool.from_manifest(
        {
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [],
                        "nodeClassRef": {
                            "group": group,
                            "kind": "EC2NodeClass",
                            "name": node_class,
                        },
                    }
                }
            },
        }
    )


def instance_id(created: NodeClaim) -> str:
    return (created.status.provider_id or "").rsplit("/", 1)[-1]


def tags_of(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        except Exception as error:
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


# -- pure parts ---------------------------------------------------------------------------------


def test_cluster_dns_is_the_tenth_service_address() -> None:
    assert cluster_dns_ip("172.20.0.0/16") == "172.20.0.10"
    assert cluster_dns_ip("fd00:10::/108") == "fd00:10::a"
    assert cluster_dns_ip("not a cidr") is None


def test_launch_tags_and_node_labels(aws: AWSEnv) -> None:
    node_class = EC2NodeClass.from_manifest(node_class_manifest(aws))
    assert launch_tags("test-cluster", node_class, "default") == {
        "team": "platform",
        "kubernetes.io/cluster/test-cluster": "owned",
        "karpenter.sh/nodepool": "default",
        "eks:eks-cluster-name": "test-cluster",
        "karpenter.k8s.aws/ec2nodeclass": "default",
    }
    assert node_labels(
        {
            "karpenter.sh/nodepool": "default",
            "team": "a",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "m5.large",
            "node-restriction.kubernetes.io/x": "y",
            "example.k8s.io/z": "1",
        },
        "spot",
    ) == {"karpenter.sh/nodepool": "default", "team": "a", "karpenter.sh/capacity-type": "spot"}


# -- offline --------------------------------------------------------------------------------------


def test_offline_the_packaged_catalog_is_served_and_nothing_launches() -> None:
    provider = AWSCloudProvider.from_context(ProviderContext(settings={"region": "us-east-1"}))
    assert isinstance(provider, CloudProvider)
    types = provider.get_instance_types(nodepool())
    assert len(types) > 100
    assert {t.name for t in types} >= {"m5.large", "c5.large"}
    assert provider.node_class_readiness(nodepool()).ready
    with pytest.raises(CloudProviderError, match="offline"):
        provider.create(claim())
    with pytest.raises(CloudProviderError, match="offline"):
        provider.list()
    assert provider.is_drifted(claim()) == ""


def test_with_aws_clients_but_no_cluster_the_live_catalog_is_served(aws: AWSEnv) -> None:
    context = ProviderContext(
        settings={"region": aws.region, "cluster-name": aws.cluster_name, "isolated-vpc": "true"},
        clients={"ec2": narrowed_ec2(aws)},
    )
    provider = AWSCloudProvider.from_context(context)
    assert provider.catalog.is_live
    types = provider.get_instance_types(nodepool())
    assert {t.name for t in types} == set(TYPES)
    assert "us-east-1f" in {o.zone for t in types for o in t.offerings}
    with pytest.raises(CloudProviderError, match="NodeClass view"):
        provider.create(claim())


def test_the_provider_describes_itself(env: Env) -> None:
    provider = env.provider
    assert provider.name == "aws"
    assert provider.supported_node_classes() == [EC2NodeClass]
    policies = provider.repair_policies()
    assert RepairPolicy("Ready", "False", timedelta(minutes=30)) in policies
    assert RepairPolicy("Ready", "Unknown", timedelta(minutes=30)) in policies
    assert (provider.settings.cluster_name, provider.clients.ec2) == ("test-cluster", env.ec2)
    assert provider.catalog.unavailable is provider.unavailable


# -- instance types and readiness -----------------------------------------------------------------


def test_instance_types_follow_the_node_class_subnet_zones(env: Env) -> None:
    types = {t.name: t for t in env.provider.get_instance_types(nodepool())}
    assert set(types) == set(TYPES)
    zones = {o.zone for o in types["m5.large"].offerings}
    assert zones == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert env.provider.get_instance_types(nodepool("missing")) == []
    assert env.provider.get_instance_types(nodepool(group="other.sh")) == []


def test_prices_are_read_in_the_background_when_due(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = env.provider.catalog.prices
    reads = Calls(env.ec2, "DescribeSpotPriceHistory")
    env.provider.get_instance_types(nodepool())
    wait_for(lambda: not prices.spot_estimated)
    m5 = {t.name: t for t in env.provider.get_instance_types(nodepool())}["m5.large"]
    assert {o.price for o in m5.offerings if o.capacity_type == "spot"} == {0.00001}  # moto's
    assert reads.count == 1

    def threads_started_by_get_instance_types() -> list[str]:
        started: list[str] = []
        start = threading.Thread.start

        def recording_start(thread: threading.Thread) -> None:
            started.append(thread.name)
            start(thread)

        with monkeypatch.context() as patch:
            patch.setattr(threading.Thread, "start", recording_start)
            env.provider.get_instance_types(nodepool())
        return started

    env.clock.now += timedelta(hours=11)
    assert "refresh spot prices" not in threads_started_by_get_instance_types()
    env.clock.now += timedelta(hours=1)
    assert "refresh spot prices" in threads_started_by_get_instance_types()
    wait_for(lambda: reads.count == 2)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_node_class_readiness(env: Env) -> None:
    provider = env.provider
    assert provider.node_class_readiness(nodepool()).ready
    missing = provider.node_class_readiness(nodepool("missing"))
    assert not missing.ready and "'missing' not found" in missing.reason
    env.node_class()["status"]["conditions"][0].update(
        status="False", reason="SubnetsNotFound", message="no subnets match"
    )
    assert provider.node_class_readiness(nodepool()).reason == "no subnets match"
    assert not provider.node_class_readiness(nodepool(group="other.sh")).ready


def test_readiness_and_create_agree_on_a_status_of_an_older_spec(env: Env) -> None:
    env.node_class()["metadata"]["generation"] = 2  # Ready was observed at generation 1
    readiness = env.provider.node_class_readiness(nodepool())
    assert not readiness.ready and "not been reconciled" in readiness.reason
    with pytest.raises(NodeClassNotReady, match="not been reconciled"):
        env.provider.create(claim())
    env.node_class()["status"]["conditions"][0]["observedGeneration"] = 2
    assert env.provider.node_class_readiness(nodepool()).ready


# -- create ---------------------------------------------------------------------------------------


def test_create_launches_and_hydrates_the_nodeclaim(env: Env) -> None:
    aws = env.aws
    created = env.provider.create(claim(requests={"cpu": "1", "memory": "1Gi"}))
    assert env.fleets.count == 1
    request = env.fleets.params[0]
    assert request["Type"] == "instant"
    assert request["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 1,
        "DefaultTargetCapacityType": "spot",
    }
    assert request["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    overrides = env.fleets.overrides()
    # t3.micro's 1 GiB cannot hold the request; m6g.large, the cheapest, is arm64
    assert ("t3.micro", "us-east-1a") not in overrides
    assert overrides[:2] == [("m6g.large", "us-east-1a"), ("m6g.large", "us-east-1b")]
    assert {zone for _, zone in overrides} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    configs = request["LaunchTemplateConfigs"]
    images = {(o["InstanceType"], o["ImageId"]) for c in configs for o in c["Overrides"]}
    assert ("m6g.large", aws.images["al2023/arm64/standard"]) in images
    assert ("c5.large", aws.images["al2023/x86_64/standard"]) in images
    assert len(configs) == 3  # arm64; x86_64 with 29 pods (large); x86_64 with 58 (xlarge)
    assert {o["SubnetId"] for c in configs for o in c["Overrides"]} == set(aws.subnet_list)

    instance = env.instance(instance_id(created))
    assert (instance["InstanceType"], instance["Placement"]["AvailabilityZone"]) == (
        "m6g.large",
        "us-east-1a",
    )
    assert tags_of(instance) == {
        "team": "platform",
        "kubernetes.io/cluster/test-cluster": "owned",
        "karpenter.sh/nodepool": "default",
        "eks:eks-cluster-name": "test-cluster",
        "karpenter.k8s.aws/ec2nodeclass": "default",
        "karpenter.sh/nodeclaim": "default-abcde",
        "Name": "default-abcde",
    }
    assert created.status.provider_id == f"aws:///us-east-1a/{instance['InstanceId']}"
    assert created.status.image_id == aws.images["al2023/arm64/standard"]
    labels = created.metadata.labels
    assert labels[wk.INSTANCE_TYPE] == "m6g.large"
    assert labels[wk.ARCH] == "arm64"
    assert labels[wk.TOPOLOGY_ZONE] == "us-east-1a"
    assert labels[wk.CAPACITY_TYPE] == "spot"
    assert labels["topology.k8s.aws/zone-id"] == instance["Placement"].get(
        "AvailabilityZoneId", "use1-az6"
    )
    assert labels["karpenter.k8s.aws/instance-family"] == "m6g"
    assert labels["karpenter.k8s.aws/ec2nodeclass"] == "default"
    assert (labels[wk.NODEPOOL], labels["team"]) == ("default", "a")
    assert created.status.capacity["cpu"] == 2
    assert 0 < created.status.allocatable["memory"] < created.status.capacity["memory"]
    annotations = created.metadata.annotations
    node_class = env.node_class()
    assert annotations[HASH_ANNOTATION] == node_class["metadata"]["annotations"][HASH_ANNOTATION]
    assert annotations[HASH_VERSION_ANNOTATION] == HASH_VERSION
    assert annotations["karpenter.k8s.aws/instance-profile"] == "test-cluster_profile"
    assert annotations["karpenter.sh/nodepool-hash"] == "1"


def test_launch_templates_hold_the_node_class_settings_and_are_reused(env: Env) -> None:
    env.provider.create(claim("a", _in(wk.INSTANCE_TYPE, "m5.large", "c5.large")))
    assert env.templates.count == 1
    env.provider.create(claim("b", _in(wk.INSTANCE_TYPE, "m5.large", "c5.large")))
    assert (env.templates.count, env.fleets.count) == (1, 2)
    template = env.templates.params[0]
    assert template["LaunchTemplateName"].startswith("karpenter.k8s.aws/")
    data = template["LaunchTemplateData"]
    assert data["ImageId"] == env.aws.images["al2023/x86_64/standard"]
    assert data["IamInstanceProfile"] == {"Name": "test-cluster_profile"}
    assert data["NetworkInterfaces"][0]["Groups"] == [env.aws.security_group_id]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 20
    import base64

    user_data = base64.b64decode(data["UserData"]).decode()
    assert "apiServerEndpoint" in user_data and "172.20.0.10" in user_data
    assert "maxPods: 29" in user_data
    assert "dedicated" in user_data and "karpenter.sh/unregistered" in user_data
    assert "karpenter.sh/capacity-type=spot" in user_data and "team=a" in user_data
    tags = {t["Key"]: t["Value"] for t in template["TagSpecifications"][0]["Tags"]}
    assert tags["eks:eks-cluster-name"] == "test-cluster"
    assert "karpenter.sh/nodeclaim" not in tags


def test_pod_capacities_get_their_own_templates(env: Env) -> None:
    env.provider.create(claim("a", _in(wk.INSTANCE_TYPE, "m5.large", "m5.xlarge")))
    assert env.templates.count == 2
    names = {
        c["LaunchTemplateSpecification"]["LaunchTemplateName"]
        for c in env.fleets.params[0]["LaunchTemplateConfigs"]
    }
    assert len(names) == 2


def test_on_demand_when_spot_is_not_allowed(env: Env) -> None:
    created = env.provider.create(
        claim("a", _in(wk.INSTANCE_TYPE, "m5.large"), _in(wk.CAPACITY_TYPE, "on-demand"))
    )
    request = env.fleets.params[0]
    assert request["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert request["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert created.metadata.labels[wk.CAPACITY_TYPE] == "on-demand"
    assert "InstanceLifecycle" not in env.instance(instance_id(created))


def test_create_is_idempotent_per_nodeclaim(env: Env) -> None:
    first = env.provider.create(claim())
    again = env.provider.create(claim())
    assert env.fleets.count == 1
    assert again.status.provider_id == first.status.provider_id
    assert again.metadata.labels[wk.INSTANCE_TYPE] == first.metadata.labels[wk.INSTANCE_TYPE]
    assert len(list(moto_account.instances(env.aws))) == 1


def _lookup_names(lookups: Calls) -> list[str]:
    """The NodeClaim names the recorded DescribeInstances calls looked up, in call order."""
    return [
        name
        for params in lookups.params
        for f in params["Filters"]
        if f["Name"] == "tag:karpenter.sh/nodeclaim"
        for name in f["Values"]
    ]


def test_concurrent_identical_creates_become_one_create_fleet(
    aws: AWSEnv, node_classes: NodeClassView
) -> None:
    env = Env(
        aws, node_classes, **{"fleet-batch-idle-duration": "35ms", "fleet-batch-max-duration": "5s"}
    )
    lookups = Calls(env.ec2, "DescribeInstances")
    tagging = Calls(env.ec2, "CreateTags")
    names = [f"default-{i:02d}" for i in range(20)]
    created = in_threads(20, lambda i: env.provider.create(claim(names[i])))
    assert not [c for c in created if isinstance(c, Exception)], created
    assert env.fleets.count == 1
    assert env.fleets.params[0]["TargetCapacitySpecification"]["TotalTargetCapacity"] == 20
    assert lookups.count <= 2 and sorted(_lookup_names(lookups)) == names
    ids = [instance_id(c) for c in created]
    assert len(set(ids)) == 20
    for name, found in zip(names, ids, strict=True):
        tags = tags_of(env.instance(found))
        assert (tags["karpenter.sh/nodeclaim"], tags["Name"]) == (name, name)
    assert tagging.count == 20
    configs = env.fleets.params[0]["LaunchTemplateConfigs"]
    assert env.templates.count == len(configs)  # each template created once


def test_concurrent_creates_find_what_was_launched_before_a_crash(
    aws: AWSEnv, node_classes: NodeClassView
) -> None:
    env = Env(aws, node_classes, **{"fleet-batch-max-duration": "5s"})
    launched = env.provider.create(claim("default-03"))
    lookups = Calls(env.ec2, "DescribeInstances")
    names = [f"default-{i:02d}" for i in range(6)]
    created = in_threads(6, lambda i: env.provider.create(claim(names[i])))
    assert not [c for c in created if isinstance(c, Exception)], created
    assert lookups.count <= 2 and sorted(_lookup_names(lookups)) == names
    assert env.fleets.count == 2
    assert env.fleets.params[1]["TargetCapacitySpecification"]["TotalTargetCapacity"] == 5
    assert created[3].status.provider_id == launched.status.provider_id
    ids = {instance_id(c) for c in created}
    assert len(ids) == 6 and len(list(moto_account.instances(env.aws))) == 6
    for name, found in zip(names, created, strict=True):
        assert tags_of(env.instance(instance_id(found)))["karpenter.sh/nodeclaim"] == name


# -- capacity errors ------------------------------------------------------------------------------


def _fleet_error(code: str, override: dict[str, Any]) -> dict[str, Any]:
    return {
        "ErrorCode": code,
        "ErrorMessage": f"no {override['InstanceType']} in {override['AvailabilityZone']}",
        "LaunchTemplateAndOverrides": {"Overrides": override},
        "Lifecycle": "spot",
    }


def unavailable_first_offering(ec2: Any, code: str = "InsufficientInstanceCapacity") -> list[Any]:
    """EC2 without capacity for the first override of each request: moto launches from the
    others and the response names the first in its Errors."""
    failed: list[dict[str, Any]] = []

    def drop_first(params: dict[str, Any], **_: Any) -> None:
        first = params["LaunchTemplateConfigs"][0]["Overrides"].pop(0)
        failed.append(first)

    def report(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Errors"] = [_fleet_error(code, failed[-1])]

    ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", drop_first)
    ec2.meta.events.register("after-call.ec2.CreateFleet", report)
    return failed


def answer(ec2: Any, parsed: dict[str, Any], status: int = 200) -> None:
    class Raw:
        status_code = status
        headers: dict[str, str] = {}

    ec2.meta.events.register("before-call.ec2.CreateFleet", lambda **_: (Raw(), parsed))


def test_capacity_errors_mark_the_offering_unavailable_for_three_minutes(env: Env) -> None:
    failed = unavailable_first_offering(env.ec2)
    created = env.provider.create(claim("a"))
    assert (failed[0]["InstanceType"], failed[0]["AvailabilityZone"]) == ("t3.micro", "us-east-1a")
    assert (
        created.metadata.labels[wk.INSTANCE_TYPE],
        created.metadata.labels[wk.TOPOLOGY_ZONE],
    ) == (
        "t3.micro",
        "us-east-1b",
    )
    unavailable = env.provider.unavailable
    assert ("spot", "us-east-1a") in unavailable.snapshot()["t3.micro"]
    assert ("on-demand", "us-east-1a") not in unavailable.snapshot()["t3.micro"]
    env.provider.create(claim("b"))
    assert ("t3.micro", "us-east-1a") not in env.fleets.overrides(-1)
    env.clock.now += timedelta(minutes=3)
    assert "t3.micro" not in unavailable.snapshot()
    env.provider.create(claim("c"))
    assert env.fleets.overrides(-1)[0] == ("t3.micro", "us-east-1a")


def test_no_instance_and_only_capacity_errors_is_insufficient_capacity(env: Env) -> None:
    answer(
        env.ec2,
        {
            "Instances": [],
            "Errors": [
                _fleet_error(
                    "InsufficientInstanceCapacity",
                    {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a"},
                ),
                _fleet_error(
                    "UnfulfillableCapacity",
                    {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1b"},
                ),
            ],
        },
    )
    with pytest.raises(InsufficientCapacity, match="InsufficientInstanceCapacity"):
        env.provider.create(claim("a", _in(wk.INSTANCE_TYPE, "m5.large")))
    assert ("spot", "us-east-1a") in env.provider.unavailable.snapshot()["m5.large"]
    assert ("spot", "us-east-1b") in env.provider.unavailable.snapshot()["m5.large"]


def test_other_fleet_errors_are_create_errors(env: Env) -> None:
    answer(
        env.ec2,
        {
            "Instances": [],
            "Errors": [
                _fleet_error(
                    "InvalidParameterValue",
                    {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a"},
                )
            ],
        },
    )
    with pytest.raises(CreateError) as caught:
        env.provider.create(claim("a", _in(wk.INSTANCE_TYPE, "m5.large")))
    assert caught.value.reason == "InvalidParameterValue"
    assert "'a'" in caught.value.message


def test_refused_create_fleet_is_a_create_error(env: Env) -> None:
    answer(env.ec2, {"Error": {"Code": "UnauthorizedOperation", "Message": "denied"}}, 403)
    with pytest.raises(CreateError) as caught:
        env.provider.create(claim("a"))
    assert caught.value.reason == "UnauthorizedOperation"
    assert "denied" in caught.value.message


def test_a_vanished_launch_template_is_recreated_once(env: Env) -> None:
    only = _in(wk.INSTANCE_TYPE, "m5.large")
    env.provider.create(claim("a", only))
    name = env.templates.params[0]["LaunchTemplateName"]
    env.aws.client("ec2").delete_launch_template(LaunchTemplateName=name)
    created = env.provider.create(claim("b", only))
    assert created.status.provider_id
    assert (env.templates.count, env.fleets.count) == (2, 3)
    assert env.templates.params[1]["LaunchTemplateName"] == name


def test_nothing_fits_is_insufficient_capacity(env: Env) -> None:
    with pytest.raises(InsufficientCapacity, match="default-abcde"):
        env.provider.create(claim(requests={"cpu": "64"}))
    assert env.fleets.count == 0


def test_node_class_problems(env: Env) -> None:
    with pytest.raises(InsufficientCapacity, match="'missing' not found"):
        env.provider.create(claim(node_class="missing"))
    with pytest.raises(NodeClassNotReady, match="EC2NodeClass"):
        env.provider.create(claim(group="other.sh"))
    conditions = env.node_class()["status"]["conditions"]
    conditions[0].update(status="False", reason="AMIsNotFound", message="no AMI matches")
    with pytest.raises(NodeClassNotReady, match="no AMI matches"):
        env.provider.create(claim())
    conditions.clear()
    with pytest.raises(CreateError) as caught:
        env.provider.create(claim())
    assert caught.value.reason == "NodeClassReadinessUnknown"
    env.node_class()["spec"]["subnetSelectorTerms"] = []  # the informer leaves it out
    with pytest.raises(InsufficientCapacity, match="'default' not found"):
        env.provider.create(claim())
    assert env.fleets.count == 0


def test_without_a_cluster_name_nothing_launches(aws: AWSEnv, node_classes: NodeClassView) -> None:
    env = Env(aws, node_classes, **{"cluster-name": ""})
    with pytest.raises(CloudProviderError, match="--cluster-name"):
        env.provider.create(claim())


# -- get, list, delete ----------------------------------------------------------------------------


def test_get_list_and_delete(env: Env) -> None:
    created = env.provider.create(claim(requests={"cpu": "1"}))
    provider_id = created.status.provider_id or ""
    got = env.provider.get(provider_id)
    assert got.status.provider_id == provider_id
    assert got.metadata.name == "default-abcde"
    assert got.status.image_id == created.status.image_id
    for key in (wk.INSTANCE_TYPE, wk.TOPOLOGY_ZONE, wk.CAPACITY_TYPE, wk.NODEPOOL):
        assert got.metadata.labels[key] == created.metadata.labels[key]
    assert got.status.capacity == created.status.capacity
    assert got.spec.node_class_ref.name == "default"
    listed = env.provider.list()
    assert [c.status.provider_id for c in listed] == [provider_id]
    env.provider.delete(created)
    with pytest.raises(NodeClaimNotFound):
        env.provider.delete(created)
    with pytest.raises(NodeClaimNotFound):
        env.provider.get(provider_id)
    assert env.provider.list() == []
    with pytest.raises(NodeClaimNotFound):
        env.provider.get("kwok://node")


def test_list_shows_instances_whose_node_class_is_gone(env: Env) -> None:
    created = env.provider.create(claim())
    del env.node_classes.objects["default"]
    [listed] = env.provider.list()
    assert listed.status.provider_id == created.status.provider_id
    assert listed.metadata.labels[wk.INSTANCE_TYPE] == created.metadata.labels[wk.INSTANCE_TYPE]


# -- drift ----------------------------------------------------------------------------------------


def launched_in_sync(env: Env) -> NodeClaim:
    """A launched NodeClaim whose instance came up with its launch template's security groups."""
    created = env.provider.create(claim())
    described = env.aws.client("ec2").describe_instances(InstanceIds=[instance_id(created)])
    groups = described["Reservations"][0]["Instances"][0]["SecurityGroups"]
    assert [g["GroupId"] for g in groups] == [env.aws.security_group_id]
    return created


def test_an_instance_matching_its_node_class_is_not_drifted(env: Env) -> None:
    assert env.provider.is_drifted(launched_in_sync(env)) == ""


def test_node_class_drift(env: Env) -> None:
    created = launched_in_sync(env)
    env.node_class()["spec"]["tags"] = {"team": "other"}
    assert env.provider.is_drifted(created) == "NodeClassDrift"
    created.metadata.annotations[HASH_VERSION_ANNOTATION] = "old"
    assert env.provider.is_drifted(created) == ""


def test_ami_drift(env: Env) -> None:
    created = launched_in_sync(env)
    amis = env.node_class()["status"]["amis"]
    for ami in amis:
        if ami["id"] == created.status.image_id:
            ami["id"] = "ami-0123456789abcdef0"
    assert env.provider.is_drifted(created) == "AMIDrift"


def test_security_group_drift(env: Env) -> None:
    created = launched_in_sync(env)
    env.node_class()["status"]["securityGroups"].append({"id": "sg-0123456789abcdef0"})
    assert env.provider.is_drifted(created) == "SecurityGroupDrift"


def test_subnet_drift(env: Env) -> None:
    created = launched_in_sync(env)
    subnets = env.node_class()["status"]["subnets"]
    subnets[:] = [s for s in subnets if s["zone"] != created.metadata.labels[wk.TOPOLOGY_ZONE]]
    assert env.provider.is_drifted(created) == "SubnetDrift"


def test_no_drift_without_node_class_or_instance(env: Env) -> None:
    created = launched_in_sync(env)
    env.aws.client("ec2").terminate_instances(InstanceIds=[instance_id(created)])
    assert env.provider.is_drifted(created) == ""
    del env.node_classes.objects["default"]
    assert env.provider.is_drifted(created) == ""


def test_drift_reads_instances_from_the_cache_and_batches_the_rest(
    aws: AWSEnv, node_classes: NodeClassView
) -> None:
    env = Env(aws, node_classes, **{"fleet-batch-max-duration": "5s"})
    names = [f"default-{i:02d}" for i in range(10)]
    created = in_threads(10, lambda i: env.provider.create(claim(names[i])))
    assert not [c for c in created if isinstance(c, Exception)], created
    for launched in created:  # moto does not apply the launch template's security groups
        env.aws.client("ec2").modify_instance_attribute(
            InstanceId=instance_id(launched), Groups=[env.aws.security_group_id]
        )
    describes = Calls(env.ec2, "DescribeInstances")
    for launched in created * 5:
        assert env.provider.is_drifted(launched) == ""
    assert describes.count == 0  # what was launched is known

    restarted = Env(aws, node_classes, **{"fleet-batch-idle-duration": "200ms"})
    assert restarted.provider.get_instance_types(nodepool())  # as the provisioner has
    describes = Calls(restarted.ec2, "DescribeInstances")
    drifted = in_threads(50, lambda i: restarted.provider.is_drifted(created[i % 10]))
    assert drifted == [""] * 50
    assert describes.count <= 2
    assert sorted({i for p in describes.params for i in p["InstanceIds"]}) == sorted(
        instance_id(c) for c in created
    )
    for launched in created * 5:
        assert restarted.provider.is_drifted(launched) == ""
    assert describes.count <= 2


def test_delete_is_not_fooled_by_the_instance_cache(env: Env) -> None:
    created = env.provider.create(claim())
    env.aws.client("ec2").terminate_instances(InstanceIds=[instance_id(created)])
    assert env.provider.get(created.status.provider_id or "").metadata.name == "default-abcde"
    terminates = Calls(env.ec2, "TerminateInstances")
    with pytest.raises(NodeClaimNotFound):
        env.provider.delete(created)
    assert terminates.count == 0
    with pytest.raises(NodeClaimNotFound):
        env.provider.get(created.status.provider_id or "")


# -- EC2NodeClass read view -----------------------------------------------------------------------


def test_node_classes_are_read_from_the_view_only(env: Env) -> None:
    """Instance types, readiness, launches, list and drift read the EC2NodeClass through the
    context's view; a deleting one launches nothing."""
    before = env.node_classes.lookups
    assert env.provider.get_instance_types(nodepool())
    assert env.provider.node_class_readiness(nodepool()).ready
    created = env.provider.create(claim())
    assert env.provider.is_drifted(created) == ""
    assert env.provider.list()
    assert env.node_classes.lookups >= before + 5
    env.node_class()["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert env.provider.get_instance_types(nodepool()) == []
    with pytest.raises(InsufficientCapacity, match="not found"):
        env.provider.create(claim("other-abcde"))


def test_without_a_view_nothing_launches(aws: AWSEnv, node_classes: NodeClassView) -> None:
    env = Env(aws, node_classes)
    blind = AWSCloudProvider.from_context(
        dataclasses.replace(env.provider._context, node_classes=None)
    )
    with pytest.raises(CloudProviderError, match="NodeClass view"):
        blind.create(claim())


def test_a_node_class_is_launched_from_as_soon_as_it_is_ready(
    aws: AWSEnv, node_classes: NodeClassView
) -> None:
    env = Env(aws, node_classes)
    conditions = env.node_class()["status"]["conditions"]
    ready = copy.deepcopy(conditions)
    conditions[0].update(status="Unknown", reason="AwaitingReconciliation", message="resolving")
    assert not env.provider.node_class_readiness(nodepool()).ready
    assert env.provider.get_instance_types(nodepool()) != []
    env.node_class()["status"]["conditions"] = ready
    assert env.provider.node_class_readiness(nodepool()).ready


# -- cluster discovery ----------------------------------------------------------------------------


class DescribeCluster:
    """Counts EKS DescribeCluster calls and refuses them while ``denied``."""

    def __init__(self, eks: Any) -> None:
        self.count = 0
        self.denied = True
        eks.meta.events.register("before-call.eks.DescribeCluster", self._call)

    def _call(self, **_: Any) -> Any:
        self.count += 1
        if not self.denied:
            return None

        class Raw:
            status_code = 403
            headers: dict[str, str] = {}

        error = {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}
        return Raw(), error


def test_a_failed_cluster_lookup_is_retried_after_a_minute(
    aws: AWSEnv, node_classes: NodeClassView
) -> None:
    env = Env(aws, node_classes, **{"cluster-endpoint": "https://api.example"})
    describe = DescribeCluster(env.provider.clients.eks)
    for name in ("a", "b"):
        with pytest.raises(CreateError) as caught:
            env.provider.create(claim(name))
        assert caught.value.reason == "ClusterCIDRUnknown"
        message = caught.value.message
        assert "--service-cidr" in message and "eks:DescribeCluster" in message
        assert "AccessDeniedException" in message and "'default'" in message
    assert (describe.count, env.fleets.count) == (1, 0)
    env.clock.now += timedelta(seconds=59)
    with pytest.raises(CreateError):
        env.provider.create(claim("c"))
    assert describe.count == 1
    describe.denied = False
    env.clock.now += timedelta(seconds=2)
    env.provider.create(claim("d"))
    env.provider.create(claim("e"))
    assert (describe.count, env.fleets.count) == (2, 2)


def test_without_an_endpoint_a_failed_cluster_lookup_says_what_to_set(
    aws: AWSEnv, node_classes: NodeClassView
) -> None:
    env = Env(aws, node_classes)
    DescribeCluster(env.provider.clients.eks)
    with pytest.raises(CreateError) as caught:
        env.provider.create(claim())
    assert caught.value.reason == "ClusterDiscoveryFailed"
    assert "--cluster-endpoint" in caught.value.message
    assert "AccessDeniedException" in caught.value.message


def test_settings_make_the_cluster_lookup_unneeded(
    aws: AWSEnv, node_classes: NodeClassView
) -> None:
    env = Env(
        aws,
        node_classes,
        **{
            "cluster-endpoint": "https://api.example",
            "cluster-ca-bundle": "Y2E=",
            "service-cidr": "10.100.0.0/16",
        },
    )
    describe = DescribeCluster(env.provider.clients.eks)
    env.provider.create(claim())
    assert describe.count == 0
    import base64

    data = env.templates.params[0]["LaunchTemplateData"]
    user_data = base64.b64decode(data["UserData"]).decode()
    assert "10.100.0.0/16" in user_data and "10.100.0.10" in user_data


# -- partly filled fleets -------------------------------------------------------------------------


def test_callers_a_batched_fleet_left_out_get_insufficient_capacity(
    aws: AWSEnv, node_classes: NodeClassView
) -> None:
    env = Env(
        aws,
        node_classes,
        **{"fleet-batch-idle-duration": "100ms", "fleet-batch-max-duration": "5s"},
    )

    def only_one(params: dict[str, Any], **_: Any) -> None:
        params["TargetCapacitySpecification"]["TotalTargetCapacity"] = 1

    env.ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", only_one)
    results = in_threads(3, lambda i: env.provider.create(claim(f"default-{i}")))
    assert env.fleets.count == 1
    assert sum(isinstance(r, NodeClaim) for r in results) == 1
    left_out = [r for r in results if not isinstance(r, NodeClaim)]
    assert all(isinstance(r, InsufficientCapacity) for r in left_out), left_out
    assert "no instance and no error returned" in str(left_out[0])


# -- simulate ---------------------------------------------------------------------------------------

SCENARIO = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: few-pods}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
%s
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: few-pods}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 20
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        resources: {requests: {cpu: 10m, memory: 16Mi}}
"""


@pytest.mark.parametrize(("kubelet", "most"), [("  kubelet: {maxPods: 8}", 8), ("", 20)])
def test_simulate_follows_the_node_class_of_the_manifests(
    tmp_path: Any, kubelet: str, most: int
) -> None:
    from click.testing import CliRunner

    from karpenter_core.cli.simulate import simulate

    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO % kubelet)
    args = ["--provider", "aws", "--region", "us-east-1", "-f", str(path), "-o", "json"]
    result = CliRunner().invoke(simulate, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["unschedulable"] == [] and report["summary"]["pods"] == 20
    per_node = [len(c["pods"]) for c in report["nodeclaims"]]
    assert sum(per_node) == 20 and max(per_node) == most
