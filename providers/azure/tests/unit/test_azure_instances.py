"""Launch parts: the customData a VM boots with (cloud-init joining the node with the settings'
endpoint, CA and bootstrap token, the NodeClaim's labels and taints and the AKSNodeClass's kubelet
settings), and NICs and VMs created, listed and deleted through the fake ARM server with the real
azure-mgmt clients and DefaultAzureCredential."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from azure.core.exceptions import HttpResponseError

from karpenter_azure.bootstrap import BootstrapOptions, custom_data
from karpenter_azure.clients import AzureClients
from karpenter_azure.fake_arm import FakeARM, Latency, seed
from karpenter_azure.instances import TAG_CLUSTER, Instances, LaunchSpec, arm_error
from karpenter_azure.nodeclass import KubeletConfiguration
from karpenter_azure.settings import AzureSettings
from karpenter_core.apis.v1.common import Taint
from karpenter_core.cloudprovider.types import NodeClaimNotFound


def decoded(options: BootstrapOptions) -> tuple[dict[str, Any], dict[str, str]]:
    """The cloud-config and its files by path."""
    text = base64.b64decode(custom_data(options)).decode()
    assert text.startswith("#cloud-config\n")
    config = yaml.safe_load(text)
    return config, {f["path"]: f["content"] for f in config["write_files"]}


def options(**changes: Any) -> BootstrapOptions:
    values: dict[str, Any] = {
        "cluster_endpoint": "https://prod-dns.hcp.eastus.azmk8s.io:443",
        "ca_bundle": "LS0tLS1CRUdJTi1DRVJUSUZJQ0FURS0tLS0t",
        "bootstrap_token": "abcdef.0123456789abcdef",
        "labels": {"karpenter.sh/nodepool": "general"},
        "taints": [],
        "max_pods": 250,
    }
    values.update(changes)
    return BootstrapOptions(**values)


def test_the_bootstrap_kubeconfig_holds_endpoint_ca_and_token() -> None:
    config, files = decoded(options())
    kubeconfig = yaml.safe_load(files["/var/lib/kubelet/bootstrap-kubeconfig"])
    [cluster] = kubeconfig["clusters"]
    assert cluster["cluster"] == {
        "server": "https://prod-dns.hcp.eastus.azmk8s.io:443",
        "certificate-authority-data": "LS0tLS1CRUdJTi1DRVJUSUZJQ0FURS0tLS0t",
    }
    assert kubeconfig["users"][0]["user"] == {"token": "abcdef.0123456789abcdef"}
    assert config["runcmd"] == [["systemctl", "enable", "--now", "kubelet"]]


def test_without_a_ca_the_kubeconfig_names_none() -> None:
    _, files = decoded(options(ca_bundle=""))
    kubeconfig = yaml.safe_load(files["/var/lib/kubelet/bootstrap-kubeconfig"])
    assert "certificate-authority-data" not in kubeconfig["clusters"][0]["cluster"]


def test_kubelet_flags_carry_labels_taints_pods_and_the_node_class_settings() -> None:
    _, files = decoded(
        options(
            labels={
                "karpenter.sh/nodepool": "general",
                "node.kubernetes.io/instance-type": "Standard_D2s_v5",
                "node-role.kubernetes.io/worker": "",
                "kubernetes.azure.com/kubelet-identity-client-id": "1234",
            },
            taints=[
                Taint(key="dedicated", value="gpu", effect="NoSchedule"),
                Taint(key="karpenter.sh/unregistered", effect="NoExecute"),
            ],
            max_pods=30,
            kubelet=KubeletConfiguration(cpu_manager_policy="static", pod_pids_limit=1024),
        )
    )
    line = files["/etc/default/kubelet"]
    assert line.startswith("KUBELET_FLAGS=")
    flags = line.removeprefix("KUBELET_FLAGS=").split()
    assert "--cloud-provider=external" in flags
    assert "--max-pods=30" in flags
    assert (
        "--node-labels=karpenter.sh/nodepool=general,"
        "kubernetes.azure.com/kubelet-identity-client-id=1234,"
        "node.kubernetes.io/instance-type=Standard_D2s_v5"
    ) in flags
    assert (
        "--register-with-taints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute"
        in flags
    )
    assert "--cpu-manager-policy=static" in flags
    assert "--pod-max-pids=1024" in flags


# -- NIC and VM through the fake ARM server ---------------------------------------------------

NODE_GROUP = seed.NODE_RESOURCE_GROUP
UBUNTU_2204 = (
    f"/CommunityGalleries/{seed.AKS_UBUNTU_COMMUNITY_GALLERY}/images/2204gen2containerd/"
    "versions/202506.10.0"
)
IDENTITY = (
    f"/subscriptions/{seed.SUBSCRIPTION_ID}/resourceGroups/{NODE_GROUP}/providers/"
    "Microsoft.ManagedIdentity/userAssignedIdentities/kubelet"
)
TAGS = {
    "karpenter.azure.com_cluster": seed.CLUSTER_NAME,
    "karpenter.sh_nodepool": "general",
    "karpenter.sh_nodeclaim": "general-abcde",
}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeARM]:
    with FakeARM(latency=Latency.none()) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeARM, monkeypatch: pytest.MonkeyPatch) -> FakeARM:
    server.reset()
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return server


@pytest.fixture
def instances(fake: FakeARM) -> Instances:
    settings = AzureSettings.from_mapping(
        {
            "cluster-name": seed.CLUSTER_NAME,
            "region": seed.LOCATION,
            "subscription-id": fake.subscription_id,
            "node-resource-group": NODE_GROUP,
            "node-identities": IDENTITY,
            "ssh-public-key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG user@host",
            "arm-endpoint-url": fake.url,
            "arm-ca-bundle": fake.ca_file,
        }
    )
    clients = AzureClients(settings)  # DefaultAzureCredential, from the fake's environment
    return Instances(clients.compute, clients.network, settings)


def spec(fake: FakeARM, name: str = "aks-general-abcde", **changes: Any) -> LaunchSpec:
    values: dict[str, Any] = {
        "name": name,
        "vm_size": "Standard_D2s_v3",
        "zone": "2",
        "capacity_type": "spot",
        "image_id": UBUNTU_2204,
        "subnet_id": fake.subnet_id(),
        "os_disk_size_gb": 64,
        "custom_data": custom_data(options()),
        "tags": TAGS,
    }
    values.update(changes)
    return LaunchSpec(**values)


def launches(fake: FakeARM) -> list[str]:
    """The ARM requests made, without token requests and operation polls."""
    return [
        f"{r.method} {r.path.rsplit('/', 2)[-2]}"
        for r in fake.requests
        if "/providers/" in r.path and not r.is_poll
    ]


@pytest.mark.slow
def test_a_launch_creates_the_nic_then_the_vm_as_upstream_shapes_them(
    fake: FakeARM, instances: Instances
) -> None:
    assert instances.find("aks-general-abcde") is None
    vm = instances.launch(spec(fake))
    assert (vm.name, vm.vm_size, vm.zone, vm.capacity_type) == (
        "aks-general-abcde",
        "Standard_D2s_v3",
        "2",
        "spot",
    )
    assert vm.image_id == UBUNTU_2204
    assert vm.identities == (IDENTITY,)
    # the GET after each PUT is the long-running operation's closing read, done by its poller
    assert launches(fake) == [
        "GET virtualMachines",
        "PUT networkInterfaces",
        "GET networkInterfaces",
        "PUT virtualMachines",
        "GET virtualMachines",
    ]
    [shown] = fake.vms()
    properties = shown["properties"]
    assert properties["evictionPolicy"] == "Delete"
    assert properties["billingProfile"] == {"maxPrice": -1}
    assert properties["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert properties["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] == (
        "Delete"
    )
    assert properties["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    assert shown["tags"] == TAGS
    [nic] = fake.nics()
    assert nic["name"] == "aks-general-abcde" and nic["tags"] == TAGS
    assert instances.provider_id("aks-general-abcde") == (
        f"azure:///subscriptions/{fake.subscription_id}/resourceGroups/{NODE_GROUP.lower()}/"
        "providers/Microsoft.Compute/virtualMachines/aks-general-abcde"
    )


@pytest.mark.slow
def test_an_on_demand_regional_vm_has_no_spot_fields_and_no_zone(
    fake: FakeARM, instances: Instances
) -> None:
    vm = instances.launch(spec(fake, capacity_type="on-demand", zone=""))
    assert (vm.capacity_type, vm.zone) == ("on-demand", "")
    [shown] = fake.vms()
    assert "evictionPolicy" not in shown["properties"]
    assert not shown.get("zones")


@pytest.mark.slow
def test_list_keeps_the_clusters_vms_of_a_nodepool(fake: FakeARM, instances: Instances) -> None:
    instances.launch(spec(fake, name="aks-ours"))
    instances.launch(spec(fake, name="aks-other", tags={**TAGS, TAG_CLUSTER: "another"}))
    untagged = {k: v for k, v in TAGS.items() if k != "karpenter.sh_nodepool"}
    instances.launch(spec(fake, name="aks-no-pool", tags=untagged))
    assert [vm.name for vm in instances.list()] == ["aks-ours"]


@pytest.mark.slow
def test_delete_deletes_the_vm_then_says_it_is_gone(fake: FakeARM, instances: Instances) -> None:
    instances.launch(spec(fake))
    instances.delete("aks-general-abcde")  # starts the delete
    with pytest.raises(NodeClaimNotFound):
        for _ in range(50):
            instances.delete("aks-general-abcde")
            time.sleep(0.05)
    assert fake.vms() == [] and fake.nics() == [] and fake.disks() == []
    with pytest.raises(NodeClaimNotFound):
        instances.get("aks-general-abcde")


@pytest.mark.slow
def test_a_lone_nic_is_deleted_with_the_not_found(fake: FakeARM, instances: Instances) -> None:
    fake.fail_creates("SkuNotAvailable", sku="Standard_D2s_v3")
    with pytest.raises(HttpResponseError):
        instances.launch(spec(fake))
    assert len(fake.nics()) == 1
    with pytest.raises(NodeClaimNotFound):
        instances.delete("aks-general-abcde")
    assert fake.nics() == []


@pytest.mark.slow
def test_an_allocation_failure_reads_as_its_code_and_cleanup_removes_what_was_made(
    fake: FakeARM, instances: Instances
) -> None:
    fake.fail_creates("ZonalAllocationFailed", sku="Standard_D2s_v3", zone="2")
    with pytest.raises(HttpResponseError) as raised:
        instances.launch(spec(fake))
    assert "ZonalAllocationFailed" in [code for code, _ in arm_error(raised.value).codes()]
    instances.cleanup("aks-general-abcde")
    assert fake.vms() == [] and fake.nics() == []
    vm = instances.launch(spec(fake, zone="3"))
    assert vm.zone == "3"


@pytest.mark.slow
def test_every_retry_after_is_honoured(fake: FakeARM, instances: Instances) -> None:
    fake.set_latency(Latency(vm_create=1.0, vm_delete=1.0, nic_create=0.0, nic_delete=0.0))
    instances.launch(spec(fake))
    polls = [r for r in fake.requests if r.is_poll]
    assert fake.requests.retry_after_violations() == []
    assert len(polls) == 2  # the NIC's at once (Retry-After 0), the VM's after its second
