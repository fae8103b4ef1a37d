"""Security groups of an EC2NodeClass: selector terms resolved with DescribeSecurityGroups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from karpenter_aws.nodeclass import SecurityGroupStatus
from karpenter_aws.subnets import tag_filters

if TYPE_CHECKING:
    from karpenter_aws.nodeclass import SecurityGroupSelectorTerm

__all__ = ["resolve_security_groups", "security_group_filter_sets"]


def security_group_filter_sets(
    terms: Iterable[SecurityGroupSelectorTerm],
) -> list[list[dict[str, Any]]]:
    """One filter set per tags term, one for all id terms and one for all name terms (ORed)."""
    sets: list[list[dict[str, Any]]] = []
    ids: list[str] = []
    names: list[str] = []
    for term in terms:
        if term.id:
            ids.append(term.id)
        elif term.name:
            names.append(term.name)
        elif term.tags:
            sets.append(tag_filters(term.tags))
    if ids:
        sets.append([{"Name": "group-id", "Values": ids}])
    if names:
        sets.append([{"Name": "group-name", "Values": names}])
    return sets


def resolve_security_groups(
    ec2: Any, terms: Iterable[SecurityGroupSelectorTerm]
) -> list[SecurityGroupStatus]:
    """The security groups any term matches, without duplicates, sorted by id.

    Raises botocore's ``ClientError`` when EC2 refuses the call.
    """
    found: dict[str, Mapping[str, Any]] = {}
    paginator = ec2.get_paginator("describe_security_groups")
    for filters in security_group_filter_sets(terms):
        for page in paginator.paginate(Filters=filters):
            for group in page.get("SecurityGroups") or ():
                found[group["GroupId"]] = group
    return [
        SecurityGroupStatus(id=group_id, name=found[group_id].get("GroupName") or "")
        for group_id in sorted(found)
    ]
