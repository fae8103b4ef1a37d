"""The KWOK provider without a cluster: its CRD, NodeClass, offering choice and Node manifest."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from pydantic import ValidationError

from karpenter_core.apis import labels
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.crds import provider_crds
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import (
    CloudProviderError,
    InstanceType,
    InsufficientCapacity,
    NodeClaimNotFound,
    RepairPolicy,
)
from karpenter_core.sdk.crds import crd_path, node_class_crd
from karpenter_kwok.catalog import parse_catalog
from karpenter_kwok.cloudprovider import (
    KWOKCloudProvider,
    choose,
    load_instance_types,
    node_manifest,
    node_name,
)
from karpenter_kwok.nodeclass import NODE_CLASS, KWOKNodeClass

REGENERATE = "regenerate it with: python -m karpenter_core.sdk.crds kwok"

CRD_PATH = crd_path(NODE_CLASS)


@pytest.fixture(scope="module")
def catalog() -> list[InstanceType]:
    return load_instance_types(None)


def _claim(
    requirements: list[dict[str, Any]], requests: dict[str, str] | None = None, **meta: Any
) -> NodeClaim:
    return NodeClaim.from_manifest(
        {
            "metadata": {"name": "default-abcde", "uid": "1234", **meta},
            "spec": {
                "requirements": requirements,
                "nodeClassRef": {
                    "group": "karpenter.kwok.sh",
                    "kind": "KWOKNodeClass",
                    "name": "default",
                },
                "resources": {"requests": requests or {}},
            },
        }
    )


def _in(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def test_the_shipped_crd_is_the_generated_one() -> None:
    shipped = yaml.safe_load(CRD_PATH.read_text())
    assert shipped == node_class_crd(NODE_CLASS), f"{CRD_PATH} is stale; {REGENERATE}"


def test_the_shipped_crd_is_what_karpenter_crds_publishes() -> None:
    published = [c for c in provider_crds() if c["spec"]["group"] == "karpenter.kwok.sh"]
    assert published == [yaml.safe_load(CRD_PATH.read_text())], REGENERATE


def test_nodeclass_ready_by_default_in_the_crd() -> None:
    status = node_class_crd(NODE_CLASS)["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ]["status"]
    (condition,) = status["default"]["conditions"]
    assert (condition["type"], condition["status"]) == ("Ready", "True")


def test_nodeclass_registration_delay() -> None:
    node_class = KWOKNodeClass.from_manifest(
        {"metadata": {"name": "slow"}, "spec": {"nodeRegistrationDelay": "1m30s"}}
    )
    assert node_class.spec.registration_delay() == timedelta(seconds=90)
    assert KWOKNodeClass.from_manifest(
        {"metadata": {"name": "d"}}
    ).spec.registration_delay() == timedelta(0)
    with pytest.raises(ValidationError, match="nodeRegistrationDelay"):
        KWOKNodeClass.from_manifest({"spec": {"nodeRegistrationDelay": "5 minutes"}})


def test_nodeclass_readiness_comes_from_its_ready_condition() -> None:
    def with_ready(status: str) -> KWOKNodeClass:
        condition = {"type": "Ready", "status": status, "reason": "Test", "message": "disabled"}
        return KWOKNodeClass.from_manifest({"status": {"conditions": [condition]}})

    assert with_ready("True").not_ready_reason() is None
    assert with_ready("False").not_ready_reason() == "disabled"
    assert KWOKNodeClass().not_ready_reason() is None


def test_choose_takes_the_cheapest_compatible_offering(catalog: list[InstanceType]) -> None:
    claim = _claim(
        [
            _in(labels.ARCH, "arm64"),
            _in(labels.CAPACITY_TYPE, "on-demand"),
            _in(labels.TOPOLOGY_ZONE, "test-zone-b", "test-zone-c"),
        ]
    )
    it, offering = choose(catalog, claim)
    assert it.name == "c-1x-arm64-linux"
    assert (offering.capacity_type, offering.zone) == ("on-demand", "test-zone-b")


def test_choose_breaks_ties_by_zone_then_name(catalog: list[InstanceType]) -> None:
    it, offering = choose(catalog, _claim([]))
    assert (it.name, offering.capacity_type, offering.zone) == (
        "c-1x-amd64-linux",
        "spot",
        "test-zone-a",
    )


def test_equal_prices_prefer_the_zone_before_the_type_name() -> None:
    def entry(name: str, zone: str) -> dict[str, Any]:
        offering = {
            "Price": 0.1,
            "Requirements": [
                _in(labels.CAPACITY_TYPE, "on-demand"),
                _in(labels.TOPOLOGY_ZONE, zone),
            ],
        }
        return {
            "name": name,
            "offerings": [offering],
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {"cpu": "1", "memory": "1Gi"},
        }

    catalog = parse_catalog([entry("aaa", "zone-b"), entry("bbb", "zone-a")], "test")
    assert choose(catalog, _claim([]))[0].name == "bbb"
    assert choose(catalog, _claim([_in(labels.TOPOLOGY_ZONE, "zone-b")]))[0].name == "aaa"


def test_choose_needs_room_for_the_requests(catalog: list[InstanceType]) -> None:
    it, _ = choose(catalog, _claim([_in(labels.OS, "linux")], {"cpu": "3", "memory": "1Gi"}))
    assert it.name == "c-4x-amd64-linux"
    it, _ = choose(catalog, _claim([_in(labels.OS, "linux")], {"cpu": "900m", "memory": "7Gi"}))
    assert it.name == "m-1x-amd64-linux"


def test_choose_raises_insufficient_capacity(catalog: list[InstanceType]) -> None:
    with pytest.raises(InsufficientCapacity, match="default-abcde"):
        choose(catalog, _claim([_in(labels.TOPOLOGY_ZONE, "elsewhere")]))
    with pytest.raises(InsufficientCapacity):
        choose(catalog, _claim([], {"cpu": "257"}))


def test_node_manifest(catalog: list[InstanceType]) -> None:
    claim = _claim(
        [
            _in(labels.INSTANCE_TYPE, "c-1x-amd64-linux"),
            _in(labels.NODEPOOL, "default"),
            _in("team", "a", "b"),
        ],
        labels={"user": "label", labels.NODEPOOL: "default"},
        annotations={"note": "kept"},
    )
    it, offering = choose(catalog, claim)
    name = node_name(claim)
    node = node_manifest(claim, name, it, offering)
    assert node["metadata"]["annotations"] == {"note": "kept", "kwok.x-k8s.io/node": "fake"}
    assert node["metadata"]["labels"] == {
        "user": "label",
        labels.NODEPOOL: "default",
        labels.INSTANCE_TYPE: "c-1x-amd64-linux",
        labels.ARCH: "amd64",
        labels.OS: "linux",
        labels.CAPACITY_TYPE: "spot",
        labels.TOPOLOGY_ZONE: "test-zone-a",
        "karpenter.kwok.sh/instance-size": "1",
        "karpenter.kwok.sh/instance-family": "c",
        "karpenter.kwok.sh/instance-cpu": "1",
        "karpenter.kwok.sh/instance-memory": "2Gi",
        "karpenter.kwok.sh/kwoknodeclass": "default",
        labels.HOSTNAME: name,
        "kwok.x-k8s.io/node": "fake",
    }
    assert node["spec"] == {
        "providerID": f"kwok://{name}",
        "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
    }
    assert node["status"]["capacity"] == {
        "cpu": "1",
        "memory": "2Gi",
        "pods": "16",
        "ephemeral-storage": "20Gi",
    }
    assert node["status"]["allocatable"] == {
        "cpu": "900m",
        "memory": "2038Mi",
        "pods": "16",
        "ephemeral-storage": "20Gi",
    }


def test_node_names_are_stable_per_nodeclaim_object() -> None:
    claim = _claim([])
    assert node_name(claim) == node_name(_claim([])) == "kwok-default-abcde-03ac6742"
    assert node_name(_claim([], uid="5678")) != node_name(claim)
    long = node_name(_claim([], name="x" * 200))
    assert len(long) <= 63
    assert long.startswith("kwok-xxx")


def test_launching_needs_a_cluster() -> None:
    provider = KWOKCloudProvider.from_context(ProviderContext())
    with pytest.raises(CloudProviderError, match="no cluster is configured"):
        provider.create(_claim([]))
    with pytest.raises(CloudProviderError, match="no cluster is configured"):
        provider.list()


def test_delete_of_a_claim_that_never_launched_is_not_found() -> None:
    provider = KWOKCloudProvider.from_context(ProviderContext())
    with pytest.raises(NodeClaimNotFound):
        provider.delete(_claim([]))


def test_upstream_behaviour_of_the_small_methods() -> None:
    provider = KWOKCloudProvider.from_context(ProviderContext())
    claim = _claim([])
    assert provider.is_drifted(claim) == ""
    assert provider.repair_policies() == [
        RepairPolicy("Ready", "False", timedelta(minutes=10)),
        RepairPolicy("Ready", "Unknown", timedelta(minutes=10)),
    ]
    assert provider.supported_node_classes() == [KWOKNodeClass]
    assert provider.node_class_readiness(None).ready  # type: ignore[arg-type]


def _nodepool(
    node_class: str, group: str = "karpenter.kwok.sh", kind: str = "KWOKNodeClass"
) -> NodePool:
    ref = {"group": group, "kind": kind, "name": node_class}
    return NodePool.from_manifest(
        {
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": ref, "requirements": []}}},
        }
    )


def test_node_classes_come_from_the_read_view_without_requests() -> None:
    """The KWOKNodeClass is looked up in the context's view; the cluster is never asked (this
    client points at a port nothing listens on)."""
    unreachable = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))
    not_ready = KWOKNodeClass.from_manifest(
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "Test", "message": "broken"}
                ]
            }
        }
    )
    view = {"ready": KWOKNodeClass(), "broken": not_ready}
    context = ProviderContext(
        kube_client=unreachable,
        node_classes=lambda kind, name: view.get(name) if kind == "KWOKNodeClass" else None,
    )
    provider = KWOKCloudProvider.from_context(context)
    assert provider.node_class_readiness(_nodepool("ready")).ready
    broken = provider.node_class_readiness(_nodepool("broken"))
    assert not broken.ready and "broken" in broken.reason
    missing = provider.node_class_readiness(_nodepool("absent"))
    assert not missing.ready and "'absent' not found" in missing.reason
    blind = KWOKCloudProvider.from_context(ProviderContext(kube_client=unreachable))
    without_view = blind.node_class_readiness(_nodepool("ready"))
    assert not without_view.ready and "NodeClass view" in without_view.reason


def test_another_providers_node_class_gets_no_instance_types() -> None:
    provider = KWOKCloudProvider.from_context(ProviderContext())
    assert provider.get_instance_types(_nodepool("default"))
    assert (
        provider.get_instance_types(_nodepool("default", "karpenter.k8s.aws", "EC2NodeClass")) == []
    )
    assert provider.get_instance_types(_nodepool("default", "karpenter.kwok.sh", "Other")) == []


def test_launch_list_and_delete_never_build_the_generated_core_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process's first ``CoreV1Api`` takes seconds and about 20 MB to build; the provider's
    Node calls are raw JSON over the ``ApiClient``, so the first launch does not wait for it."""
    from karpenter_conformance.fakekube import FakeKube

    def refuse(*args: object) -> None:
        raise AssertionError("CoreV1Api built")

    monkeypatch.setattr(k8s, "CoreV1Api", refuse)
    fake = FakeKube()
    try:
        context = ProviderContext(
            kube_client=fake.api_client(),
            node_classes=lambda kind, name: KWOKNodeClass(),
        )
        provider = KWOKCloudProvider.from_context(context)
        launched = provider.create(_claim([_in(labels.CAPACITY_TYPE, "spot")]))
        assert launched.status.provider_id.startswith("kwok://")
        assert [c.status.provider_id for c in provider.list()] == [launched.status.provider_id]
        with pytest.raises(NodeClaimNotFound):
            provider.delete(launched)
        assert provider.list() == []
    finally:
        fake.stop()
