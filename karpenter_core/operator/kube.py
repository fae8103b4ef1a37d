"""A thin, fast Kubernetes client: raw JSON over ``kubernetes.client.ApiClient``.

The official client's generated models are the known performance trap of Python controllers, so
this wrapper only borrows its configuration, authentication and connection pool, sends and
receives plain dicts, and maps HTTP errors to a few exception types. Requests are paced by a
client-side token bucket (``KUBE_CLIENT_QPS`` / ``KUBE_CLIENT_BURST``), as client-go does.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from karpenter_core.operator.settings import Settings

__all__ = [
    "ApiError",
    "Conflict",
    "Forbidden",
    "Gone",
    "KubeClient",
    "NotFound",
    "TokenBucket",
    "TooManyRequests",
    "Unavailable",
    "retry_on_conflict",
]

FIELD_MANAGER = "karpenter"
PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
RequestTimeout = float | tuple[float, float]
"""Seconds a request may take in all, or (connect, read) seconds."""
REQUEST_TIMEOUT: RequestTimeout = (10.0, 60.0)
"""(connect, read) seconds of an ordinary request."""
WATCH_READ_SLACK = 30.0
"""Seconds a watch may stay silent beyond its server-side timeout before it counts as hung."""

T = TypeVar("T")


class ApiError(Exception):
    """The apiserver refused a request: HTTP ``status``, its ``reason`` and ``message``."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(ApiError):
    """404: the object (or its resource) does not exist."""


class Conflict(ApiError):
    """409: a stale resourceVersion, a failed precondition, or the object already exists."""


class Forbidden(ApiError):
    """403: RBAC refuses the request (or an admission rule does)."""


class Gone(ApiError):
    """410: the resourceVersion is too old; list again."""


class TooManyRequests(ApiError):
    """429: throttled (or a PodDisruptionBudget refuses an eviction); retry after ``retry_after``."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float) -> None:
        super().__init__(status, reason, message)
        self.retry_after = retry_after


class Unavailable(ApiError):
    """The apiserver could not be reached, or a response stopped arriving (status 0)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "Unavailable", message)


THROTTLE_RETRIES = 5
"""Times a request refused with 429 and a Retry-After header is sent again, as client-go does."""

_ERRORS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 403: Forbidden, 410: Gone}


def _error(status: int, data: bytes, headers: Mapping[str, str]) -> ApiError:
    reason, message = "", data.decode("utf-8", "replace")
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if isinstance(body, dict):
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or message)
    if status == 429:
        try:
            retry_after = float(headers.get("Retry-After") or 1)
        except ValueError:
            retry_after = 1.0
        return TooManyRequests(status, reason or "TooManyRequests", message, retry_after)
    return _ERRORS.get(status, ApiError)(status, reason, message)


def retry_on_conflict(fn: Callable[[], T], attempts: int = 5, backoff: float = 0.01) -> T:
    """Call ``fn`` again (re-reading is its job) while it raises ``Conflict``, up to ``attempts``."""
    for attempt in range(attempts):
        try:
            return fn()
        except Conflict:
            if attempt == attempts - 1:
                raise
            time.sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")


