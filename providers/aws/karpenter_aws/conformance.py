"""The AWS provider's conformance profile: a moto server seeded as a cluster's account.

``start`` runs moto's server on a free local port (so a controller in another process reaches it
through the ``aws-endpoint-url`` setting) with fake credentials in the environment, and seeds it
as ``karpenter_aws.moto_account`` does for the provider's tests (a VPC, a subnet per zone tagged
for discovery, EKS-optimized and Bottlerocket images with their SSM parameters, the node IAM role
the EC2NodeClass controller makes an instance profile for). The fake cloud offers a handful of
instance types (moto knows ~1,400; listing them costs seconds per provider). EC2 has no fault
injection, so ``insufficient_capacity`` takes the refused offerings out of CreateFleet requests
in the server and reports them in the response's ``Errors``, as EC2 does; ``cloud_errors`` makes
chosen EC2 actions answer ``RequestLimitExceeded`` (HTTP 503, as EC2 throttles) in the server
until ``clear_faults``. Needs ``moto[server]`` (``pip install 'karpenter-aws[conformance]'``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from karpenter_aws import moto_account
from karpenter_aws.amis import AMIResolver
from karpenter_aws.instances import provider_id
from karpenter_aws.labels import TAG_NAME, TAG_NODECLASS, cluster_tag
from karpenter_aws.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    EC2NodeClass,
    nodeclass_hash,
)
from karpenter_core.apis.v1.common import CONDITION_READY
from karpenter_core.sdk.profiles import EnvironOverlay, condition, is_ready, respecified

__all__ = ["AWSProfile"]

REGION = moto_account.REGION
CLUSTER_NAME = "conformance"
INSTANCE_TYPES = ("t3.micro", "m5.large", "c5.large", "m6g.large", "r5.large")
SPOT_PRICES = {
    "t3.micro": "0.0031",
    "m5.large": "0.0370",
    "c5.large": "0.0330",
    "m6g.large": "0.0290",
    "r5.large": "0.0480",
}
"""Hourly spot prices DescribeSpotPriceHistory reports (moto answers 0.00001 for every type,
which would leave the cheapest offering to a tie-break by name)."""
DISCOVERY_TAG = moto_account.DISCOVERY_TAG
NODE_CLASS = "default"
AMI_ALIAS = "al2023@latest"
DRIFTED_AMI_ALIAS = "bottlerocket@latest"
"""``drifted`` moves the NodeClass to the other seeded image family."""
UNMANAGED_INSTANCE = ("t3.micro", "al2023/x86_64/standard")
"""Instance type and seeded image of ``launch_unmanaged``."""
ENVIRONMENT = {**moto_account.FAKE_ENV, "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}
"""Environment that keeps boto3 off real AWS (a controller in another process needs it too)."""

Offering = tuple[str, str, str]
"""(instance type, zone, capacity type)."""

_REFUSED: dict[int, set[Offering]] = {}
"""Refused offerings by the id of the moto EC2 backend they apply to."""
_FAILING: set[str] = set()
"""EC2 actions the server answers with ``RequestLimitExceeded`` (moto's state is per process,
as is the server)."""
THROTTLED = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
    "<Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>"
    "</Error></Errors><RequestID>conformance-throttled</RequestID></Response>"
)
_PATCH_LOCK = threading.Lock()
_patched: list[Callable[..., Any]] = []


class AWSProfile:
    """A seeded moto server; faults are offerings CreateFleet refuses and EC2 actions
    throttled."""

    nodes_via: Literal["registrar", "native"] = "registrar"
    unsupported: Mapping[str, str] = {}

    def __init__(self) -> None:
        self._server: Any = None
        self.endpoint_url = ""
        self._environ = EnvironOverlay()
        self._status: dict[str, Any] = {}
        self._account: moto_account.AWSEnv | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start moto's server on a free port and seed the account."""
        self._environ.set(ENVIRONMENT)
        try:
            self._server, self.endpoint_url = moto_account.start_server()
        except ImportError as error:
            raise RuntimeError(
                f"the AWS conformance profile runs moto's server ({error}): "
                "pip install 'karpenter-aws[conformance]'"
            ) from None
        _patch_responses()
        self.reset()

    def reset(self) -> None:
        """Drop everything and seed again."""
        self.clear_faults()
        self._account = moto_account.seed(self.endpoint_url, cluster_name=CLUSTER_NAME)
        self._narrow(_ec2_backend())
        self._status = self._status_of(self._account)

    def stop(self) -> None:
        """Drop everything (moto's state is per process), stop the server, restore the
        environment."""
        if self._server is not None:
            self._drop_all()
            self._server.stop()
            self._server = None
        self._environ.restore()

    def _drop_all(self) -> None:
        self.clear_faults()
        moto_account.reset(self.endpoint_url)

    # -- what the suite asks for -----------------------------------------------------------

    def settings(self) -> Mapping[str, str]:
        """The moto endpoint, the cluster's name and what would come from EKS."""
        return {
            "aws-endpoint-url": self.endpoint_url,
            "region": REGION,
            "cluster-name": CLUSTER_NAME,
            "cluster-endpoint": "https://127.0.0.1:6443",
            "cluster-ca-bundle": "",
            "service-cidr": "10.100.0.0/16",
            "isolated-vpc": "true",
            "fleet-batch-idle-duration": "10ms",
            "fleet-batch-max-duration": "100ms",
        }

    def node_class(self, ready: bool = True) -> dict[str, Any]:
        """The default EC2NodeClass, with the seeded node role, subnets and security group found
        by their discovery tag, and the status its controller would write."""
        manifest: dict[str, Any] = {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": NODE_CLASS, "generation": 1},
            "spec": {
                "role": self._seeded.node_role,
                "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: CLUSTER_NAME}}],
                "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: CLUSTER_NAME}}],
                "amiSelectorTerms": [{"alias": AMI_ALIAS}],
            },
        }
        return self._with_status(manifest, ready)

    def drifted(self, node_class: dict[str, Any]) -> dict[str, Any]:
        """``node_class`` selecting the other seeded image family: its instances' AMI and the
        NodeClass's hash both change."""
        changed = respecified(node_class)
        changed["spec"]["amiSelectorTerms"] = [{"alias": DRIFTED_AMI_ALIAS}]
        return self._with_status(changed, is_ready(node_class))

    def launch_unmanaged(self, tags: Mapping[str, str]) -> str:
        """A running instance in the first seeded subnet, tagged with ``tags`` and as owned by
        the cluster (what the provider's ``list()`` reports), launched with RunInstances."""
        account = self._seeded
        instance_type, image = UNMANAGED_INSTANCE
        owned = {
            **tags,
            cluster_tag(CLUSTER_NAME): "owned",
            TAG_NODECLASS: NODE_CLASS,
            TAG_NAME: "conformance-unmanaged",
        }
        [instance] = self._client("ec2").run_instances(
            ImageId=account.images[image],
            InstanceType=instance_type,
            MinCount=1,
            MaxCount=1,
            SubnetId=account.subnet_list[0],
            SecurityGroupIds=[g["id"] for g in self._status["securityGroups"]],
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in owned.items()],
                }
            ],
        )["Instances"]
        return provider_id(instance["Placement"]["AvailabilityZone"], instance["InstanceId"])

    def insufficient_capacity(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """CreateFleet leaves this offering out and names it in ``Errors``."""
        _REFUSED.setdefault(id(_ec2_backend()), set()).add((instance_type, zone, capacity_type))

    def cloud_errors(self, actions: Iterable[str]) -> None:
        """The server answers these EC2 actions (``CreateFleet``, ``TerminateInstances``, ...)
        with ``RequestLimitExceeded`` and HTTP 503 until ``clear_faults``."""
        _FAILING.update(actions)

    def clear_faults(self) -> None:
        """No refused offerings and no throttled actions; the account keeps its resources."""
        _REFUSED.pop(id(_ec2_backend()), None)
        _FAILING.clear()

    # -- helpers ---------------------------------------------------------------------------

    @property
    def _seeded(self) -> moto_account.AWSEnv:
        if self._account is None:
            raise RuntimeError("the AWS conformance profile is not started (call start())")
        return self._account

    def _client(self, service: str) -> Any:
        return moto_account.client(self.endpoint_url, service)

    def _narrow(self, backend: Any) -> None:
        """Offer only ``INSTANCE_TYPES`` (attributes of this backend object only)."""
        backend.instance_types = [
            t for t in type(backend).instance_types if t["InstanceType"] in INSTANCE_TYPES
        ]
        for name in ("describe_instance_type_offerings", "describe_spot_price_history"):
            original = getattr(type(backend), name)

            def narrowed(*args: Any, _original: Any = original, **kwargs: Any) -> list[Any]:
                rows = _original(backend, *args, **kwargs)
                return [r for r in rows if r.get("InstanceType") in INSTANCE_TYPES]

            setattr(backend, name, narrowed)
        original_create = type(backend).create_fleet

        def create_fleet(*args: Any, **kwargs: Any) -> Any:
            refused = _REFUSED.get(id(backend), set())
            return _create_fleet_without(backend, original_create, refused, *args, **kwargs)

        backend.create_fleet = create_fleet

    def _status_of(self, account: moto_account.AWSEnv) -> dict[str, Any]:
        """The subnets and the security group of the seeded account, as a NodeClass status."""
        ec2 = self._client("ec2")
        zone_ids = {
            subnet["SubnetId"]: subnet["AvailabilityZoneId"]
            for subnet in ec2.describe_subnets(SubnetIds=account.subnet_list)["Subnets"]
        }
        return {
            "subnets": [
                {"id": subnet_id, "zone": zone, "zoneID": zone_ids[subnet_id]}
                for zone, subnet_id in sorted(account.subnet_ids.items())
            ],
            "securityGroups": [
                {"id": account.security_group_id, "name": account.security_group_name}
            ],
            "instanceProfile": f"{CLUSTER_NAME}_profile",
        }

    def _with_status(self, manifest: dict[str, Any], ready: bool) -> dict[str, Any]:
        node_class = EC2NodeClass.from_manifest(manifest)
        amis = AMIResolver(self._client("ec2"), self._client("ssm")).resolve(
            node_class, moto_account.KUBERNETES_VERSION
        )
        generation = manifest["metadata"].get("generation", 1)
        manifest["status"] = {
            **copy.deepcopy(self._status),
            "amis": [a.model_dump(mode="json", by_alias=True, exclude_none=True) for a in amis],
            "conditions": [
                condition(
                    CONDITION_READY,
                    ready,
                    "Ready" if ready else "SubnetsNotFound",
                    "" if ready else "no subnet matches (conformance)",
                    generation,
                )
            ],
        }
        manifest["metadata"]["annotations"] = {
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
        }
        return manifest


def _ec2_backend() -> Any:
    return moto_account.backend("ec2")


def _create_fleet_without(
    backend: Any, create: Callable[..., Any], refused: set[Offering], *args: Any, **kwargs: Any
) -> Any:
    """moto's create_fleet with the refused overrides taken out; they are kept on the fleet
    (``refused_overrides``) for the response's ``Errors``."""
    if not refused:
        return create(backend, *args, **kwargs)
    kwargs = copy.deepcopy(kwargs)
    capacity_type = kwargs["target_capacity_specification"].get(
        "DefaultTargetCapacityType", "on-demand"
    )
    zones = {s.id: s.availability_zone for s in backend.describe_subnets()}
    dropped = []
    for config in kwargs["launch_template_configs"]:
        kept = []
        for override in config.get("Overrides") or ():
            zone = override.get("AvailabilityZone") or zones.get(override.get("SubnetId"), "")
            if (override.get("InstanceType"), zone, capacity_type) in refused:
                dropped.append({**override, "AvailabilityZone": zone})
            else:
                kept.append(override)
        config["Overrides"] = kept
    kwargs["launch_template_configs"] = [
        c for c in kwargs["launch_template_configs"] if c["Overrides"]
    ]
    if not kwargs["launch_template_configs"]:
        kwargs["target_capacity_specification"] = {
            **kwargs["target_capacity_specification"],
            "TotalTargetCapacity": 0,
        }
    fleet = create(backend, *args, **kwargs)
    fleet.refused_overrides = (dropped, capacity_type)
    return fleet


def _patch_responses() -> None:
    """Once per process: CreateFleet answers name the refused overrides in ``Errors``;
    DescribeSpotPriceHistory answers ``SPOT_PRICES``; the actions in ``_FAILING`` answer
    ``THROTTLED``."""
    from moto.core.responses import ActionResult, BaseResponse
    from moto.ec2.responses import EC2Response
    from moto.ec2.responses.fleets import Fleets
    from moto.ec2.responses.spot_instances import SpotInstances

    with _PATCH_LOCK:
        if _patched:
            return
        original = Fleets.create_fleet
        original_history = SpotInstances.describe_spot_price_history

        def describe_spot_price_history(self: Any) -> Any:
            result = original_history(self)
            answer: dict[str, Any] = result.result  # type: ignore[assignment]
            history = [
                {**row, "SpotPrice": SPOT_PRICES.get(row["InstanceType"], row["SpotPrice"])}
                for row in answer["SpotPriceHistory"]
            ]
            return ActionResult({**answer, "SpotPriceHistory": history})

        def create_fleet(self: Any) -> Any:
            result = original(self)
            answer: dict[str, Any] = result.result  # type: ignore[assignment]
            fleet = self.ec2_backend.fleets.get(answer["FleetId"])
            dropped, capacity_type = getattr(fleet, "refused_overrides", ((), ""))
            if not dropped:
                return result
            errors = [
                {
                    "ErrorCode": "InsufficientInstanceCapacity",
                    "ErrorMessage": f"no {o['InstanceType']} capacity in {o['AvailabilityZone']}",
                    "LaunchTemplateAndOverrides": {"Overrides": o},
                    "Lifecycle": capacity_type,
                }
                for o in dropped
            ]
            return ActionResult({**answer, "Errors": errors})

        def call_action(self: Any) -> Any:
            if self._get_action() in _FAILING:
                return 503, {"Content-Type": "text/xml"}, THROTTLED
            return BaseResponse.call_action(self)

        Fleets.create_fleet = create_fleet  # type: ignore[method-assign]
        EC2Response.call_action = call_action  # type: ignore[method-assign]
        SpotInstances.describe_spot_price_history = describe_spot_price_history  # type: ignore[method-assign]
        _patched.extend((original, original_history, call_action))
