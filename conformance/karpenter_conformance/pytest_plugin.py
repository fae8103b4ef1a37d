"""pytest fixtures that give integration tests a real Kubernetes API.

Nothing starts unless a test marked ``integration`` asks for ``kube_cluster``,
``kube_client`` or ``namespace``; the cluster then lives until the session ends.
Backends (``--cluster-backend``): ``binaries`` (default; processes built from Go modules),
``docker`` (KWOK's cluster image through pytest-docker) and ``external`` (``--kubeconfig``
or ``$KUBECONFIG``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pytest
import yaml
from kubernetes import client, config

from karpenter_conformance.cluster import build, control_plane, crds, versions
from karpenter_core.cli.checkout import checkout_dir

BACKENDS = ("binaries", "docker", "external")
CLUSTER_FIXTURES = frozenset({"kube_cluster", "kube_client", "namespace"})
COMPOSE_FILE = Path(__file__).parent / "docker" / "compose.yaml"
DOCKER_READY_TIMEOUT = 180.0
PROGRESS = pytest.StashKey[TextIO]()
"""Where ``say`` writes progress lines instead of the terminal (set by the conformance runner,
which keeps pytest's own output off the terminal)."""


@dataclass
class KubeCluster:
    """A running cluster: its backend, its kubeconfig and, for binaries, its processes."""

    backend: str
    kubeconfig: Path
    plane: control_plane.ControlPlane | None = None

    def restart_apiserver(self) -> None:
        """Restart kube-apiserver (binaries backend only; other backends skip the test)."""
        if self.plane is None:
            pytest.skip(f"restart_apiserver needs --cluster-backend binaries, not {self.backend}")
        self.plane.restart_apiserver()

    def compact_etcd(self) -> int:
        """Compact etcd's history (binaries backend only): older resourceVersions become 410
        Gone. Returns the revision compacted to."""
        if self.plane is None:
            pytest.skip(f"compact_etcd needs --cluster-backend binaries, not {self.backend}")
        return self.plane.compact_etcd()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register --cluster-backend and --kubeconfig."""
    group = parser.getgroup("karpenter-cluster", "Kubernetes cluster for integration tests")
    group.addoption(
        "--cluster-backend",
        choices=BACKENDS,
        default="binaries",
        help="where integration tests get a cluster: local processes built from Go modules "
        "(binaries, default), KWOK's cluster image (docker) or an existing cluster (external)",
    )
    group.addoption(
        "--kubeconfig",
        default=None,
        help="kubeconfig of the cluster for --cluster-backend external (default: $KUBECONFIG)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the integration marker and check the external backend has a kubeconfig."""
    config.addinivalue_line(
        "markers", "integration: needs a running Kubernetes control plane (local KWOK cluster)"
    )
    if config.getoption("cluster_backend") == "external" and not _external_kubeconfig(config):
        raise pytest.UsageError("--cluster-backend external needs --kubeconfig or $KUBECONFIG")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse cluster fixtures in tests that are not marked integration."""
    offenders = [
        item.nodeid
        for item in items
        if CLUSTER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("integration") is None
    ]
    if offenders:
        raise pytest.UsageError(
            "these tests use cluster fixtures but are not marked integration:\n  "
            + "\n  ".join(offenders)
        )


def _external_kubeconfig(config: pytest.Config) -> Path | None:
    value = config.getoption("kubeconfig") or os.environ.get("KUBECONFIG", "")
    first = value.split(os.pathsep)[0]
    return Path(first).expanduser() if first else None


def say(config: pytest.Config, message: str) -> None:
    """Show a progress line, even while output is captured: on the stream the conformance
    runner asked for (``PROGRESS``), else on the terminal."""
    sink = config.stash.get(PROGRESS, None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        if sink is not None:
            sink.write(message + "\n")
            sink.flush()
        elif reporter is not None:
            reporter.write_line(message)


def _binaries_cluster(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeCluster]:
    if not build.is_built():
        say(config, f"[cluster] building control-plane binaries into {build.bin_dir()}")
        build.build(log=lambda line: say(config, line))
    plane = control_plane.ControlPlane(tmp_path_factory.mktemp("cluster"))
    seconds = plane.start(control_plane.installed_crds())
    say(config, f"[cluster] control plane up in {seconds:.1f}s (state in {plane.state_dir})")
    try:
        yield KubeCluster("binaries", plane.kubeconfig, plane)
    finally:
        plane.stop()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _docker_cluster(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeCluster]:
    if shutil.which("docker") is None:
        pytest.skip("--cluster-backend docker: the docker command is not installed")
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"--cluster-backend docker: no Docker engine answers `docker info` ({reason})")
    try:
        from pytest_docker.plugin import get_docker_ip, get_docker_services
    except ImportError:
        kit = shlex.quote(checkout_dir("karpenter-conformance") + "[docker]")
        pytest.skip(f"--cluster-backend docker needs pytest-docker: pip install -e {kit}")
    compose = f"KWOK_CLUSTER_IMAGE={shlex.quote(versions.KWOK_CLUSTER_IMAGE)} docker compose"
    project = f"karpenter-conformance-{os.getpid()}"
    with get_docker_services(
        compose, str(COMPOSE_FILE), project, ["up -d"], ["down -v"]
    ) as services:
        server = f"http://{get_docker_ip()}:{services.port_for('kwok', 8080)}"
        services.wait_until_responsive(
            lambda: _http_ok(f"{server}/readyz"), timeout=DOCKER_READY_TIMEOUT, pause=0.5
        )
        kubeconfig = tmp_path_factory.mktemp("docker-cluster") / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "kwok", "cluster": {"server": server}}],
                    "users": [{"name": "anonymous", "user": {}}],
                    "contexts": [
                        {"name": "kwok", "context": {"cluster": "kwok", "user": "anonymous"}}
                    ],
                    "current-context": "kwok",
                }
            )
        )
        crds.apply_documents(kubeconfig, control_plane.installed_crds())
        yield KubeCluster("docker", kubeconfig)


@pytest.fixture(scope="session")
def kube_cluster(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeCluster]:
    """The session's cluster, started on first use and stopped when the session ends."""
    backend = pytestconfig.getoption("cluster_backend")
    if backend == "binaries":
        yield from _binaries_cluster(pytestconfig, tmp_path_factory)
    elif backend == "docker":
        yield from _docker_cluster(pytestconfig, tmp_path_factory)
    else:
        kubeconfig = _external_kubeconfig(pytestconfig)
        assert kubeconfig is not None  # checked in pytest_configure
        yield KubeCluster("external", kubeconfig)


@pytest.fixture(scope="session")
def kube_client(kube_cluster: KubeCluster) -> Iterator[client.ApiClient]:
    """A Kubernetes ApiClient connected to the session's cluster."""
    api_client = config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def namespace(kube_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, deleted afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    core = client.CoreV1Api(kube_client)
    created = core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(generate_name=f"{slug or 'test'}-"))
    )
    assert created.metadata is not None and created.metadata.name is not None
    name = created.metadata.name
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except client.ApiException as error:
            if error.status != 404:
                raise
