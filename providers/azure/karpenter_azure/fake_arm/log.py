"""The fake ARM server's record of every request (the SDK's fake request log, with the API
version ARM calls carry), and the checks a benchmark makes on it."""

from __future__ import annotations

from dataclasses import dataclass

from karpenter_core.sdk.fakehttp import (
    RETRY_AFTER_TOLERANCE,
    RequestLog,
    Violation,
)
from karpenter_core.sdk.fakehttp import RequestRecord as BaseRecord

__all__ = ["RETRY_AFTER_TOLERANCE", "RequestLog", "RequestRecord", "Violation"]


@dataclass(slots=True)
class RequestRecord(BaseRecord):
    """One request (see the SDK's ``RequestRecord``), with its ``api-version``."""

    api_version: str = ""

    @property
    def is_arm(self) -> bool:
        """Whether this is an ARM call (not a token, discovery or price-list request)."""
        return self.path.lower().startswith("/subscriptions/")

    @property
    def is_poll(self) -> bool:
        """Whether this is a status poll of an asynchronous operation."""
        return self.method == "GET" and "/operations/" in self.path.lower()
