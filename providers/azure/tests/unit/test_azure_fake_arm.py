"""The fake ARM server driven by the real clients: azure-identity's ClientSecretCredential,
azure-mgmt-compute and azure-mgmt-network over HTTPS with the server's CA, and the Retail Prices
API and admin API over plain urllib."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.mgmt.compute import ComputeManagementClient

from karpenter_azure.fake_arm import FakeARM, Latency, seed

# every test talks to a server thread through the Azure SDK (a second of imports and tokens)
pytestmark = pytest.mark.slow

RG = seed.NODE_RESOURCE_GROUP
UBUNTU = seed.AKS_UBUNTU_COMMUNITY_GALLERY
UBUNTU_2204 = f"/CommunityGalleries/{UBUNTU}/images/2204gen2containerd/versions/202506.10.0"
IDENTITY = (
    f"/subscriptions/{seed.SUBSCRIPTION_ID}/resourceGroups/{RG}/providers/"
    "Microsoft.ManagedIdentity/userAssignedIdentities/kubelet"
)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeARM]:
    with FakeARM(latency=Latency.none()) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeARM) -> FakeARM:
    server.reset()
    server.set_latency(Latency.none())
    return server


@pytest.fixture(scope="module")
def clients(server: FakeARM) -> tuple[Any, Any]:
    # no retries: an injected fault is the answer unless a test asks for retries
    return server.compute_client(retry_total=0), server.network_client(retry_total=0)


def nic_body(fake: FakeARM, subnet: str = "aks-subnet") -> dict[str, Any]:
    return {
        "location": "eastus",
        "tags": {"karpenter.azure.com_cluster": "test-cluster"},
        "properties": {
            "ipConfigurations": [
                {
                    "name": "ipconfig1",
                    "properties": {"primary": True, "subnet": {"id": fake.subnet_id(subnet)}},
                }
            ]
        },
    }


def vm_body(
    nic_id: str, size: str = "Standard_D2s_v3", zone: str | None = "1", **props: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "location": "eastus",
        "tags": {"karpenter.sh_nodepool": "default", "karpenter.azure.com_cluster": "test-cluster"},
        "identity": {"type": "UserAssigned", "userAssignedIdentities": {IDENTITY: {}}},
        "properties": {
            "hardwareProfile": {"vmSize": size},
            "storageProfile": {
                "imageReference": {"communityGalleryImageId": UBUNTU_2204},
                "osDisk": {
                    "createOption": "FromImage",
                    "deleteOption": "Delete",
                    "diskSizeGB": 128,
                },
            },
            "osProfile": {
                "computerName": "aks-node",
                "adminUsername": "azureuser",
                "customData": "I2Nsb3VkLWNvbmZpZw==",
            },
            "networkProfile": {
                "networkInterfaces": [
                    {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
                ]
            },
            **props,
        },
    }
    if zone:
        body["zones"] = [zone]
    return body


def launch(clients: tuple[Any, Any], fake: FakeARM, name: str, **vm: Any) -> Any:
    compute, network = clients
    nic = network.network_interfaces.begin_create_or_update(RG, name, nic_body(fake)).result()
    return compute.virtual_machines.begin_create_or_update(RG, name, vm_body(nic.id, **vm)).result()


def fetch(fake: FakeARM, path: str, method: str = "GET", body: Any = None) -> Any:
    context = ssl.create_default_context(cafile=fake.ca_file)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(fake.url + path, data=data, method=method)
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return json.loads(response.read() or b"null")


# -- identity ------------------------------------------------------------------------------


def test_client_secret_credential_gets_a_token_from_the_fake(fake: FakeARM) -> None:
    token = fake.credential().get_token("https://management.azure.com/.default")
    assert token.token.startswith("fake-arm.")
    assert token.expires_on > time.time() + 3000
    paths = [r.path for r in fake.requests]
    assert f"/{fake.tenant_id}/v2.0/.well-known/openid-configuration" in paths
    assert f"/{fake.tenant_id}/oauth2/v2.0/token" in paths


def test_a_wrong_secret_is_refused_and_arm_refuses_requests_without_a_token(fake: FakeARM) -> None:
    from azure.identity import ClientSecretCredential

    credential = ClientSecretCredential(
        fake.tenant_id,
        fake.client_id,
        "wrong",
        authority=fake.authority,
        disable_instance_discovery=True,
        connection_verify=fake.ca_file,
    )
    with pytest.raises(ClientAuthenticationError, match="AADSTS7000215"):
        credential.get_token("https://management.azure.com/.default")
    with pytest.raises(urllib.error.HTTPError) as refused:
        fetch(
            fake,
            f"/subscriptions/{fake.subscription_id}/providers/Microsoft.Compute/skus?api-version=2021-07-01",
        )
    assert refused.value.code == 401
    assert json.loads(refused.value.read())["error"]["code"] == "InvalidAuthenticationToken"


def test_workload_identity_exchanges_its_federated_token(fake: FakeARM, tmp_path: Any) -> None:
    from azure.identity import WorkloadIdentityCredential

    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2ln")
    credential = WorkloadIdentityCredential(
        tenant_id=fake.tenant_id,
        client_id=fake.client_id,
        token_file_path=str(token_file),
        authority=fake.authority,
        disable_instance_discovery=True,
        connection_verify=fake.ca_file,
    )
    compute = ComputeManagementClient(credential, fake.subscription_id, **fake.client_kwargs())
    assert list(compute.resource_skus.list(filter="location eq 'westus2'"))


# -- resource SKUs, subnets, images --------------------------------------------------------


def test_resource_skus_are_filtered_by_location_and_paged(clients: tuple[Any, Any]) -> None:
    compute, _ = clients
    eastus = list(compute.resource_skus.list(filter="location eq 'eastus'"))
    assert len(eastus) == len(seed.BUILTIN_SKUS)
    assert {sku.locations[0] for sku in eastus} == {"eastus"}
    d2 = next(sku for sku in eastus if sku.name == "Standard_D2s_v3")
    assert d2.location_info[0].zones == ["1", "2", "3"]
    capabilities = {c.name: c.value for c in d2.capabilities}
    assert capabilities["vCPUs"] == "2"
    assert capabilities["LowPriorityCapable"] == "True"
    with FakeARM(latency=Latency.none(), page_size=5) as paged:
        everything = list(paged.compute_client().resource_skus.list())
    assert len(everything) == len(seed.BUILTIN_SKUS) * len(seed.REGIONS)


def test_subnets_and_node_image_versions_are_served(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    compute, network = clients
    subnet = network.subnets.get(RG, seed.VNET_NAME, "aks-subnet")
    assert subnet.address_prefix == "10.224.0.0/16"
    versions = list(
        compute.community_gallery_image_versions.list("eastus", UBUNTU, "2204gen2containerd")
    )
    assert [v.name for v in versions] == [name for name, _ in seed.IMAGE_VERSIONS]
    fake.publish_image(UBUNTU, "2204gen2containerd", "202507.01.0", "2025-07-01T00:00:00Z")
    versions = list(
        compute.community_gallery_image_versions.list("eastus", UBUNTU, "2204gen2containerd")
    )
    newest = max(versions, key=lambda v: v.properties.published_date)
    assert newest.name == "202507.01.0"
    shared = list(
        compute.gallery_image_versions.list_by_gallery_image(
            "AKS-Ubuntu", "AKSUbuntu", "2204gen2containerd"
        )
    )
    assert "202507.01.0" in {v.name for v in shared}
    with pytest.raises(ResourceNotFoundError):
        list(compute.community_gallery_image_versions.list("eastus", UBUNTU, "nosuchimage"))


# -- VMs and NICs --------------------------------------------------------------------------


def test_a_nic_and_a_vm_are_created_through_long_running_operations(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    compute, _ = clients
    vm = launch(clients, fake, "aks-default-a1b2c", zone="2")
    assert vm.properties.provisioning_state == "Succeeded"
    assert vm.zones == ["2"]
    assert vm.properties.hardware_profile.vm_size == "Standard_D2s_v3"
    assert vm.properties.priority == "Regular"
    assert vm.properties.vm_id
    assert vm.properties.os_profile.custom_data is None  # ARM never returns customData
    assert vm.identity.user_assigned_identities[IDENTITY].client_id
    assert vm.tags["karpenter.sh_nodepool"] == "default"
    view = compute.virtual_machines.get(RG, "aks-default-a1b2c", expand="instanceView")
    assert "PowerState/running" in [s.code for s in view.properties.instance_view.statuses]
    [nic] = fake.nics()
    assert nic["properties"]["virtualMachine"]["id"] == vm.id
    assert (
        nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"] == "10.224.0.4"
    )
    polls = [r for r in fake.requests if r.is_poll]
    assert [r.status for r in polls] == [200, 200]  # one status poll per operation
    assert {r.api_version for r in fake.requests if "virtualMachines" in r.path} == {"2026-04-01"}


def test_a_spot_vm_keeps_its_eviction_policy_and_max_price(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    vm = launch(
        clients,
        fake,
        "aks-spot",
        priority="Spot",
        evictionPolicy="Delete",
        billingProfile={"maxPrice": -1},
    )
    assert vm.properties.priority == "Spot"
    assert vm.properties.eviction_policy == "Delete"
    assert vm.properties.billing_profile.max_price == -1


def test_vms_are_listed_by_group_and_subscription(fake: FakeARM, clients: tuple[Any, Any]) -> None:
    compute, _ = clients
    for name in ("aks-a", "aks-b"):
        launch(clients, fake, name)
    assert sorted(vm.name for vm in compute.virtual_machines.list(RG)) == ["aks-a", "aks-b"]
    assert sorted(vm.name for vm in compute.virtual_machines.list_all()) == ["aks-a", "aks-b"]
    assert list(compute.virtual_machines.list(seed.RESOURCE_GROUP)) == []


def test_deleting_a_vm_deletes_its_nic_and_os_disk_when_asked(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    compute, network = clients
    launch(clients, fake, "aks-a")
    assert len(fake.disks()) == 1
    with pytest.raises(HttpResponseError) as in_use:
        network.network_interfaces.begin_delete(RG, "aks-a").result()
    assert in_use.value.error.code == "NicInUse"
    compute.virtual_machines.begin_delete(RG, "aks-a", force_deletion=True).result()
    assert (fake.vms(), fake.nics(), fake.disks()) == ([], [], [])
    with pytest.raises(ResourceNotFoundError):
        compute.virtual_machines.get(RG, "aks-a")
    compute.virtual_machines.begin_delete(RG, "aks-a").result()  # gone: 204, no error


def test_a_detached_nic_and_disk_stay_after_the_vm(fake: FakeARM, clients: tuple[Any, Any]) -> None:
    compute, network = clients
    nic = network.network_interfaces.begin_create_or_update(RG, "aks-a", nic_body(fake)).result()
    body = vm_body(nic.id)
    body["properties"]["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] = (
        "Detach"
    )
    body["properties"]["storageProfile"]["osDisk"]["deleteOption"] = "Detach"
    compute.virtual_machines.begin_create_or_update(RG, "aks-a", body).result()
    compute.virtual_machines.begin_delete(RG, "aks-a").result()
    [left] = fake.nics()
    assert "virtualMachine" not in left["properties"]
    assert [d["managedBy"] for d in fake.disks()] == [None]
    network.network_interfaces.begin_delete(RG, "aks-a").result()
    assert fake.nics() == []


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"size": "Standard_D2s_v9"}, 400, "InvalidParameter"),
        ({"size": "Standard_D2ps_v5"}, 400, "BadRequest"),  # an x64 image on an Arm64 size
        ({"zone": "4"}, 409, "SkuNotAvailable"),
    ],
)
def test_a_vm_the_region_cannot_run_is_refused(
    fake: FakeARM, clients: tuple[Any, Any], change: dict[str, Any], status: int, code: str
) -> None:
    with pytest.raises(HttpResponseError) as refused:
        launch(clients, fake, "aks-a", **change)
    assert (refused.value.status_code, refused.value.error.code) == (status, code)
    assert fake.vms() == []


def test_an_unknown_image_version_is_refused(fake: FakeARM, clients: tuple[Any, Any]) -> None:
    compute, network = clients
    nic = network.network_interfaces.begin_create_or_update(RG, "aks-a", nic_body(fake)).result()
    body = vm_body(nic.id)
    body["properties"]["storageProfile"]["imageReference"] = {
        "communityGalleryImageId": UBUNTU_2204.replace("202506.10.0", "199901.01.0")
    }
    with pytest.raises(ResourceNotFoundError) as refused:
        compute.virtual_machines.begin_create_or_update(RG, "aks-a", body).result()
    assert refused.value.error.code == "GalleryImageNotFound"


# -- faults --------------------------------------------------------------------------------


def test_a_zonal_allocation_failure_fails_the_operation_and_the_next_zone_works(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    fake.fail_creates("ZonalAllocationFailed", sku="Standard_D2s_v3", zone="eastus-1")
    with pytest.raises(HttpResponseError) as failed:
        launch(clients, fake, "aks-a", zone="1")
    assert failed.value.error.code == "ZonalAllocationFailed"
    [vm] = fake.vms()
    assert vm["properties"]["provisioningState"] == "Failed"
    assert launch(clients, fake, "aks-b", zone="2").properties.provisioning_state == "Succeeded"


def test_quota_and_sku_errors_answer_the_put_with_409(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    fake.fail_creates("LowPriorityQuota", priority="Spot", times=1)
    fake.fail_creates("SkuNotAvailable", sku="Standard_F2s_v2", times=1)
    with pytest.raises(ResourceExistsError) as quota:
        launch(clients, fake, "aks-a", priority="Spot", evictionPolicy="Delete")
    assert quota.value.error.code == "OperationNotAllowed"
    assert "LowPriorityCores" in quota.value.error.message
    with pytest.raises(ResourceExistsError) as sku:
        launch(clients, fake, "aks-b", size="Standard_F2s_v2")
    assert sku.value.error.code == "SkuNotAvailable"
    assert fake.vms() == []
    assert launch(clients, fake, "aks-c", priority="Spot", evictionPolicy="Delete").name == "aks-c"


def test_throttling_is_retried_after_its_retry_after(fake: FakeARM) -> None:
    compute = fake.compute_client(retry_total=2)
    fake.fail_requests(429, method="GET", path=r"/skus$", retry_after=0.5, times=1)
    started = time.monotonic()
    assert list(compute.resource_skus.list(filter="location eq 'eastus'"))
    assert time.monotonic() - started >= 0.5
    statuses = [r.status for r in fake.requests if r.path.endswith("/skus")]
    assert statuses == [429, 200]
    assert fake.requests.retry_after_violations() == []


def test_a_server_error_is_answered_in_arm_shape(fake: FakeARM, clients: tuple[Any, Any]) -> None:
    compute, _ = clients
    fake.fail_requests(500, path="virtualMachines", times=1)
    with pytest.raises(HttpResponseError) as failed:
        compute.virtual_machines.get(RG, "aks-a")
    assert (failed.value.status_code, failed.value.error.code) == (500, "InternalServerError")
    with pytest.raises(ResourceNotFoundError):
        compute.virtual_machines.get(RG, "aks-a")


def test_operations_take_their_latency_and_polls_are_told_when_to_come_back(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    fake.set_latency(Latency(vm_create=1.2, vm_delete=0, nic_create=0, nic_delete=0))
    started = time.monotonic()
    launch(clients, fake, "aks-a")
    assert time.monotonic() - started >= 1.2
    polls = [r for r in fake.requests if r.is_poll and "Microsoft.Compute" in r.path]
    assert polls[0].retry_after is not None and polls[0].retry_after >= 1
    assert polls[-1].retry_after is None  # done
    assert len(polls) <= 3
    # the poll that followed an InProgress answer waited for its Retry-After
    late = [v for v in fake.requests.retry_after_violations() if v.previous.is_poll]
    assert late == []


def test_concurrent_creates_all_succeed_with_distinct_addresses(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            launch(clients, fake, f"aks-{index}")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    addresses = {
        n["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"]
        for n in fake.nics()
    }
    assert len(addresses) == 10
    assert {vm["properties"]["provisioningState"] for vm in fake.vms()} == {"Succeeded"}


# -- retail prices and the admin API -------------------------------------------------------


def test_retail_prices_are_filtered_and_paged(fake: FakeARM) -> None:
    query = quote(
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and armRegionName eq 'eastus'"
    )
    page = fetch(fake, f"/api/retail/prices?api-version=2023-01-01-preview&$filter={query}")
    items = list(page["Items"])
    assert page["NextPageLink"] is None
    assert len(items) == len([p for p in seed.builtin_prices() if p["armRegionName"] == "eastus"])
    spot = [i for i in items if i["skuName"] == "D2s v3 Spot"]
    assert spot and spot[0]["retailPrice"] < 0.096
    with FakeARM(latency=Latency.none(), page_size=10) as paged:
        link: str | None = f"{paged.prices_url}?$filter={query}"
        collected = []
        while link:
            page = fetch(paged, link.removeprefix(paged.url))
            collected += page["Items"]
            link = page["NextPageLink"]
    assert collected == items


def test_the_admin_api_injects_faults_and_shows_state(
    fake: FakeARM, clients: tuple[Any, Any]
) -> None:
    fetch(fake, "/fake-arm-api/faults/capacity", "POST", {"error": "AllocationFailed", "times": 1})
    with pytest.raises(HttpResponseError) as failed:
        launch(clients, fake, "aks-a")
    assert failed.value.error.code == "AllocationFailed"
    state = fetch(fake, "/fake-arm-api/state")
    assert [vm["name"] for vm in state["vms"]] == ["aks-a"]
    assert state["faults"] == {"capacity": [], "request": []}
    with pytest.raises(urllib.error.HTTPError) as bad:
        fetch(fake, "/fake-arm-api/faults/request", "POST", {"status": 404})
    assert bad.value.code == 400
    assert "status" in json.loads(bad.value.read())["error"]["message"]
    requests = fetch(fake, "/fake-arm-api/requests")["requests"]
    assert any(r["method"] == "PUT" and r["status"] == 201 for r in requests)
    fetch(fake, "/fake-arm-api/reset", "POST", {})
    assert fake.vms() == [] and len(fake.requests) == 0


def test_the_server_runs_as_a_process(tmp_path: Any) -> None:
    endpoint_file = tmp_path / "endpoint.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "karpenter_azure.fake_arm",
            "--no-latency",
            "--tls-dir",
            str(tmp_path),
            "--endpoint-file",
            str(endpoint_file),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        endpoint = json.loads(process.stdout.readline())
        assert json.loads(endpoint_file.read_text()) == endpoint
        context = ssl.create_default_context(cafile=endpoint["ca_file"])
        with urllib.request.urlopen(
            endpoint["admin_url"] + "/state", context=context, timeout=10
        ) as answer:
            assert json.loads(answer.read())["vms"] == []
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_a_failure_inside_the_fake_is_answered_with_500_and_logged(
    fake: FakeARM, clients: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    compute, _ = clients

    def broken(*_: Any) -> Any:
        raise KeyError("properties")

    monkeypatch.setattr(fake.state, "handle", broken)
    with pytest.raises(HttpResponseError) as failed:
        compute.virtual_machines.get(RG, "aks-a")
    assert (failed.value.status_code, failed.value.error.code) == (500, "FakeFailure")
    assert "KeyError('properties')" in failed.value.error.message
    assert "fake ARM failed on GET" in caplog.text
