"""The nodeclass controller: resolves each GCENodeClass into its status on the SDK's NodeClass
status loop (which also keeps the drift hash annotations and the termination finalizer).

For each GCENodeClass due, it resolves the node images of the cluster's Kubernetes version
(``images.resolve_images``) and reads the subnetwork of ``spec.networkConfig.subnetwork`` (unset:
the cluster's, from the node pool's template, nothing to read), then writes ImagesReady,
SubnetworkReady and Ready. A failed Compute call keeps that part's previous value and condition
(Unknown when there was none) and retries sooner.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.api_core.exceptions import GoogleAPICallError, NotFound

from karpenter_core.apis.v1.common import CONDITION_READY, Condition
from karpenter_core.sdk.nodeclass import Verdict, ready_verdict, resolved_status, stamp_conditions
from karpenter_core.sdk.record import ProviderContext
from karpenter_core.sdk.status import NodeClassStatusController, git_version, kept_verdict
from karpenter_gcp.images import ImageResolutionError, resolve_images
from karpenter_gcp.nodeclass import (
    CONDITION_IMAGES_READY,
    CONDITION_SUBNETWORK_READY,
    CONDITION_TYPES,
    HASH_VERSION,
    NODE_CLASS,
    GCENodeClass,
    GCENodeClassStatus,
    Image,
    nodeclass_hash,
)

DEFAULT_RESYNC = timedelta(minutes=5)
"""How often an unchanged GCENodeClass is resolved again (the community provider's image cache)."""
_SUBNETWORK = re.compile(r"^(?:.*/)?projects/([^/]+)/regions/([^/]+)/subnetworks/([^/]+)$")


def subnetwork_path(value: str, project: str, region: str) -> tuple[str, str, str] | None:
    """(project, region, name) of a subnetwork given by name, path or URL; None when it is none."""
    if "/" not in value:
        return (project, region, value) if value else None
    match = _SUBNETWORK.match(value)
    return None if match is None else (match[1], match[2], match[3])


@dataclass(frozen=True, slots=True)
class StatusResolver:
    """Resolves a GCENodeClass's status through the Compute ``images`` and ``subnetworks``
    clients, for the cluster's ``project`` and ``region``."""

    images: Any
    subnetworks: Any
    project: str
    region: str

    def __call__(
        self, node_class: GCENodeClass, kubernetes_version: str, now: datetime
    ) -> tuple[dict[str, Any], bool]:
        """The status ``node_class`` should have (camelCase JSON) and whether a Compute call
        failed; conditions keep their lastTransitionTime unless their status changes."""
        earlier = {condition.type: condition for condition in node_class.status.conditions}
        verdicts: dict[str, Verdict] = {}
        images, verdicts[CONDITION_IMAGES_READY] = self._images(
            node_class, kubernetes_version, earlier.get(CONDITION_IMAGES_READY)
        )
        subnetwork, verdicts[CONDITION_SUBNETWORK_READY] = self._subnetwork(
            node_class, earlier.get(CONDITION_SUBNETWORK_READY)
        )
        verdicts[CONDITION_READY] = ready_verdict(verdicts, CONDITION_TYPES)
        conditions = stamp_conditions(
            verdicts, node_class.status.conditions, now, node_class.metadata.generation
        )
        status = GCENodeClassStatus(images=images, subnetwork=subnetwork, conditions=conditions)
        return resolved_status(status, verdicts)

    def _images(
        self, node_class: GCENodeClass, kubernetes_version: str, previous: Condition | None
    ) -> tuple[list[Image], Verdict]:
        try:
            images = resolve_images(self.images, node_class, kubernetes_version)
        except ImageResolutionError as error:
            return [], Verdict("False", "ImagesNotFound", str(error))
        except GoogleAPICallError as error:
            message = f"listing images failed: {error.message}"
            return node_class.status.images, kept_verdict(
                previous, "ImagesResolutionFailed", message
            )
        return images, Verdict.true(CONDITION_IMAGES_READY)

    def _subnetwork(
        self, node_class: GCENodeClass, previous: Condition | None
    ) -> tuple[str | None, Verdict]:
        config = node_class.spec.network_config
        given = config.subnetwork if config is not None else None
        if not given:
            return None, Verdict("True", CONDITION_SUBNETWORK_READY, "the cluster's subnetwork")
        parts = subnetwork_path(given, self.project, self.region)
        if parts is None or parts[1] != self.region:
            message = f"{given!r} is no subnetwork of the cluster's region {self.region}"
            return None, Verdict("False", "SubnetworkInvalid", message)
        path = "projects/{}/regions/{}/subnetworks/{}".format(*parts)
        try:
            self.subnetworks.get(project=parts[0], region=parts[1], subnetwork=parts[2])
        except NotFound:
            return None, Verdict("False", "SubnetworkNotFound", f"subnetwork {path} not found")
        except GoogleAPICallError as error:
            message = f"reading subnetwork {path} failed: {error.message}"
            verdict = kept_verdict(previous, "SubnetworkUnknownError", message)
            return node_class.status.subnetwork, verdict
        return path, Verdict.true(CONDITION_SUBNETWORK_READY)


def resolve_status(
    node_class: GCENodeClass,
    *,
    images_client: Any,
    subnetworks_client: Any,
    project: str,
    region: str,
    kubernetes_version: str,
    now: datetime,
) -> tuple[dict[str, Any], bool]:
    """One ``StatusResolver`` call: the status ``node_class`` should have and whether a Compute
    call failed."""
    resolver = StatusResolver(images_client, subnetworks_client, project, region)
    return resolver(node_class, kubernetes_version, now)


class NodeClassController(
    NodeClassStatusController[GCENodeClass], info=NODE_CLASS, hash_version=HASH_VERSION
):
    """Keeps every GCENodeClass's status resolved against the apiserver and Compute Engine."""

    restamp_nodeclaims = True

    def __init__(
        self, context: ProviderContext, resolver: StatusResolver, resync: timedelta = DEFAULT_RESYNC
    ) -> None:
        super().__init__(context, resync)
        self._resolver = resolver

    @classmethod
    def for_provider(cls, context: ProviderContext, provider: Any) -> NodeClassController:
        """The controller of a GCP cloud provider: its ``clients`` (``GCPClients``: ``project``,
        ``images``, ``subnetworks``) and ``settings.region``."""
        clients = provider.clients
        resolver = StatusResolver(
            clients.images, clients.subnetworks, clients.project, provider.settings.region
        )
        return cls(context, resolver)

    def spec_hash(self, node_class: GCENodeClass) -> str:
        """``nodeclass_hash`` of the spec."""
        return nodeclass_hash(node_class.spec)

    def kubernetes_version(self, version_info: Mapping[str, Any]) -> str:
        """The apiserver's ``gitVersion``, e.g. v1.31.2-gke.1000."""
        return git_version(version_info)

    def resolve(
        self, node_class: GCENodeClass, kubernetes_version: str, now: datetime
    ) -> tuple[dict[str, Any], bool]:
        """The ``StatusResolver``'s status."""
        return self._resolver(node_class, kubernetes_version, now)

    def log_resolved(self, name: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
        """New node images."""
        old = sorted(image["sourceImage"] for image in before.get("images") or ())
        new = sorted(image["sourceImage"] for image in after.get("images") or ())
        if new and new != old:
            self._log.info("nodeclass: GCENodeClass %s: images %s", name, ", ".join(new))
