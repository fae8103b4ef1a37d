"""Compute list semantics for the fake GCE server: the ``filter`` expressions the provider and
the community provider send (``labels.k=v``, ``labels.k:*``, ``name eq re``, ``name=gke-1341-*``,
``operationType="..."``, joined by ``AND`` or juxtaposed in parentheses), page tokens, and the
list and aggregated-list answers."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

_TERM = re.compile(
    r"""\s*\(?\s*(?P<field>[\w.\-/]+)\s*(?P<op>!=|=|:|\s+eq\s+|\s+ne\s+)\s*"""
    r"""(?P<value>"[^"]*"|'[^']*'|[^\s()]+)\s*\)?\s*(?:AND\b\s*)?""",
    re.IGNORECASE,
)
DEFAULT_PAGE = 500


class FilterError(ValueError):
    """A filter expression the fake does not understand."""


@functools.cache
def _terms(text: str) -> tuple[tuple[str, str, str], ...]:
    terms, at = [], 0
    while at < len(text.strip()):
        match = _TERM.match(text, at)
        if not match or match.end() == at:
            raise FilterError(
                f"Invalid value for field 'filter': '{text}'. Invalid list filter expression."
            )
        terms.append((match["field"], match["op"].strip().lower(), match["value"].strip("\"'")))
        at = match.end()
    return tuple(terms)


def _lookup(item: Mapping[str, Any], path: str) -> Any:
    value: Any = item
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return (
        str(value).rsplit("/", 1)[-1] if isinstance(value, str) and "://" in value else str(value)
    )


def matches(item: Mapping[str, Any], expression: str) -> bool:
    """Whether ``item`` passes the filter ``expression`` (every term of it)."""
    for name, op, value in _terms(expression):
        found = _lookup(item, name)
        if op == ":" and value == "*":
            ok = found is not None
        elif found is None:
            ok = op in ("!=", "ne")
        elif op in ("eq", "ne"):
            ok = re.fullmatch(value, _text(found)) is not None
            ok = ok if op == "eq" else not ok
        else:
            ok = fnmatchcase(_text(found), value)
            ok = ok if op in ("=", ":") else not ok
        if not ok:
            return False
    return True


def page(
    items: Sequence[Any], params: Mapping[str, str], size_key: str = "maxResults"
) -> tuple[list[Any], str]:
    """One page of ``items`` for the request's ``pageToken`` and page size; the next token
    ("" on the last page)."""
    start = int(params.get("pageToken") or 0)
    size = int(params.get(size_key) or DEFAULT_PAGE)
    end = start + size
    return list(items[start:end]), (str(end) if end < len(items) else "")


def listed(items: Iterable[dict[str, Any]], params: Mapping[str, str]) -> dict[str, Any]:
    """A list answer: the page of ``items`` passing the request's filter."""
    _terms(params.get("filter") or "")  # a filter it cannot read is refused, items or none
    chosen = [i for i in items if matches(i, params.get("filter") or "")]
    items_page, token = page(chosen, params)
    return {"items": items_page, "nextPageToken": token} if token else {"items": items_page}


def aggregated(
    key: str, by_zone: Mapping[str, list[dict[str, Any]]], params: Mapping[str, str]
) -> dict[str, Any]:
    """An aggregated list answer: the page of items passing the filter, under ``zones/<z>``
    and ``key`` (``instances``, ``machineTypes``)."""
    _terms(params.get("filter") or "")
    flat = [(z, i) for z, items in sorted(by_zone.items()) for i in items]
    chosen = [(z, i) for z, i in flat if matches(i, params.get("filter") or "")]
    items_page, token = page(chosen, params)
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for zone, item in items_page:
        grouped.setdefault(f"zones/{zone}", {key: []})[key].append(item)
    out: dict[str, Any] = {"items": grouped, "unreachables": []}
    return {**out, "nextPageToken": token} if token else out


def by_zone(resources: Mapping[tuple[str, str], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Resources keyed by (zone, name) as lists by zone, in name order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for (zone, _), resource in sorted(resources.items()):
        out.setdefault(zone, []).append(resource)
    return out
