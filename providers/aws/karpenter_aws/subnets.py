"""Subnets of an EC2NodeClass: selector terms resolved with DescribeSubnets, and the subnet per
zone a launch uses (the one with the most free IP addresses)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from karpenter_aws.nodeclass import SubnetStatus

if TYPE_CHECKING:
    from karpenter_aws.nodeclass import SubnetSelectorTerm

__all__ = [
    "SubnetInfo",
    "ZonalSubnets",
    "describe_subnets",
    "resolve_subnets",
    "subnet_filter_sets",
    "tag_filters",
]


def tag_filters(tags: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """EC2 filters matching every tag: ``"*"`` means the key exists with any value."""
    filters: list[dict[str, Any]] = []
    for key, value in sorted((tags or {}).items()):
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters


def subnet_filter_sets(terms: Iterable[SubnetSelectorTerm]) -> list[list[dict[str, Any]]]:
    """One DescribeSubnets filter set per tags term, plus one for all id terms (terms are ORed)."""
    sets: list[list[dict[str, Any]]] = []
    ids: list[str] = []
    for term in terms:
        if term.id:
            ids.append(term.id)
        elif term.tags:
            sets.append(tag_filters(term.tags))
    if ids:
        sets.append([{"Name": "subnet-id", "Values": ids}])
    return sets


def _describe(ec2: Any, filters: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for page in ec2.get_paginator("describe_subnets").paginate(Filters=filters):
        yield from page.get("Subnets") or ()


def _available_ips(subnet: Mapping[str, Any]) -> int:
    return int(subnet.get("AvailableIpAddressCount") or 0)


def resolve_subnets(ec2: Any, terms: Iterable[SubnetSelectorTerm]) -> list[SubnetStatus]:
    """The subnets any term matches, without duplicates: most free IP addresses first, then id.

    Raises botocore's ``ClientError`` when EC2 refuses the call.
    """
    found: dict[str, Mapping[str, Any]] = {}
    for filters in subnet_filter_sets(terms):
        for subnet in _describe(ec2, filters):
            found[subnet["SubnetId"]] = subnet
    ordered = sorted(found.values(), key=lambda s: (-_available_ips(s), s["SubnetId"]))
    return [
        SubnetStatus(
            id=s["SubnetId"],
            zone=s.get("AvailabilityZone") or "",
            zone_id=s.get("AvailabilityZoneId") or "",
        )
        for s in ordered
    ]


@dataclass(frozen=True, slots=True)
class SubnetInfo:
    """A subnet as a launch sees it: where it is and how many IP addresses are free."""

    id: str
    zone: str
    zone_id: str
    available_ips: int


def describe_subnets(ec2: Any, subnet_ids: Sequence[str]) -> list[SubnetInfo]:
    """The subnets with these ids that exist (DescribeSubnets with a ``subnet-id`` filter)."""
    if not subnet_ids:
        return []
    return [
        SubnetInfo(
            id=s["SubnetId"],
            zone=s.get("AvailabilityZone") or "",
            zone_id=s.get("AvailabilityZoneId") or "",
            available_ips=_available_ips(s),
        )
        for s in _describe(ec2, [{"Name": "subnet-id", "Values": list(subnet_ids)}])
    ]


def _by_zone(subnets: Iterable[SubnetInfo]) -> dict[str, SubnetInfo]:
    best: dict[str, SubnetInfo] = {}
    for subnet in subnets:
        current = best.get(subnet.zone)
        if current is None or (-subnet.available_ips, subnet.id) < (
            -current.available_ips,
            current.id,
        ):
            best[subnet.zone] = subnet
    return best


class ZonalSubnets:
    """Zone -> the subnet to launch into: the one with the most free IP addresses (ties: lower
    id), from a DescribeSubnets answer kept for ``ttl``.

    ``mark_exhausted`` records that a launch found a subnet out of addresses
    (InsufficientFreeAddressesInSubnet): until the next describe it counts as having none.
    """

    def __init__(
        self,
        ec2: Any,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        ttl: timedelta = timedelta(seconds=30),
    ) -> None:
        self._ec2 = ec2
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[frozenset[str], tuple[datetime, list[SubnetInfo]]] = {}
        self._exhausted: set[str] = set()

    def get(self, subnet_ids: Sequence[str]) -> dict[str, SubnetInfo]:
        """Zone -> the subnet to launch into, from a describe at most ``ttl`` old."""
        key = frozenset(subnet_ids)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
            exhausted = set(self._exhausted)
        if cached is None or now - cached[0] >= self._ttl:
            subnets = describe_subnets(self._ec2, sorted(key))
            with self._lock:
                self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self._ttl}
                self._cache[key] = (now, subnets)
                self._exhausted -= {s.id for s in subnets}
                exhausted = set(self._exhausted)
        else:
            subnets = cached[1]
        return _by_zone(
            SubnetInfo(s.id, s.zone, s.zone_id, 0) if s.id in exhausted else s for s in subnets
        )

    def mark_exhausted(self, subnet_id: str) -> None:
        """Count ``subnet_id`` as having no free addresses until it is described again."""
        with self._lock:
            self._exhausted.add(subnet_id)
