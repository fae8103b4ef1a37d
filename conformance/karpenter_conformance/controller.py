"""The real controller run against a cluster as its least-privilege identity.

``controller_identity`` applies the shipped RBAC (the core's and the provider record's) and
writes a kubeconfig for the controller's ServiceAccount, so a permission the manifests lack
shows. ``ControllerProcess`` runs ``karpenter controller --provider NAME`` in a subprocess of its
own session with that kubeconfig; its log goes to a file. The conformance suite's cluster level,
the soak benchmark and the core's end-to-end tests all start the controller this way.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from karpenter_conformance.identity import service_account_kubeconfig
from karpenter_conformance.waiting import wait_until
from karpenter_core import rbac
from karpenter_core.cloudprovider.plugin import ProviderRecord, option_flag
from karpenter_core.operator.kube import KubeClient

__all__ = ["ControllerProcess", "controller_identity", "free_port"]


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def controller_identity(admin_kubeconfig: Path, record: ProviderRecord, out: Path) -> Path:
    """Apply the shipped RBAC for ``record``'s provider in the default namespace and write a
    kubeconfig authenticating as the controller's ServiceAccount to ``out``."""
    namespace = rbac.DEFAULT_NAMESPACE
    path = service_account_kubeconfig(admin_kubeconfig, namespace, rbac.SERVICE_ACCOUNT, out)
    kube = KubeClient.from_config(str(admin_kubeconfig))
    try:
        rbac.apply(kube, rbac.manifests(namespace, provider=record))
    finally:
        kube.close()
    return path


class ControllerProcess:
    """``karpenter controller`` in a subprocess; its log goes to a file in ``log_dir``.

    ``env`` is laid over this process's environment (settings such as timers; ``KUBECONFIG``
    is dropped so only ``kubeconfig`` counts); ``options``, keyed by the provider's option names,
    become ``--<provider>-<name> value`` flags."""

    def __init__(
        self,
        provider: str,
        kubeconfig: Path,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
        name: str = "controller",
    ) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        environment = {
            **os.environ,
            "METRICS_PORT": str(self.metrics_port),
            "HEALTH_PROBE_PORT": str(self.health_port),
            **(env or {}),
        }
        environment.pop("KUBECONFIG", None)
        command = [
            str(Path(sys.executable).parent / "karpenter"),
            "controller",
            "--provider",
            provider,
            "--kubeconfig",
            str(kubeconfig),
        ]
        for option, value in (options or {}).items():
            command += [option_flag(provider, option), value]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until /readyz answers 200."""
        wait_until(
            lambda: self.alive() and _http_ok(f"http://127.0.0.1:{self.health_port}/readyz"),
            f"the controller ready (log {self.log_path})",
            timeout=timeout,
        )

    def wait_leading(self, timeout: float = 30.0) -> None:
        """Until this replica holds the Lease and has started its controllers."""
        wait_until(
            lambda: (
                self.alive()
                and any(r.get("message") == "controllers started" for r in self.log_lines())
            ),
            f"the controller leading (log {self.log_path})",
            timeout=timeout,
        )

    def alive(self) -> bool:
        """The process runs; raises AssertionError with the log's tail when it has exited."""
        if self.process.poll() is not None:
            raise AssertionError(
                f"the controller exited with {self.process.returncode}:\n{self.log_tail()}"
            )
        return True

    def metrics(self) -> str:
        """The /metrics text."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def log_lines(self) -> list[dict[str, Any]]:
        """The JSON log records written so far."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the log."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def forbidden(self) -> list[str]:
        """What the log reports RBAC refused the controller's identity."""
        text = self.log_path.read_text(errors="replace")
        pattern = r'forbidden: User \\?"[^"\\]+\\?" cannot [^"\\]+\\?"[^"\\]*'
        return sorted(set(re.findall(pattern, text)))

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL the process group."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
