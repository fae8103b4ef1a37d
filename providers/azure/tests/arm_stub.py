"""A small local ARM endpoint for the node class tests: subnet GETs and community gallery
image version lists over plain HTTP, read by the real azure-mgmt-compute and azure-mgmt-network
clients (bearer authentication replaced, no retries)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from azure.core.credentials import AccessToken
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.network import NetworkManagementClient

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"


@dataclass
class ARM:
    """What the endpoint holds: subnet ids (lower-cased), image versions per definition as
    (name, publishedDate), and path patterns answered with an error status instead; ``paths``
    records every request path."""

    subnets: set[str] = field(default_factory=set)
    versions: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    failing: dict[str, int] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)


@dataclass
class Clients:
    """azure-mgmt clients pointed at the endpoint."""

    compute: ComputeManagementClient
    network: NetworkManagementClient


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        arm = self.server.arm
        arm.paths.append(self.path)
        path = self.path.split("?", 1)[0]
        for pattern, status in arm.failing.items():
            if re.search(pattern, path):
                code = "AuthorizationFailed" if status == 403 else "InternalServerError"
                self._reply(status, {"error": {"code": code, "message": f"{code} on {path}"}})
                return
        gallery = re.search(r"/communityGalleries/[^/]+/images/([^/]+)/versions$", path)
        if gallery is not None:
            body = [
                {"name": name, "location": "eastus", "properties": {"publishedDate": published}}
                for name, published in arm.versions.get(gallery[1], [])
            ]
            self._reply(200, {"value": body})
        elif path.lower() in arm.subnets:
            self._reply(200, {"id": path, "name": path.rsplit("/", 1)[1], "properties": {}})
        else:
            message = f"The Resource '{path}' was not found."
            self._reply(404, {"error": {"code": "ResourceNotFound", "message": message}})

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    arm: ARM


class _StaticToken:
    """A token credential; the endpoint checks no token (the bearer policy is replaced)."""

    def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
        return AccessToken("token", 2**31)


@contextmanager
def serve(arm: ARM) -> Iterator[Clients]:
    """Serve ``arm`` on 127.0.0.1 while the context is open; yields clients pointed at it."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.arm = arm
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    options: dict[str, Any] = {
        "credential": _StaticToken(),
        "subscription_id": SUBSCRIPTION,
        "base_url": f"http://127.0.0.1:{server.server_address[1]}",
        "authentication_policy": SansIOHTTPPolicy(),
        "retry_total": 0,
    }
    try:
        yield Clients(ComputeManagementClient(**options), NetworkManagementClient(**options))
    finally:
        server.shutdown()
        server.server_close()
