"""The nodeclass controller: resolves each EC2NodeClass's selector terms into its status.

Every poll it lists the EC2NodeClasses and, for those whose generation changed or whose last
resolution is older than ``--nodeclass-resync-period``, resolves subnets, security groups, AMIs
and the instance profile, then writes the status (conditions SubnetsReady, SecurityGroupsReady,
AMIsReady, InstanceProfileReady, ValidationSucceeded and Ready). It keeps the drift hash
annotations and the termination finalizer on every EC2NodeClass; once one is deleted and no
NodeClaim uses it any more, it deletes the instance profiles Karpenter created for it and
releases the finalizer.

``resolve_status`` is the AWS-only part: nodeclass in, status out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from karpenter_aws.amis import AMIResolver
from karpenter_aws.errors import AWS_ERRORS, describe_error
from karpenter_aws.instanceprofile import InstanceProfiles
from karpenter_aws.nodeclass import (
    CONDITION_AMIS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_SUBNETS_READY,
    CONDITION_TYPES,
    CONDITION_VALIDATION_SUCCEEDED,
    HASH_VERSION,
    NODE_CLASS,
    AMIStatus,
    EC2NodeClass,
    EC2NodeClassStatus,
    SecurityGroupStatus,
    SubnetStatus,
    nodeclass_hash,
)
from karpenter_aws.securitygroups import resolve_security_groups
from karpenter_aws.subnets import resolve_subnets
from karpenter_core.apis.v1.common import CONDITION_READY
from karpenter_core.sdk.nodeclass import Verdict, ready_verdict, resolved_status, stamp_conditions
from karpenter_core.sdk.record import ProviderContext
from karpenter_core.sdk.status import ERROR_RETRY, NodeClassStatusController
from karpenter_core.sdk.types import CloudProviderError

__all__ = ["ERROR_RETRY", "NodeClassController", "kubernetes_minor_version", "resolve_status"]

DEPENDENCIES = (
    CONDITION_SUBNETS_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_AMIS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
)
_T = TypeVar("_T")


def _resolve_part(
    condition: str,
    resolve: Callable[[], _T],
    previous: _T,
    *,
    missing: tuple[str, str],
    failed: tuple[str, str],
    refused: _T | None = None,
) -> tuple[_T, Verdict]:
    """Resolve one part of the status and judge its condition.

    An empty answer is ``missing`` (reason, message); a ``CloudProviderError`` (the selection
    cannot be resolved) is ``missing`` with its message and leaves ``refused``; an AWS error is
    ``failed`` (reason, action) and keeps the ``previous`` value.
    """
    try:
        value = resolve()
    except CloudProviderError as error:
        return refused, Verdict("False", missing[0], str(error))  # type: ignore[return-value]
    except AWS_ERRORS as error:
        reason, action = failed
        return previous, Verdict("False", reason, describe_error(f"{action} failed", error), True)
    if not value:
        return value, Verdict("False", *missing)
    return value, Verdict.true(condition)


class _Parts(NamedTuple):
    """What the selector terms resolved to, with the verdict on each part by condition."""

    subnets: list[SubnetStatus]
    security_groups: list[SecurityGroupStatus]
    amis: list[AMIStatus]
    instance_profile: str | None
    outcomes: dict[str, Verdict]


def _resolve_parts(
    node_class: EC2NodeClass,
    *,
    ec2: Any,
    amis: AMIResolver,
    profiles: InstanceProfiles,
    kubernetes_version: str,
) -> _Parts:
    """Resolve subnets, security groups, AMIs and the instance profile, each judged."""
    previous = node_class.status
    spec = node_class.spec
    outcomes: dict[str, Verdict] = {}
    subnets, outcomes[CONDITION_SUBNETS_READY] = _resolve_part(
        CONDITION_SUBNETS_READY,
        lambda: resolve_subnets(ec2, spec.subnet_selector_terms),
        previous.subnets,
        missing=("SubnetsNotFound", "no subnet matches subnetSelectorTerms"),
        failed=("SubnetsResolutionFailed", "describing subnets"),
    )
    groups, outcomes[CONDITION_SECURITY_GROUPS_READY] = _resolve_part(
        CONDITION_SECURITY_GROUPS_READY,
        lambda: resolve_security_groups(ec2, spec.security_group_selector_terms),
        previous.security_groups,
        missing=(
            "SecurityGroupsNotFound",
            "no security group matches securityGroupSelectorTerms",
        ),
        failed=("SecurityGroupsResolutionFailed", "describing security groups"),
    )
    images, outcomes[CONDITION_AMIS_READY] = _resolve_part(
        CONDITION_AMIS_READY,
        lambda: amis.resolve(node_class, kubernetes_version),
        previous.amis,
        missing=("AMINotFound", "no AMI matches amiSelectorTerms"),
        failed=("AMIsResolutionFailed", "resolving AMIs"),
        refused=[],
    )
    profile, outcomes[CONDITION_INSTANCE_PROFILE_READY] = _resolve_part(
        CONDITION_INSTANCE_PROFILE_READY,
        lambda: profiles.ensure(node_class),
        previous.instance_profile,
        missing=("InstanceProfileNotFound", "no instance profile"),
        failed=("InstanceProfileResolutionFailed", "ensuring the instance profile"),
        refused=None,
    )
    return _Parts(subnets, groups, images, profile, outcomes)


def _judge(outcomes: dict[str, Verdict]) -> None:
    """Add ValidationSucceeded (every dependency True) and Ready (every condition True)."""
    waiting = [name for name in DEPENDENCIES if outcomes[name].status != "True"]
    outcomes[CONDITION_VALIDATION_SUCCEEDED] = (
        Verdict(
            "False",
            "DependenciesNotReady",
            f"waiting for {', '.join(waiting)}",
        )
        if waiting
        else Verdict.true(CONDITION_VALIDATION_SUCCEEDED)
    )
    outcomes[CONDITION_READY] = ready_verdict(outcomes, CONDITION_TYPES)


def resolve_status(
    node_class: EC2NodeClass,
    *,
    ec2: Any,
    amis: AMIResolver,
    profiles: InstanceProfiles,
    kubernetes_version: str,
    now: datetime,
) -> tuple[dict[str, Any], bool]:
    """The status ``node_class`` should have (camelCase JSON) and whether an AWS call failed.

    A resolution that fails keeps the previously resolved values of that part and sets its
    condition False with the error. Conditions keep their lastTransitionTime unless their status
    changes.
    """
    parts = _resolve_parts(
        node_class,
        ec2=ec2,
        amis=amis,
        profiles=profiles,
        kubernetes_version=kubernetes_version,
    )
    _judge(parts.outcomes)
    conditions = stamp_conditions(
        parts.outcomes,
        node_class.status.conditions,
        now,
        node_class.metadata.generation,
    )
    status = EC2NodeClassStatus(
        subnets=parts.subnets,
        security_groups=parts.security_groups,
        amis=parts.amis,
        instance_profile=parts.instance_profile,
        conditions=conditions,
    )
    return resolved_status(status, parts.outcomes)


def kubernetes_minor_version(version_info: Mapping[str, Any]) -> str:
    """``major.minor`` from the apiserver's /version (EKS reports minors such as ``"30+"``)."""
    major = "".join(ch for ch in str(version_info.get("major") or "") if ch.isdigit())
    minor = "".join(ch for ch in str(version_info.get("minor") or "") if ch.isdigit())
    if not major or not minor:
        raise CloudProviderError(f"the apiserver reports no usable version: {dict(version_info)}")
    return f"{major}.{minor}"


