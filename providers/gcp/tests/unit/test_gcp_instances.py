"""Instances of the cluster's nodes: names, providerIDs and the instance a launch asks for
(pure); then launches, lists and deletes against the fake GCE server (slow)."""

from __future__ import annotations

import pytest
from karpenter_gcp.bootstrap import NodeTemplate
from karpenter_gcp.instances import (
    Disk,
    LaunchSpec,
    instance_body,
    instance_name,
    machine_of,
    parse_provider_id,
    provider_id,
)

from karpenter_core.sdk.types import NodeClaimNotFound

TEMPLATE = NodeTemplate(
    metadata={"cluster-name": "demo"},
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


def spec(capacity_type: str = "on-demand", **overrides: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "name": "karpenter-default-abcde",
        "machine_type": "n2-standard-4",
        "zone": "us-central1-b",
        "capacity_type": capacity_type,
        "image": "projects/gke-node-images/global/images/cos-1",
        "disks": (Disk(375, "local-ssd"), Disk(100, "pd-balanced", boot=True)),
        "metadata": {"kube-env": "X: y\n"},
        "labels": {"karpenter-sh-nodepool": "default"},
        "template": TEMPLATE,
    }
    fields.update(overrides)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def test_names_and_provider_ids() -> None:
    assert instance_name("default-abcde") == "karpenter-default-abcde"
    long = instance_name("x" * 80)
    assert len(long) == 63 and long != instance_name("x" * 81)
    pid = provider_id("p", "us-central1-a", "karpenter-a")
    assert pid == "gce://p/us-central1-a/karpenter-a"
    assert parse_provider_id(pid) == ("p", "us-central1-a", "karpenter-a")
    with pytest.raises(NodeClaimNotFound, match="not a GCE providerID"):
        parse_provider_id("aws:///us-east-1a/i-1")


def test_spot_is_the_spot_provisioning_model_deleted_on_preemption() -> None:
    assert instance_body(spec("spot"))["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
    }
    on_demand = instance_body(spec(gpu=True))["scheduling"]
    assert on_demand["provisioningModel"] == "STANDARD"
    assert on_demand["onHostMaintenance"] == "TERMINATE"
    assert "instanceTerminationAction" not in on_demand


def test_the_body_boots_the_image_and_deletes_every_disk_with_the_instance() -> None:
    body = instance_body(spec())
    assert body["machineType"] == "zones/us-central1-b/machineTypes/n2-standard-4"
    boot, scratch = body["disks"]
    assert boot["boot"] is True and boot["autoDelete"] is True
    assert boot["initializeParams"] == {
        "diskType": "zones/us-central1-b/diskTypes/pd-balanced",
        "diskSizeGb": "100",
        "sourceImage": "projects/gke-node-images/global/images/cos-1",
    }
    assert scratch["type"] == "SCRATCH" and scratch["autoDelete"] is True
    assert body["labels"] == {
        "goog-k8s-cluster-name": "demo",
        "team": "a",
        "karpenter-sh-nodepool": "default",
    }
    assert body["serviceAccounts"] == [
        {"email": "nodes@p.iam.gserviceaccount.com", "scopes": ["x"]}
    ]
    keys = [item["key"] for item in body["metadata"]["items"]]
    assert keys == ["karpenter-source-image", "kube-env"]


def test_the_network_comes_from_the_template_with_the_nodeclass_choices() -> None:
    (nic,) = instance_body(spec())["networkInterfaces"]
    assert nic["subnetwork"] == "regions/us-central1/subnetworks/default"
    assert nic["aliasIpRanges"] == [{"ipCidrRange": "/24", "subnetworkRangeName": "pods"}]
    assert nic["accessConfigs"] == [{"type": "ONE_TO_ONE_NAT", "name": "external-nat"}]
    body = instance_body(
        spec(
            subnetwork="regions/us-central1/subnetworks/nodes",
            private_nodes=True,
            max_pods=32,
            network_tags=("web", "gke-demo-node"),
            service_account="sa@p.iam.gserviceaccount.com",
        )
    )
    (nic,) = body["networkInterfaces"]
    assert nic["subnetwork"] == "regions/us-central1/subnetworks/nodes"
    assert nic["aliasIpRanges"][0]["ipCidrRange"] == "/26"
    assert nic["accessConfigs"] == []
    assert body["tags"] == {"items": ["gke-demo-node", "web"]}
    assert body["serviceAccounts"][0]["email"] == "sa@p.iam.gserviceaccount.com"


def test_an_instance_read_back_is_a_machine() -> None:
    body = instance_body(spec("spot"))
    body.update(
        zone="https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-b",
        status="RUNNING",
        creationTimestamp="2026-01-02T03:04:05.000-08:00",
        labels={**body["labels"], "karpenter-sh-nodeclaim": "default-abcde"},
    )
    machine = machine_of("p", body)
    assert machine.provider_id == "gce://p/us-central1-b/karpenter-default-abcde"
    assert (machine.instance_type, machine.zone, machine.capacity_type) == (
        "n2-standard-4",
        "us-central1-b",
        "spot",
    )
    assert (machine.nodeclaim, machine.nodepool) == ("default-abcde", "default")
    assert machine.image_id == "projects/gke-node-images/global/images/cos-1"
    assert machine.created is not None and not machine.deleting
    assert machine_of("p", {**body, "status": "STOPPING"}).deleting
