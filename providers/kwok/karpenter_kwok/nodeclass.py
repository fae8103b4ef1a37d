"""The ``karpenter.kwok.sh/v1alpha1`` KWOKNodeClass: how long fake nodes take to register."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field

from karpenter_core.apis.duration import parse_duration
from karpenter_core.apis.v1.common import (
    CONDITION_READY,
    Conditions,
    Duration,
    KubeModel,
    KubeObject,
    ObjectMeta,
)
from karpenter_core.sdk.crds import KubeSchema
from karpenter_core.sdk.nodeclass import NotReady
from karpenter_core.sdk.record import NodeClassInfo
from karpenter_kwok.labels import GROUP

__all__ = [
    "KIND",
    "NODE_CLASS",
    "PLURAL",
    "VERSION",
    "KWOKNodeClass",
    "KWOKNodeClassSpec",
    "KWOKNodeClassStatus",
]

VERSION = "v1alpha1"
KIND = "KWOKNodeClass"
PLURAL = "kwoknodeclasses"

_READY_BY_DEFAULT = {
    "conditions": [
        {
            "type": CONDITION_READY,
            "status": "True",
            "reason": CONDITION_READY,
            "message": "",
            "lastTransitionTime": "2024-01-01T01:01:01Z",
        }
    ]
}


class KWOKNodeClassSpec(KubeModel):
    """Settings of the fake instances."""

    node_registration_delay: Annotated[
        Duration | None,
        Field(
            description=(
                "How long a launched node takes to appear in the cluster, to model the start-up "
                "time of real instances (e.g. '30s', '1m30s'). Default: no delay."
            )
        ),
    ] = None

    def registration_delay(self) -> timedelta:
        """``nodeRegistrationDelay`` as a ``timedelta`` (zero when unset)."""
        if self.node_registration_delay is None:
            return timedelta(0)
        return parse_duration(self.node_registration_delay)


class KWOKNodeClassStatus(KubeModel):
    """Observed state; KWOKNodeClass has no prerequisites, so it is Ready from the start."""

    conditions: Conditions = Field(default_factory=list, description="Readiness signals.")


class KWOKNodeClass(KubeObject):
    """Parameters of fake KWOK nodes, referenced by NodePools in spec.template.spec.nodeClassRef."""

    api_version: Literal["karpenter.kwok.sh/v1alpha1"] = "karpenter.kwok.sh/v1alpha1"
    kind: Literal["KWOKNodeClass"] = "KWOKNodeClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: KWOKNodeClassSpec = Field(default_factory=KWOKNodeClassSpec)
    status: Annotated[KWOKNodeClassStatus, KubeSchema(keywords={"default": _READY_BY_DEFAULT})] = (
        Field(default_factory=KWOKNodeClassStatus)
    )

    def not_ready_reason(self) -> str | None:
        """The message of a Ready condition that is not True, or None (ready, or not reported)."""
        for condition in self.status.conditions:
            if condition.type == CONDITION_READY and condition.status != "True":
                return condition.message or condition.reason
        return None

    def not_ready(self) -> NotReady | None:
        """Why the KWOKNodeClass launches nothing (see ``not_ready_reason``), or None."""
        reason = self.not_ready_reason()
        return None if reason is None else NotReady(reason, unknown=False)


NODE_CLASS = NodeClassInfo(KWOKNodeClass, GROUP, VERSION, KIND, PLURAL)
"""The KWOKNodeClass kind as the provider's record lists it (its CRD: ``python -m
karpenter_core.sdk.crds kwok``)."""
