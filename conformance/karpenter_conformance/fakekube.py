"""An in-process fake of the Kubernetes API, served over HTTP on 127.0.0.1.

Controllers are tested against it with their real client (``KubeClient``, the informers, the
Kubernetes Python client): it speaks the REST API's paths, verbs and status codes for the parts
the controllers use. It is held to the real apiserver by the test suite that runs the same tests
against both (see docs/testing.md).

What it implements:

- every collection path, core (``/api/v1``) and grouped (``/apis/<group>/<version>``), cluster
  or namespaced (``/namespaces/<ns>/<plural>``); any plural is accepted (no discovery, no CRDs
  needed, no schema validation);
- create (``generateName`` included; namespaced objects need their Namespace), get, list (with
  ``limit``/``continue``), replace, patch (merge, JSON patch, strategic merge applied as a merge
  patch) and delete, with ``resourceVersion`` taken from one global counter (etcd's revision);
- 409 Conflict for a stale ``metadata.resourceVersion`` on replace or merge patch, a failed
  JSON-patch ``test``, a taken name, or failed delete preconditions;
- finalizers: deleting an object that has some sets ``deletionTimestamp``; it is removed when
  the last finalizer comes off; no finalizer may be added to an object being deleted;
- the ``status`` subresource: writes to the object leave ``status`` alone and writes to
  ``/status`` change only ``status`` (Leases, Events, ConfigMaps and Secrets have none);
  ``metadata.generation`` counts spec changes;
- watch with ``resourceVersion`` (from a version: the events after it; ``""`` or ``"0"``:
  the current objects as ADDED first), ``timeoutSeconds``, and bookmarks with
  ``allowWatchBookmarks`` (every ``bookmark_interval`` seconds and two seconds before the
  watch's timeout, as the apiserver's watch cache does, and only when the version moved past
  the last one sent); a version older than the last
  ``compact()`` is answered with a 410 Gone ERROR event (a list with such a ``continue``, 410);
- field selectors (``=``, ``==``, ``!=`` on any dotted field, e.g. ``spec.nodeName``,
  ``status.phase``, ``metadata.name``) and label selectors (``=``, ``!=``, ``in``, ``notin``,
  exists, ``!``) on list and watch; an object that stops matching a watch's selector is sent as
  DELETED, one that starts matching as ADDED;
- the Eviction subresource (``pods/<name>/eviction``): refused with 429 when a matching
  PodDisruptionBudget allows no disruption, counted from the pods themselves (Ready and not
  terminating is healthy; ``minAvailable``/``maxUnavailable``, numbers or percentages of the
  matching pods); Pending, finished and terminating pods are evicted regardless, and more than
  one matching budget is a 500, as upstream;
- deleting a Namespace deletes what is in it.

What it does not: no kubelet, scheduler or controller-manager (pods stay Pending until a test
binds them; deleted pods go at once, as if their kubelet confirmed it; no garbage collection of
owned objects, no PDB status), no admission, defaulting or validation, no RBAC or
authentication, no server-side apply, no strategic-merge list semantics, and a paginated list is
not a consistent snapshot. Tests can inject failures with ``fail``.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import math
import random
import re
import string
import threading
import time
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client as k8s

from karpenter_core.sdk.testing import LoopbackServer, serve_in_background

__all__ = ["FakeKube", "Fault", "LoopbackServer", "Resource"]


NO_STATUS_SUBRESOURCE = frozenset({"leases", "events", "configmaps", "secrets", "namespaces"})
"""Plurals whose ``status`` (if any) is written with the object itself."""
BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
BOOKMARK_BEFORE_TIMEOUT = 2.0
"""Seconds before a watch's timeout at which it gets a bookmark (as the apiserver's cache)."""


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind's collection: ``prefix`` (``api/v1`` or ``apis/<group>/<version>``) and plural."""

    prefix: str
    plural: str

    @property
    def api_version(self) -> str:
        """``v1`` or ``<group>/<version>``."""
        return self.prefix.removeprefix("api/").removeprefix("apis/")


@dataclass(slots=True)
class _Target:
    """A parsed request path."""

    resource: Resource
    namespace: str | None
    name: str | None = None
    subresource: str | None = None


