"""List-then-watch caches of one resource each, decoded into slim structures.

An ``Informer`` lists a collection, then watches from the list's resourceVersion with bookmarks,
resuming from the last version it saw when a watch ends or breaks, and listing again when the
apiserver answers 410 Gone. Every watch has a server-side timeout and a socket read timeout, so a
silent connection is noticed. Errors back off exponentially with jitter. Handlers see every change,
including those a re-list discovers.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from karpenter_core.manifests.errors import one_line
from karpenter_core.manifests.validation import from_validation_error
from karpenter_core.operator.kube import ApiError, Gone, KubeClient
from karpenter_core.scheduling.snapshot import DecodeError

__all__ = ["ADDED", "DELETED", "MODIFIED", "Handler", "Informer", "object_key"]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
T = TypeVar("T")
Handler = Callable[[str, str, Any, Any], None]
"""``handler(event_type, key, old, new)``: old is None for ADDED, new is None for DELETED."""

log = logging.getLogger("karpenter.informer")


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


class Informer(Generic[T]):
    """A cache of one collection (``path``, e.g. ``/api/v1/pods``) kept current by a watch.

    ``decode`` turns an object into what is cached; returning None leaves the object out.
    Start it with ``start()``; ``synced`` is set once the first list is in the cache.
    """

    def __init__(
        self,
        client: KubeClient,
        path: str,
        decode: Callable[[dict[str, Any]], T | None],
        *,
        key: Callable[[Mapping[str, Any]], str] = object_key,
        params: Mapping[str, Any] | None = None,
        watch_timeout: int = 300,
        backoff_base: float = 0.2,
        backoff_max: float = 30.0,
        lock: threading.RLock | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.decode = decode
        self.key = key
        self.params = dict(params or {})
        self.watch_timeout = watch_timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.cache: dict[str, T] = {}
        self.synced = threading.Event()
        self.resource_version = ""
        self.lock = lock or threading.RLock()
        """Held while the cache changes and handlers run (informers may share one)."""
        self._versions: dict[str, str] = {}
        self._handlers: list[Handler] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self.lists = 0
        """How many times the collection was listed (1 unless watches expired)."""

    def add_handler(self, handler: Handler) -> None:
        """Call ``handler(event_type, key, old, new)`` after each change to the cache."""
        self._handlers.append(handler)

    def start(self) -> Informer[T]:
        """Start the list-and-watch thread (a daemon); after ``stop()``, start a new one that
        resumes from the last resourceVersion seen."""
        if self._thread is None or self._stop.is_set():
            self._stop = stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(stop,), name=f"informer {self.path}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 0.0) -> None:
        """Stop after the current watch event (or once the watch times out)."""
        self._stop.set()
        if self._thread is not None and timeout:
            self._thread.join(timeout)

    def running(self) -> bool:
        """The watch thread is alive."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until the first list is in the cache; False on timeout."""
        return self.synced.wait(timeout)

    def inject(self, obj: dict[str, Any]) -> T | None:
        """Cache an object this process just wrote (the apiserver's answer), so readers see
        their own writes before the watch delivers them; an older version is ignored."""
        decoded = self._decode(obj)
        with self.lock:
            key = self.key(obj)
            if decoded is None:
                if key in self.cache:
                    self._apply(DELETED, key, None, "")
            else:
                self._apply(MODIFIED if key in self.cache else ADDED, key, decoded, _version(obj))
            return self.cache.get(key)

    def forget(self, key: str) -> None:
        """Drop an object this process saw deleted, before the watch delivers the deletion."""
        with self.lock:
            if key in self.cache:
                self._apply(DELETED, key, None, "")

    def get(self, key: str) -> T | None:
        """The cached object under ``key``."""
        return self.cache.get(key)

    def values(self) -> list[T]:
        """A copy of the cached objects."""
        with self.lock:
            return list(self.cache.values())

    # -- the loop -------------------------------------------------------------------------

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                if not self.resource_version:
                    self._list()
                self._watch(stop)
                self._failures = 0
            except Gone:
                log.info("watch expired, listing again", extra={"path": self.path})
                self.resource_version = ""
            except (ApiError, ValueError) as error:
                self._back_off(error, stop)
            except Exception as error:  # keep the cache alive whatever happens
                log.exception("informer error", extra={"path": self.path})
                self._back_off(error, stop)

    def _back_off(self, error: Exception, stop: threading.Event) -> None:
        self._failures += 1
        delay = min(self.backoff_max, self.backoff_base * 2 ** min(self._failures - 1, 16))
        delay *= random.uniform(0.5, 1.0)
        log.warning(
            "watch failed, retrying",
            extra={"path": self.path, "error": str(error), "retry_in": round(delay, 2)},
        )
        stop.wait(delay)

    def _list(self) -> None:
        items, version = self.client.list(self.path, self.params)
        self.lists += 1
        fresh: dict[str, tuple[str, T]] = {}
        for obj in items:
            decoded = self._decode(obj)
            if decoded is not None:
                fresh[self.key(obj)] = (_version(obj), decoded)
        with self.lock:
            for key in [k for k in self.cache if k not in fresh]:
                self._apply(DELETED, key, None, "")
            for key, (obj_version, decoded) in fresh.items():
                self._apply(MODIFIED if key in self.cache else ADDED, key, decoded, obj_version)
            self.resource_version = version
        self.synced.set()

    def _watch(self, stop: threading.Event) -> None:
        events = self.client.watch(
            self.path, self.resource_version, self.watch_timeout, params=self.params
        )
        try:
            for event_type, obj in events:
                if stop.is_set():
                    return
                version = _version(obj)
                if event_type == "BOOKMARK":
                    self.resource_version = version or self.resource_version
                    continue
                key = self.key(obj)
                decoded = None if event_type == DELETED else self._decode(obj)
                with self.lock:
                    if decoded is None:
                        if key in self.cache:
                            self._apply(DELETED, key, None, "")
                    else:
                        kind = MODIFIED if key in self.cache else ADDED
                        self._apply(kind, key, decoded, version)
                    self.resource_version = version or self.resource_version
        finally:
            events.close()

    def _decode(self, obj: dict[str, Any]) -> T | None:
        try:
            return self.decode(obj)
        except (ValidationError, DecodeError) as error:
            # bad data, not a bug: one line naming the object and the field, no traceback
            log.warning(
                "cannot decode %s %s: %s; left out of the cache",
                one_line(str(obj.get("kind") or self.path)),
                one_line(self.key(obj)),
                one_line(_first_problem(error)),
                extra={"path": self.path, "key": self.key(obj)},
            )
            return None
        except Exception:
            log.exception("cannot decode object", extra={"path": self.path, "key": self.key(obj)})
            return None

    def _apply(self, kind: str, key: str, new: T | None, version: str) -> None:
        if new is not None and not _newer(version, self._versions.get(key)):
            return
        old = self.cache.get(key)
        if new is None:
            self.cache.pop(key, None)
            self._versions.pop(key, None)
        else:
            self.cache[key] = new
            self._versions[key] = version
        for handler in self._handlers:
            try:
                handler(kind, key, old, new)
            except Exception:
                log.exception("informer handler failed", extra={"path": self.path, "key": key})


def _first_problem(error: ValidationError | DecodeError) -> str:
    """``field: message`` for the first problem of a decoding error, on one line."""
    if isinstance(error, ValidationError):
        error = from_validation_error(error)
    return " ".join(f"{error.field}: {error.message}".split())


def _newer(version: str, cached: str | None) -> bool:
    """Whether ``version`` replaces ``cached``. resourceVersions are opaque, but the apiserver's
    are etcd revisions, so digits are compared as numbers to drop stale copies."""
    if cached is None or not version:
        return True
    if version.isdigit() and cached.isdigit():
        return int(version) > int(cached)
    return version != cached


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
