"""The IAM instance profile of an EC2NodeClass.

With ``spec.role`` Karpenter manages a profile for the nodeclass: named deterministically from
cluster, region and nodeclass, under the path ``/karpenter/<region>/<cluster>/<nodeclass-uid>/``,
tagged as the cluster's, holding that role (a different role is replaced). With
``spec.instanceProfile`` the named profile must exist and is used as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_aws.labels import LABEL_NODECLASS, TAG_EKS_CLUSTER_NAME, cluster_tag
from karpenter_aws.nodeclass import EC2NodeClass
from karpenter_core.apis.labels import TOPOLOGY_REGION
from karpenter_core.sdk.types import CloudProviderError

__all__ = ["PROFILE_CACHE_TTL", "InstanceProfileError", "InstanceProfiles"]

PROFILE_CACHE_TTL = timedelta(minutes=15)
"""How long a profile found holding the right role is trusted without asking IAM again."""
_MAX_NAME = 128


class InstanceProfileError(CloudProviderError):
    """The instance profile cannot be used: it, or the role to put in it, does not exist."""


class InstanceProfiles:
    """Finds, creates and deletes the instance profiles of EC2NodeClasses (IAM calls)."""

    def __init__(
        self,
        iam: Any,
        cluster_name: str,
        region: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._iam = iam
        self._cluster = cluster_name
        self._region = region
        self._clock = clock
        self._lock = threading.Lock()
        self._ensured: dict[str, tuple[str, datetime]] = {}
        """Profile name -> (the role it was found holding, when)."""

    def path(self, node_class: EC2NodeClass) -> str:
        """The IAM path of the profiles Karpenter manages for ``node_class``."""
        uid = node_class.metadata.uid or node_class.metadata.name or ""
        return f"/karpenter/{self._region}/{self._cluster}/{uid}/"

    def profile_name(self, node_class: EC2NodeClass) -> str:
        """``<cluster>_<digest of region, nodeclass name and uid>``, at most 128 characters."""
        identity = f"{self._region}/{node_class.metadata.name}/{node_class.metadata.uid or ''}"
        digest = str(int(hashlib.sha256(identity.encode()).hexdigest()[:16], 16))
        return f"{self._cluster[: _MAX_NAME - len(digest) - 1]}_{digest}"

    def tags(self, node_class: EC2NodeClass) -> dict[str, str]:
        """Tags of a managed profile: the nodeclass's tags plus the cluster's ownership tags."""
        return {
            **node_class.spec.tags,
            cluster_tag(self._cluster): "owned",
            TAG_EKS_CLUSTER_NAME: self._cluster,
            LABEL_NODECLASS: node_class.metadata.name or "",
            TOPOLOGY_REGION: self._region,
        }

    def ensure(self, node_class: EC2NodeClass) -> str:
        """The name of the instance profile ``node_class``'s instances use, created if managed.

        Raises ``InstanceProfileError`` when the profile (``spec.instanceProfile``) or the role
        (``spec.role``) does not exist, botocore's ``ClientError`` for other refusals.
        """
        spec = node_class.spec
        if spec.instance_profile is not None:
            self._check_exists(spec.instance_profile)
            return spec.instance_profile
        if spec.role is None:
            raise InstanceProfileError(
                f"EC2NodeClass {node_class.metadata.name!r} sets neither spec.role nor "
                "spec.instanceProfile"
            )
        if not self._cluster:
            raise InstanceProfileError(
                "cannot manage an instance profile for spec.role without a cluster name "
                "(--cluster-name / CLUSTER_NAME)"
            )
        name = self.profile_name(node_class)
        role = spec.role.rsplit("/", 1)[-1]  # AddRoleToInstanceProfile takes the bare name
        now = self._clock()
        with self._lock:
            ensured = self._ensured.get(name)
        if ensured is not None and ensured[0] == role and now - ensured[1] < PROFILE_CACHE_TTL:
            return name
        profile = self._get(name)
        if profile is None:
            profile = self._iam.create_instance_profile(
                InstanceProfileName=name,
                Path=self.path(node_class),
                Tags=[{"Key": k, "Value": v} for k, v in sorted(self.tags(node_class).items())],
            )["InstanceProfile"]
        self._ensure_role(name, profile, role)
        with self._lock:
            self._ensured = {
                k: v for k, v in self._ensured.items() if now - v[1] < PROFILE_CACHE_TTL
            }
            self._ensured[name] = (role, now)
        return name

    def delete(self, node_class: EC2NodeClass) -> list[str]:
        """Delete the profiles Karpenter created for ``node_class`` (their role removed first);
        returns their names. Profiles already gone are fine."""
        path = self.path(node_class)
        names = {self.profile_name(node_class)}
        for page in self._iam.get_paginator("list_instance_profiles").paginate(PathPrefix=path):
            names.update(
                p["InstanceProfileName"]
                for p in page.get("InstanceProfiles") or ()
                if p.get("Path") == path
            )
        deleted = []
        for name in sorted(names):
            profile = self._get(name)
            if profile is None:
                continue
            for role in profile.get("Roles") or ():
                self._ignore_missing(
                    self._iam.remove_role_from_instance_profile,
                    InstanceProfileName=name,
                    RoleName=role["RoleName"],
                )
            self._ignore_missing(self._iam.delete_instance_profile, InstanceProfileName=name)
            deleted.append(name)
        with self._lock:
            self._ensured = {k: v for k, v in self._ensured.items() if k not in names}
        return deleted

    def _get(self, name: str) -> dict[str, Any] | None:
        try:
            return self._iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except self._iam.exceptions.NoSuchEntityException:
            return None

    def _check_exists(self, name: str) -> None:
        if self._get(name) is None:
            raise InstanceProfileError(
                f"instance profile {name!r} (spec.instanceProfile) not found"
            )

    def _ensure_role(self, name: str, profile: dict[str, Any], role: str) -> None:
        current = [r["RoleName"] for r in profile.get("Roles") or ()]
        if current == [role]:
            return
        for other in current:
            self._iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=other)
        try:
            self._iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role)
        except self._iam.exceptions.NoSuchEntityException:
            raise InstanceProfileError(
                f"role {role!r} (spec.role) not found: cannot add it to instance profile {name!r}"
            ) from None

    def _ignore_missing(self, call: Callable[..., Any], **kwargs: Any) -> None:
        with contextlib.suppress(self._iam.exceptions.NoSuchEntityException):
            call(**kwargs)
