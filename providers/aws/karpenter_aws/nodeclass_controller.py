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

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError

from karpenter_aws.amis import AMIResolver
from karpenter_aws.errors import AWS_ERRORS, describe_error
from karpenter_aws.instanceprofile import InstanceProfiles
from karpenter_aws.labels import TERMINATION_FINALIZER
from karpenter_aws.nodeclass import (
    CONDITION_AMIS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_SUBNETS_READY,
    CONDITION_TYPES,
    CONDITION_VALIDATION_SUCCEEDED,
    GROUP,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    KIND,
    PLURAL,
    VERSION,
    EC2NodeClass,
    EC2NodeClassStatus,
    nodeclass_hash,
    validation_problems,
)
from karpenter_aws.securitygroups import resolve_security_groups
from karpenter_aws.subnets import resolve_subnets
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.common import CONDITION_READY, Condition
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.operator import logs

__all__ = ["ERROR_RETRY", "NodeClassController", "kubernetes_minor_version", "resolve_status"]

MAX_POLL = timedelta(seconds=5)
"""The longest pause between two passes over the EC2NodeClasses."""
ERROR_RETRY = timedelta(seconds=10)
"""How soon an EC2NodeClass whose resolution hit an AWS error is resolved again."""
DEPENDENCIES = (
    CONDITION_SUBNETS_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_AMIS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
)
_MERGE_PATCH = "application/merge-patch+json"
_T = TypeVar("_T")


@dataclass(slots=True)
class _Outcome:
    """One condition's verdict: status True/False, reason and message."""

    status: str
    reason: str
    message: str = ""
    aws_error: bool = False


def _true(condition: str) -> _Outcome:
    return _Outcome("True", condition)


def _resolve_part(
    condition: str,
    resolve: Callable[[], _T],
    previous: _T,
    *,
    missing: tuple[str, str],
    failed: tuple[str, str],
    refused: _T | None = None,
) -> tuple[_T, _Outcome]:
    """Resolve one part of the status and judge its condition.

    An empty answer is ``missing`` (reason, message); a ``CloudProviderError`` (the selection
    cannot be resolved) is ``missing`` with its message and leaves ``refused``; an AWS error is
    ``failed`` (reason, action) and keeps the ``previous`` value.
    """
    try:
        value = resolve()
    except CloudProviderError as error:
        return refused, _Outcome("False", missing[0], str(error))  # type: ignore[return-value]
    except AWS_ERRORS as error:
        reason, action = failed
        return previous, _Outcome("False", reason, describe_error(f"{action} failed", error), True)
    if not value:
        return value, _Outcome("False", *missing)
    return value, _true(condition)


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
    previous = node_class.status
    spec = node_class.spec
    outcomes: dict[str, _Outcome] = {}

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

    waiting = [name for name in DEPENDENCIES if outcomes[name].status != "True"]
    outcomes[CONDITION_VALIDATION_SUCCEEDED] = (
        _Outcome(
            "False",
            "DependenciesNotReady",
            f"waiting for {', '.join(waiting)}",
        )
        if waiting
        else _true(CONDITION_VALIDATION_SUCCEEDED)
    )
    unhealthy = [name for name in CONDITION_TYPES if outcomes[name].status != "True"]
    outcomes[CONDITION_READY] = (
        _Outcome(
            "False",
            "UnhealthyDependents",
            "; ".join(f"{name}=False: {outcomes[name].message}" for name in unhealthy),
        )
        if unhealthy
        else _true(CONDITION_READY)
    )

    earlier = {condition.type: condition for condition in previous.conditions}
    stamp = now.replace(microsecond=0)
    conditions = []
    for name, outcome in outcomes.items():
        before = earlier.get(name)
        conditions.append(
            Condition(
                type=name,
                status=outcome.status,
                reason=outcome.reason,
                message=outcome.message,
                last_transition_time=(
                    before.last_transition_time
                    if before is not None and before.status == outcome.status
                    else stamp
                ),
                observed_generation=node_class.metadata.generation,
            )
        )
    status = EC2NodeClassStatus(
        subnets=subnets,
        security_groups=groups,
        amis=images,
        instance_profile=profile,
        conditions=conditions,
    )
    return (
        status.model_dump(mode="json", by_alias=True, exclude_none=True),
        any(outcome.aws_error for outcome in outcomes.values()),
    )


def kubernetes_minor_version(version_info: Mapping[str, Any]) -> str:
    """``major.minor`` from the apiserver's /version (EKS reports minors such as ``"30+"``)."""
    major = "".join(ch for ch in str(version_info.get("major") or "") if ch.isdigit())
    minor = "".join(ch for ch in str(version_info.get("minor") or "") if ch.isdigit())
    if not major or not minor:
        raise CloudProviderError(f"the apiserver reports no usable version: {dict(version_info)}")
    return f"{major}.{minor}"


