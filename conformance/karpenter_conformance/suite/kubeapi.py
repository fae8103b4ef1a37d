"""The Kubernetes API of the contract level: cluster-scoped objects in memory, served over HTTP.

The contract level runs without a cluster. A provider reads its NodeClasses through its read
view (the harness fills it), but one whose instances are Kubernetes objects, like KWOK's Nodes,
writes them through the Kubernetes API, so the suite serves the part of the REST API those calls
use: get, list, create, replace and delete of cluster-scoped objects, for any path. The cluster
level uses a real apiserver instead.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

from kubernetes import client as k8s

from karpenter_conformance.fakekube import LoopbackServer

__all__ = ["ObjectAPI"]


class ObjectAPI:
    """Cluster-scoped objects by collection path (``/api/v1/nodes``) and name."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._versions = itertools.count(1)
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(*api.get(self.path))

            def do_POST(self) -> None:
                self._answer(*api.create(self.path, self._body()))

            def do_PUT(self) -> None:
                self._answer(*api.replace(self.path, self._body()))

            def do_DELETE(self) -> None:
                self._answer(*api.delete(self.path))

            def _body(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                return

        self._server = LoopbackServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Where the API listens."""
        return f"http://127.0.0.1:{self._server.server_port}"

    def client(self) -> k8s.ApiClient:
        """A Kubernetes client for this API (no retries: an error is the answer)."""
        configuration = k8s.Configuration(host=self.url)
        configuration.retries = 0
        return k8s.ApiClient(configuration)

    def items(self, collection: str) -> list[dict[str, Any]]:
        """The objects stored under ``collection``."""
        with self._lock:
            return copy.deepcopy(list(self._objects.get(collection, {}).values()))

    def clear(self) -> None:
        """Forget every object."""
        with self._lock:
            self._objects.clear()

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    # -- REST ------------------------------------------------------------------------------

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """``GET`` of an object, or of a collection (a list)."""
        path = path.split("?", 1)[0]
        with self._lock:
            if path in self._objects or _is_collection(path):
                items = list(self._objects.get(path, {}).values())
                return 200, {"kind": "List", "metadata": {}, "items": copy.deepcopy(items)}
            collection, name = _split(path)
            found = self._objects.get(collection, {}).get(name)
            if found is None:
                return _status(404, "NotFound", f"{path} not found")
            return 200, copy.deepcopy(found)

    def create(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST`` to a collection; 409 when the name is taken."""
        collection = path.split("?", 1)[0]
        name = (body.get("metadata") or {}).get("name", "")
        with self._lock:
            if name in self._objects.get(collection, {}):
                return _status(409, "AlreadyExists", f"{collection}/{name} already exists")
        return self.replace(f"{collection}/{name}", body, create=True)

    def replace(
        self, path: str, body: dict[str, Any], create: bool = False
    ) -> tuple[int, dict[str, Any]]:
        """``PUT`` of an object (``/status`` replaces the status only)."""
        path = path.split("?", 1)[0]
        status_only = path.endswith("/status")
        collection, name = _split(path.removesuffix("/status"))
        with self._lock:
            stored = self._objects.setdefault(collection, {})
            previous = stored.get(name)
            if previous is None and not create:
                return _status(404, "NotFound", f"{collection}/{name} not found")
            if status_only and previous is not None:
                obj = {**copy.deepcopy(previous), "status": copy.deepcopy(body.get("status"))}
            else:
                obj = copy.deepcopy(body)
            metadata = obj.setdefault("metadata", {})
            metadata["name"] = name
            kept = (previous or {}).get("metadata", {}).get("uid")
            metadata["uid"] = kept or metadata.get("uid") or str(uuid.uuid4())
            metadata["resourceVersion"] = str(next(self._versions))
            stored[name] = obj
            return (201 if previous is None else 200), copy.deepcopy(obj)

    def delete(self, path: str) -> tuple[int, dict[str, Any]]:
        """``DELETE`` of an object; 404 when there is none."""
        collection, name = _split(path.split("?", 1)[0])
        with self._lock:
            found = self._objects.get(collection, {}).pop(name, None)
        if found is None:
            return _status(404, "NotFound", f"{collection}/{name} not found")
        return 200, found


def _split(path: str) -> tuple[str, str]:
    collection, _, name = path.rpartition("/")
    return collection, name


def _is_collection(path: str) -> bool:
    """``/api/v1/<plural>`` or ``/apis/<group>/<version>/<plural>``."""
    parts = path.strip("/").split("/")
    return (parts[0] == "api" and len(parts) == 3) or (parts[0] == "apis" and len(parts) == 4)


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return code, {
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
