"""The local control plane behaves like a cluster: KWOK nodes, scheduling, controllers."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
from kubernetes import client, watch

from karpenter_conformance.cluster import __main__ as cluster_cli
from karpenter_conformance.cluster import build
from karpenter_conformance.pytest_plugin import KubeCluster
from karpenter_conformance.waiting import wait_until

pytestmark = pytest.mark.integration

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}


@pytest.fixture
def fake_node(kube_client: client.ApiClient) -> Iterator[str]:
    """A Node that KWOK manages (annotated kwok.x-k8s.io/node=fake); deleted afterwards."""
    core = client.CoreV1Api(kube_client)
    name = f"kwok-node-{uuid.uuid4().hex[:8]}"
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": KWOK_ANNOTATION,
                "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            },
            "status": {"capacity": resources, "allocatable": resources},
        }
    )
    try:
        yield name
    finally:
        core.delete_node(name)


def _node_ready(core: client.CoreV1Api, name: str) -> bool:
    conditions = core.read_node_status(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _deployment(name: str, node: str, replicas: int) -> dict[str, object]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example/app:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ],
                },
            },
        },
    }


def _running_pods(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return [
        p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    ]


def _run_deployment(
    kube_client: client.ApiClient, namespace: str, node: str, replicas: int
) -> list[client.V1Pod]:
    client.AppsV1Api(kube_client).create_namespaced_deployment(
        namespace, _deployment("web", node, replicas)
    )
    core = client.CoreV1Api(kube_client)

    def all_running() -> list[client.V1Pod] | None:
        pods = _running_pods(core, namespace, "web")
        return pods if len(pods) == replicas else None

    return wait_until(all_running, f"{replicas} running pods of deployment web")


def test_kwok_node_becomes_ready(kube_client: client.ApiClient, fake_node: str) -> None:
    core = client.CoreV1Api(kube_client)
    wait_until(lambda: _node_ready(core, fake_node), f"node {fake_node} Ready")
    node = core.read_node(fake_node)
    assert node.status.allocatable["cpu"] == "32"


def test_deployment_pods_are_bound_and_run(
    kube_client: client.ApiClient, namespace: str, fake_node: str
) -> None:
    pods = _run_deployment(kube_client, namespace, fake_node, replicas=3)
    assert {pod.spec.node_name for pod in pods} == {fake_node}
    assert all(pod.status.pod_ip for pod in pods)


def test_pod_disruption_budget_status_is_computed(
    kube_client: client.ApiClient, namespace: str, fake_node: str
) -> None:
    _run_deployment(kube_client, namespace, fake_node, replicas=3)
    policy = client.PolicyV1Api(kube_client)
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )

    def settled() -> client.V1PodDisruptionBudgetStatus | None:
        status = policy.read_namespaced_pod_disruption_budget_status("web", namespace).status
        return status if status and status.current_healthy == 3 else None

    status = wait_until(settled, "PDB web to count 3 healthy pods")
    assert (status.expected_pods, status.desired_healthy, status.disruptions_allowed) == (3, 2, 1)


def test_deleting_a_namespace_removes_its_pods(
    kube_client: client.ApiClient, namespace: str, fake_node: str
) -> None:
    _run_deployment(kube_client, namespace, fake_node, replicas=2)
    core = client.CoreV1Api(kube_client)
    core.delete_namespace(namespace)

    def namespace_gone() -> bool:
        try:
            core.read_namespace(namespace)
        except client.ApiException as error:
            return error.status == 404
        return False

    wait_until(namespace_gone, f"namespace {namespace} to be deleted")
    assert core.list_namespaced_pod(namespace).items == []


def _config_map_names_since(core: client.CoreV1Api, namespace: str, version: str) -> set[str]:
    """What an informer learns after a break: events since ``version``, or a relist on 410."""
    try:
        return {
            event["object"].metadata.name
            for event in watch.Watch().stream(
                core.list_namespaced_config_map,
                namespace,
                resource_version=version,
                timeout_seconds=3,
            )
        }
    except client.ApiException as error:
        if error.status != 410:
            raise
        return {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}


def test_watch_recovers_after_apiserver_restart(
    kube_cluster: KubeCluster, kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "before"}, "data": {"k": "v"}}
    )
    version = core.list_namespaced_config_map(namespace).metadata.resource_version
    seen: list[str] = []
    ended = threading.Event()

    def consume() -> None:
        try:
            for event in watch.Watch().stream(
                core.list_namespaced_config_map,
                namespace,
                resource_version=version,
                timeout_seconds=300,
            ):
                seen.append(event["object"].metadata.name)
        except urllib3.exceptions.HTTPError:
            pass  # the restart cut the connection
        finally:
            ended.set()

    threading.Thread(target=consume, daemon=True).start()
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "probe"}})
    wait_until(lambda: "probe" in seen, "the open watch to deliver the probe")

    kube_cluster.restart_apiserver()
    assert ended.wait(30), "a watch open across the restart never ended"
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "after"}})
    assert "after" in _config_map_names_since(core, namespace, version)
    assert core.read_namespaced_config_map("before", namespace).data == {"k": "v"}


# User mistakes with the command line: one clear line, no traceback ------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cluster_cli.main(list(argv))
    return code, capsys.readouterr().err


def test_down_and_env_when_nothing_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "state")
    assert _cli(capsys, "--state-dir", state, "down") == (
        0,
        f"no control plane was running from {state}\n",
    )
    assert _cli(capsys, "--state-dir", state, "env") == (
        1,
        f"error: no control plane runs from {state}; run `up`\n",
    )


def test_a_damaged_pid_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pids.json").write_text("{")
    for command in ("down", "env"):
        code, err = _cli(capsys, "--state-dir", str(tmp_path), command)
        assert code == 1
        assert err.startswith(f"error: {tmp_path / 'pids.json'} is damaged (JSONDecodeError")
        assert "Traceback" not in err


def test_a_state_dir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not build.is_built():
        pytest.skip("`up` checks the binaries before the state directory")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    code, err = _cli(capsys, "--state-dir", str(not_a_dir), "up", "--no-crds")
    assert code == 1
    assert err.startswith(f"error: cannot use {not_a_dir} as the state directory: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [\n", "not valid YAML: expected the node content, but found '<stream end>' at line 2"),
        ("- 1\n", "expected CustomResourceDefinition, got a YAML list"),
        ("kind: ConfigMap\n", "expected CustomResourceDefinition, got ConfigMap"),
        ("kind: CustomResourceDefinition\n", "a CustomResourceDefinition has no metadata.name"),
    ],
)
def test_bad_crd_files_fail_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    crd_dir = tmp_path / "crds"
    crd_dir.mkdir()
    (crd_dir / "bad.yaml").write_text(text)
    state = tmp_path / "state"
    code, err = _cli(capsys, "--state-dir", str(state), "up", "--crd-dir", str(crd_dir))
    assert code == 1
    assert err.startswith(f"error: {crd_dir / 'bad.yaml'}: {message}")
    assert err.count("\n") == 1
    assert not (state / "logs").exists()