@dataclass(slots=True)
class _Resolved:
    generation: int | None
    due: datetime


class _Cluster:
    """The apiserver calls the controller makes (raw JSON)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client as k8s

        self._custom = k8s.CustomObjectsApi(api_client)
        self._version = k8s.VersionApi(api_client)
        self.api_exception = k8s.ApiException

    def kubernetes_version(self) -> str:
        response = self._version.get_code(_preload_content=False)
        return kubernetes_minor_version(json.loads(response.data))

    def node_classes(self) -> list[dict[str, Any]]:
        response = self._custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _preload_content=False
        )
        return json.loads(response.data).get("items") or []

    def nodeclaims_using(self, name: str) -> list[str]:
        response = self._custom.list_cluster_custom_object(
            wk.GROUP, "v1", "nodeclaims", _preload_content=False
        )
        names = []
        for item in json.loads(response.data).get("items") or ():
            ref = (item.get("spec") or {}).get("nodeClassRef") or {}
            if ref.get("group") == GROUP and ref.get("kind") == KIND and ref.get("name") == name:
                names.append(item["metadata"]["name"])
        return sorted(names)

    def patch(self, name: str, body: Mapping[str, Any]) -> None:
        self._custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, body, _content_type=_MERGE_PATCH, _preload_content=False
        )

    def patch_status(self, name: str, body: Mapping[str, Any]) -> None:
        self._custom.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, name, body, _content_type=_MERGE_PATCH, _preload_content=False
        )


class NodeClassController:
    """Keeps every EC2NodeClass's status resolved against EC2, SSM and IAM.

    ``provider`` needs ``settings`` (``AWSSettings``) and ``clients`` (``AWSClients``).
    """

    name = "nodeclass"

    def __init__(self, context: ProviderContext, provider: Any) -> None:
        if context.kube_client is None:
            raise CloudProviderError(
                "the nodeclass controller needs a Kubernetes cluster to read EC2NodeClasses"
            )
        settings = provider.settings
        clients = provider.clients
        self._log = context.logger
        self._clock: Callable[[], datetime] = context.clock
        self._resync: timedelta = settings.nodeclass_resync
        self._poll = min(MAX_POLL, self._resync) if self._resync > timedelta(0) else MAX_POLL
        self._ec2 = clients.ec2
        self._amis = AMIResolver(clients.ec2, clients.ssm, context.clock, context.logger)
        self._profiles = InstanceProfiles(
            clients.iam, settings.cluster_name, clients.region, context.clock
        )
        self._cluster = _Cluster(context.kube_client)
        self._resolved: dict[str, _Resolved] = {}
        self._invalid: set[tuple[str, int | None]] = set()
        self._waiting: dict[str, tuple[str, ...]] = {}

    def run(self, stop: threading.Event) -> None:
        """Resolve EC2NodeClasses until ``stop`` is set; failures are logged and retried."""
        with logs.bind(controller=self.name):
            while not stop.is_set():
                try:
                    self.sync()
                except Exception as error:
                    self._log.error("nodeclass: listing EC2NodeClasses failed: %s", error)
                stop.wait(self._poll.total_seconds())

    def sync(self) -> None:
        """One pass over all EC2NodeClasses."""
        version: str | None = None
        seen: set[str] = set()
        for raw in self._cluster.node_classes():
            metadata = raw.get("metadata") or {}
            name = str(metadata.get("name") or "")
            seen.add(str(metadata.get("uid") or name))
            try:
                node_class = EC2NodeClass.from_manifest(raw)
            except ValidationError as error:
                self._report_invalid(raw, error)
                continue
            try:
                if node_class.metadata.deletion_timestamp is not None:
                    self._finalize(node_class)
                    continue
                self._ensure_metadata(node_class)
                if self._due(node_class):
                    if version is None:
                        version = self._cluster.kubernetes_version()
                    self._reconcile(node_class, version)
            except self._cluster.api_exception as error:
                if error.status not in (404, 409):  # gone, or changed meanwhile: next pass
                    self._log.error(
                        "nodeclass: updating EC2NodeClass %s failed: %s %s",
                        name,
                        error.status,
                        error.reason,
                    )
            except Exception as error:
                self._log.error("nodeclass: reconciling EC2NodeClass %s failed: %s", name, error)
        for uid in set(self._resolved) - seen:
            del self._resolved[uid]
        self._invalid = {key for key in self._invalid if key[0] in seen}
        self._waiting = {key: users for key, users in self._waiting.items() if key in seen}

    # -- steps -------------------------------------------------------------------------------

    def _key(self, node_class: EC2NodeClass) -> str:
        return node_class.metadata.uid or node_class.metadata.name or ""

    def _due(self, node_class: EC2NodeClass) -> bool:
        resolved = self._resolved.get(self._key(node_class))
        return (
            resolved is None
            or resolved.generation != node_class.metadata.generation
            or self._clock() >= resolved.due
        )

    def _ensure_metadata(self, node_class: EC2NodeClass) -> None:
        metadata = node_class.metadata
        annotations = {
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
        }
        patch: dict[str, Any] = {}
        if any(metadata.annotations.get(k) != v for k, v in annotations.items()):
            patch["annotations"] = annotations
        if TERMINATION_FINALIZER not in metadata.finalizers:
            patch["finalizers"] = [*metadata.finalizers, TERMINATION_FINALIZER]
            patch["resourceVersion"] = metadata.resource_version
        if patch:
            self._cluster.patch(metadata.name or "", {"metadata": patch})

    def _reconcile(self, node_class: EC2NodeClass, kubernetes_version: str) -> None:
        now = self._clock()
        status, failed = resolve_status(
            node_class,
            ec2=self._ec2,
            amis=self._amis,
            profiles=self._profiles,
            kubernetes_version=kubernetes_version,
            now=now,
        )
        before = node_class.status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if status != before:
            patch = {**{key: None for key in before if key not in status}, **status}
            self._cluster.patch_status(node_class.metadata.name or "", {"status": patch})
            self._log_changes(node_class.metadata.name or "", before, status)
        retry = min(self._resync, ERROR_RETRY) if failed else self._resync
        self._resolved[self._key(node_class)] = _Resolved(
            node_class.metadata.generation, now + retry
        )

    def _finalize(self, node_class: EC2NodeClass) -> None:
        metadata = node_class.metadata
        name = metadata.name or ""
        if TERMINATION_FINALIZER not in metadata.finalizers:
            return
        key = self._key(node_class)
        users = tuple(self._cluster.nodeclaims_using(name))
        if users:
            if self._waiting.get(key) != users:
                self._log.info(
                    "nodeclass: EC2NodeClass %s is deleted; waiting for NodeClaims %s to go",
                    name,
                    ", ".join(users),
                )
                self._waiting[key] = users
            return
        self._waiting.pop(key, None)
        try:
            deleted = self._profiles.delete(node_class)
        except AWS_ERRORS as error:
            self._log.error(
                "nodeclass: EC2NodeClass %s: %s",
                name,
                describe_error("deleting its instance profiles failed", error),
            )
            return
        if deleted:
            self._log.info(
                "nodeclass: EC2NodeClass %s: deleted instance profiles %s", name, ", ".join(deleted)
            )
        finalizers = [f for f in metadata.finalizers if f != TERMINATION_FINALIZER]
        self._cluster.patch(
            name,
            {"metadata": {"finalizers": finalizers, "resourceVersion": metadata.resource_version}},
        )
        self._resolved.pop(key, None)

    # -- logging -----------------------------------------------------------------------------

    def _report_invalid(self, raw: Mapping[str, Any], error: ValidationError) -> None:
        metadata = raw.get("metadata") or {}
        key = (str(metadata.get("uid") or metadata.get("name")), metadata.get("generation"))
        if key in self._invalid:
            return
        self._invalid.add(key)
        self._log.error(
            "nodeclass: EC2NodeClass %s is not valid, skipping it: %s",
            metadata.get("name"),
            validation_problems(error),
        )

    def _log_changes(self, name: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
        for field, what in (
            ("subnets", "subnets"),
            ("securityGroups", "security groups"),
            ("amis", "AMIs"),
        ):
            old_ids = sorted({item["id"] for item in before.get(field) or ()})
            new_ids = sorted({item["id"] for item in after.get(field) or ()})
            if new_ids and new_ids != old_ids:
                self._log.info("nodeclass: EC2NodeClass %s: %s %s", name, what, ", ".join(new_ids))
        old_conditions = {c["type"]: c for c in before.get("conditions") or ()}
        for condition in after.get("conditions") or ():
            old = old_conditions.get(condition["type"])
            changed = old is None or (old["status"], old.get("message")) != (
                condition["status"],
                condition.get("message"),
            )
            if changed and condition["status"] != "True" and condition["type"] != CONDITION_READY:
                self._log.warning(
                    "nodeclass: EC2NodeClass %s: %s is %s: %s",
                    name,
                    condition["type"],
                    condition["status"],
                    condition.get("message", ""),
                )
