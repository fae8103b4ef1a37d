"""CreateFleet: choosing what to ask for, building the request, batching, reading the answer.

Everything but ``FleetBatcher`` is pure. A request names the cheapest compatible instance types
(at most ``MAX_INSTANCE_TYPES``), one override per type and zone with a subnet, and EC2 picks the
offering (price-capacity-optimized for spot, lowest price for on-demand). Identical concurrent
requests are sent as one CreateFleet for N instances, as upstream's batcher does.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from karpenter_aws.batcher import Batcher
from karpenter_aws.errors import AWS_ERRORS
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.types import (
    CloudProviderError,
    CreateError,
    InstanceType,
    InsufficientCapacity,
    Offering,
    Requirement,
    Requirements,
)

__all__ = [
    "ICE_ERROR_CODES",
    "MAX_INSTANCE_TYPES",
    "FleetBatcher",
    "FleetError",
    "FleetOutcome",
    "LaunchedInstance",
    "TemplateOverrides",
    "capacity_type_for",
    "compatible_instance_types",
    "fleet_failure",
    "fleet_request",
    "launch_template_config",
    "offerings_for",
    "parse_fleet_response",
    "tag_specifications",
]

log = logging.getLogger("karpenter.aws.fleet")

MAX_INSTANCE_TYPES = 60
"""The most instance types one CreateFleet request names."""

ICE_ERROR_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
    }
)
"""CreateFleet error codes meaning "no capacity for this offering now" (it is kept out a while)."""

TAGGED_RESOURCES = ("instance", "volume", "fleet")
_MAX_BATCH = 1000
_TAG_RETRY_DELAY = 0.2
"""Seconds before CreateTags on a batched instance is tried a second time."""


def _with_capacity_type(requirements: Requirements, capacity_type: str) -> Requirements:
    narrowed = requirements.copy()
    narrowed.add(Requirement(wk.CAPACITY_TYPE, False, frozenset((capacity_type,))))
    return narrowed


def _compatible_offerings(
    instance_type: InstanceType, requirements: Requirements
) -> Iterable[Offering]:
    return (
        o
        for o in instance_type.offerings
        if o.available and requirements.intersects(o.requirements) is None
    )


def compatible_instance_types(
    instance_types: Iterable[InstanceType],
    requirements: Requirements,
    requests: Mapping[str, int],
    limit: int = MAX_INSTANCE_TYPES,
) -> list[InstanceType]:
    """The cheapest ``limit`` types whose labels meet ``requirements``, whose allocatable covers
    ``requests`` (thousandths) and that have an available compatible offering; cheapest first
    (by their cheapest such offering, ties by name)."""
    ranked: list[tuple[float, str, InstanceType]] = []
    for instance_type in instance_types:
        offering = instance_type.offering_for(requirements, requests)
        if offering is not None:
            ranked.append((offering.price, instance_type.name, instance_type))
    ranked.sort(key=lambda item: item[:2])
    return [item[2] for item in ranked[:limit]]


def capacity_type_for(requirements: Requirements, instance_types: Iterable[InstanceType]) -> str:
    """Spot when the requirements allow it and some type has an available compatible spot
    offering; on-demand otherwise."""
    allowed = requirements.get_or_exists(wk.CAPACITY_TYPE)
    if allowed.has(wk.CAPACITY_TYPE_SPOT):
        spot = _with_capacity_type(requirements, wk.CAPACITY_TYPE_SPOT)
        for instance_type in instance_types:
            if next(iter(_compatible_offerings(instance_type, spot)), None) is not None:
                return wk.CAPACITY_TYPE_SPOT
    return wk.CAPACITY_TYPE_ON_DEMAND


def offerings_for(
    instance_type: InstanceType, requirements: Requirements, capacity_type: str
) -> list[Offering]:
    """Available offerings of ``instance_type`` of ``capacity_type`` meeting ``requirements``,
    one per zone (the cheapest), in zone order."""
    by_zone: dict[str, Offering] = {}
    for offering in _compatible_offerings(
        instance_type, _with_capacity_type(requirements, capacity_type)
    ):
        best = by_zone.get(offering.zone)
        if best is None or offering.price < best.price:
            by_zone[offering.zone] = offering
    return [by_zone[zone] for zone in sorted(by_zone)]


@dataclass(frozen=True, slots=True)
class TemplateOverrides:
    """A launch template and what to launch from it: the image and the (type, zone) pairs."""

    template_name: str
    image_id: str
    offerings: tuple[tuple[str, str], ...]
    """(instance type, zone) pairs, in preference order."""


def launch_template_config(
    template: TemplateOverrides, subnets: Mapping[str, str]
) -> dict[str, Any] | None:
    """One ``LaunchTemplateConfigs`` entry: an override per (type, zone) whose zone has a subnet
    in ``subnets`` (zone -> subnet id); None when no pair has one."""
    overrides = [
        {
            "InstanceType": instance_type,
            "SubnetId": subnets[zone],
            "ImageId": template.image_id,
            "AvailabilityZone": zone,
        }
        for instance_type, zone in template.offerings
        if zone in subnets
    ]
    if not overrides:
        return None
    return {
        "LaunchTemplateSpecification": {
            "LaunchTemplateName": template.template_name,
            "Version": "$Latest",
        },
        "Overrides": overrides,
    }


def tag_specifications(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    """The same tags on the instance, its volumes and the fleet, sorted by key (none when there
    are no tags: EC2 refuses an empty specification)."""
    ec2_tags = [{"Key": key, "Value": tags[key]} for key in sorted(tags)]
    if not ec2_tags:
        return []
    return [{"ResourceType": resource, "Tags": list(ec2_tags)} for resource in TAGGED_RESOURCES]


def fleet_request(
    capacity_type: str,
    launch_template_configs: Sequence[Mapping[str, Any]],
    tags: Mapping[str, str],
    count: int = 1,
) -> dict[str, Any]:
    """The keyword arguments of an instant CreateFleet for ``count`` instances."""
    request: dict[str, Any] = {
        "Type": "instant",
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": count,
            "DefaultTargetCapacityType": capacity_type,
        },
        "LaunchTemplateConfigs": [dict(c) for c in launch_template_configs],
    }
    specifications = tag_specifications(tags)
    if specifications:
        request["TagSpecifications"] = specifications
    if capacity_type == wk.CAPACITY_TYPE_SPOT:
        request["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
    else:
        request["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
    return request


@dataclass(frozen=True, slots=True)
class LaunchedInstance:
    """An instance CreateFleet launched, with the override it was launched from."""

    instance_id: str
    instance_type: str
    zone: str
    subnet_id: str
    image_id: str
    capacity_type: str


@dataclass(frozen=True, slots=True)
class FleetError:
    """One entry of a CreateFleet response's ``Errors``."""

    code: str
    message: str
    instance_type: str
    zone: str
    subnet_id: str

    @property
    def insufficient_capacity(self) -> bool:
        """Whether the error means no capacity for this offering."""
        return self.code in ICE_ERROR_CODES


