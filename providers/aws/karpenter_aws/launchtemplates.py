"""Launch templates: one per distinct launch configuration, named after a hash of it.

``LaunchTemplateConfig`` holds what goes into a template (pure); ``LaunchTemplates`` finds the
template of a configuration by name or creates it, remembers for a minute that it exists, and
deletes the cluster's templates nothing used for that minute.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from karpenter_aws.errors import describe_error, error_code
from karpenter_aws.labels import GROUP, TAG_EKS_CLUSTER_NAME
from karpenter_aws.nodeclass import (
    AMI_FAMILY_AL2,
    AMI_FAMILY_AL2023,
    AMI_FAMILY_BOTTLEROCKET,
    AMI_FAMILY_WINDOWS2019,
    AMI_FAMILY_WINDOWS2022,
    AMI_FAMILY_WINDOWS2025,
)
from karpenter_core.sdk.types import CloudProviderError, CreateError

if TYPE_CHECKING:
    from karpenter_aws.nodeclass import BlockDeviceMapping, EC2NodeClass

__all__ = [
    "NAME_PREFIX",
    "NOT_FOUND_CODES",
    "LaunchTemplateConfig",
    "LaunchTemplates",
    "block_device_mappings",
    "create_request",
    "metadata_options",
    "template_name",
]

NAME_PREFIX = f"{GROUP}/"
"""Launch templates Karpenter creates are named ``karpenter.k8s.aws/<hash>``."""

NOT_FOUND_CODES = frozenset(
    {
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.NotFoundException",
    }
)
"""Error codes EC2 answers for a launch template that does not exist."""
_ALREADY_EXISTS = "InvalidLaunchTemplateName.AlreadyExistsException"
_GIB = 1 << 30
_FREE = threading.Lock()

log = logging.getLogger("karpenter.aws.launchtemplates")


def _ebs(size_gib: int) -> dict[str, Any]:
    return {"Encrypted": True, "VolumeType": "gp3", "VolumeSize": size_gib}


_DEFAULT_DEVICES: Mapping[str, tuple[tuple[str, int], ...]] = {
    AMI_FAMILY_AL2: (("/dev/xvda", 20),),
    AMI_FAMILY_AL2023: (("/dev/xvda", 20),),
    AMI_FAMILY_BOTTLEROCKET: (("/dev/xvda", 4), ("/dev/xvdb", 20)),
    AMI_FAMILY_WINDOWS2019: (("/dev/sda1", 50),),
    AMI_FAMILY_WINDOWS2022: (("/dev/sda1", 50),),
    AMI_FAMILY_WINDOWS2025: (("/dev/sda1", 50),),
}
"""Encrypted gp3 volumes (device, GiB) of each AMI family when the EC2NodeClass maps none;
Custom maps none, so the AMI's own mappings apply."""


def _mapping(mapping: BlockDeviceMapping) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if mapping.device_name is not None:
        out["DeviceName"] = mapping.device_name
    ebs = mapping.ebs
    if ebs is not None:
        volume: dict[str, Any] = {
            "DeleteOnTermination": ebs.delete_on_termination,
            "Encrypted": ebs.encrypted,
            "Iops": ebs.iops or None,
            "KmsKeyId": ebs.kms_key_id,
            "SnapshotId": ebs.snapshot_id,
            "Throughput": ebs.throughput or None,
            "VolumeType": ebs.volume_type,
        }
        size = ebs.size_bytes()
        if size is not None:
            volume["VolumeSize"] = math.ceil(size / _GIB)
        out["Ebs"] = {key: value for key, value in volume.items() if value is not None}
    return out


def block_device_mappings(node_class: EC2NodeClass) -> list[dict[str, Any]]:
    """The launch template's block device mappings: the EC2NodeClass's, else the AMI family's
    defaults (sizes in GiB, rounded up)."""
    if node_class.spec.block_device_mappings:
        return [_mapping(m) for m in node_class.spec.block_device_mappings]
    defaults = _DEFAULT_DEVICES.get(node_class.resolved_ami_family(), ())
    return [{"DeviceName": device, "Ebs": _ebs(size)} for device, size in defaults]


def metadata_options(node_class: EC2NodeClass) -> dict[str, Any]:
    """The instance metadata options; instance tags in the metadata are always off (Karpenter's
    tag keys are not valid there)."""
    options = node_class.spec.metadata_options
    return {
        "HttpEndpoint": options.http_endpoint,
        "HttpProtocolIpv6": options.http_protocol_ipv6,
        "HttpPutResponseHopLimit": options.http_put_response_hop_limit,
        "HttpTokens": options.http_tokens,
        "InstanceMetadataTags": "disabled",
    }


@dataclass(frozen=True, slots=True)
class LaunchTemplateConfig:
    """Everything a launch template holds; equal configurations share one template."""

    image_id: str
    security_group_ids: tuple[str, ...]
    instance_profile: str
    user_data: str
    """Plain text; base64-encoded into the template."""
    block_device_mappings: tuple[Mapping[str, Any], ...]
    metadata_options: Mapping[str, Any]
    tags: tuple[tuple[str, str], ...]
    """Sorted (key, value) pairs on the template and the network interfaces it creates."""
    detailed_monitoring: bool = False
    associate_public_ip_address: bool | None = None

    @classmethod
    def build(
        cls, node_class: EC2NodeClass, image_id: str, user_data: str, tags: Mapping[str, str]
    ) -> LaunchTemplateConfig:
        """The configuration of ``node_class`` (its resolved status) for one AMI."""
        return cls(
            image_id=image_id,
            security_group_ids=tuple(sorted(g.id for g in node_class.status.security_groups)),
            instance_profile=node_class.status.instance_profile or "",
            user_data=user_data,
            block_device_mappings=tuple(block_device_mappings(node_class)),
            metadata_options=metadata_options(node_class),
            tags=tuple(sorted(tags.items())),
            detailed_monitoring=bool(node_class.spec.detailed_monitoring),
            associate_public_ip_address=node_class.spec.associate_public_ip_address,
        )


