"""Instances of the cluster's nodes: names, providerIDs and the instance a NodeClaim launches
(pure); then creates, lists and deletes against the fake GCE server (slow)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud import compute_v1

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.offerings import UnavailableOfferings, without_unavailable
from karpenter_core.sdk.types import InstanceType, InsufficientCapacity, NodeClaimNotFound
from karpenter_gcp.bootstrap import NodeTemplate
from karpenter_gcp.clients import GCPClients
from karpenter_gcp.instances import (
    Instances,
    instance_body,
    instance_name,
    machine_of,
    provider_id,
)
from karpenter_gcp.instancetype import BuildOptions, MachineType, build
from karpenter_gcp.nodeclass import GCENodeClass
from karpenter_gcp.settings import GCPSettings
from karpenter_gcp.testing import FakeGCE

ZONES = ("us-central1-a", "us-central1-b", "us-central1-c")
SETTINGS = GCPSettings(
    project_id="test-project", region="us-central1", cluster_location="us-central1",
    cluster_name="demo",
)  # fmt: skip
IMAGE = "projects/gke-node-images/global/images/gke-1310-cos-amd64"
TEMPLATE = NodeTemplate(
    metadata={"cluster-name": "demo", "kube-env": "KUBELET_ARGS: --v=2\n"},
    labels={"goog-k8s-cluster-name": "demo", "team": "a"},
    tags=("gke-demo-node",),
    network_interfaces=(
        {
            "name": "nic0",
            "network": "global/networks/default",
            "subnetwork": "regions/us-central1/subnetworks/default",
            "aliasIpRanges": [{"ipCidrRange": "/24", "subnetworkRangeName": "pods"}],
            "accessConfigs": [{"type": "ONE_TO_ONE_NAT"}],
        },
    ),
    service_accounts=({"email": "nodes@p.iam.gserviceaccount.com", "scopes": ["x"]},),
)


def node_class(**spec: Any) -> GCENodeClass:
    return GCENodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {"imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}], **spec},
            "status": {
                "images": [
                    {
                        "sourceImage": IMAGE,
                        "requirements": [{"key": wk.ARCH, "operator": "In", "values": ["amd64"]}],
                    }
                ]
            },
        }
    )


def nodeclaim(
    name: str = "default-abcde", capacity_types: tuple[str, ...] = ("on-demand",)
) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "labels": {wk.NODEPOOL: "default"}},
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.k8s.gcp",
                    "kind": "GCENodeClass",
                    "name": "default",
                },
                "requirements": [
                    {"key": wk.CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)}
                ],
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                "resources": {"requests": {"cpu": "1"}},
            },
        }
    )


def instance_type(
    name: str = "e2-standard-4", price: float = 0.2, zones: tuple[str, ...] = ZONES
) -> InstanceType:
    mt = MachineType(name, 4, 16384, zones)
    prices = {"on-demand": price, "spot": price / 4}
    return build(
        mt,
        BuildOptions("us-central1"),
        lambda ct, _, z: prices[ct] + ZONES.index(z) / 100,
        lambda *_: False,
    )


def body(capacity_type: str = "on-demand", **spec: Any) -> dict[str, Any]:
    it = instance_type()
    offering = next(o for o in it.offerings if o.capacity_type == capacity_type)
    return instance_body(nodeclaim(), node_class(**spec), it, offering, TEMPLATE, SETTINGS)


def test_names_and_provider_ids() -> None:
    assert instance_name("default-abcde") == "karpenter-default-abcde"
    long = instance_name("x" * 80)
    assert len(long) == 63 and long != instance_name("x" * 81)
    assert provider_id("p", "us-central1-a", "karpenter-a") == "gce://p/us-central1-a/karpenter-a"


def test_spot_is_the_spot_provisioning_model_deleted_on_preemption() -> None:
    assert body("spot")["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
    }
    assert body()["scheduling"] == {
        "provisioningModel": "STANDARD",
        "automaticRestart": True,
        "onHostMaintenance": "MIGRATE",
    }
    gpu = build(
        MachineType("g2-standard-4", 4, 16384, ZONES, gpu_name="nvidia-l4", gpu_count=1),
        BuildOptions("us-central1"),
        lambda *_: 1.0,
        lambda *_: False,
    )
    offering = next(o for o in gpu.offerings if o.capacity_type == "on-demand")
    made = instance_body(nodeclaim(), node_class(), gpu, offering, TEMPLATE, SETTINGS)
    assert made["scheduling"]["onHostMaintenance"] == "TERMINATE", "GPUs do not live-migrate"


def test_the_body_boots_the_image_and_deletes_every_disk_with_the_instance() -> None:
    made = body(
        disks=[
            {"category": "local-ssd", "sizeGiB": 375},
            {"boot": True, "sizeGiB": 50, "category": "pd-ssd"},
        ]
    )
    assert made["name"] == "karpenter-default-abcde"
    assert made["machineType"] == "zones/us-central1-a/machineTypes/e2-standard-4"
    boot, scratch = made["disks"]
    assert boot["boot"] is True and boot["autoDelete"] is True
    assert boot["initializeParams"] == {
        "diskType": "zones/us-central1-a/diskTypes/pd-ssd",
        "diskSizeGb": "50",
        "sourceImage": IMAGE,
    }
    assert scratch["type"] == "SCRATCH" and scratch["autoDelete"] is True
    assert body()["disks"][0]["initializeParams"]["diskSizeGb"] == "100"


def test_the_instance_carries_the_clusters_labels_and_karpenters() -> None:
    made = body(labels={"env": "prod"})
    assert made["labels"] == {
        "goog-k8s-cluster-name": "demo",
        "team": "a",
        "env": "prod",
        "karpenter-sh-nodepool": "default",
        "karpenter-sh-nodeclaim": "default-abcde",
        "karpenter-k8s-gcp-gcenodeclass": "default",
    }
    assert made["serviceAccounts"] == [
        {"email": "nodes@p.iam.gserviceaccount.com", "scopes": ["x"]}
    ]


def test_the_bootstrap_metadata_names_the_node() -> None:
    made = body("spot", metadata={"team": "a"}, kubeletConfiguration={"podsPerCore": 8})
    items = {i["key"]: i["value"] for i in made["metadata"]["items"]}
    assert items["karpenter-source-image"] == IMAGE and items["team"] == "a"
    assert items["kubelet-config"] == "podsPerCore: 8\nmaxPods: 110\n"
    assert items["cluster-name"] == "demo"
    labels = dict(pair.split("=") for pair in items["kube-labels"].split(","))
    assert labels[wk.NODEPOOL] == "default" and labels[wk.CAPACITY_TYPE] == "spot"
    assert labels["cloud.google.com/gke-spot"] == "true"
    assert labels[wk.TOPOLOGY_ZONE] == "us-central1-a"
    taints = "--register-with-taints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute"
    assert taints in items["kube-env"]
    assert "ZONE: us-central1-a" in items["kube-env"]


def test_the_network_comes_from_the_template_with_the_nodeclass_choices() -> None:
    (nic,) = body()["networkInterfaces"]
    assert nic["subnetwork"] == "regions/us-central1/subnetworks/default"
    assert nic["aliasIpRanges"] == [{"ipCidrRange": "/24", "subnetworkRangeName": "pods"}]
    assert nic["accessConfigs"] == [{"type": "ONE_TO_ONE_NAT", "name": "external-nat"}]
    made = body(
        networkConfig={"enablePrivateNodes": True},
        networkTags=["web", "gke-demo-node"],
        serviceAccount="sa@test-project.iam.gserviceaccount.com",
    )
    (nic,) = made["networkInterfaces"]
    assert nic["accessConfigs"] == []
    assert made["tags"] == {"items": ["gke-demo-node", "web"]}
    assert made["serviceAccounts"][0]["email"] == "sa@test-project.iam.gserviceaccount.com"


def test_an_instance_read_back_is_a_machine() -> None:
    made = body("spot")
    made.update(
        zone="https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
        status="RUNNING",
        creationTimestamp="2026-01-02T03:04:05.000-08:00",
    )
    machine = machine_of("p", made)
    assert machine.provider_id == "gce://p/us-central1-a/karpenter-default-abcde"
    assert (machine.instance_type, machine.zone, machine.capacity_type) == (
        "e2-standard-4",
        "us-central1-a",
        "spot",
    )
    assert (machine.nodeclaim, machine.nodepool, machine.node_class) == (
        "default-abcde",
        "default",
        "default",
    )
    assert machine.image_id == IMAGE
    assert machine.created is not None and not machine.deleting
    assert machine_of("p", {**made, "status": "STOPPING"}).deleting


def test_a_provider_id_of_another_cloud_is_not_found() -> None:
    instances = Instances(object(), SETTINGS, ZONES, None)  # type: ignore[arg-type]
    with pytest.raises(NodeClaimNotFound, match="not a GCE providerID"):
        instances.get("aws:///us-east-1a/i-1")


# -- against the fake GCE server ---------------------------------------------------------------

FAKE_SETTINGS = GCPSettings(
    project_id="test-project", region="us-central1", cluster_location="us-central1",
    cluster_name="test-cluster",
)  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeGCE]:
    with FakeGCE(operation_delay=0.05) as server:
        yield server


def launcher(fake: FakeGCE, unavailable: UnavailableOfferings | None = None) -> Instances:
    clients = GCPClients.create("test-project", endpoint=fake.endpoint)
    return Instances(clients, FAKE_SETTINGS, ZONES, unavailable or UnavailableOfferings())


def offered(unavailable: UnavailableOfferings, *types: InstanceType) -> list[InstanceType]:
    return [without_unavailable(t, unavailable.snapshot()) for t in types]


def calls(fake: FakeGCE, method: str, suffix: str) -> int:
    return sum(1 for r in fake.requests if r.method == method and r.path.endswith(suffix))


@pytest.mark.slow
def test_a_create_is_one_get_one_insert_and_the_operation_polls(fake: FakeGCE) -> None:
    instances = launcher(fake)
    instances.template.current()
    fake.requests.clear()
    machine = instances.create(nodeclaim(), node_class(), [instance_type()])
    assert machine.provider_id == "gce://test-project/us-central1-a/karpenter-default-abcde"
    paths = [(r.method, r.path.rsplit("/", 2)[-2:], r.status) for r in fake.requests]
    assert paths[:2] == [
        ("GET", ["instances", "karpenter-default-abcde"], 404),
        ("POST", ["us-central1-a", "instances"], 200),
    ]
    assert all(p[0] == "POST" and p[1][-1] == "wait" for p in paths[2:]) and len(paths) >= 3
    (made,) = fake.instances()
    assert made["labels"]["goog-k8s-cluster-name"] == "test-cluster"
    metadata = {i["key"]: i["value"] for i in made["metadata"]["items"]}
    assert "KUBELET_ARGS" in metadata["kube-env"]


@pytest.mark.slow
def test_a_retried_create_finds_the_first_instance(fake: FakeGCE) -> None:
    first = launcher(fake).create(nodeclaim(), node_class(), [instance_type()])
    fake.requests.clear()
    again = launcher(fake).create(nodeclaim(), node_class(), [instance_type()])
    assert again.provider_id == first.provider_id
    assert calls(fake, "POST", "/instances") == 0
    assert len(fake.instances()) == 1


@pytest.mark.slow
def test_spot_launches_the_spot_model(fake: FakeGCE) -> None:
    launcher(fake).create(nodeclaim(capacity_types=("spot",)), node_class(), [instance_type()])
    (made,) = fake.instances()
    assert made["scheduling"]["provisioningModel"] == "SPOT"
    assert made["scheduling"]["instanceTerminationAction"] == "DELETE"


@pytest.mark.slow
def test_a_stockout_marks_the_offering_and_the_next_create_moves_zone(fake: FakeGCE) -> None:
    unavailable = UnavailableOfferings()
    instances = launcher(fake, unavailable)
    fake.faults.stockout("e2-standard-4", "us-central1-a")
    with pytest.raises(InsufficientCapacity, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
        instances.create(nodeclaim(), node_class(), offered(unavailable, instance_type()))
    assert unavailable.is_unavailable("on-demand", "e2-standard-4", "us-central1-a")
    machine = instances.create(nodeclaim(), node_class(), offered(unavailable, instance_type()))
    assert machine.zone == "us-central1-b"


@pytest.mark.slow
@pytest.mark.parametrize("immediate", [False, True], ids=["in-operation", "insert-403"])
def test_a_quota_error_moves_the_next_create_to_another_type(
    fake: FakeGCE, immediate: bool
) -> None:
    unavailable = UnavailableOfferings()
    instances = launcher(fake, unavailable)
    fake.faults.quota("e2-standard-4", metric="E2_CPUS", immediate=immediate)
    types = (instance_type(), instance_type("e2-standard-8", price=0.4))
    with pytest.raises(InsufficientCapacity, match="quota"):
        instances.create(nodeclaim(), node_class(), offered(unavailable, *types))
    assert all(unavailable.is_unavailable("on-demand", "e2-standard-4", z) for z in ZONES)
    machine = instances.create(nodeclaim(), node_class(), offered(unavailable, *types))
    assert machine.instance_type == "e2-standard-8"


@pytest.mark.slow
def test_throttling_and_503_are_retried_and_mark_nothing(fake: FakeGCE) -> None:
    unavailable = UnavailableOfferings()
    instances = launcher(fake, unavailable)
    instances.template.current()
    fake.faults.throttle(2, path="/instances")
    fake.faults.unavailable(1, path="/instances")
    machine = instances.create(nodeclaim(), node_class(), [instance_type()])
    assert machine.zone == "us-central1-a"
    assert sorted(r.status for r in fake.requests if r.status >= 400) == [404, 429, 429, 503]
    assert unavailable.seq == 0


@pytest.mark.slow
def test_delete_removes_the_instance_and_its_boot_disk(fake: FakeGCE) -> None:
    instances = launcher(fake)
    machine = instances.create(nodeclaim(), node_class(), [instance_type()])
    assert fake.disks()
    instances.delete(machine.provider_id)
    deadline = time.monotonic() + 5
    while (fake.instances() or fake.disks()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.instances() == [] and fake.disks() == []
    with pytest.raises(NodeClaimNotFound):
        instances.delete(machine.provider_id)


@pytest.mark.slow
def test_list_keeps_the_clusters_instances(fake: FakeGCE) -> None:
    instances = launcher(fake)
    instances.create(nodeclaim("default-a"), node_class(), [instance_type()])
    instances.create(nodeclaim("default-b"), node_class(), [instance_type(zones=ZONES[1:])])
    other = {
        "name": "karpenter-default-c",
        "machineType": "zones/us-central1-a/machineTypes/e2-standard-4",
        "labels": {"goog-k8s-cluster-name": "other", "karpenter-sh-nodepool": "default"},
    }
    GCPClients.create("test-project", endpoint=fake.endpoint).instances.insert_unary(
        project="test-project",
        zone="us-central1-a",
        instance_resource=compute_v1.Instance.from_json(json.dumps(other)),
    )
    listed = sorted((m.nodeclaim, m.zone) for m in instances.list())
    assert listed == [("default-a", "us-central1-a"), ("default-b", "us-central1-b")]
