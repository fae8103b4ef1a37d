"""The ``karpenter.kwok.sh/v1alpha1`` KWOKNodeClass: how long fake nodes take to register."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

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
from karpenter_core.sdk.crds import KubeSchema, generate_crd
from karpenter_kwok.labels import GROUP

__all__ = [
    "CRD_PATH",
    "KIND",
    "PLURAL",
    "VERSION",
    "KWOKNodeClass",
    "KWOKNodeClassSpec",
    "KWOKNodeClassStatus",
    "crd",
]

VERSION = "v1alpha1"
KIND = "KWOKNodeClass"
PLURAL = "kwoknodeclasses"
CRD_PATH = Path(__file__).parent / "crds" / f"{GROUP}_{PLURAL}.yaml"
"""The generated CRD shipped with the package (regenerate with ``python -m karpenter_kwok.nodeclass``)."""

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


def crd() -> dict[str, Any]:
    """The KWOKNodeClass CustomResourceDefinition (as ``karpenter crds`` publishes it)."""
    return generate_crd(
        KWOKNodeClass,
        group=GROUP,
        kind=KIND,
        plural=PLURAL,
        version=VERSION,
        categories=("karpenter",),
    )


if __name__ == "__main__":
    from karpenter_core.sdk.crds import render_crd

    header = "# Generated from karpenter_kwok.nodeclass: python -m karpenter_kwok.nodeclass\n"
    CRD_PATH.write_text(header + render_crd(crd()), encoding="utf-8")
    print(f"wrote {CRD_PATH}")
