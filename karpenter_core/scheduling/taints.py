"""Taints and tolerations, with Kubernetes' matching rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = ["EFFECTS", "Taint", "Toleration", "untolerated"]

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class Taint(NamedTuple):
    """A node taint."""

    key: str
    value: str
    effect: str

    @classmethod
    def from_manifest(cls, obj: Mapping[str, object]) -> Taint:
        """From ``{"key", "value", "effect"}``."""
        return cls(str(obj.get("key", "")), str(obj.get("value") or ""), str(obj.get("effect", "")))

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


class Toleration(NamedTuple):
    """A pod toleration (operator Equal or Exists; empty effect matches every effect)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @classmethod
    def from_manifest(cls, obj: Mapping[str, object]) -> Toleration:
        """From a pod spec toleration."""
        return cls(
            str(obj.get("key") or ""),
            str(obj.get("operator") or "Equal"),
            str(obj.get("value") or ""),
            str(obj.get("effect") or ""),
        )

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator == "Equal" and self.value == taint.value and bool(self.key)


def untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first taint (of any effect) none of the tolerations tolerates, or None."""
    tolerations = tuple(tolerations)
    for taint in taints:
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None
