"""The NodeClass status controller: a provider subclasses it to resolve and publish status."""

from karpenter_core.controllers.nodeclass_status import ERROR_RETRY, NodeClassStatusController

__all__ = ["ERROR_RETRY", "NodeClassStatusController"]
