"""Structured logs and the controller's metrics, for a provider's own controllers."""

from karpenter_core.operator import logs, metrics

__all__ = ["logs", "metrics"]