class TokenBucket:
    """Client-side rate limit: ``qps`` tokens per second, at most ``burst`` saved up."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token; return how many seconds the caller must wait before using it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self) -> None:
        """Block until a token is available."""
        delay = self.reserve()
        if delay > 0:
            time.sleep(delay)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeClient:
    """Raw JSON requests to the apiserver; paths are API paths such as ``/api/v1/pods``."""

    def __init__(self, api_client: k8s.ApiClient, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        self.api_client = api_client
        self.bucket = TokenBucket(settings.kube_client_qps, settings.kube_client_burst)
        pool_size = max(4, min(settings.kube_client_burst, 64))
        self.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = pool_size

    def with_own_rate_limit(self) -> KubeClient:
        """This client with a token bucket of its own (same QPS and burst), as client-go gives
        each clientset its own: a burst of events through it never delays other requests."""
        sibling = copy.copy(self)
        sibling.bucket = TokenBucket(self.bucket.qps, self.bucket.burst)
        return sibling

    @classmethod
    def from_config(cls, kubeconfig: str | None, settings: Settings | None = None) -> KubeClient:
        """Connect with a kubeconfig file, else ``$KUBECONFIG``/``~/.kube/config``, else in-cluster."""
        configuration = k8s.Configuration()
        if kubeconfig:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except k8s_config.ConfigException:
                k8s_config.load_kube_config(client_configuration=configuration)
        return cls(k8s.ApiClient(configuration), settings)

    def close(self) -> None:
        """Release the connection pool."""
        self.api_client.close()

    # -- transport ------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: RequestTimeout = REQUEST_TIMEOUT,
        retry_throttled: bool = True,
    ) -> Any:
        """Send one request; return the urllib3 response (unread), or raise ``ApiError``.

        A 429 with Retry-After is sent again (unless ``retry_throttled`` is False)."""
        query = [(k, _query_value(v)) for k, v in (params or {}).items() if v is not None]
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        if isinstance(timeout, tuple):
            limit = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            limit = urllib3.Timeout(total=timeout)
        for attempt in range(THROTTLE_RETRIES + 1):
            self.bucket.acquire()
            _, url, sent_headers, _, _ = self.api_client.param_serialize(
                method,
                path,
                query_params=query,
                header_params=dict(headers),
                auth_settings=["BearerToken"],
            )
            try:
                response = self.api_client.rest_client.pool_manager.request(
                    method,
                    url,
                    body=data,
                    headers=sent_headers,
                    timeout=limit,
                    preload_content=False,
                )
            except urllib3.exceptions.HTTPError as error:
                raise Unavailable(f"{method} {path}: {error}") from error
            if response.status < 300:
                return response
            try:
                payload = response.read()
            finally:
                response.release_conn()
            failure = _error(response.status, payload, response.headers)
            throttled = retry_throttled and "Retry-After" in response.headers
            if not isinstance(failure, TooManyRequests) or not throttled:
                raise failure
            if attempt == THROTTLE_RETRIES:
                raise failure
            time.sleep(min(failure.retry_after, 10.0))
        raise AssertionError("unreachable")

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """One request; the decoded JSON response body."""
        response = self._send(method, path, **kwargs)
        try:
            payload = response.read()
        except urllib3.exceptions.HTTPError as error:
            raise Unavailable(f"{method} {path}: {error}") from error
        finally:
            response.release_conn()
        return json.loads(payload) if payload else {}

    # -- verbs ----------------------------------------------------------------------------

    def get(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        timeout: RequestTimeout = REQUEST_TIMEOUT,
    ) -> dict[str, Any]:
        """GET one object (or any JSON endpoint); ``timeout`` bounds this request (seconds in
        all, or (connect, read))."""
        return self.request("GET", path, params=params, timeout=timeout)

    def list(
        self, path: str, params: Mapping[str, Any] | None = None, page_size: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection, paginated; returns (items, the list's resourceVersion)."""
        items: list[dict[str, Any]] = []
        query = dict(params or {})
        query.setdefault("limit", page_size)
        while True:
            page = self.request("GET", path, params=query)
            items.extend(page.get("items") or ())
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion") or "")
            query["continue"] = meta["continue"]

    def watch(
        self,
        path: str,
        resource_version: str,
        timeout_seconds: int = 300,
        params: Mapping[str, Any] | None = None,
    ) -> Generator[tuple[str, dict[str, Any]], None, None]:
        """Stream (event type, object) from ``resource_version``, bookmarks included.

        Ends when the server closes the watch after ``timeout_seconds``. A watch silent for
        longer than that plus a slack raises ``Unavailable`` (noticed, not hung).
        An ERROR event is raised as the ``ApiError`` it carries (``Gone`` for an expired version).
        """
        query = {
            **(params or {}),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
        }
        response = self._send(
            "GET", path, params=query, timeout=(10.0, timeout_seconds + WATCH_READ_SLACK)
        )
        finished = False
        try:
            rest = b""
            for chunk in response.stream(amt=None, decode_content=False):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line.strip():
                        yield _watch_event(line)
            if rest.strip():
                yield _watch_event(rest)
            finished = True
        except urllib3.exceptions.HTTPError as error:
            raise Unavailable(f"watch {path}: {error}") from error
        finally:
            if finished:
                response.release_conn()
            else:  # abandoned mid-stream: the connection cannot be reused
                response.close()

    def create(
        self,
        path: str,
        body: Mapping[str, Any],
        params: Mapping[str, Any] | None = None,
        timeout: RequestTimeout = REQUEST_TIMEOUT,
    ) -> dict[str, Any]:
        """POST an object to its collection."""
        return self.request("POST", path, params=params, body=body, timeout=timeout)

    def replace(
        self, path: str, body: Mapping[str, Any], timeout: RequestTimeout = REQUEST_TIMEOUT
    ) -> dict[str, Any]:
        """PUT an object (its metadata.resourceVersion is the precondition)."""
        return self.request("PUT", path, body=body, timeout=timeout)

    def patch(
        self,
        path: str,
        body: Any,
        patch_type: str = "merge",
        params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """PATCH: ``merge``, ``json``, ``strategic`` or ``apply`` (server-side, forced, as
        field manager ``karpenter``). Put ``metadata.resourceVersion`` in a merge patch, or a
        ``test`` operation in a JSON patch, to make it conditional."""
        if patch_type not in PATCH_TYPES:
            raise ValueError(f"patch_type {patch_type!r}: one of {', '.join(PATCH_TYPES)}")
        query = dict(params or {})
        if patch_type == "apply":
            query.setdefault("fieldManager", FIELD_MANAGER)
            query.setdefault("force", "true")
        return self.request(
            "PATCH", path, params=query, body=body, content_type=PATCH_TYPES[patch_type]
        )

    def delete(
        self,
        path: str,
        grace_period: int | None = None,
        preconditions: Mapping[str, str] | None = None,
        propagation: str | None = None,
    ) -> dict[str, Any]:
        """DELETE, optionally with a grace period and uid/resourceVersion preconditions."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if preconditions:
            body["preconditions"] = dict(preconditions)
        if propagation:
            body["propagationPolicy"] = propagation
        return self.request("DELETE", path, body=body)

    def evict(self, namespace: str, name: str, grace_period: int | None = None) -> dict[str, Any]:
        """Evict a pod through the policy/v1 Eviction API. PodDisruptionBudgets apply: a refusal
        is ``TooManyRequests`` at once (not retried here; the drain decides when to try again)."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_period is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period}
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        return self.request("POST", path, body=body, retry_throttled=False)

    def create_event(
        self,
        involved: Mapping[str, Any],
        event_type: str,
        reason: str,
        message: str,
        component: str = "karpenter",
    ) -> dict[str, Any]:
        """Publish a core/v1 Event about ``involved`` (an object with apiVersion, kind and
        metadata); it goes to the object's namespace, or ``default`` for cluster objects."""
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", ""),
                "kind": involved.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return self.create(f"/api/v1/namespaces/{namespace}/events", body)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ",".join(str(v) for v in value)
    return str(value)


def _watch_event(line: bytes) -> tuple[str, dict[str, Any]]:
    event = json.loads(line)
    kind, obj = str(event.get("type") or ""), event.get("object") or {}
    if kind == "ERROR":
        status = int(obj.get("code") or 500)
        raise _ERRORS.get(status, ApiError)(
            status, str(obj.get("reason") or ""), str(obj.get("message") or "")
        )
    return kind, obj
