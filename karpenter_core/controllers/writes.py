"""Conditional writes the controllers share: status patches and finalizer changes.

Every write carries the object's resourceVersion; on a conflict the object is read again and
the change re-applied (``retry_on_conflict``), so a write never clobbers one it did not see.
NodeClaim writes are fed back to the cluster state at once, so the next pass sees them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from karpenter_core.operator.kube import Conflict, NotFound, retry_on_conflict

if TYPE_CHECKING:
    from karpenter_core.controllers.context import Context

__all__ = ["patch_status", "remove_finalizer", "update_metadata"]


def _record(context: Context, obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("kind") == "NodeClaim":
        context.state.update_nodeclaim(obj)
    return obj


def patch_status(
    context: Context,
    path: str,
    obj: Mapping[str, Any],
    mutate: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Change ``status`` with ``mutate`` (given a copy of the status) and patch the status
    subresource conditionally; re-read and retry on conflict."""
    current: list[Mapping[str, Any]] = [obj]

    def attempt() -> dict[str, Any]:
        status = copy.deepcopy(dict(current[0].get("status") or {}))
        mutate(status)
        version = (current[0].get("metadata") or {}).get("resourceVersion")
        body = {"metadata": {"resourceVersion": version}, "status": status}
        try:
            return _record(context, context.client.patch(path + "/status", body))
        except Conflict:
            current[0] = context.client.get(path)
            raise

    return retry_on_conflict(attempt)


def update_metadata(
    context: Context,
    path: str,
    obj: Mapping[str, Any],
    mutate: Callable[[dict[str, Any]], None],
) -> dict[str, Any] | None:
    """Change ``metadata`` with ``mutate`` (given a copy) and patch it conditionally; re-read and
    retry on conflict. None if the object is gone."""
    current: list[Mapping[str, Any]] = [obj]

    def attempt() -> dict[str, Any]:
        meta = copy.deepcopy(dict(current[0].get("metadata") or {}))
        mutate(meta)
        body = {
            "metadata": {
                key: meta.get(key)
                for key in ("resourceVersion", "labels", "annotations", "finalizers")
            }
        }
        try:
            return _record(context, context.client.patch(path, body))
        except Conflict:
            current[0] = context.client.get(path)
            raise

    try:
        return retry_on_conflict(attempt)
    except NotFound:
        return None


def remove_finalizer(
    context: Context, path: str, obj: Mapping[str, Any], finalizer: str
) -> dict[str, Any] | None:
    """Take ``finalizer`` off the object (conditionally); None if the object is gone."""

    def drop(meta: dict[str, Any]) -> None:
        meta["finalizers"] = [f for f in meta.get("finalizers") or () if f != finalizer]

    if finalizer not in ((obj.get("metadata") or {}).get("finalizers") or ()):
        return dict(obj)
    return update_metadata(context, path, obj, drop)
