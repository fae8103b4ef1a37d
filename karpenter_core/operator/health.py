"""HTTP endpoints: /metrics on the metrics port, /healthz and /readyz on the health-probe port.

Both are small ``http.server`` servers on daemon threads; when the two ports are equal, one
server answers all three paths. Port 0 picks a free port (see ``metrics_port``/``health_port``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from karpenter_core.operator.metrics import REGISTRY

__all__ = ["Probes"]

Check = Callable[[], bool]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], routes: dict[str, Callable[[], tuple]]) -> None:
        self.routes = routes
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a probe that timed out) is no error of the server's: no
        traceback for it; anything else is printed as the standard library does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        route = self.server.routes.get(self.path.split("?", 1)[0])
        if route is None:
            status, content_type, body = 404, "text/plain", b"not found\n"
        else:
            status, content_type, body = route()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds are not worth a log line."""


def _probe(check: Check) -> Callable[[], tuple[int, str, bytes]]:
    def answer() -> tuple[int, str, bytes]:
        try:
            ok = check()
        except Exception:
            ok = False
        return (200, "text/plain", b"ok\n") if ok else (503, "text/plain", b"not ready\n")

    return answer


def _metrics() -> tuple[int, str, bytes]:
    return 200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY)


STOP_POLL = 0.05
"""Seconds between a server loop's checks for ``stop``: how long stopping the probes takes."""


class Probes:
    """The metrics and health servers; ``ready`` and ``healthy`` are asked on every probe."""

    def __init__(
        self,
        metrics_port: int,
        health_port: int,
        ready: Check,
        healthy: Check = lambda: True,
        host: str = "",
    ) -> None:
        health_routes = {"/healthz": _probe(healthy), "/readyz": _probe(ready)}
        self._servers: list[_Server] = []
        if metrics_port and metrics_port == health_port:
            self._servers.append(
                _Server((host, metrics_port), {"/metrics": _metrics, **health_routes})
            )
        else:
            self._servers.append(_Server((host, metrics_port), {"/metrics": _metrics}))
            self._servers.append(_Server((host, health_port), health_routes))
        self.metrics_port = self._servers[0].server_address[1]
        self.health_port = self._servers[-1].server_address[1]

    def start(self) -> Probes:
        """Serve on daemon threads."""
        for server in self._servers:
            threading.Thread(
                target=server.serve_forever, args=(STOP_POLL,), name="http", daemon=True
            ).start()
        return self

    def stop(self) -> None:
        """Stop serving and close the sockets."""
        for server in self._servers:
            server.shutdown()
            server.server_close()
