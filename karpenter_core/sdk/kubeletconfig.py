"""Upstream Karpenter's kubelet settings of a NodeClass (``spec.kubelet`` of an EC2NodeClass,
``spec.kubeletConfiguration`` of a GCENodeClass): the model, its rules as validators and as CRD
keywords and CEL, and the small field helpers it is built from."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from karpenter_core.apis.crdgen import KubeSchema, cel
from karpenter_core.apis.v1.common import KubeModel
from karpenter_core.sdk.fields import checked
from karpenter_core.sdk.kubelet import IMAGE_GC_THRESHOLDS_RULE

__all__ = [
    "EVICTION_SIGNALS",
    "RESERVED_RESOURCES",
    "KubeletConfiguration",
    "explicit_nulls",
    "keys_in",
    "listed",
    "matching",
]

QUANTITY_PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
THRESHOLD_PATTERN = (
    r"^(([0-9]+(\.[0-9]+)?%)|\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE])?)$"
)
GO_DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"

RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
"""The resources systemReserved and kubeReserved may reserve."""
EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
)
"""The signals the eviction thresholds may name."""


def listed(values: tuple[str, ...]) -> str:
    """``'a', 'b'``: values quoted for a CEL list or a message."""
    return ", ".join(f"'{value}'" for value in values)


def matching(pattern: str, what: str) -> Callable[[str], str | None]:
    """A check (for ``checked``) that a string matches ``pattern`` whole, else names ``what``
    it should be."""

    def check(value: str) -> str | None:
        if re.fullmatch(pattern, value) is None:
            return f"{value!r} is not {what}"
        return None

    return check


def explicit_nulls(data: Any, *fields: tuple[str, str]) -> Any:
    """``data`` with an explicit null for each absent (name, alias) field, so the field's
    validator, which checks it against earlier fields, runs and names it in errors."""
    if not isinstance(data, Mapping):
        return data
    missing = {alias: None for name, alias in fields if name not in data and alias not in data}
    return {**data, **missing} if missing else data


def keys_in(allowed: tuple[str, ...], field: str) -> tuple[AfterValidator, KubeSchema]:
    """The validator and CEL rule allowing only ``allowed`` keys in the map ``field``."""
    message = f"valid keys for {field} are [{listed(allowed)}]"

    def check(mapping: dict[str, str]) -> str | None:
        bad = sorted(set(mapping) - set(allowed))
        return f"{message}, not {bad}" if bad else None

    rule = cel(f"self.all(x, x in [{listed(allowed)}])", message)
    return checked(check), KubeSchema(rules=(rule,))


_ReservedQuantity = Annotated[
    str,
    checked(matching(QUANTITY_PATTERN, "a non-negative resource quantity")),
    KubeSchema(keywords={"pattern": QUANTITY_PATTERN}),
]
_Threshold = Annotated[
    str,
    checked(matching(THRESHOLD_PATTERN, "a quantity or a percentage such as '10%'")),
    KubeSchema(keywords={"pattern": THRESHOLD_PATTERN}),
]
_GraceValue = Annotated[
    str,
    checked(matching(GO_DURATION_PATTERN, "a duration such as '1m30s'")),
    KubeSchema(keywords={"pattern": GO_DURATION_PATTERN}),
]


class KubeletConfiguration(KubeModel):
    """Kubelet settings of the nodes (a subset of the kubelet's KubeletConfiguration)."""

    model_config = ConfigDict(
        json_schema_extra=KubeSchema(
            rules=(
                IMAGE_GC_THRESHOLDS_RULE,
                cel(
                    "has(self.evictionSoft) ? self.evictionSoft.all(e, "
                    "has(self.evictionSoftGracePeriod) && e in self.evictionSoftGracePeriod) "
                    ": true",
                    "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
                ),
                cel(
                    "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, "
                    "has(self.evictionSoft) && e in self.evictionSoft) : true",
                    "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
                ),
            )
        )
    )

    cluster_dns: list[str] | None = Field(default=None, alias="clusterDNS")
    """IP addresses of the cluster DNS servers."""
    max_pods: int | None = Field(default=None, ge=0)
    """The most pods a node may run (overrides the provider's default limit)."""
    pods_per_core: int | None = Field(default=None, ge=0)
    """The most pods per vCPU; the lower of this and maxPods applies."""
    system_reserved: (
        Annotated[dict[str, _ReservedQuantity], *keys_in(RESERVED_RESOURCES, "systemReserved")]
        | None
    ) = None
    """Resources reserved for OS daemons (cpu, memory, ephemeral-storage, pid)."""
    kube_reserved: (
        Annotated[dict[str, _ReservedQuantity], *keys_in(RESERVED_RESOURCES, "kubeReserved")] | None
    ) = None
    """Resources reserved for Kubernetes daemons (cpu, memory, ephemeral-storage, pid)."""
    eviction_hard: (
        Annotated[dict[str, _Threshold], *keys_in(EVICTION_SIGNALS, "evictionHard")] | None
    ) = None
    """Hard eviction thresholds per signal (quantity or percentage)."""
    eviction_soft: (
        Annotated[dict[str, _Threshold], *keys_in(EVICTION_SIGNALS, "evictionSoft")] | None
    ) = None
    """Soft eviction thresholds per signal; each needs a grace period."""
    eviction_soft_grace_period: (
        Annotated[
            dict[str, _GraceValue],
            *keys_in(EVICTION_SIGNALS, "evictionSoftGracePeriod"),
        ]
        | None
    ) = None
    """How long each soft eviction threshold must hold before pods are evicted."""
    eviction_max_pod_grace_period: int | None = None
    """The longest grace period (seconds) given to pods evicted on a soft threshold."""
    image_gc_high_threshold_percent: int | None = Field(
        default=None, ge=0, le=100, alias="imageGCHighThresholdPercent"
    )
    """Disk usage percentage above which image garbage collection always runs."""
    image_gc_low_threshold_percent: int | None = Field(
        default=None, ge=0, le=100, alias="imageGCLowThresholdPercent"
    )
    """Disk usage percentage image garbage collection frees down to."""
    cpu_cfs_quota: bool | None = Field(default=None, alias="cpuCFSQuota")
    """Whether CPU CFS quotas enforce containers' CPU limits."""

    @model_validator(mode="before")
    @classmethod
    def _cross_checked_fields_present(cls, data: Any) -> Any:
        return explicit_nulls(data, ("eviction_soft_grace_period", "evictionSoftGracePeriod"))

    @field_validator("image_gc_low_threshold_percent")
    @classmethod
    def _low_below_high(cls, low: int | None, info: ValidationInfo) -> int | None:
        high = info.data.get("image_gc_high_threshold_percent")
        if low is not None and high is not None and high <= low:
            raise ValueError(
                f"imageGCHighThresholdPercent ({high}) must be greater than "
                f"imageGCLowThresholdPercent ({low})"
            )
        return low

    @field_validator("eviction_soft_grace_period", mode="after")
    @classmethod
    def _grace_matches_soft(
        cls, grace: dict[str, str] | None, info: ValidationInfo
    ) -> dict[str, str] | None:
        soft = set(info.data.get("eviction_soft") or ())
        periods = set(grace or ())
        if soft - periods:
            raise ValueError(
                f"evictionSoft signals {sorted(soft - periods)} have no evictionSoftGracePeriod"
            )
        if periods - soft:
            raise ValueError(
                f"evictionSoftGracePeriod signals {sorted(periods - soft)} have no evictionSoft"
            )
        return grace
