"""What a provider writes on a node's kubelet command line: flags of the values a NodeClass's
kubelet settings set, and taints as ``--register-with-taints`` lists them."""

from __future__ import annotations

from karpenter_core.apis.v1.common import Taint

__all__ = ["kubelet_flags", "taint_text"]


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
