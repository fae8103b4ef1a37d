"""The KWOK provider against a real apiserver: Nodes created, found, listed and deleted; its
KWOKNodeClasses read through an informer, as the controller gives them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from fractions import Fraction

import pytest
from kubernetes import client

from karpenter_conformance.pytest_plugin import KubeCluster
from karpenter_conformance.waiting import wait_until
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import InsufficientCapacity, NodeClaimNotFound
from karpenter_core.operator.kube import KubeClient
from karpenter_core.state.informer import Informer
from karpenter_kwok.cloudprovider import KWOKCloudProvider
from karpenter_kwok.nodeclass import KWOKNodeClass

pytestmark = pytest.mark.integration

GROUP, VERSION, PLURAL = "karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses"


@pytest.fixture
def node_classes(kube_cluster: KubeCluster) -> Iterator[Informer[KWOKNodeClass]]:
    """The provider's KWOKNodeClass read view: an informer, as the controller runs one."""
    kube = KubeClient.from_config(str(kube_cluster.kubeconfig))
    informer = Informer(kube, f"/apis/{GROUP}/{VERSION}/{PLURAL}", KWOKNodeClass.from_manifest)
    informer.start()
    try:
        wait_until(informer.synced.is_set, "the KWOKNodeClass informer to sync", 10)
        yield informer
    finally:
        informer.stop(timeout=5)
        kube.close()


@pytest.fixture
def node_class(
    kube_client: client.ApiClient,
    node_classes: Informer[KWOKNodeClass],
    request: pytest.FixtureRequest,
) -> Iterator[str]:
    """A KWOKNodeClass (with the delay given by the test's parameter, if any), once the
    provider's view has it; deleted after."""
    api = client.CustomObjectsApi(kube_client)
    name = f"kwok-{uuid.uuid4().hex[:8]}"
    spec = {"nodeRegistrationDelay": request.param} if hasattr(request, "param") else {}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KWOKNodeClass",
        "metadata": {"name": name},
        "spec": spec,
    }
    api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    try:
        wait_until(lambda: name in node_classes.cache, f"{name} in the informer cache", 10)
        yield name
    finally:
        api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


@pytest.fixture
def provider(
    kube_client: client.ApiClient, node_classes: Informer[KWOKNodeClass]
) -> KWOKCloudProvider:
    def view(kind: str, name: str) -> KWOKNodeClass | None:
        return node_classes.cache.get(name) if kind == "KWOKNodeClass" else None

    context = ProviderContext(kube_client=kube_client, node_classes=view)
    return KWOKCloudProvider.from_context(context)


def _claim(node_class: str) -> NodeClaim:
    return NodeClaim.from_manifest(
        {
            "metadata": {"name": f"claim-{uuid.uuid4().hex[:6]}", "uid": str(uuid.uuid4())},
            "spec": {
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["on-demand"],
                    },
                ],
                "nodeClassRef": {"group": GROUP, "kind": "KWOKNodeClass", "name": node_class},
                "resources": {"requests": {"cpu": "1500m"}},
            },
        }
    )


def _ready(core: client.CoreV1Api, name: str) -> bool:
    conditions = core.read_node_status(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def test_create_get_list_delete(
    provider: KWOKCloudProvider, node_class: str, kube_client: client.ApiClient
) -> None:
    claim = _claim(node_class)
    launched = provider.create(claim)
    provider_id = launched.status.provider_id
    assert provider_id is not None and provider_id.startswith("kwok://kwok-claim-")
    assert launched.metadata.labels["node.kubernetes.io/instance-type"] == "c-2x-arm64-linux"
    assert launched.metadata.labels["karpenter.sh/capacity-type"] == "on-demand"
    assert launched.status.allocatable["cpu"] == Fraction("1.9")
    assert provider.create(claim).status.provider_id == provider_id  # idempotent

    core = client.CoreV1Api(kube_client)
    name = provider_id.removeprefix("kwok://")
    node = core.read_node(name)
    assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    assert ("karpenter.sh/unregistered", "NoExecute") in {
        (t.key, t.effect) for t in node.spec.taints
    }
    wait_until(lambda: _ready(core, name), f"KWOK to make node {name} Ready")

    assert provider.get(provider_id).status.provider_id == provider_id
    assert provider_id in {c.status.provider_id for c in provider.list()}

    with pytest.raises(NodeClaimNotFound, match="terminated"):
        provider.delete(launched)
    with pytest.raises(NodeClaimNotFound):
        provider.get(provider_id)
    with pytest.raises(NodeClaimNotFound):
        provider.delete(launched)


@pytest.mark.parametrize("node_class", ["2s"], indirect=True)
def test_registration_delay(
    provider: KWOKCloudProvider, node_class: str, kube_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_client)
    started = time.monotonic()
    launched = provider.create(_claim(node_class))
    name = (launched.status.provider_id or "").removeprefix("kwok://")
    with pytest.raises(client.ApiException):
        core.read_node(name)
    wait_until(lambda: _exists(core, name), f"node {name} to be created", timeout=30)
    assert time.monotonic() - started >= 2
    with pytest.raises(NodeClaimNotFound):
        provider.delete(launched)


def _exists(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_node(name)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def test_a_missing_node_class_means_no_capacity(provider: KWOKCloudProvider) -> None:
    with pytest.raises(InsufficientCapacity, match="'absent' not found"):
        provider.create(_claim("absent"))
