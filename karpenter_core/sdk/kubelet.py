"""What a provider writes on a node's kubelet command line: flags of the values a NodeClass's
kubelet settings set, and taints as ``--register-with-taints`` lists them; and the CEL rule of
kubelet settings with image garbage collection thresholds."""

from __future__ import annotations

from karpenter_core.apis.crdgen import cel
from karpenter_core.apis.v1.common import Taint

__all__ = ["IMAGE_GC_THRESHOLDS_RULE", "kubelet_flags", "taint_text"]

IMAGE_GC_THRESHOLDS_RULE = cel(
    "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent)"
    " ? self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent : true",
    "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
)
"""The CEL rule of a kubelet settings model with ``imageGCHighThresholdPercent`` and
``imageGCLowThresholdPercent``: the high one above the low one when both are set."""


def kubelet_flags(*flags: tuple[str, object]) -> list[str]:
    """``--name=value`` for each ``(--name, value)`` whose value is set (not None), in order;
    booleans written as the kubelet reads them (``true``, ``false``)."""
    return [
        f"{name}={str(value).lower() if isinstance(value, bool) else value}"
        for name, value in flags
        if value is not None
    ]


def taint_text(taint: Taint) -> str:
    """A taint as the kubelet's ``--register-with-taints`` takes it: ``key[=value]:effect``."""
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"
