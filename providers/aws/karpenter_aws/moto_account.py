"""A seeded AWS account on moto's server, for the conformance profile and the provider's tests.

``start_server()`` starts one ``ThreadedMotoServer`` on a free local port; ``seed(endpoint_url)``
resets it and creates what a Karpenter cluster needs (VPC, subnets and a security group tagged
for discovery, an EKS cluster, EKS-optimized and Bottlerocket images with their SSM parameters,
the node IAM role, an interruption queue) and returns an ``AWSEnv`` describing it. moto's state
lives in the process that runs the server, so images and AWS-owned SSM parameters are written
into its backends directly. moto and boto3 are imported lazily: importing them costs a second
that callers not using AWS should not pay. Needs ``moto[server]``
(``pip install 'karpenter-aws[conformance]'``).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import boto3
    from moto.server import ThreadedMotoServer

REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
CLUSTER_NAME = "test-cluster"
KUBERNETES_VERSION = "1.36"
DISCOVERY_TAG = "karpenter.sh/discovery"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
VPC_CIDR = "10.0.0.0/16"
AMAZON_OWNER_ID = "137112412989"
NODE_TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}
FAKE_CREDENTIALS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "aws_session_token": "testing",
}
# Environment that keeps boto3 in this process (and in subprocesses given it) off real AWS.
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
}
UNSET_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")


@dataclass(frozen=True, slots=True)
class Image:
    """One seeded image: its key (``family/arch/variant``), the SSM parameter naming it."""

    key: str
    name: str
    architecture: str
    ssm_parameter: str


def _al2023(arch: str, variant: str) -> Image:
    return Image(
        key=f"al2023/{arch}/{variant}",
        name=f"amazon-eks-node-al2023-{arch}-{variant}-{KUBERNETES_VERSION}-v20250601",
        architecture=arch,
        ssm_parameter=f"/aws/service/eks/optimized-ami/{KUBERNETES_VERSION}/amazon-linux-2023/"
        f"{arch}/{variant}/recommended/image_id",
    )


def _bottlerocket(arch: str, variant: str) -> Image:
    suffix = "-nvidia" if variant == "nvidia" else ""
    name_variant = "nvidia-" if variant == "nvidia" else ""
    return Image(
        key=f"bottlerocket/{arch}/{variant}",
        name=f"bottlerocket-aws-k8s-{KUBERNETES_VERSION}-{name_variant}{arch}-v1.40.0-a1b2c3d4",
        architecture=arch,
        ssm_parameter=f"/aws/service/bottlerocket/aws-k8s-{KUBERNETES_VERSION}{suffix}/{arch}/latest/image_id",
    )


IMAGES: tuple[Image, ...] = (
    _al2023("x86_64", "standard"),
    _al2023("arm64", "standard"),
    _al2023("x86_64", "nvidia"),
    _al2023("arm64", "nvidia"),
    _al2023("x86_64", "neuron"),
    _bottlerocket("x86_64", "standard"),
    _bottlerocket("arm64", "standard"),
    _bottlerocket("x86_64", "nvidia"),
    _bottlerocket("arm64", "nvidia"),
)


@dataclass(frozen=True, slots=True)
class AWSEnv:
    """A seeded moto account: where it is and the ids of what was created in it."""

    endpoint_url: str
    region: str
    account_id: str
    cluster_name: str
    kubernetes_version: str
    vpc_id: str
    subnet_ids: dict[str, str]
    security_group_id: str
    security_group_name: str
    images: dict[str, str]
    queue_name: str
    queue_url: str
    cluster_endpoint: str
    node_role: str

    def client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client for ``service`` against the moto server, with fake credentials."""
        return client(self.endpoint_url, service, region=self.region, **kwargs)

    def clients(self, *services: str) -> dict[str, Any]:
        """Clients by service name, the shape ``ProviderContext.clients`` takes."""
        names = services or ("ec2", "ssm", "sqs", "iam", "eks", "pricing")
        return {name: self.client(name) for name in names}

    @property
    def subnet_list(self) -> list[str]:
        """Subnet ids in zone order."""
        return [self.subnet_ids[zone] for zone in sorted(self.subnet_ids)]

    def put_service_parameter(self, name: str, value: str) -> None:
        """Write an AWS-owned SSM parameter (``/aws/service/...``, refused through the API)."""
        put_service_parameter(name, value, account_id=self.account_id, region=self.region)

    def register_image(
        self,
        name: str,
        architecture: str = "x86_64",
        tags: Mapping[str, str] | None = None,
        owner_id: str | None = None,
        creation_date: datetime.datetime | None = None,
    ) -> str:
        """Register an available image with an architecture (``RegisterImage`` in moto sets none)."""
        return register_image(
            name,
            architecture,
            tags=tags,
            owner_id=owner_id,
            creation_date=creation_date,
            account_id=self.account_id,
            region=self.region,
        )

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that talks to this moto server and nowhere else."""
        return {**FAKE_ENV, "AWS_ENDPOINT_URL": self.endpoint_url, "AWS_REGION": self.region}


_SESSION_LOCK = threading.Lock()
_SESSION: list[boto3.session.Session] = []
_SEED_CLIENTS: dict[tuple[str, str, str], Any] = {}


def client(endpoint_url: str, service: str, region: str = REGION, **kwargs: Any) -> Any:
    """A boto3 client against ``endpoint_url`` with fake credentials (one shared session, so
    service models load once)."""
    import boto3

    with _SESSION_LOCK:
        if not _SESSION:
            _SESSION.append(boto3.session.Session(region_name=region, **FAKE_CREDENTIALS))
        return _SESSION[0].client(service, endpoint_url=endpoint_url, region_name=region, **kwargs)


def _seed_client(endpoint_url: str, service: str, region: str) -> Any:
    key = (endpoint_url, service, region)
    if key not in _SEED_CLIENTS:
        _SEED_CLIENTS[key] = client(endpoint_url, service, region)
    return _SEED_CLIENTS[key]


def start_server() -> tuple[ThreadedMotoServer, str]:
    """Start a moto server on a free 127.0.0.1 port; returns it and its endpoint URL.

    moto's own catalogue of old public images is not loaded (it costs a quarter second per
    reset and would compete with the seeded images); its request log is silenced."""
    from moto.server import ThreadedMotoServer

    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    _apply_launch_template_security_groups()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def _template_security_groups(data: Mapping[str, Any]) -> list[str]:
    """The security groups a launch template's data gives an instance: ``SecurityGroupIds``, or
    the groups of its primary network interface."""
    if data.get("SecurityGroupIds"):
        return list(data["SecurityGroupIds"])
    for interface in data.get("NetworkInterfaces") or ():
        if str(interface.get("DeviceIndex", "0")) == "0" and interface.get("Groups"):
            return list(interface["Groups"])
    return []


def _fleet_template_groups(backend: Any, spec: Mapping[str, Any]) -> list[str]:
    """The security groups of the template version a fleet's launch template config names."""
    if "LaunchTemplateId" in spec:
        template = backend.get_launch_template(template_id=spec["LaunchTemplateId"])
    elif "LaunchTemplateName" in spec:
        template = backend.get_launch_template_by_name(name=spec["LaunchTemplateName"])
    else:
        return []
    version = spec.get("Version", template.default_version_number)
    if version == "$Latest":
        version = template.latest_version_number
    elif version == "$Default":
        version = template.default_version_number
    return _template_security_groups(template.get_version(version).data)


