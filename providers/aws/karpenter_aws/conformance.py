"""The AWS provider's conformance profile: a moto server seeded as a cluster's account.

``start`` runs moto's server on a free local port (so a controller in another process reaches it
through the ``aws-endpoint-url`` setting) with fake credentials in the environment, and seeds
what a launch needs: a VPC, a subnet and a security group per zone tagged for discovery, and
EKS-optimized AL2023 images with their SSM parameters. The fake cloud offers a handful of
instance types (moto knows ~1,400; listing them costs seconds per provider). EC2 has no fault
injection, so ``insufficient_capacity`` takes the refused offerings out of CreateFleet requests
in the server and reports them in the response's ``Errors``, as EC2 does. Needs ``moto[server]``
(``pip install 'karpenter-aws[conformance]'``).
"""

from __future__ import annotations

import copy
import datetime
import functools
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

from karpenter_aws.amis import AMIResolver
from karpenter_aws.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    EC2NodeClass,
    nodeclass_hash,
)

__all__ = ["AWSProfile"]

REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
CLUSTER_NAME = "conformance"
KUBERNETES_VERSION = "1.36"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
INSTANCE_TYPES = ("t3.micro", "m5.large", "c5.large", "m6g.large", "r5.large")
DISCOVERY_TAG = "karpenter.sh/discovery"
AMAZON_OWNER_ID = "137112412989"
NODE_CLASS = "default"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
}
"""Environment that keeps boto3 off real AWS (a controller in another process needs it too)."""

Offering = tuple[str, str, str]
"""(instance type, zone, capacity type)."""

_REFUSED: dict[int, set[Offering]] = {}
"""Refused offerings by the id of the moto EC2 backend they apply to."""
_PATCH_LOCK = threading.Lock()
_patched: list[Callable[..., Any]] = []


class AWSProfile:
    """A seeded moto server; faults are offerings CreateFleet refuses."""

    nodes_via: Literal["registrar", "native"] = "registrar"
    unsupported: Mapping[str, str] = {
        "launch_unmanaged": "not provided yet: the cluster level is where it is used",
    }

    def __init__(self) -> None:
        self._server: Any = None
        self.endpoint_url = ""
        self._saved_env: dict[str, str | None] = {}
        self._status: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start moto's server on a free port and seed the account."""
        for name, value in CREDENTIALS.items():
            self._saved_env[name] = os.environ.get(name)
            os.environ[name] = value
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as error:
            raise RuntimeError(
                f"the AWS conformance profile runs moto's server ({error}): "
                "pip install 'karpenter-aws[conformance]'"
            ) from None

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        _patch_create_fleet_response()
        self.reset()

    def reset(self) -> None:
        """Drop everything and seed again."""
        self._drop_all()
        self._narrow(_ec2_backend())
        self._status = self._seed()

    def stop(self) -> None:
        """Drop everything (moto's state is per process), stop the server, restore the
        environment."""
        if self._server is not None:
            self._drop_all()
            self._server.stop()
            self._server = None
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def _drop_all(self) -> None:
        import urllib.request

        _REFUSED.pop(id(_ec2_backend()), None)
        request = urllib.request.Request(
            f"{self.endpoint_url}/moto-api/reset", method="POST", data=b""
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

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
        """The default EC2NodeClass with the status its controller would write."""
        manifest: dict[str, Any] = {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": NODE_CLASS, "generation": 1},
            "spec": {
                "role": "KarpenterNodeRole",
                "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: CLUSTER_NAME}}],
                "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: CLUSTER_NAME}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "tags": {"conformance": "v1"},
            },
        }
        return self._with_status(manifest, ready)

    def drifted(self, node_class: dict[str, Any]) -> dict[str, Any]:
        """``node_class`` with other tags (its hash changes)."""
        changed = copy.deepcopy(node_class)
        changed["spec"]["tags"] = {"conformance": "v2"}
        changed["metadata"]["generation"] = changed["metadata"].get("generation", 1) + 1
        ready = changed["status"]["conditions"][0]["status"] == "True"
        return self._with_status(changed, ready)

    def insufficient_capacity(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """CreateFleet leaves this offering out and names it in ``Errors``."""
        _REFUSED.setdefault(id(_ec2_backend()), set()).add((instance_type, zone, capacity_type))

    # -- helpers ---------------------------------------------------------------------------

    def _client(self, service: str) -> Any:
        return _session().client(service, endpoint_url=self.endpoint_url, region_name=REGION)

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

    def _seed(self) -> dict[str, Any]:
        ec2 = self._client("ec2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", TagSpecifications=_tags("vpc"))["Vpc"]
        subnets = []
        for index, zone in enumerate(ZONES):
            subnet = ec2.create_subnet(
                VpcId=vpc["VpcId"],
                CidrBlock=f"10.0.{index * 32}.0/19",
                AvailabilityZone=zone,
                TagSpecifications=_tags("subnet"),
            )["Subnet"]
            subnets.append(
                {"id": subnet["SubnetId"], "zone": zone, "zoneID": subnet["AvailabilityZoneId"]}
            )
        group = ec2.create_security_group(
            GroupName=f"{CLUSTER_NAME}-nodes",
            Description="nodes",
            VpcId=vpc["VpcId"],
            TagSpecifications=_tags("security-group"),
        )["GroupId"]
        for arch in ("x86_64", "arm64"):
            image_id = _register_image(
                f"amazon-eks-node-al2023-{arch}-standard-{KUBERNETES_VERSION}-v20250601", arch
            )
            _put_service_parameter(
                f"/aws/service/eks/optimized-ami/{KUBERNETES_VERSION}/amazon-linux-2023/{arch}/"
                "standard/recommended/image_id",
                image_id,
            )
        return {
            "subnets": subnets,
            "securityGroups": [{"id": group, "name": f"{CLUSTER_NAME}-nodes"}],
            "instanceProfile": f"{CLUSTER_NAME}_profile",
        }

    def _with_status(self, manifest: dict[str, Any], ready: bool) -> dict[str, Any]:
        node_class = EC2NodeClass.from_manifest(manifest)
        amis = AMIResolver(self._client("ec2"), self._client("ssm")).resolve(
            node_class, KUBERNETES_VERSION
        )
        generation = manifest["metadata"].get("generation", 1)
        manifest["status"] = {
            **copy.deepcopy(self._status),
            "amis": [a.model_dump(mode="json", by_alias=True, exclude_none=True) for a in amis],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "Ready" if ready else "SubnetsNotFound",
                    "message": "" if ready else "no subnet matches (conformance)",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": generation,
                }
            ],
        }
        manifest["metadata"]["annotations"] = {
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
        }
        return manifest


