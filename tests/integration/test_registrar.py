"""The node registrar: which Nodes it plans (pure), and Nodes it keeps on a real cluster.

The provider side is a test double whose ``list()`` returns NodeClaims: the registrar's whole
contract with a provider is that one call.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from karpenter_conformance.registrar import (
    KWOK_NODE,
    MANAGED_LABEL,
    Plan,
    Registrar,
    main,
    node_manifest,
    node_name,
    plan,
)
from karpenter_conformance.waiting import wait_until
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.registry import Registry, discover


def instance(provider_id: str, labels: dict[str, str] | None = None, **status: Any) -> NodeClaim:
    """A NodeClaim as a provider's ``list()`` returns it."""
    return NodeClaim.from_manifest(
        {
            "metadata": {"name": "claim", "labels": labels or {}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "example.com", "kind": "Class", "name": "default"},
            },
            "status": {
                "providerID": provider_id,
                "capacity": {"cpu": "2", "memory": "4Gi", "pods": "29"},
                "allocatable": {"cpu": "1930m", "memory": "3388Mi", "pods": "29"},
                **status,
            },
        }
    )


def node(name: str, provider_id: str, ours: bool = True, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {MANAGED_LABEL: "true"} if ours else {}}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": {"providerID": provider_id}}


# -- pure --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider_id", "name"),
    [
        ("aws:///us-east-1a/i-0abc123", "i-0abc123"),
        ("aws:///us-east-1a/i-0ABC", "i-0abc"),
        ("azure:///subscriptions/s/virtualMachines/aks_Pool_1/", "aks-pool-1"),
        ("kwok://node-a", "node-a"),
        ("gce://p/z/" + "x" * 300, "x" * 253),
        ("", ""),
    ],
)
def test_node_name_is_the_dns_safe_tail_of_the_provider_id(provider_id: str, name: str) -> None:
    assert node_name(provider_id) == name


def test_manifest_carries_identity_labels_resources_and_the_unregistered_taint() -> None:
    labels = {wk.INSTANCE_TYPE: "m5.large", wk.TOPOLOGY_ZONE: "us-east-1a"}
    manifest = node_manifest(instance("aws:///us-east-1a/i-0abc", labels))
    assert manifest["metadata"]["name"] == "i-0abc"
    assert manifest["metadata"]["labels"] == {
        **labels,
        wk.HOSTNAME: "i-0abc",
        KWOK_NODE: "fake",
        MANAGED_LABEL: "true",
    }
    assert manifest["metadata"]["annotations"] == {KWOK_NODE: "fake"}
    assert manifest["spec"] == {
        "providerID": "aws:///us-east-1a/i-0abc",
        "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
    }
    assert manifest["status"]["capacity"] == {"cpu": "2", "memory": "4Gi", "pods": "29"}
    assert manifest["status"]["allocatable"] == {"cpu": "1930m", "memory": "3388Mi", "pods": "29"}


def test_manifest_allocatable_defaults_to_capacity() -> None:
    manifest = node_manifest(instance("aws:///z/i-1", allocatable={}))
    assert manifest["status"]["allocatable"] == manifest["status"]["capacity"]


def test_plan_creates_nodes_for_new_instances_only() -> None:
    instances = [instance("aws:///z/i-1"), instance("aws:///z/i-2"), instance("aws:///z/i-3")]
    nodes = [node("i-1", "aws:///z/i-1"), node("i-2", "other://i-2", ours=False)]
    work = plan(instances, nodes, registered={"aws:///z/i-3"})
    # i-1 has its Node; i-2's name is taken by someone else's Node; i-3 was registered before.
    assert work.create == []
    assert work.delete == []
    work = plan(instances, [], registered=())
    assert [m["metadata"]["name"] for m in work.create] == ["i-1", "i-2", "i-3"]


def test_plan_deletes_only_its_own_nodes_whose_instance_is_gone() -> None:
    nodes = [
        node("i-1", "aws:///z/i-1"),
        node("i-2", "aws:///z/i-2", ours=False),
        node("i-3", "aws:///z/i-3", deleting=True),
        node("i-4", "aws:///z/i-4"),
    ]
    work = plan([instance("aws:///z/i-4")], nodes)
    assert work.delete == ["i-1"]
    assert work.create == []


def test_plan_skips_instances_without_a_provider_id() -> None:
    assert plan([instance("")], []).create == []


def test_plan_does_not_boot_instances_being_terminated() -> None:
    terminating = instance("aws:///z/i-1")
    terminating.metadata.deletion_timestamp = datetime(2025, 1, 1, tzinfo=UTC)
    work = plan([terminating], [node("i-1", "aws:///z/i-1")])
    assert (work.create, work.delete) == ([], [])
    assert plan([terminating], []).create == []


