"""What a provider's conformance profile (the record's ``conformance``) builds on: its fake
cloud's settings laid over the environment and taken off again, and NodeClass manifests with the
status their controller would write.

Pure standard library, so a profile module may import it (``sdk.testing``, with its test
certificate authority, is for tests and fakes).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

from karpenter_core.apis.v1.common import CONDITION_READY

__all__ = ["TRANSITION_TIME", "EnvironOverlay", "condition", "is_ready", "respecified"]

TRANSITION_TIME = "2026-01-01T00:00:00Z"
"""The lastTransitionTime of a profile's conditions."""


class EnvironOverlay:
    """Values laid over ``os.environ``; ``restore`` puts back what each name had before the
    first ``set`` of it (unset when it had none)."""

    __slots__ = ("_saved",)

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def set(self, values: Mapping[str, str]) -> None:
        """Set ``values`` in the environment, remembering what they replace."""
        for name, value in values.items():
            self._saved.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def restore(self) -> None:
        """Put back every name ``set`` replaced, and forget them."""
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved.clear()


def condition(
    type_: str, true: bool, reason: str, message: str = "", generation: int | None = None
) -> dict[str, Any]:
    """A condition of a NodeClass's status, as its manifest has it (observed at ``generation``
    when given)."""
    manifest: dict[str, Any] = {
        "type": type_,
        "status": "True" if true else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": TRANSITION_TIME,
    }
    if generation is not None:
        manifest["observedGeneration"] = generation
    return manifest


def is_ready(manifest: Mapping[str, Any]) -> bool:
    """Whether a NodeClass manifest's status has a True Ready condition."""
    conditions = (manifest.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == CONDITION_READY and c.get("status") == "True" for c in conditions)


def respecified(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a NodeClass manifest for a changed spec: its ``metadata.generation`` one
    higher (from 1 when it has none)."""
    changed = copy.deepcopy(dict(manifest))
    changed["metadata"]["generation"] = changed["metadata"].get("generation", 1) + 1
    return changed
