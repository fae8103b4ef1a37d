"""EC2 instances Karpenter launched: describe, list, find by NodeClaim, tag, terminate.

Lookups by NodeClaim arriving together (concurrent creates) are sent as one DescribeInstances
naming all their NodeClaims, and the answer is split per NodeClaim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from karpenter_aws.batcher import Batcher
from karpenter_aws.labels import PROVIDER_ID_PREFIX, TAG_NODECLAIM, TAG_NODEPOOL, cluster_tag
from karpenter_core.apis import labels as wk
from karpenter_core.cloudprovider.types import CloudProviderError, NodeClaimNotFound

__all__ = [
    "LIVE_STATES",
    "MAX_LOOKUP_BATCH",
    "Instance",
    "Instances",
    "instance_from_description",
    "instance_id_of",
    "provider_id",
]

LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
"""Instance states that still count as existing (terminated ones do not)."""

MAX_LOOKUP_BATCH = 200 - 1 - len(LIVE_STATES)
"""The most NodeClaims one lookup names: EC2 takes at most 200 filter values in a call, and the
cluster tag and the states take the others."""

_NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})


@dataclass(frozen=True, slots=True)
class Instance:
    """What the provider needs of an EC2 instance."""

    id: str
    instance_type: str
    zone: str
    state: str
    image_id: str
    subnet_id: str
    security_group_ids: tuple[str, ...]
    capacity_type: str
    tags: Mapping[str, str]
    launch_time: datetime | None = None


def instance_from_description(data: Mapping[str, Any]) -> Instance:
    """An ``Instance`` from one entry of DescribeInstances' ``Reservations[].Instances``."""
    spot = data.get("InstanceLifecycle") == "spot" or bool(data.get("SpotInstanceRequestId"))
    return Instance(
        id=data["InstanceId"],
        instance_type=data.get("InstanceType", ""),
        zone=(data.get("Placement") or {}).get("AvailabilityZone", ""),
        state=(data.get("State") or {}).get("Name", ""),
        image_id=data.get("ImageId", ""),
        subnet_id=data.get("SubnetId", ""),
        security_group_ids=tuple(
            g["GroupId"] for g in data.get("SecurityGroups") or () if g.get("GroupId")
        ),
        capacity_type=wk.CAPACITY_TYPE_SPOT if spot else wk.CAPACITY_TYPE_ON_DEMAND,
        tags={t["Key"]: t.get("Value", "") for t in data.get("Tags") or ()},
        launch_time=data.get("LaunchTime"),
    )


def provider_id(zone: str, instance_id: str) -> str:
    """``aws:///<zone>/<instance-id>``."""
    return f"{PROVIDER_ID_PREFIX}{zone}/{instance_id}"


def instance_id_of(provider_id: str | None) -> str:
    """The instance id of an ``aws:///<zone>/<instance-id>`` providerID; ``NodeClaimNotFound``
    for anything else."""
    if not provider_id or not provider_id.startswith(PROVIDER_ID_PREFIX):
        raise NodeClaimNotFound(f"{provider_id!r} is not an aws providerID (aws:///<zone>/<id>)")
    instance_id = provider_id.rsplit("/", 1)[-1]
    if not instance_id.startswith("i-"):
        raise NodeClaimNotFound(f"{provider_id!r} does not end in an instance id")
    return instance_id


def _state_filter() -> dict[str, Any]:
    return {"Name": "instance-state-name", "Values": list(LIVE_STATES)}