def template_name(config: LaunchTemplateConfig) -> str:
    """``karpenter.k8s.aws/<hash of the configuration>``."""
    canonical = json.dumps(asdict(config), sort_keys=True, separators=(",", ":"))
    return NAME_PREFIX + str(int(hashlib.sha256(canonical.encode()).hexdigest()[:16], 16))


def create_request(config: LaunchTemplateConfig, name: str) -> dict[str, Any]:
    """The keyword arguments of CreateLaunchTemplate for ``config``."""
    tags = [{"Key": key, "Value": value} for key, value in config.tags]
    interface: dict[str, Any] = {"DeviceIndex": 0, "Groups": list(config.security_group_ids)}
    if config.associate_public_ip_address is not None:
        interface["AssociatePublicIpAddress"] = config.associate_public_ip_address
    data: dict[str, Any] = {
        "ImageId": config.image_id,
        "IamInstanceProfile": {"Name": config.instance_profile},
        "NetworkInterfaces": [interface],
        "UserData": base64.b64encode(config.user_data.encode()).decode(),
        "MetadataOptions": dict(config.metadata_options),
        "Monitoring": {"Enabled": config.detailed_monitoring},
    }
    if config.block_device_mappings:
        data["BlockDeviceMappings"] = [dict(m) for m in config.block_device_mappings]
    request: dict[str, Any] = {"LaunchTemplateName": name, "LaunchTemplateData": data}
    if tags:
        data["TagSpecifications"] = [{"ResourceType": "network-interface", "Tags": tags}]
        request["TagSpecifications"] = [{"ResourceType": "launch-template", "Tags": tags}]
    return request


class LaunchTemplates:
    """Finds or creates the launch template of a configuration.

    A template is looked up in EC2 at most once per ``ttl`` while it is in use. Templates of the
    cluster (tagged ``eks:eks-cluster-name``) that go unused for ``ttl`` are deleted, as upstream
    does; those left by an earlier run are found on first use and deleted likewise.
    """

    def __init__(
        self,
        ec2: Any,
        cluster_name: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        ttl: timedelta = timedelta(minutes=1),
    ) -> None:
        self._ec2 = ec2
        self._cluster_name = cluster_name
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._used: dict[str, datetime] = {}
        self._name_locks: dict[str, threading.Lock] = {}
        self._adopted = False

    def ensure(self, config: LaunchTemplateConfig) -> str:
        """The name of the template for ``config``, created if EC2 has none by that name."""
        self._adopt()
        name = template_name(config)
        with self._lock:
            name_lock = self._name_locks.setdefault(name, threading.Lock())
        with name_lock:
            now = self._clock()
            with self._lock:
                used = self._used.get(name)
            if (used is None or now - used >= self._ttl) and not self._exists(name):
                self._create(config, name)
            with self._lock:
                self._used[name] = now
        self._sweep(now)
        return name

    def invalidate(self, name: str) -> None:
        """Forget that ``name`` exists (CreateFleet said it does not)."""
        with self._lock:
            self._used.pop(name, None)

    def _adopt(self) -> None:
        """Count the cluster's existing templates as just used, so unused ones get deleted."""
        with self._lock:
            if self._adopted:
                return
            self._adopted = True
        now = self._clock()
        try:
            pages = self._ec2.get_paginator("describe_launch_templates").paginate(
                Filters=[{"Name": f"tag:{TAG_EKS_CLUSTER_NAME}", "Values": [self._cluster_name]}],
                PaginationConfig={"PageSize": 200},
            )
            names = [
                t["LaunchTemplateName"]
                for page in pages
                for t in page.get("LaunchTemplates") or ()
                if t.get("LaunchTemplateName", "").startswith(NAME_PREFIX)
            ]
        except ClientError as error:
            log.warning("listing the cluster's launch templates failed: %s", error)
            return
        with self._lock:
            for name in names:
                self._used.setdefault(name, now)

    def _sweep(self, now: datetime) -> None:
        with self._lock:
            stale = [
                name
                for name, used in self._used.items()
                if now - used >= self._ttl and not self._name_locks.get(name, _FREE).locked()
            ]
            for name in stale:
                del self._used[name]
            idle = [
                name
                for name, lock in self._name_locks.items()
                if name not in self._used and not lock.locked()
            ]
            for name in idle:
                del self._name_locks[name]
        for name in stale:
            try:
                self._ec2.delete_launch_template(LaunchTemplateName=name)
            except ClientError as error:
                if error_code(error) not in NOT_FOUND_CODES:
                    log.warning("deleting unused launch template %s failed: %s", name, error)
                continue
            log.info("deleted unused launch template %s", name)

    def _exists(self, name: str) -> bool:
        try:
            found = self._ec2.describe_launch_templates(LaunchTemplateNames=[name])
        except ClientError as error:
            if error_code(error) in NOT_FOUND_CODES:
                return False
            raise _failure(f"describing launch template {name}", error) from None
        return bool(found.get("LaunchTemplates"))

    def _create(self, config: LaunchTemplateConfig, name: str) -> None:
        try:
            self._ec2.create_launch_template(**create_request(config, name))
        except ClientError as error:
            if error_code(error) == _ALREADY_EXISTS:
                return
            raise _failure(f"creating launch template {name}", error) from None
        log.info("created launch template %s", name)


def _failure(action: str, error: ClientError) -> CloudProviderError:
    return CreateError(error_code(error) or "LaunchTemplateFailed", describe_error(action, error))
