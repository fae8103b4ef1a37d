"""The NodeClass status controller: a provider subclasses it to resolve and publish status;
and the small steps every provider's ``resolve`` and ``kubernetes_version`` share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpenter_core.apis.v1.common import Condition
from karpenter_core.cloudprovider.nodeclass import Verdict
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.controllers.nodeclass_status import ERROR_RETRY, NodeClassStatusController

__all__ = ["ERROR_RETRY", "NodeClassStatusController", "git_version", "kept_verdict"]


def kept_verdict(previous: Condition | None, reason: str, message: str) -> Verdict:
    """A condition's verdict after a failed cloud call: the ``previous`` one kept (its part of
    the status is kept too), or Unknown with ``reason`` and ``message`` when there was none;
    marked as a cloud error, so the NodeClass is resolved again sooner."""
    if previous is None:
        return Verdict("Unknown", reason, message, cloud_error=True)
    return Verdict(previous.status, previous.reason, previous.message, cloud_error=True)


def git_version(version_info: Mapping[str, Any]) -> str:
    """The apiserver's ``gitVersion`` (e.g. v1.31.2) from its /version answer."""
    version = version_info.get("gitVersion")
    if not version:
        raise CloudProviderError("the apiserver's /version has no gitVersion")
    return str(version)