class NodeClassController(
    NodeClassStatusController[EC2NodeClass], info=NODE_CLASS, hash_version=HASH_VERSION
):
    """Keeps every EC2NodeClass's status resolved against EC2, SSM and IAM.

    ``provider`` needs ``settings`` (``AWSSettings``) and ``clients`` (``AWSClients``).
    """

    restamp_nodeclaims = True

    def __init__(self, context: ProviderContext, provider: Any) -> None:
        settings = provider.settings
        clients = provider.clients
        super().__init__(context, settings.nodeclass_resync)
        self._ec2 = clients.ec2
        self._amis = AMIResolver(clients.ec2, clients.ssm, context.clock, context.logger)
        self._profiles = InstanceProfiles(
            clients.iam, settings.cluster_name, clients.region, context.clock
        )

    def spec_hash(self, node_class: EC2NodeClass) -> str:
        """``nodeclass_hash`` of the spec."""
        return nodeclass_hash(node_class.spec)

    def kubernetes_version(self, version_info: Mapping[str, Any]) -> str:
        """``major.minor`` (``kubernetes_minor_version``)."""
        return kubernetes_minor_version(version_info)

    def resolve(
        self, node_class: EC2NodeClass, kubernetes_version: str, now: datetime
    ) -> tuple[dict[str, Any], bool]:
        """``resolve_status`` against this controller's clients."""
        return resolve_status(
            node_class,
            ec2=self._ec2,
            amis=self._amis,
            profiles=self._profiles,
            kubernetes_version=kubernetes_version,
            now=now,
        )

    def release(self, node_class: EC2NodeClass) -> bool:
        """Delete the instance profiles Karpenter created for the EC2NodeClass."""
        name = node_class.metadata.name or ""
        try:
            deleted = self._profiles.delete(node_class)
        except AWS_ERRORS as error:
            self._log.error(
                "nodeclass: EC2NodeClass %s: %s",
                name,
                describe_error("deleting its instance profiles failed", error),
            )
            return False
        if deleted:
            self._log.info(
                "nodeclass: EC2NodeClass %s: deleted instance profiles %s", name, ", ".join(deleted)
            )
        return True

    def log_resolved(self, name: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
        """New subnet, security group and AMI ids."""
        for field, what in (
            ("subnets", "subnets"),
            ("securityGroups", "security groups"),
            ("amis", "AMIs"),
        ):
            old_ids = sorted({item["id"] for item in before.get(field) or ()})
            new_ids = sorted({item["id"] for item in after.get(field) or ()})
            if new_ids and new_ids != old_ids:
                self._log.info("nodeclass: EC2NodeClass %s: %s %s", name, what, ", ".join(new_ids))
