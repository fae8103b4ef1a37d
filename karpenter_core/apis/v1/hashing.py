"""The NodePool template hash that marks NodeClaims, and tells when they have drifted; and the
hash function providers use for their NodeClass specs (``spec_hash``).

As upstream, the hash covers ``spec.template`` except the requirements (requirement drift is
detected separately), with lists compared as sets and empty values ignored, so reordering taints
or writing a default explicitly does not change it. The number differs from upstream's (a
SHA-256 of canonical JSON, not Go's hashstructure), so ``nodepool-hash-version`` carries our own
tag: NodeClaims annotated by another implementation read as a version mismatch, never as drift.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["HASH_VERSION", "nodepool_hash", "spec_hash"]

HASH_VERSION = "py-v1"
"""Bumped whenever a change to the hashed fields would change existing NodePools' hashes."""


def _normalized(value: Any) -> Any:
    """Drop empty values, sort lists (as sets) and dict keys, recursively."""
    if isinstance(value, Mapping):
        out = {k: _normalized(v) for k, v in sorted(value.items())}
        return {k: v for k, v in out.items() if v not in (None, "", [], {}, 0, False)}
    if isinstance(value, list):
        items = [_normalized(v) for v in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    return value


def nodepool_hash(nodepool: Mapping[str, Any]) -> str:
    """The hash of a NodePool manifest's ``spec.template`` (requirements excluded)."""
    template = dict((nodepool.get("spec") or {}).get("template") or {})
    spec = {k: v for k, v in (template.get("spec") or {}).items() if k != "requirements"}
    hashed = _normalized({"metadata": template.get("metadata") or {}, "spec": spec})
    digest = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()
    return str(int(digest[:16], 16))


def _is_unset(value: Any) -> bool:
    """None, "", [] or {}: a field left unset. ``False`` and ``0`` are values, not unset."""
    return value is None or (isinstance(value, str | list | dict) and not value)


def _as_sets(value: Any) -> Any:
    """Drop unset values, sort lists (as sets) and dict keys, recursively."""
    if isinstance(value, Mapping):
        out = {key: _as_sets(item) for key, item in sorted(value.items())}
        return {key: item for key, item in out.items() if not _is_unset(item)}
    if isinstance(value, list):
        items = [_as_sets(item) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    return value


def spec_hash(fields: Mapping[str, Any]) -> str:
    """The drift hash of a NodeClass spec's hashed ``fields`` (camelCase JSON).

    Lists count as sets and None, "", [] and {} as unset, so reordering a list or writing out a
    default keeps the hash; unlike ``nodepool_hash``, ``false`` and ``0`` are values.
    """
    canonical = json.dumps(_as_sets(fields), sort_keys=True, separators=(",", ":"))
    return str(int(hashlib.sha256(canonical.encode()).hexdigest()[:16], 16))