@functools.cache
def _session() -> Any:
    import boto3

    return boto3.session.Session(
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        aws_session_token="testing",
    )


def _ec2_backend() -> Any:
    from moto.backends import get_backend

    return get_backend("ec2")[ACCOUNT_ID][REGION]


def _tags(resource: str) -> list[dict[str, Any]]:
    return [{"ResourceType": resource, "Tags": [{"Key": DISCOVERY_TAG, "Value": CLUSTER_NAME}]}]


def _register_image(name: str, architecture: str) -> str:
    """An available Amazon-owned image (``RegisterImage`` in moto sets no architecture)."""
    from moto.ec2.models.amis import Ami
    from moto.ec2.utils import random_ami_id

    backend = _ec2_backend()
    ami_id = random_ami_id()
    backend.amis[ami_id] = Ami(
        backend,
        ami_id,
        name=name,
        description=name,
        owner_id=AMAZON_OWNER_ID,
        owner_alias="amazon",
        public=True,
        virtualization_type="hvm",
        architecture=architecture,
        creation_date=datetime.datetime(2025, 6, 1, tzinfo=datetime.UTC),
        root_device_type="ebs",
        root_device_name="/dev/xvda",
        region_name=f"{REGION}a",
        tags={},
    )
    return ami_id


def _put_service_parameter(name: str, value: str) -> None:
    """An AWS-owned SSM parameter (``/aws/service/...`` is refused through the API)."""
    from moto.backends import get_backend
    from moto.core.utils import utcnow
    from moto.ssm.models import Parameter

    parameters = get_backend("ssm")[ACCOUNT_ID][REGION]._parameters
    parameters[name].append(
        Parameter(  # type: ignore[abstract]
            account_id=ACCOUNT_ID,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=utcnow(),
            version=1,
            data_type="aws:ec2:image",
        )
    )


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


def _patch_create_fleet_response() -> None:
    """CreateFleet answers name the refused overrides in ``Errors`` (once per process)."""
    from moto.core.responses import ActionResult
    from moto.ec2.responses.fleets import Fleets

    with _PATCH_LOCK:
        if _patched:
            return
        original = Fleets.create_fleet

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

        Fleets.create_fleet = create_fleet  # type: ignore[method-assign]
        _patched.append(original)