def _apply_launch_template_security_groups() -> None:
    """Make moto's CreateFleet give instances their launch template's security groups, as EC2
    does. moto 5.2's fleets read only a ``GroupSet`` key that real templates never carry, so
    every fleet instance came up without the groups its template names, and the AWS provider
    saw each one as drifted (SecurityGroupDrift). Each override is handed the template's groups
    under that key; idempotent."""
    from moto.ec2.models.fleets import FleetsBackend

    create_fleet: Any = FleetsBackend.create_fleet
    if getattr(create_fleet, "_karpenter_template_groups", False):
        return

    def with_template_groups(backend: Any, **kwargs: Any) -> Any:
        configs = []
        for config in kwargs.pop("launch_template_configs", None) or []:
            groups = _fleet_template_groups(
                backend, config.get("LaunchTemplateSpecification") or {}
            )
            overrides = [
                {"GroupSet": groups, **override} if groups else override
                for override in config.get("Overrides") or [{}]
            ]
            configs.append({**config, "Overrides": overrides})
        return create_fleet(backend, launch_template_configs=configs, **kwargs)

    with_template_groups._karpenter_template_groups = True  # type: ignore[attr-defined]
    FleetsBackend.create_fleet = with_template_groups  # type: ignore[method-assign,assignment]


def reset(endpoint_url: str) -> None:
    """Drop every resource in the moto server."""
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def backend(service: str, account_id: str = ACCOUNT_ID, region: str = REGION) -> Any:
    """moto's in-process backend of ``service`` for one account and region."""
    from moto.backends import get_backend

    return get_backend(service)[account_id][region]  # type: ignore[call-overload]


def put_service_parameter(
    name: str, value: str, account_id: str = ACCOUNT_ID, region: str = REGION
) -> None:
    """Write ``name`` into moto's SSM backend directly (a new version when it exists)."""
    from moto.core.utils import utcnow
    from moto.ssm.models import Parameter

    parameters = backend("ssm", account_id, region)._parameters
    versions = parameters[name]
    versions.append(
        Parameter(  # type: ignore[abstract]
            account_id=account_id,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=utcnow(),
            version=versions[-1].version + 1 if versions else 1,
            data_type="aws:ec2:image",
        )
    )


