"""What a provider gives the conformance suite: a profile of operations on a fake of its cloud.

``ProviderRecord.conformance`` returns an object with these operations. A profile may leave out
what its cloud cannot do: it lists the operation in ``unsupported`` with the reason, and the
checks that need it are skipped with that reason (the core checks cannot be skipped: they fail).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["OPERATIONS", "ConformanceProfile", "missing"]

OPERATIONS = (
    "start",
    "reset",
    "stop",
    "settings",
    "node_class",
    "drifted",
    "insufficient_capacity",
    "launch_unmanaged",
)


@runtime_checkable
class ConformanceProfile(Protocol):
    """A fake of the provider's cloud, reachable from other processes, and how to act on it."""

    nodes_via: Literal["registrar", "native"]
    """How launched instances become Nodes on a KWOK cluster: through the suite's node
    registrar, or by the provider itself."""
    unsupported: Mapping[str, str]
    """Operations this profile leaves out, with the reason (shown with each skipped check)."""

    def start(self) -> None:
        """Start the fake cloud (once per session)."""

    def reset(self) -> None:
        """Return the fake cloud to its state just after ``start`` (before each check)."""

    def stop(self) -> None:
        """Stop the fake cloud and remove what ``start`` created."""

    def settings(self) -> Mapping[str, str]:
        """Provider option values (by option name) that point the provider at the fake cloud."""

    def node_class(self, ready: bool = True) -> dict[str, Any]:
        """A manifest of the provider's default NodeClass, status included: ready to launch, or
        not ready."""

    def drifted(self, node_class: dict[str, Any]) -> dict[str, Any]:
        """``node_class`` changed so that instances launched from it have drifted."""

    def insufficient_capacity(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """Make the fake cloud refuse launches of this offering for lack of capacity."""

    def launch_unmanaged(self, tags: Mapping[str, str]) -> str:
        """Launch an instance behind the controller's back, with ``tags``; its providerID."""


def missing(profile: object, operation: str) -> str | None:
    """Why ``profile`` cannot do ``operation`` (``None`` when it can)."""
    unsupported = getattr(profile, "unsupported", None) or {}
    if operation in unsupported:
        return str(unsupported[operation])
    if not callable(getattr(profile, operation, None)):
        return f"the profile has no {operation}() operation"
    return None