def test_cli_rejects_an_unknown_provider(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--provider", "no-such-cloud"])
    assert exited.value.code == 2
    assert "unknown provider 'no-such-cloud'" in capsys.readouterr().err


def test_cli_lists_the_provider_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--provider", "kwok", "--help"])
    shown = capsys.readouterr().out
    assert "--kwok-instance-types-file-path" in shown
    assert "KARPENTER_KWOK_INSTANCE_TYPES_FILE_PATH, or" in shown
    assert " --instance-types-file-path" not in shown  # today's flag: a hidden alias


def test_cli_reads_the_prefixed_and_the_unprefixed_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[object] = []

    def stop(context: object) -> None:
        seen.append(context)
        raise SystemExit(0)

    record = discover().provider("kwok")
    monkeypatch.setattr(
        "karpenter_core.cloudprovider.registry.discover",
        lambda: Registry({"kwok": replace(record, factory=stop)}, {}, []),
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    for flag in ("--kwok-instance-types-file-path", "--instance-types-file-path"):
        with pytest.raises(SystemExit):
            main(["--provider", "kwok", flag, "catalog.json", "--kubeconfig", str(kubeconfig)])
    assert [c.settings["instance-types-file-path"] for c in seen] == ["catalog.json"] * 2


# -- against the cluster -------------------------------------------------------------------


def test_a_round_without_an_apiserver_is_skipped_not_raised() -> None:
    # an apiserver address nothing listens on, as while the apiserver restarts
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:1"
    configuration.retries = False
    cloud = FakeCloud()
    cloud.instances = [instance("aws:///us-east-1a/i-0abc123")]
    registrar = Registrar(cloud, client.ApiClient(configuration))
    assert registrar.sync_once() == Plan(create=[], delete=[])


class FakeCloud:
    """Stands in for a provider's instance list."""

    def __init__(self) -> None:
        self.instances: list[NodeClaim] = []
        self.lock = threading.Lock()

    def list(self) -> list[NodeClaim]:
        with self.lock:
            return list(self.instances)


@pytest.fixture
def cloud(kube_client: client.ApiClient) -> Iterator[FakeCloud]:
    """A fake cloud; the Nodes of its instances are deleted after the test."""
    fake = FakeCloud()
    yield fake
    core = client.CoreV1Api(kube_client)
    for claim in fake.instances:
        try:
            core.delete_node(node_name(claim.status.provider_id or ""))
        except client.ApiException as error:
            if error.status != 404:
                raise


def _instance_id() -> str:
    return f"i-{uuid.uuid4().hex[:17]}"


def _read(core: client.CoreV1Api, name: str) -> client.V1Node | None:
    try:
        return core.read_node(name)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _ready(core: client.CoreV1Api, name: str) -> bool:
    found = _read(core, name)
    conditions = (found.status.conditions if found and found.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


@pytest.mark.integration
def test_registers_a_kwok_node_that_becomes_ready(
    kube_client: client.ApiClient, cloud: FakeCloud
) -> None:
    core = client.CoreV1Api(kube_client)
    instance_id = _instance_id()
    provider_id = f"aws:///us-east-1b/{instance_id}"
    cloud.instances.append(instance(provider_id, {wk.TOPOLOGY_ZONE: "us-east-1b"}))
    registrar = Registrar(cloud, kube_client, interval=0.2)
    work = registrar.sync_once()
    assert [m["metadata"]["name"] for m in work.create] == [instance_id]
    created = core.read_node(instance_id)
    assert created.spec.provider_id == provider_id
    assert created.metadata.labels[wk.TOPOLOGY_ZONE] == "us-east-1b"
    assert created.metadata.labels[MANAGED_LABEL] == "true"
    assert ("karpenter.sh/unregistered", "NoExecute") in [
        (t.key, t.effect) for t in created.spec.taints
    ]
    assert created.status.allocatable["cpu"] == "1930m"
    wait_until(lambda: _ready(core, instance_id), f"node {instance_id} Ready (KWOK)", timeout=30)
    assert registrar.sync_once().create == []


@pytest.mark.integration
def test_deletes_the_node_once_the_instance_is_gone(
    kube_client: client.ApiClient, cloud: FakeCloud
) -> None:
    core = client.CoreV1Api(kube_client)
    instance_id = _instance_id()
    cloud.instances.append(instance(f"aws:///us-east-1a/{instance_id}"))
    with Registrar(cloud, kube_client, interval=0.1).start():
        wait_until(lambda: _read(core, instance_id), f"node {instance_id} created", timeout=30)
        with cloud.lock:
            cloud.instances.clear()
        wait_until(
            lambda: _read(core, instance_id) is None, f"node {instance_id} deleted", timeout=30
        )


@pytest.mark.integration
def test_leaves_other_nodes_alone_and_does_not_reboot_a_deleted_node(
    kube_client: client.ApiClient, cloud: FakeCloud
) -> None:
    core = client.CoreV1Api(kube_client)
    foreign = f"foreign-{uuid.uuid4().hex[:8]}"
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": foreign},
            "spec": {"providerID": f"aws:///us-east-1a/{foreign}"},
        }
    )
    try:
        registrar = Registrar(cloud, kube_client)
        assert foreign not in registrar.sync_once().delete
        instance_id = _instance_id()
        cloud.instances.append(instance(f"aws:///us-east-1c/{instance_id}"))
        registrar.sync_once()
        core.delete_node(instance_id)
        wait_until(lambda: _read(core, instance_id) is None, f"node {instance_id} deleted")
        # Still listed (terminating): its kubelet does not come back.
        assert registrar.sync_once().create == []
        assert _read(core, foreign) is not None
    finally:
        core.delete_node(foreign)