def register_image(
    name: str,
    architecture: str = "x86_64",
    tags: Mapping[str, str] | None = None,
    owner_id: str | None = None,
    creation_date: datetime.datetime | None = None,
    account_id: str = ACCOUNT_ID,
    region: str = REGION,
) -> str:
    """Add an available HVM/EBS image to moto's EC2 backend; returns its id. Without
    ``owner_id`` the image belongs to Amazon (owner alias ``amazon``) and is public."""
    from moto.ec2.models.amis import Ami
    from moto.ec2.utils import random_ami_id

    ec2 = backend("ec2", account_id, region)
    ami_id = random_ami_id()
    amazon = owner_id is None
    ec2.amis[ami_id] = Ami(
        ec2,
        ami_id,
        name=name,
        description=name,
        owner_id=AMAZON_OWNER_ID if amazon else owner_id,
        owner_alias="amazon" if amazon else None,
        public=amazon,
        virtualization_type="hvm",
        architecture=architecture,
        creation_date=creation_date,
        root_device_type="ebs",
        root_device_name="/dev/xvda",
        region_name=f"{region}a",
        tags=dict(tags or {}),
    )
    return ami_id


def _tags(resource: str, cluster_name: str, name: str) -> list[dict[str, Any]]:
    return [
        {
            "ResourceType": resource,
            "Tags": [{"Key": DISCOVERY_TAG, "Value": cluster_name}, {"Key": "Name", "Value": name}],
        }
    ]


def seed(endpoint_url: str, region: str = REGION, cluster_name: str = CLUSTER_NAME) -> AWSEnv:
    """Reset the server and create the account a Karpenter cluster runs in."""
    reset(endpoint_url)
    ec2 = _seed_client(endpoint_url, "ec2", region)
    vpc_id = ec2.create_vpc(
        CidrBlock=VPC_CIDR, TagSpecifications=_tags("vpc", cluster_name, cluster_name)
    )["Vpc"]["VpcId"]
    subnet_ids = {}
    for index, zone in enumerate(ZONES):
        subnet_ids[zone] = ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=f"10.0.{index * 32}.0/19",
            AvailabilityZone=zone,
            TagSpecifications=_tags("subnet", cluster_name, f"{cluster_name}-{zone}"),
        )["Subnet"]["SubnetId"]
    sg_name = f"{cluster_name}-nodes"
    sg_id = ec2.create_security_group(
        GroupName=sg_name,
        Description="Karpenter nodes",
        VpcId=vpc_id,
        TagSpecifications=_tags("security-group", cluster_name, sg_name),
    )["GroupId"]
    eks = _seed_client(endpoint_url, "eks", region)
    cluster = eks.create_cluster(
        name=cluster_name,
        version=KUBERNETES_VERSION,
        roleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/{cluster_name}-cluster",
        resourcesVpcConfig={"subnetIds": list(subnet_ids.values()), "securityGroupIds": [sg_id]},
    )["cluster"]
    images = {}
    for image in IMAGES:
        images[image.key] = register_image(image.name, image.architecture, region=region)
        put_service_parameter(image.ssm_parameter, images[image.key], region=region)
    node_role = f"KarpenterNodeRole-{cluster_name}"
    _seed_client(endpoint_url, "iam", region).create_role(
        RoleName=node_role, AssumeRolePolicyDocument=json.dumps(NODE_TRUST_POLICY)
    )
    queue_name = f"{cluster_name}-interruption"
    queue_url = _seed_client(endpoint_url, "sqs", region).create_queue(QueueName=queue_name)[
        "QueueUrl"
    ]
    return AWSEnv(
        endpoint_url=endpoint_url,
        region=region,
        account_id=ACCOUNT_ID,
        cluster_name=cluster_name,
        kubernetes_version=KUBERNETES_VERSION,
        vpc_id=vpc_id,
        subnet_ids=subnet_ids,
        security_group_id=sg_id,
        security_group_name=sg_name,
        images=images,
        queue_name=queue_name,
        queue_url=queue_url,
        cluster_endpoint=cluster.get("endpoint") or "",
        node_role=node_role,
    )


def spot_interruption_body(instance_id: str, region: str = REGION) -> str:
    """An EventBridge "EC2 Spot Instance Interruption Warning" event as SQS receives it."""
    return json.dumps(
        {
            "version": "0",
            "id": "7e5f2b8a-0c1d-4e6f-9a3b-2c4d5e6f7a8b",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": ACCOUNT_ID,
            "time": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": region,
            "resources": [f"arn:aws:ec2:{region}:{ACCOUNT_ID}:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


def instances(env: AWSEnv, states: tuple[str, ...] = ("pending", "running")) -> Iterator[dict]:
    """Instances in ``states`` (``DescribeInstances``, all pages)."""
    pages = (
        env.client("ec2")
        .get_paginator("describe_instances")
        .paginate(Filters=[{"Name": "instance-state-name", "Values": list(states)}])
    )
    for page in pages:
        for reservation in page["Reservations"]:
            yield from reservation["Instances"]