@dataclass(slots=True)
class _Event:
    revision: int
    resource: Resource
    kind: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None


@dataclass(slots=True)
class Fault:
    """A failure to inject: requests matching ``method`` (any if None) and whose path starts
    with ``path`` are answered with ``status`` ``times`` times (``retry_after`` adds the
    header)."""

    status: int
    method: str | None = None
    path: str = ""
    times: int = 1
    retry_after: float | None = None
    reason: str = "InjectedFault"
    matched: list[str] = field(default_factory=list)


class ApiFailure(Exception):
    """A request is refused: the HTTP status and a ``Status`` object's reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_body(status: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": status,
    }


def _parse_path(path: str) -> _Target:
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        prefix, rest = "/".join(parts[:2]), parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        prefix, rest = "/".join(parts[:3]), parts[3:]
    else:
        raise ApiFailure(
            404, "NotFound", f"the server could not find the requested resource {path}"
        )
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise ApiFailure(
            404, "NotFound", f"the server could not find the requested resource {path}"
        )
    return _Target(
        Resource(prefix, rest[0]),
        namespace,
        rest[1] if len(rest) > 1 else None,
        rest[2] if len(rest) > 2 else None,
    )


# -- selectors ----------------------------------------------------------------------------------


def _field_value(obj: Mapping[str, Any], dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def _field_matcher(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    terms: list[tuple[str, bool, str]] = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        match = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", term)
        if match is None:
            raise ApiFailure(400, "BadRequest", f"invalid field selector: {term!r}")
        terms.append((match[1].strip(), match[2] != "!=", match[3].strip()))
    return lambda obj: all((_field_value(obj, f) == v) == eq for f, eq, v in terms)


_SET_TERM = re.compile(r"\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*")


def _label_term(term: str) -> tuple[str, str, frozenset[str]]:
    """One label-selector requirement as (operator, key, values)."""
    found = _SET_TERM.fullmatch(term)
    if found is not None:
        values = frozenset(v.strip() for v in found[3].split(",") if v.strip())
        return found[2], found[1], values
    equal = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", term)
    if equal is not None:
        operator = "!=" if equal[2] == "!=" else "="
        return operator, equal[1].strip(), frozenset({equal[3].strip()})
    if term.startswith("!"):
        return "!", term[1:].strip(), frozenset()
    if re.fullmatch(r"[\w./-]+", term):
        return "exists", term, frozenset()
    raise ApiFailure(400, "BadRequest", f"invalid label selector: {term!r}")


def _label_matcher(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    terms = [_label_term(t.strip()) for t in re.split(r",(?![^(]*\))", selector) if t.strip()]

    def holds(operator: str, key: str, values: frozenset[str], labels: Mapping[str, str]) -> bool:
        if operator in ("=", "in"):
            return labels.get(key) in values
        if operator in ("!=", "notin"):
            return labels.get(key) not in values
        return (key in labels) == (operator == "exists")

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(holds(*term, labels) for term in terms)

    return matches


def _selector(params: Mapping[str, str]) -> Callable[[Mapping[str, Any]], bool]:
    by_field = _field_matcher(params.get("fieldSelector", ""))
    by_label = _label_matcher(params.get("labelSelector", ""))
    return lambda obj: by_field(obj) and by_label(obj)


def _selector_object_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels, matchExpressions) against labels; a null selector
    matches nothing, an empty one everything (as a PDB's)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = set(expression.get("values") or ())
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


# -- patches ------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiFailure(422, "Invalid", f"JSON pointer {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(doc, list):
            doc = doc[int(token)]
        elif isinstance(doc, dict):
            doc = doc[token]
        else:
            raise KeyError(token)
    return doc


def json_patch(doc: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902 JSON patch; a failed ``test`` or a missing path raises a 422 (Invalid)."""
    doc = copy.deepcopy(doc)
    for op in operations:
        name, tokens = op.get("op"), _pointer(str(op.get("path", "")))
        try:
            if name == "test":
                if _walk(doc, tokens) != op.get("value"):
                    raise ApiFailure(
                        422, "Invalid", f"the test operation on {op.get('path')} failed"
                    )
                continue
            if name in ("move", "copy"):
                value = copy.deepcopy(_walk(doc, _pointer(str(op.get("from", "")))))
                if name == "move":
                    doc = _remove(doc, _pointer(str(op.get("from", ""))))
                doc = _add(doc, tokens, value)
            elif name == "add":
                doc = _add(doc, tokens, copy.deepcopy(op.get("value")))
            elif name == "remove":
                doc = _remove(doc, tokens)
            elif name == "replace":
                _walk(doc, tokens)
                doc = _add(_remove(doc, tokens), tokens, copy.deepcopy(op.get("value")))
            else:
                raise ApiFailure(422, "Invalid", f"unknown JSON patch operation {name!r}")
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise ApiFailure(
                422, "Invalid", f"JSON patch {name} {op.get('path')}: {error!r}"
            ) from None
    return doc


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise KeyError(last)
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return None
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, list):
        del parent[int(last)]
    else:
        del parent[last]
    return doc


