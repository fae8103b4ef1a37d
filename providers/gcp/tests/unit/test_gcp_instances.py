"""Instances of the cluster's nodes: names, providerIDs and the instance a NodeClaim launches
(pure); then creates, lists and deletes against the fake GCE server (slow)."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.types import InstanceType, NodeClaimNotFound
from karpenter_gcp.bootstrap import NodeTemplate
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
    name: str = "n2-standard-4", price: float = 0.2, zones: tuple[str, ...] = ZONES
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


def test_the_body_boots_the_image_and_deletes_every_disk_with_the_instance() -> None:
    made = body(
        disks=[
            {"category": "local-ssd", "sizeGiB": 375},
            {"boot": True, "sizeGiB": 50, "category": "pd-ssd"},
        ]
    )
    assert made["name"] == "karpenter-default-abcde"
    assert made["machineType"] == "zones/us-central1-a/machineTypes/n2-standard-4"
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
    items = {
        i["key"]: i["value"] for i in body("spot", metadata={"team": "a"})["metadata"]["items"]
    }
    assert items["karpenter-source-image"] == IMAGE and items["team"] == "a"
    assert items["cluster-name"] == "demo"
    labels = dict(pair.split("=") for pair in items["kube-labels"].split(","))
    assert labels[wk.NODEPOOL] == "default" and labels[wk.CAPACITY_TYPE] == "spot"
    assert labels["cloud.google.com/gke-spot"] == "true"
    assert labels[wk.TOPOLOGY_ZONE] == "us-central1-a"
    assert "--register-with-taints=dedicated=gpu:NoSchedule" in items["kube-env"]
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
        "n2-standard-4",
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