@dataclass(frozen=True, slots=True)
class FleetOutcome:
    """What one caller of a (possibly batched) CreateFleet got: an instance, or none, and the
    response's errors."""

    instance: LaunchedInstance | None
    errors: tuple[FleetError, ...] = ()


def parse_fleet_response(
    response: Mapping[str, Any], capacity_type: str
) -> tuple[list[LaunchedInstance], list[FleetError]]:
    """The launched instances (one per instance id) and the errors of a CreateFleet response."""
    launched = []
    for entry in response.get("Instances") or ():
        overrides = (entry.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        for instance_id in entry.get("InstanceIds") or ():
            launched.append(
                LaunchedInstance(
                    instance_id=instance_id,
                    instance_type=entry.get("InstanceType") or overrides.get("InstanceType", ""),
                    zone=overrides.get("AvailabilityZone", ""),
                    subnet_id=overrides.get("SubnetId", ""),
                    image_id=overrides.get("ImageId", ""),
                    capacity_type=entry.get("Lifecycle") or capacity_type,
                )
            )
    errors = []
    for entry in response.get("Errors") or ():
        overrides = (entry.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        errors.append(
            FleetError(
                code=entry.get("ErrorCode", ""),
                message=entry.get("ErrorMessage", ""),
                instance_type=overrides.get("InstanceType", ""),
                zone=overrides.get("AvailabilityZone", ""),
                subnet_id=overrides.get("SubnetId", ""),
            )
        )
    return launched, errors


def fleet_failure(errors: Sequence[FleetError], nodeclaim: str) -> CloudProviderError:
    """The error for a CreateFleet that launched nothing: ``InsufficientCapacity`` when every
    error is a capacity error, or there are none (a batched fleet EC2 filled only in part
    leaves its last callers so), otherwise a ``CreateError`` with the first other error's code."""
    unique = sorted({f"{e.code}: {e.message}" for e in errors})
    detail = "; ".join(unique) if unique else "no instance and no error returned"
    if all(e.insufficient_capacity for e in errors):
        return InsufficientCapacity(
            f"CreateFleet for NodeClaim {nodeclaim!r} found no capacity: {detail}"
        )
    reason = next(e.code for e in errors if not e.insufficient_capacity) or "LaunchFailed"
    return CreateError(reason, f"CreateFleet for NodeClaim {nodeclaim!r} failed: {detail}")


@dataclass(frozen=True, slots=True)
class _Launch:
    request: Mapping[str, Any]
    own_tags: Mapping[str, str]
    capacity_type: str


class FleetBatcher:
    """Sends identical concurrent CreateFleet requests as one request for N instances.

    A request joins the open batch with the same request; the batch is sent once no request
    joined for ``idle``, ``max_wait`` after it opened, or when it holds 1,000 requests. The first
    caller sends it; every caller gets one instance (or none, with the errors). Each caller's own
    tags (``own_tags``) go into the request when it is alone, or onto its instance with
    CreateTags afterwards (by the caller, tried twice) when batched. If tagging still fails the
    instance is returned all the same: its NodeClaim tracks it by providerID, but it lacks those
    tags (so ``Instances.find_for_nodeclaim`` does not find it). API errors (botocore's) of
    CreateFleet are raised to every caller.
    """

    def __init__(self, ec2: Any, idle: timedelta, max_wait: timedelta) -> None:
        self._ec2 = ec2
        self._batcher: Batcher[_Launch, tuple[FleetOutcome, bool]] = Batcher(
            self._send, idle, max_wait, _MAX_BATCH
        )

    def expecting(self) -> AbstractContextManager[None]:
        """Within this block the calling thread counts as about to ``launch``: open batches wait
        for it (up to ``max_wait``) instead of closing when idle."""
        return self._batcher.expecting()

    def launch(
        self, request: Mapping[str, Any], own_tags: Mapping[str, str], capacity_type: str
    ) -> FleetOutcome:
        """Launch one instance with ``request`` (built for one instance, without ``own_tags``)."""
        key = json.dumps(request, sort_keys=True, default=str)
        outcome, batched = self._batcher.add(key, _Launch(request, own_tags, capacity_type))
        if batched and outcome.instance is not None:
            self._tag(outcome.instance.instance_id, own_tags)
        return outcome

    def _send(self, launches: list[_Launch]) -> list[tuple[FleetOutcome, bool]]:
        """One CreateFleet for all ``launches``; each gets its outcome and whether it was
        batched (its own tags still to be put on its instance)."""
        first = launches[0]
        body = copy.deepcopy(dict(first.request))
        body["TargetCapacitySpecification"]["TotalTargetCapacity"] = len(launches)
        batched = len(launches) > 1
        if not batched:
            specifications = body.get("TagSpecifications") or [{"Tags": []}]
            shared = {t["Key"]: t["Value"] for t in specifications[0]["Tags"]}
            own = tag_specifications({**shared, **first.own_tags})
            if own:
                body["TagSpecifications"] = own
        response = self._ec2.create_fleet(**body)
        launched, errors = parse_fleet_response(response, first.capacity_type)
        if len(launched) > len(launches):
            log.error(
                "CreateFleet returned more instances than requested",
                extra={"instances": [i.instance_id for i in launched[len(launches) :]]},
            )
        return [
            (FleetOutcome(launched[i] if i < len(launched) else None, tuple(errors)), batched)
            for i in range(len(launches))
        ]

    def _tag(self, instance_id: str, tags: Mapping[str, str]) -> None:
        if not tags:
            return
        for attempt in range(2):
            try:
                self._ec2.create_tags(
                    Resources=[instance_id],
                    Tags=[{"Key": k, "Value": tags[k]} for k in sorted(tags)],
                )
                return
            except AWS_ERRORS as error:
                if attempt == 0:
                    time.sleep(_TAG_RETRY_DELAY)  # a new instance may not be visible to EC2 yet
                    continue
                # The instance is launched and returned; it just stays without these tags.
                log.warning(
                    "tagging a batched instance failed; it stays without its own tags",
                    extra={"instance_id": instance_id, "tags": dict(tags), "error": str(error)},
                )