# -- disruption budgets -------------------------------------------------------------------------


def _resolve(value: Any, total: int) -> int:
    text = str(value)
    if text.endswith("%"):
        return math.ceil(total * int(text[:-1]) / 100)
    return int(text)


def _healthy(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def disruptions_allowed(pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> int:
    """How many of ``pods`` (those the budget selects) may be disrupted now."""
    spec = pdb.get("spec") or {}
    expected = len(pods)
    healthy = sum(1 for pod in pods if _healthy(pod))
    if spec.get("minAvailable") is not None:
        desired = _resolve(spec["minAvailable"], expected)
    elif spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _resolve(spec["maxUnavailable"], expected))
    else:
        desired = expected
    return max(0, healthy - desired)


# -- the API ------------------------------------------------------------------------------------


Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped objects."""


class FakeKube:
    """The fake API's state and its HTTP server (started by the constructor; ``stop`` ends it).

    ``bookmark_interval``: seconds between bookmarks on a watch that asked for them;
    ``max_history``: how many changes are kept for watches to resume from.
    """

    def __init__(self, bookmark_interval: float = 60.0, max_history: int = 20_000) -> None:
        self.bookmark_interval = bookmark_interval
        self.max_history = max_history
        """Events kept for watches; older ones are compacted away."""
        self.revision = 0
        """The newest resourceVersion handed out."""
        self.compacted = 0
        """Versions up to this one are gone: watching or continuing from them is 410 Gone."""
        self.requests: list[tuple[str, str]] = []
        """Every request served: (method, path with query)."""
        self.faults: list[Fault] = []
        self._objects: dict[Resource, dict[Key, dict[str, Any]]] = {}
        self._events: list[_Event] = []
        self._lock = threading.Condition(threading.RLock())
        self._watch_epoch = 0
        self._bookmark_epoch = 0
        for name in BUILTIN_NAMESPACES:
            self.put("/api/v1/namespaces", {"kind": "Namespace", "metadata": {"name": name}})
        self._server = LoopbackServer(("127.0.0.1", 0), _handler(self))
        self._thread = serve_in_background(self._server, "fake kube-apiserver")

    # -- for tests -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Where the API listens."""
        return f"http://127.0.0.1:{self._server.server_port}"

    def api_client(self) -> k8s.ApiClient:
        """A Kubernetes client for this API (no retries: an error is the answer)."""
        configuration = k8s.Configuration(host=self.url)
        configuration.retries = 0
        return k8s.ApiClient(configuration)

    def stop(self) -> None:
        """End every watch and stop serving."""
        self.end_watches()
        self._server.shutdown()
        self._server.server_close()

    def put(self, collection: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``manifest`` as is (status included; no checks), creating or replacing it, as
        an admin writing to etcd would. ``collection`` is a collection path."""
        target = _parse_path(collection)
        obj = copy.deepcopy(dict(manifest))
        meta = obj.setdefault("metadata", {})
        namespace = target.namespace or meta.get("namespace") or ""
        key = (namespace, meta["name"])
        with self._lock:
            previous = self._objects.get(target.resource, {}).get(key)
            self._stamp(target.resource, obj, namespace, previous)
            self._commit(target.resource, key, previous, obj)
            return copy.deepcopy(obj)

    def items(self, collection: str) -> list[dict[str, Any]]:
        """The objects under a collection path (all namespaces for a cluster-wide path)."""
        target = _parse_path(collection)
        with self._lock:
            return copy.deepcopy(self._scan(target, lambda _: True))

    def object(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None."""
        target = _parse_path(path)
        with self._lock:
            found = self._objects.get(target.resource, {}).get(
                (target.namespace or "", target.name or "")
            )
            return copy.deepcopy(found)

    def compact(self, revision: int | None = None) -> int:
        """Forget the history up to ``revision`` (default: all of it), as etcd's compaction:
        a watch or list continuation from an older version gets 410 Gone. Returns it."""
        with self._lock:
            self.compacted = max(self.compacted, self.revision if revision is None else revision)
            cut = bisect.bisect_right([e.revision for e in self._events], self.compacted)
            del self._events[:cut]
            return self.compacted

    def end_watches(self) -> None:
        """Close every open watch (as an apiserver restart would)."""
        with self._lock:
            self._watch_epoch += 1
            self._lock.notify_all()

    def send_bookmarks(self) -> None:
        """Send a bookmark now on every watch that allows them."""
        with self._lock:
            self._bookmark_epoch += 1
            self._lock.notify_all()

    def fail(self, status: int, method: str | None = None, path: str = "", **kw: Any) -> Fault:
        """Answer the next matching request(s) with ``status`` (see ``Fault``)."""
        fault = Fault(status, method, path, **kw)
        with self._lock:
            self.faults.append(fault)
        return fault

    # -- REST ------------------------------------------------------------------------------

    def handle(
        self, method: str, raw_path: str, body: Any, content_type: str
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """One non-watch request: (status, JSON body, extra headers)."""
        split = urlsplit(raw_path)
        params = {k: v[-1] for k, v in parse_qs(split.query).items()}
        try:
            self._inject(method, split.path)
            target = _parse_path(split.path)
            if method == "GET":
                if target.name is None:
                    return 200, self._list(target, params), {}
                return 200, self._get(target), {}
            if method == "POST":
                if target.subresource == "eviction":
                    return 201, self._evict(target, body), {}
                return 201, self._create(target, body), {}
            if method == "PUT":
                return 200, self._replace(target, body), {}
            if method == "PATCH":
                return 200, self._patch(target, body, content_type), {}
            if method == "DELETE":
                return 200, self._delete(target, body or {}), {}
            raise ApiFailure(405, "MethodNotAllowed", f"{method} is not supported")
        except ApiFailure as failure:
            headers = {}
            if failure.status == 429:
                headers["Retry-After"] = "1"
            return (
                failure.status,
                _status_body(failure.status, failure.reason, failure.message),
                headers,
            )
        except _Injected as injected:
            return injected.answer()

    def _inject(self, method: str, path: str) -> None:
        with self._lock:
            for fault in self.faults:
                if (
                    fault.times > 0
                    and fault.method in (None, method)
                    and path.startswith(fault.path)
                ):
                    fault.times -= 1
                    fault.matched.append(f"{method} {path}")
                    raise _Injected(fault)

    def _collection(self, resource: Resource) -> dict[Key, dict[str, Any]]:
        return self._objects.setdefault(resource, {})

    def _scan(
        self, target: _Target, matches: Callable[[Mapping[str, Any]], bool]
    ) -> list[dict[str, Any]]:
        objects = self._objects.get(target.resource, {})
        return [
            obj
            for (namespace, _), obj in sorted(objects.items())
            if target.namespace in (None, namespace) and matches(obj)
        ]

    def _found(self, target: _Target) -> dict[str, Any]:
        obj = self._objects.get(target.resource, {}).get(
            (target.namespace or "", target.name or "")
        )
        if obj is None:
            what = target.resource.plural.removesuffix("s")
            raise ApiFailure(404, "NotFound", f'{what} "{target.name}" not found')
        return obj

    def _get(self, target: _Target) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._found(target))

    def _list(self, target: _Target, params: Mapping[str, str]) -> dict[str, Any]:
        matches = _selector(params)
        limit = int(params.get("limit") or 0)
        after: tuple[str, str] | None = None
        with self._lock:
            revision = self.revision
            if params.get("continue"):
                token = json.loads(base64.urlsafe_b64decode(params["continue"]))
                revision, after = int(token["rv"]), (token["ns"], token["name"])
                if revision < self.compacted:
                    raise ApiFailure(410, "Expired", "the provided continue parameter is too old")
            items = [
                obj for obj in self._scan(target, matches) if after is None or _key(obj) > after
            ]
            more = limit > 0 and len(items) > limit
            items = copy.deepcopy(items[:limit] if limit > 0 else items)
        meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if more:
            last = _key(items[-1])
            token = {"rv": revision, "ns": last[0], "name": last[1]}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
        return {
            "kind": "List",
            "apiVersion": target.resource.api_version,
            "metadata": meta,
            "items": items,
        }

    def _create(self, target: _Target, body: Any) -> dict[str, Any]:
        if target.name is not None:
            raise ApiFailure(405, "MethodNotAllowed", "POST goes to a collection")
        obj = copy.deepcopy(body if isinstance(body, dict) else {})
        meta = obj.setdefault("metadata", {})
        namespace = target.namespace or ""
        if meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise ApiFailure(
                400, "BadRequest", "the namespace of the object does not match the path"
            )
        with self._lock:
            if namespace and ("", namespace) not in self._collection(
                Resource("api/v1", "namespaces")
            ):
                raise ApiFailure(404, "NotFound", f'namespaces "{namespace}" not found')
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise ApiFailure(422, "Invalid", "metadata.name or generateName is required")
                alphabet = string.ascii_lowercase + string.digits
                meta["name"] = meta["generateName"] + "".join(random.choices(alphabet, k=5))
            key = (namespace, meta["name"])
            if key in self._collection(target.resource):
                raise ApiFailure(
                    409,
                    "AlreadyExists",
                    f'{target.resource.plural} "{meta["name"]}" already exists',
                )
            for server_field in ("deletionTimestamp", "resourceVersion", "uid"):
                meta.pop(server_field, None)
            _initial_status(target.resource, obj)
            self._stamp(target.resource, obj, namespace, None)
            self._commit(target.resource, key, None, obj)
            return copy.deepcopy(obj)

    def _stamp(
        self,
        resource: Resource,
        obj: dict[str, Any],
        namespace: str,
        previous: Mapping[str, Any] | None,
    ) -> None:
        """Fill in the server-set fields of an object about to be stored."""
        meta = obj.setdefault("metadata", {})
        old = (previous or {}).get("metadata") or {}
        obj.setdefault("apiVersion", resource.api_version)
        if namespace:
            meta["namespace"] = namespace
        meta["uid"] = old.get("uid") or meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = (
            old.get("creationTimestamp") or meta.get("creationTimestamp") or _now()
        )
        for kept in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if old.get(kept) is not None:
                meta[kept] = old[kept]
        generation = int(old.get("generation") or 0)
        if previous is None or _spec(previous) != _spec(obj):
            generation += 1
        meta["generation"] = generation

    def _commit(
        self,
        resource: Resource,
        key: Key,
        previous: dict[str, Any] | None,
        obj: dict[str, Any] | None,
    ) -> None:
        """Store (or, with ``obj`` None, remove) an object and record the event."""
        self.revision += 1
        objects = self._collection(resource)
        if obj is None:
            removed = copy.deepcopy(objects.pop(key))
            removed["metadata"]["resourceVersion"] = str(self.revision)
            self._events.append(_Event(self.revision, resource, "DELETED", previous, removed))
        else:
            obj["metadata"]["resourceVersion"] = str(self.revision)
            objects[key] = obj
            kind = "ADDED" if previous is None else "MODIFIED"
            self._events.append(_Event(self.revision, resource, kind, previous, copy.deepcopy(obj)))
        if len(self._events) > self.max_history:
            self.compact(self._events[len(self._events) - self.max_history].revision - 1)
        self._lock.notify_all()

    def _write(
        self, target: _Target, new: dict[str, Any], previous: dict[str, Any]
    ) -> dict[str, Any]:
        """Replace ``previous`` by ``new`` under the subresource rules; ``new``'s
        resourceVersion, when set, must be ``previous``'s."""
        version = (new.get("metadata") or {}).get("resourceVersion")
        current = previous["metadata"]["resourceVersion"]
        if version and version != current:
            raise ApiFailure(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {target.resource.plural} "{target.name}": '
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
            )
        if target.subresource == "status":
            obj = copy.deepcopy(previous)
            if "status" in new:
                obj["status"] = copy.deepcopy(new["status"])
            else:
                obj.pop("status", None)
        elif target.subresource is not None:
            raise ApiFailure(404, "NotFound", f"no subresource {target.subresource!r}")
        else:
            obj = copy.deepcopy(new)
            if target.resource.plural not in NO_STATUS_SUBRESOURCE:
                if "status" in previous:
                    obj["status"] = copy.deepcopy(previous["status"])
                else:
                    obj.pop("status", None)
        meta = obj.setdefault("metadata", {})
        meta["name"], meta["namespace"] = previous["metadata"]["name"], target.namespace
        if not target.namespace:
            meta.pop("namespace")
        old_finalizers = set(previous["metadata"].get("finalizers") or ())
        if (
            previous["metadata"].get("deletionTimestamp")
            and set(meta.get("finalizers") or ()) - old_finalizers
        ):
            raise ApiFailure(
                422,
                "Invalid",
                f'{target.resource.plural} "{target.name}": no new finalizers can be added if '
                "the object is being deleted",
            )
        key = (target.namespace or "", previous["metadata"]["name"])
        self._stamp(target.resource, obj, target.namespace or "", previous)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._commit(target.resource, key, previous, None)
            return copy.deepcopy(obj)
        if _unchanged(previous, obj):
            return copy.deepcopy(previous)
        self._commit(target.resource, key, previous, obj)
        return copy.deepcopy(obj)

    def _replace(self, target: _Target, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiFailure(400, "BadRequest", "the body must be an object")
        with self._lock:
            return self._write(target, body, self._found(target))

    def _patch(self, target: _Target, body: Any, content_type: str) -> dict[str, Any]:
        kind = content_type.split(";")[0].strip()
        with self._lock:
            previous = self._found(target)
            base = copy.deepcopy(previous)
            if kind == "application/json-patch+json":
                if not isinstance(body, list):
                    raise ApiFailure(400, "BadRequest", "a JSON patch is a list of operations")
                patched = json_patch(base, body)
                if not isinstance(patched, dict):
                    raise ApiFailure(422, "Invalid", "the patch must leave an object")
                # a JSON patch is conditional only through its own test operations
                patched.setdefault("metadata", {})["resourceVersion"] = ""
            elif kind in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                if not isinstance(body, dict):
                    raise ApiFailure(400, "BadRequest", "a merge patch is an object")
                version = (body.get("metadata") or {}).get("resourceVersion")
                patched = merge_patch(base, body)
                patched["metadata"]["resourceVersion"] = version or ""
            else:
                raise ApiFailure(
                    415, "UnsupportedMediaType", f"patch type {kind!r} is not supported"
                )
            return self._write(target, patched, previous)

    def _delete(self, target: _Target, options: Mapping[str, Any]) -> dict[str, Any]:
        if target.subresource is not None or target.name is None:
            raise ApiFailure(405, "MethodNotAllowed", "DELETE goes to an object")
        with self._lock:
            previous = self._found(target)
            meta = previous["metadata"]
            for field_name, wanted in (options.get("preconditions") or {}).items():
                have = meta.get(field_name)
                if wanted is not None and wanted != have:
                    raise ApiFailure(
                        409,
                        "Conflict",
                        f"Precondition failed: {field_name} in precondition: {wanted}, "
                        f"{field_name} in object meta: {have}",
                    )
            key = (target.namespace or "", target.name)
            if target.resource == Resource("api/v1", "namespaces"):
                self._empty_namespace(target.name)
            if not meta.get("finalizers"):
                self._commit(target.resource, key, previous, None)
                return copy.deepcopy(previous)
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(previous)
            obj = copy.deepcopy(previous)
            obj["metadata"]["deletionTimestamp"] = _now()
            obj["metadata"]["deletionGracePeriodSeconds"] = int(
                options.get("gracePeriodSeconds") or 0
            )
            obj["metadata"]["generation"] = int(meta.get("generation") or 0) + 1
            self._commit(target.resource, key, previous, obj)
            return copy.deepcopy(obj)

    def _empty_namespace(self, namespace: str) -> None:
        for resource, objects in list(self._objects.items()):
            for key in [k for k in objects if k[0] == namespace]:
                target = _Target(resource, namespace, key[1])
                self._delete(target, {})

    def _evict(self, target: _Target, body: Any) -> dict[str, Any]:
        if target.resource != Resource("api/v1", "pods") or not target.namespace:
            raise ApiFailure(404, "NotFound", "eviction is a subresource of pods")
        with self._lock:
            pod = self._found(_Target(target.resource, target.namespace, target.name))
            phase = (pod.get("status") or {}).get("phase")
            if not pod["metadata"].get("deletionTimestamp") and phase == "Running":
                self._check_budgets(pod)
            options = (body or {}).get("deleteOptions") or {}
            self._delete(_Target(target.resource, target.namespace, target.name), options)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _check_budgets(self, pod: Mapping[str, Any]) -> None:
        namespace = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        budgets = [
            pdb
            for (ns, _), pdb in self._objects.get(
                Resource("apis/policy/v1", "poddisruptionbudgets"), {}
            ).items()
            if ns == namespace
            and _selector_object_matches((pdb.get("spec") or {}).get("selector"), labels)
        ]
        if not budgets:
            return
        if len(budgets) > 1:
            raise ApiFailure(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                "does not support.",
            )
        [pdb] = budgets
        selected = [
            other
            for (ns, _), other in self._objects.get(Resource("api/v1", "pods"), {}).items()
            if ns == namespace
            and _selector_object_matches(
                (pdb.get("spec") or {}).get("selector"), other["metadata"].get("labels") or {}
            )
        ]
        if _healthy(pod):
            allowed = disruptions_allowed(pdb, selected) > 0
        else:
            # unhealthyPodEvictionPolicy IfHealthyBudget: an unhealthy pod may go while the
            # budget's healthy pods are enough
            healthy = sum(1 for other in selected if _healthy(other))
            allowed = healthy >= _desired(pdb, len(selected))
        if not allowed:
            raise ApiFailure(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )

    # -- watch -----------------------------------------------------------------------------

    def watch(self, raw_path: str) -> Generator[dict[str, Any], None, None]:
        """The events of a watch request, as they happen; ends at ``timeoutSeconds``, or when
        ``end_watches`` or ``stop`` is called."""
        split = urlsplit(raw_path)
        params = {k: v[-1] for k, v in parse_qs(split.query).items()}
        target = _parse_path(split.path)
        matches = _selector(params)
        timeout = float(params.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        bookmarks = params.get("allowWatchBookmarks") == "true"
        next_bookmark = min(
            time.monotonic() + self.bookmark_interval, deadline - BOOKMARK_BEFORE_TIMEOUT
        )
        version = params.get("resourceVersion") or "0"
        with self._lock:
            epoch, bookmark_epoch = self._watch_epoch, self._bookmark_epoch
            if version == "0":
                position = self.revision
                initial = copy.deepcopy(self._scan(target, matches))
            else:
                position = int(version)
                initial = []
        delivered = position
        """The newest version the client has (an event's or a bookmark's)."""
        for obj in initial:
            yield {"type": "ADDED", "object": obj}
        while True:
            sent: list[dict[str, Any]] = []
            with self._lock:
                if self._watch_epoch != epoch or time.monotonic() >= deadline:
                    return
                if position < self.compacted:
                    sent.append({"type": "ERROR", "object": self._expired(position)})
                    epoch = -1  # the watch ends after the error
                else:
                    pending = self._events_after(position)
                    for event in pending:
                        out = self._event_for(event, target, matches)
                        if out is not None:
                            sent.append(out)
                            delivered = event.revision
                    position = pending[-1].revision if pending else position
                    now = time.monotonic()
                    due = now >= next_bookmark or self._bookmark_epoch != bookmark_epoch
                    if bookmarks and due:
                        bookmark_epoch = self._bookmark_epoch
                        next_bookmark = min(
                            now + self.bookmark_interval, deadline - BOOKMARK_BEFORE_TIMEOUT
                        )
                        if next_bookmark <= now:
                            next_bookmark = deadline
                        if self.revision > delivered:  # as the apiserver: only news
                            delivered = self.revision
                            sent.append(_bookmark(target.resource, self.revision))
                    if not sent:
                        wake = min(deadline, next_bookmark) if bookmarks else deadline
                        self._lock.wait(max(0.0, min(wake - now, 1.0)))
            yield from sent

    def _expired(self, position: int) -> dict[str, Any]:
        message = f"too old resource version: {position} ({self.compacted})"
        return _status_body(410, "Expired", message)

    def _events_after(self, position: int) -> list[_Event]:
        start = bisect.bisect_right([e.revision for e in self._events], position)
        return self._events[start:]

    @staticmethod
    def _event_for(
        event: _Event, target: _Target, matches: Callable[[Mapping[str, Any]], bool]
    ) -> dict[str, Any] | None:
        if event.resource != target.resource:
            return None
        obj = event.new or {}
        if (
            target.namespace is not None
            and obj.get("metadata", {}).get("namespace") != target.namespace
        ):
            return None
        was = event.old is not None and event.kind != "ADDED" and matches(event.old)
        now = event.kind != "DELETED" and matches(obj)
        if event.kind == "DELETED":
            kind = "DELETED" if was or matches(obj) else None
        elif now:
            kind = "MODIFIED" if was else "ADDED"
        else:
            kind = "DELETED" if was else None
        return None if kind is None else {"type": kind, "object": copy.deepcopy(obj)}


class _Injected(Exception):
    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.status)
        self.fault = fault

    def answer(self) -> tuple[int, dict[str, Any], dict[str, str]]:
        """The injected response: (status, body, headers)."""
        fault = self.fault
        headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
        return fault.status, _status_body(fault.status, fault.reason, "injected failure"), headers


def _bookmark(resource: Resource, revision: int) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": str(revision)},
        },
    }


def _desired(pdb: Mapping[str, Any], expected: int) -> int:
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None:
        return _resolve(spec["minAvailable"], expected)
    if spec.get("maxUnavailable") is not None:
        return max(0, expected - _resolve(spec["maxUnavailable"], expected))
    return expected


def _initial_status(resource: Resource, obj: dict[str, Any]) -> None:
    """The status a created object starts with: what the client sent for Nodes and for kinds
    without a status subresource; Pending for Pods, Active for Namespaces, none otherwise."""
    if resource.plural == "nodes" or (
        resource.plural in NO_STATUS_SUBRESOURCE and resource.plural != "namespaces"
    ):
        return
    obj.pop("status", None)
    if resource.plural == "pods":
        obj["status"] = {"phase": "Pending"}
    elif resource.plural == "namespaces":
        obj["status"] = {"phase": "Active"}


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _unchanged(previous: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """A write that changes nothing keeps the resourceVersion (no event), as the apiserver."""
    strip = ("resourceVersion", "generation", "managedFields")

    def core(o: Mapping[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in (o.get("metadata") or {}).items() if k not in strip}
        return {**o, "metadata": meta}

    return core(previous) == core(obj)


def _handler(api: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart

        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            if (query.get("watch") or [""])[-1] in ("true", "1"):
                self._watch()
            else:
                self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            with api._lock:
                api.requests.append((method, self.path))
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._answer(400, _status_body(400, "BadRequest", "the body is not JSON"), {})
                return
            status, answer, headers = api.handle(
                method, self.path, body, self.headers.get("Content-Type") or ""
            )
            self._answer(status, answer, headers)

        def _answer(self, status: int, body: Mapping[str, Any], headers: Mapping[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _watch(self) -> None:
            with api._lock:
                api.requests.append(("WATCH", self.path))
            try:
                api._inject("GET", urlsplit(self.path).path)
                _parse_path(urlsplit(self.path).path)
            except ApiFailure as failure:
                body = _status_body(failure.status, failure.reason, failure.message)
                self._answer(failure.status, body, {})
                return
            except _Injected as injected:
                self._answer(*injected.answer())
                return
            events = api.watch(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in events:
                    data = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True
            finally:
                events.close()

        def log_message(self, *_: Any) -> None:
            return

    return Handler
