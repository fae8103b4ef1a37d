"""What the fake ARM server's resource modules share: ARM's error answers, names, time."""

from __future__ import annotations

import datetime
from typing import Any

from karpenter_azure.fake_arm.faults import arm_error

Answer = tuple[int, Any, dict[str, str]]
"""An answer: HTTP status, JSON body (None for none) and headers."""

COMPUTE = "Microsoft.Compute"
NETWORK = "Microsoft.Network"


class ArmError(Exception):
    """An ARM error answer."""

    def __init__(self, status: int, code: str, message: str, target: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.body = arm_error(code, message, target)


def bad(code: str, message: str, target: str | None = None) -> ArmError:
    """A 400 Bad Request with ARM's error body."""
    return ArmError(400, code, message, target)


def not_found(kind: str, name: str, group: str) -> ArmError:
    """ARM's 404 for a resource of ``kind`` missing from resource group ``group``."""
    return ArmError(
        404,
        "ResourceNotFound",
        f"The Resource '{kind}/{name}' under resource group '{group}' was not found. "
        "For more details please go to https://aka.ms/ARMResourceNotFoundFix",
    )


def now() -> str:
    """The time as ARM writes it (ISO 8601, UTC, ``Z``)."""
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def location_name(value: Any) -> str:
    """A location as ARM compares it: ``"East US"`` is ``eastus``."""
    return str(value or "").replace(" ", "").lower()
