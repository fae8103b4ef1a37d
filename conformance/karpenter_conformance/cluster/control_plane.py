"""Run etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK on 127.0.0.1.

Each component is a plain process in its own process group, logging into the state
directory. A pid file there lets another process (``python -m ... down``) stop them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from karpenter_conformance.cluster import build, crds, pki
from karpenter_conformance.cluster.logs import tail
from karpenter_conformance.waiting import wait_until
from karpenter_core.apis.crdgen import CRDSchemaError, core_crds
from karpenter_core.cloudprovider.crds import provider_crds
from karpenter_core.cloudprovider.registry import RegistryError

STATE_ENV = "KARPENTER_CLUSTER_STATE"
PID_FILE = "pids.json"
KUBECONFIG_FILE = "kubeconfig"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.1/16"
KWOK_NODE_SELECTOR = "kwok.x-k8s.io/node=fake"
# Client rate limits high enough that 1,000 pods are created and bound without throttling.
CLIENT_QPS = 1000
CLIENT_BURST = 2000
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "job-controller",
    "disruption-controller",
    "garbage-collector-controller",
    "pod-garbage-collector-controller",
    "namespace-controller",
    # Lifts the not-ready taint that admission puts on every new Node once it is Ready.
    "node-lifecycle-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)
# KWOK posts every node's first status and renews its heartbeat from one process; on a loaded
# machine with hundreds of nodes, or while the apiserver restarts, it falls behind the default
# 40 s heartbeat grace and the 1 min startup grace, and the node-lifecycle controller marks Nodes
# and their pods NotReady, which KWOK never undoes for pods. Node health is not what the local
# cluster tests, so both are 5 min.
NODE_MONITOR_GRACE_PERIOD = "5m"
START_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


class ClusterError(RuntimeError):
    """The control plane could not be started or stopped; the message says why."""


def default_state_dir() -> Path:
    """State directory (``$KARPENTER_CLUSTER_STATE`` or ``<cache root>/run``)."""
    override = os.environ.get(STATE_ENV)
    return Path(override).expanduser() if override else build.cache_root() / "run"


def installed_crds() -> list[dict[str, Any]]:
    """The core's CRDs, then those of every installed provider's NodeClasses (providers found
    through their entry points, as the controller finds them)."""
    try:
        return core_crds() + provider_crds()
    except (CRDSchemaError, RegistryError) as error:
        raise ClusterError(f"cannot generate the installed CRDs: {error}") from None


def crd_files_in(directories: Iterable[Path]) -> list[Path]:
    """YAML files of the given directories, which must exist."""
    files: list[Path] = []
    for directory in directories:
        if not directory.is_dir():
            raise ClusterError(f"CRD directory {directory} does not exist")
        files += sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml"))
    return files


def _free_ports(count: int) -> list[int]:
    """Distinct loopback ports that are free right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def write_kubeconfig(path: Path, server: str, ca: Path, client: pki.KeyPair, user: str) -> Path:
    """Write a kubeconfig that points at ``server`` with a client certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": server,
                    "certificate-authority": str(ca),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(client.cert),
                    "client-key": str(client.key),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _runs(pid: int, binary: str) -> bool:
    """True if ``pid`` is alive and still runs ``binary`` (not a recycled pid)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return argv0 == binary and _alive(pid)