class Instances:
    """The cluster's instances, through an EC2 client.

    ``find_for_nodeclaim`` calls within ``lookup_idle`` of each other (at most ``lookup_max``
    after the first) share one DescribeInstances.
    """

    def __init__(
        self,
        ec2: Any,
        cluster_name: str,
        lookup_idle: timedelta = timedelta(milliseconds=35),
        lookup_max: timedelta = timedelta(seconds=1),
    ) -> None:
        self._ec2 = ec2
        self._cluster_name = cluster_name
        self._lookups: Batcher[str, Instance | None] = Batcher(
            self._find_many, lookup_idle, lookup_max, MAX_LOOKUP_BATCH
        )

    def get(self, instance_id: str) -> Instance:
        """The instance with this id; ``NodeClaimNotFound`` when it is gone or terminated."""
        try:
            response = self._ec2.describe_instances(
                InstanceIds=[instance_id], Filters=[_state_filter()]
            )
        except ClientError as error:
            if _code(error) in _NOT_FOUND:
                raise NodeClaimNotFound(f"instance {instance_id} not found") from None
            raise _api_error(f"describing instance {instance_id}", error) from None
        found = [i for i in _instances(response) if i.id == instance_id]
        if not found:
            raise NodeClaimNotFound(f"instance {instance_id} not found")
        return found[0]

    def list(self) -> list[Instance]:
        """Live instances tagged with a NodePool and as owned by the cluster."""
        return self._describe(
            [
                {"Name": "tag-key", "Values": [TAG_NODEPOOL]},
                {"Name": f"tag:{cluster_tag(self._cluster_name)}", "Values": ["owned"]},
                _state_filter(),
            ],
            "listing the cluster's instances",
        )

    def expecting_lookup(self) -> AbstractContextManager[None]:
        """Within this block the calling thread counts as about to ``find_for_nodeclaim``: an
        open lookup waits for it (up to ``lookup_max``) instead of going out when idle."""
        return self._lookups.expecting()

    def find_for_nodeclaim(self, nodeclaim: str) -> Instance | None:
        """The live instance tagged for NodeClaim ``nodeclaim`` in this cluster, if any (the
        lowest id when there are several)."""
        return self._lookups.add(None, nodeclaim)

    def _find_many(self, nodeclaims: list[str]) -> list[Instance | None]:
        names = sorted(set(nodeclaims))
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        found = self._describe(
            [
                {"Name": f"tag:{TAG_NODECLAIM}", "Values": names},
                {"Name": f"tag:{cluster_tag(self._cluster_name)}", "Values": ["owned"]},
                _state_filter(),
            ],
            f"looking up the instances of NodeClaims {shown}",
        )
        by_name: dict[str, Instance] = {}
        for instance in found:
            name = instance.tags.get(TAG_NODECLAIM, "")
            kept = by_name.get(name)
            if kept is None or instance.id < kept.id:
                by_name[name] = instance
        return [by_name.get(name) for name in nodeclaims]

    def terminate(self, instance_id: str) -> Instance:
        """Start terminating the instance (skipped when it is already shutting down); returns it
        as it was. ``NodeClaimNotFound`` when it is already gone."""
        instance = self.get(instance_id)
        if instance.state == "shutting-down":
            return instance
        try:
            self._ec2.terminate_instances(InstanceIds=[instance_id])
        except ClientError as error:
            if _code(error) in _NOT_FOUND:
                raise NodeClaimNotFound(f"instance {instance_id} not found") from None
            raise _api_error(f"terminating instance {instance_id}", error) from None
        return instance

    def _describe(self, filters: list[dict[str, Any]], action: str) -> list[Instance]:
        out: list[Instance] = []
        try:
            pages = self._ec2.get_paginator("describe_instances").paginate(
                Filters=filters, PaginationConfig={"PageSize": 1000}
            )
            for page in pages:
                out.extend(_instances(page))
        except ClientError as error:
            raise _api_error(action, error) from None
        return out


def _instances(response: Mapping[str, Any]) -> Iterable[Instance]:
    for reservation in response.get("Reservations") or ():
        for data in reservation.get("Instances") or ():
            yield instance_from_description(data)


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _api_error(action: str, error: ClientError) -> CloudProviderError:
    detail = error.response.get("Error", {})
    return CloudProviderError(f"{action}: {detail.get('Code', '')}: {detail.get('Message', '')}")
