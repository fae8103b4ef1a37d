"""EC2 instances Karpenter launched: describe, list, find by NodeClaim, tag, terminate.

Lookups by NodeClaim arriving together (concurrent creates) are sent as one DescribeInstances
naming all their NodeClaims, and the answer is split per NodeClaim; lookups by instance id
arriving together are likewise one DescribeInstances naming all their ids. Instances read or
launched are kept for ``INSTANCE_CACHE_TTL`` so that ``get`` (drift, above all) seldom calls
EC2; terminating always reads the instance afresh.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from karpenter_aws.batcher import Batcher
from karpenter_aws.errors import describe_error, error_code
from karpenter_aws.labels import PROVIDER_ID_PREFIX, TAG_NODECLAIM, TAG_NODEPOOL, cluster_tag
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.types import CloudProviderError, NodeClaimNotFound

__all__ = [
    "INSTANCE_CACHE_TTL",
    "LIVE_STATES",
    "MAX_GET_BATCH",
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

MAX_GET_BATCH = 500
"""The most instance ids one batched DescribeInstances names."""

INSTANCE_CACHE_TTL = timedelta(minutes=1)
"""How long an instance read (or launched) is served from memory by ``Instances.get``."""

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
    after the first) share one DescribeInstances, and so do ``get`` calls that miss the cache.
    The cache holds what ``list``, ``get``, ``find_for_nodeclaim`` and ``remember`` saw, each
    entry for ``cache_ttl``; ``list`` also drops the instances it no longer finds.
    """

    def __init__(
        self,
        ec2: Any,
        cluster_name: str,
        lookup_idle: timedelta = timedelta(milliseconds=35),
        lookup_max: timedelta = timedelta(seconds=1),
        cache_ttl: timedelta = INSTANCE_CACHE_TTL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ec2 = ec2
        self._cluster_name = cluster_name
        self._lookups: Batcher[str, Instance | None] = Batcher(
            self._find_many, lookup_idle, lookup_max, MAX_LOOKUP_BATCH
        )
        self._gets: Batcher[str, Instance | CloudProviderError] = Batcher(
            self._get_many, lookup_idle, lookup_max, MAX_GET_BATCH
        )
        self._ttl = cache_ttl.total_seconds()
        self._monotonic = monotonic
        self._cache_lock = threading.Lock()
        self._cache: dict[str, tuple[float, Instance]] = {}

    def get(self, instance_id: str, fresh: bool = False) -> Instance:
        """The instance with this id, from the cache unless ``fresh``; ``NodeClaimNotFound``
        when it is gone or terminated."""
        if not fresh:
            now = self._monotonic()
            with self._cache_lock:
                cached = self._cache.get(instance_id)
            if cached is not None and now - cached[0] < self._ttl:
                return cached[1]
        found = self._gets.add(None, instance_id)
        if isinstance(found, CloudProviderError):
            if isinstance(found, NodeClaimNotFound):
                self.forget(instance_id)
            raise found
        return found

    def remember(self, instance: Instance) -> None:
        """Keep ``instance`` (e.g. one just launched) for ``get``."""
        self._store((instance,))

    def forget(self, instance_id: str) -> None:
        """Drop the cached instance ``instance_id``: the next ``get`` reads EC2."""
        with self._cache_lock:
            self._cache.pop(instance_id, None)

    def _store(self, instances: Iterable[Instance]) -> None:
        now = self._monotonic()
        with self._cache_lock:
            for instance in instances:
                self._cache[instance.id] = (now, instance)

    def _get_many(self, instance_ids: list[str]) -> list[Instance | CloudProviderError]:
        """One DescribeInstances for ``instance_ids``. An id EC2 does not know fails the whole
        call; then each id is read on its own."""
        ids = sorted(set(instance_ids))
        try:
            described = self._describe_ids(ids)
        except ClientError as error:
            if error_code(error) not in _NOT_FOUND:
                raise _api_error(_describing(ids), error) from None
            if len(ids) > 1:
                return self._get_each(instance_ids)
            described = []
        wanted = set(ids)
        found = {i.id: i for i in described if i.id in wanted}
        self._store(found.values())
        return [found.get(i) or _not_found(i) for i in instance_ids]

    def _get_each(self, instance_ids: list[str]) -> list[Instance | CloudProviderError]:
        found: dict[str, Instance] = {}
        failed: dict[str, str] = {}
        for instance_id in sorted(set(instance_ids)):
            try:
                described = self._describe_ids([instance_id])
            except ClientError as error:
                if error_code(error) not in _NOT_FOUND:
                    failed[instance_id] = str(_api_error(_describing([instance_id]), error))
                continue
            found.update((i.id, i) for i in described if i.id == instance_id)
        self._store(found.values())
        return [
            found.get(i) or (CloudProviderError(failed[i]) if i in failed else _not_found(i))
            for i in instance_ids
        ]

    def _describe_ids(self, instance_ids: list[str]) -> list[Instance]:
        response = self._ec2.describe_instances(InstanceIds=instance_ids, Filters=[_state_filter()])
        return list(_instances(response))

    def list(self) -> list[Instance]:
        """Live instances tagged with a NodePool and as owned by the cluster. They replace the
        cache, except for instances remembered since the listing started (EC2 may not show
        those yet)."""
        started = self._monotonic()
        found = self._describe(
            [
                {"Name": "tag-key", "Values": [TAG_NODEPOOL]},
                {"Name": f"tag:{cluster_tag(self._cluster_name)}", "Values": ["owned"]},
                _state_filter(),
            ],
            "listing the cluster's instances",
        )
        now = self._monotonic()
        with self._cache_lock:
            cache = {
                instance_id: entry
                for instance_id, entry in self._cache.items()
                if entry[0] >= started
            }
            cache.update((instance.id, (now, instance)) for instance in found)
            self._cache = cache
        return found

    def expecting_lookup(self) -> AbstractContextManager[None]:
        """Within this block the calling thread counts as about to ``find_for_nodeclaim``: an
        open lookup waits for it (up to ``lookup_max``) instead of going out when idle."""
        return self._lookups.expecting()

    def find_for_nodeclaim(self, nodeclaim: str) -> Instance | None:
        """The live instance tagged for NodeClaim ``nodeclaim`` in this cluster, if any (the
        lowest id when there are several)."""
        return self._lookups.add(None, nodeclaim)

    def _find_many(self, nodeclaims: builtins.list[str]) -> builtins.list[Instance | None]:
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
        self._store(found)
        by_name: dict[str, Instance] = {}
        for instance in found:
            name = instance.tags.get(TAG_NODECLAIM, "")
            kept = by_name.get(name)
            if kept is None or instance.id < kept.id:
                by_name[name] = instance
        return [by_name.get(name) for name in nodeclaims]

    def terminate(self, instance_id: str) -> Instance:
        """Start terminating the instance (skipped when it is already shutting down), read
        afresh; returns it as it was. ``NodeClaimNotFound`` when it is already gone."""
        instance = self.get(instance_id, fresh=True)
        self.forget(instance_id)
        if instance.state == "shutting-down":
            return instance
        try:
            self._ec2.terminate_instances(InstanceIds=[instance_id])
        except ClientError as error:
            if error_code(error) in _NOT_FOUND:
                raise NodeClaimNotFound(f"instance {instance_id} not found") from None
            raise _api_error(f"terminating instance {instance_id}", error) from None
        return instance

    def _describe(
        self, filters: builtins.list[dict[str, Any]], action: str
    ) -> builtins.list[Instance]:
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


def _not_found(instance_id: str) -> NodeClaimNotFound:
    return NodeClaimNotFound(f"instance {instance_id} not found")


def _describing(instance_ids: list[str]) -> str:
    shown = ", ".join(instance_ids[:5])
    more = f" and {len(instance_ids) - 5} more" if len(instance_ids) > 5 else ""
    return f"describing instance{'s' if len(instance_ids) > 1 else ''} {shown}{more}"


def _api_error(action: str, error: ClientError) -> CloudProviderError:
    return CloudProviderError(describe_error(action, error))