def _stop_group(pid: int, timeout: float) -> None:
    """SIGTERM the process group led by ``pid``, then SIGKILL it if it lingers."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)
    raise ClusterError(f"process {pid} survived SIGKILL")


@dataclass
class _Process:
    name: str
    argv: list[str]
    log: Path
    ports: tuple[int, ...] = ()
    popen: subprocess.Popen[bytes] | None = None
    pid: int = 0

    def start(self, env: dict[str, str]) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.pid = self.popen.pid

    def running(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return _runs(self.pid, self.argv[0])

    def stop(self) -> None:
        if self.running():
            _stop_group(self.pid, STOP_TIMEOUT)
        if self.popen is not None:
            self.popen.wait()

    def failure(self, what: str) -> ClusterError:
        return ClusterError(f"{self.name} {what}; last lines of {self.log}:\n{tail(self.log)}")


class ControlPlane:
    """A local control plane whose files live in ``state_dir``."""

    def __init__(self, state_dir: Path | None = None):
        self.state_dir = state_dir or default_state_dir()
        self.kubeconfig = self.state_dir / KUBECONFIG_FILE
        self._processes: dict[str, _Process] = {}
        self._pki: pki.Pki | None = None
        self._apiserver_port = 0
        self._health_ports: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------

    def start(self, documents: Sequence[dict[str, Any]] = ()) -> float:
        """Start every component, apply the CRD ``documents`` (``crds.load`` of files, or
        ``installed_crds()``); return the seconds it took."""
        started = time.monotonic()
        if not build.is_built():
            raise ClusterError(
                f"control-plane binaries are not built in {build.bin_dir()}; run "
                "`python -m karpenter_conformance.cluster build` first"
            )
        self._refuse_if_running()
        self._prepare_state_dir()
        try:
            self._start_components()
            crds.apply_documents(self.kubeconfig, documents)
            self._wait_component_health()
        except BaseException:
            with contextlib.suppress(ClusterError):
                self.stop()
            raise
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop every component (newest first), remove the pid file, check ports are free."""
        if not self._processes:
            self._load_pid_file()
        ports: list[int] = []
        for name in reversed(START_ORDER):
            process = self._processes.pop(name, None)
            if process is not None:
                process.stop()
                ports += process.ports
        (self.state_dir / PID_FILE).unlink(missing_ok=True)
        busy = [port for port in ports if _port_in_use(port)]
        if busy:
            raise ClusterError(f"ports still listening after stop: {busy}")

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port with the same data."""
        process = self._processes["kube-apiserver"]
        process.stop()
        process.start(self._env())
        self._write_pid_file()
        self._wait_ready(process, self._url(self._apiserver_port, "/readyz"))

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision, so that watches from an older
        resourceVersion answer 410 Gone (as after a long outage); return that revision."""
        if not self._processes:
            self._load_pid_file()
        url = f"http://127.0.0.1:{self._processes['etcd'].ports[0]}/v3/kv"

        def post(path: str, body: dict[str, object]) -> dict[str, Any]:
            request = urllib.request.Request(
                f"{url}/{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())

        revision = int(
            post("range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
        )
        post("compaction", {"revision": revision, "physical": True})
        return revision

    # -- state -----------------------------------------------------------------------

    def running_components(self) -> list[str]:
        """Names of the components of this state directory that are running now."""
        if not self._processes:
            self._load_pid_file()
        return [p.name for p in self._processes.values() if p.running()]

    def _refuse_if_running(self) -> None:
        running = self.running_components()
        self._processes.clear()
        if running:
            raise ClusterError(
                f"a control plane is already running from {self.state_dir} "
                f"({', '.join(running)}); stop it with `python -m karpenter_conformance.cluster "
                "down` first"
            )

    def _prepare_state_dir(self) -> None:
        for name in ("etcd-data", "pki", "logs", "kwok-home"):
            shutil.rmtree(self.state_dir / name, ignore_errors=True)
        try:
            (self.state_dir / "logs").mkdir(parents=True)
            self._pki = pki.generate(self.state_dir / "pki")
        except OSError as error:
            raise ClusterError(
                f"cannot use {self.state_dir} as the state directory: {error}"
            ) from None

    def _write_pid_file(self) -> None:
        record = {
            p.name: {"pid": p.pid, "argv0": p.argv[0], "log": str(p.log), "ports": p.ports}
            for p in self._processes.values()
        }
        (self.state_dir / PID_FILE).write_text(json.dumps(record, indent=2) + "\n")

    def _load_pid_file(self) -> None:
        path = self.state_dir / PID_FILE
        if not path.is_file():
            return
        try:
            for name, entry in json.loads(path.read_text()).items():
                self._processes[name] = _Process(
                    name,
                    [entry["argv0"]],
                    Path(entry["log"]),
                    tuple(entry["ports"]),
                    pid=entry["pid"],
                )
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            self._processes.clear()
            raise ClusterError(
                f"{path} is damaged ({type(error).__name__}: {error}); stop any leftover "
                "etcd, kube-* and kwok processes by hand, then delete the file"
            ) from None

    # -- components ------------------------------------------------------------------

    @staticmethod
    def _env() -> dict[str, str]:
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        return env

    def _url(self, port: int, path: str) -> str:
        return f"https://127.0.0.1:{port}{path}"

    def _launch(
        self,
        name: str,
        args: list[str],
        ports: tuple[int, ...],
        env: dict[str, str] | None = None,
    ) -> _Process:
        process = _Process(
            name,
            [str(build.bin_dir() / name), *args],
            self.state_dir / "logs" / f"{name}.log",
            ports,
        )
        process.start(env or self._env())
        self._processes[name] = process
        self._write_pid_file()
        return process

    def _start_components(self) -> None:
        assert self._pki is not None
        keys = self._pki
        state = self.state_dir
        etcd_port, etcd_peer, api_port, kcm_port, sched_port = _free_ports(5)
        self._apiserver_port = api_port
        server = f"https://127.0.0.1:{api_port}"
        self._health_ports = {"kube-controller-manager": kcm_port, "kube-scheduler": sched_port}

        write_kubeconfig(self.kubeconfig, server, keys.ca.cert, keys.admin, "admin")
        kcm_config = write_kubeconfig(
            state / "controller-manager.kubeconfig",
            server,
            keys.ca.cert,
            keys.controller_manager,
            "system:kube-controller-manager",
        )
        sched_config = write_kubeconfig(
            state / "scheduler.kubeconfig",
            server,
            keys.ca.cert,
            keys.scheduler,
            "system:kube-scheduler",
        )
        kwok_config = write_kubeconfig(
            state / "kwok.kubeconfig", server, keys.ca.cert, keys.kwok, "kwok-controller"
        )

        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._launch(
            "etcd",
            [
                f"--data-dir={state / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                "--name=local",
                f"--initial-cluster=local=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            (etcd_port, etcd_peer),
        )
        apiserver = self._launch(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={keys.apiserver.cert}",
                f"--tls-private-key-file={keys.apiserver.key}",
                f"--client-ca-file={keys.ca.cert}",
                # A front-proxy CA lets kcm and the scheduler load their authentication config
                # cleanly; no certificate with the allowed name is ever issued.
                f"--requestheader-client-ca-file={keys.ca.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={server}/",
                f"--service-account-key-file={keys.service_account_pub}",
                f"--service-account-signing-key-file={keys.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount",
                # The endpoints of the "kubernetes" Service cannot be a loopback address.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
            ],
            (api_port,),
        )
        self._wait_ready(apiserver, self._url(api_port, "/readyz"))

        serving = ["--bind-address=127.0.0.1", f"--client-ca-file={keys.ca.cert}"]
        self._launch(
            "kube-controller-manager",
            [
                *serving,
                f"--secure-port={kcm_port}",
                f"--tls-cert-file={keys.controller_manager_serving.cert}",
                f"--tls-private-key-file={keys.controller_manager_serving.key}",
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={keys.service_account_key}",
                f"--root-ca-file={keys.ca.cert}",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE_PERIOD}",
                f"--node-startup-grace-period={NODE_MONITOR_GRACE_PERIOD}",
                f"--kube-api-qps={CLIENT_QPS}",
                f"--kube-api-burst={CLIENT_BURST}",
                "--profiling=false",
            ],
            (kcm_port,),
        )
        self._launch(
            "kube-scheduler",
            [
                *serving,
                f"--secure-port={sched_port}",
                f"--tls-cert-file={keys.scheduler_serving.cert}",
                f"--tls-private-key-file={keys.scheduler_serving.key}",
                f"--config={self._scheduler_config(sched_config)}",
                f"--authentication-kubeconfig={sched_config}",
                f"--authorization-kubeconfig={sched_config}",
            ],
            (sched_port,),
        )
        # A HOME of its own keeps a developer's ~/.kwok/kwok.yaml out of KWOK's config.
        kwok_home = state / "kwok-home"
        kwok_home.mkdir()
        self._launch(
            "kwok",
            [
                f"--kubeconfig={kwok_config}",
                f"--config={build.stages_path()}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
                f"--cidr={POD_CIDR}",
            ],
            (),
            env={**self._env(), "HOME": str(kwok_home)},
        )

    def _scheduler_config(self, kubeconfig: Path) -> Path:
        path = self.state_dir / "scheduler-config.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(kubeconfig),
                        "qps": CLIENT_QPS,
                        "burst": CLIENT_BURST,
                    },
                    "leaderElection": {"leaderElect": False},
                },
                sort_keys=False,
            )
        )
        return path

    def _wait_component_health(self) -> None:
        for name, port in self._health_ports.items():
            self._wait_ready(self._processes[name], self._url(port, "/healthz"))
        kwok = self._processes["kwok"]
        if not kwok.running():
            raise kwok.failure("exited")

    def _ssl_context(self) -> ssl.SSLContext:
        assert self._pki is not None
        context = ssl.create_default_context(cafile=str(self._pki.ca.cert))
        context.load_cert_chain(str(self._pki.admin.cert), str(self._pki.admin.key))
        return context

    def _wait_ready(self, process: _Process, url: str, timeout: float = READY_TIMEOUT) -> None:
        """Poll ``url`` until it answers 200; fail early if any component exits."""
        context = self._ssl_context()
        last = "no answer"

        def answers() -> bool:
            nonlocal last
            for other in self._processes.values():
                if not other.running():
                    raise other.failure("exited during start-up")
            try:
                with urllib.request.urlopen(url, context=context, timeout=2) as response:
                    return response.status == 200
            except urllib.error.HTTPError as error:
                last = f"HTTP {error.code}"
            except (urllib.error.URLError, OSError) as error:
                last = str(error)
            return False

        try:
            wait_until(answers, url, timeout, interval=0.1)
        except TimeoutError:
            raise process.failure(f"was not ready at {url} after {timeout:.0f}s ({last})") from None

    def describe(self) -> dict[str, tuple[int, Path]]:
        """Pid and log path of each started component."""
        return {name: (p.pid, p.log) for name, p in self._processes.items()}
