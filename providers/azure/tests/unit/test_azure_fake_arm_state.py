"""The fake ARM server's parts without HTTP: its $filter reader, faults, request log, and the
ARM semantics of its state (long-running operations, errors, seeded data)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

import pytest

from karpenter_azure.fake_arm import odata, seed
from karpenter_azure.fake_arm.arm import ArmState
from karpenter_azure.fake_arm.faults import CapacityFault, FaultError, RequestFault
from karpenter_azure.fake_arm.log import RequestLog, RequestRecord
from karpenter_azure.fake_arm.state import Latency

API = "api-version=2026-04-01"
SUB = f"/subscriptions/{seed.SUBSCRIPTION_ID}"
NODE_RG = f"{SUB}/resourceGroups/{seed.NODE_RESOURCE_GROUP}"
VM = f"{NODE_RG}/providers/Microsoft.Compute/virtualMachines"
NIC = f"{NODE_RG}/providers/Microsoft.Network/networkInterfaces"
SUBNET = (
    f"{NODE_RG}/providers/Microsoft.Network/virtualNetworks/{seed.VNET_NAME}/subnets/aks-subnet"
)


def state(latency: Latency | None = None, **kwargs: Any) -> ArmState:
    arm = ArmState(
        seed.builtin_skus(), seed.builtin_prices(), latency=latency or Latency.none(), **kwargs
    )
    arm.base_url = "https://127.0.0.1:1"
    return arm


def nic_body(location: str = "eastus", subnet: str = SUBNET) -> dict[str, Any]:
    return {
        "location": location,
        "properties": {
            "ipConfigurations": [{"name": "ip", "properties": {"subnet": {"id": subnet}}}]
        },
    }


def vm_body(name: str, size: str = "Standard_D2s_v3", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "location": "eastus",
        "zones": ["1"],
        "properties": {
            "hardwareProfile": {"vmSize": size},
            "networkProfile": {"networkInterfaces": [{"id": f"{NIC}/{name}"}]},
        },
    }
    body.update(changes)
    return body


def create(arm: ArmState, name: str, **changes: Any) -> tuple[int, Any, dict[str, str]]:
    status, _, _ = arm.handle("PUT", f"{NIC}/{name}", API, nic_body())
    assert status == 201
    return arm.handle("PUT", f"{VM}/{name}", API, vm_body(name, **changes))


def operation(arm: ArmState, headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
    url = headers["Azure-AsyncOperation"].removeprefix(arm.base_url)
    path, _, query = url.partition("?")
    return arm.handle("GET", path, query, None)


# -- $filter -------------------------------------------------------------------------------


def test_filter_reads_comparisons_functions_and_precedence() -> None:
    predicate = odata.parse(
        "serviceName eq 'Virtual Machines' and (armRegionName eq 'eastus' or "
        "armRegionName eq 'westus2') and not contains(skuName, 'Spot') and retailPrice lt 1"
    )
    base = {"serviceName": "Virtual Machines", "armRegionName": "westus2", "skuName": "D2s v3"}
    assert predicate({**base, "retailPrice": 0.5})
    assert not predicate({**base, "retailPrice": 2})
    assert not predicate({**base, "retailPrice": 0.5, "skuName": "D2s v3 Spot"})
    assert not predicate({**base, "retailPrice": 0.5, "armRegionName": "eastus2"})


def test_filter_aliases_and_quotes() -> None:
    predicate = odata.parse(
        "priceType eq 'Consumption' and productName eq 'It''s'", {"priceType": "type"}
    )
    assert predicate({"type": "Consumption", "productName": "It's"})
    assert not predicate({"type": "Reservation", "productName": "It's"})


@pytest.mark.parametrize("text", ["armRegionName eq", "a eqq 'b'", "(a eq 'b'", "a eq 'b' c"])
def test_a_filter_it_cannot_read_is_an_error(text: str) -> None:
    with pytest.raises(odata.FilterError):
        odata.parse(text)


# -- faults --------------------------------------------------------------------------------


def test_a_capacity_fault_matches_size_zone_and_priority() -> None:
    fault = CapacityFault("ZonalAllocationFailed", sku="standard_d2s_v3", zone="eastus-2")
    assert fault.zone == "2"
    assert fault.matches("Standard_D2s_v3", "2", "Regular")
    assert not fault.matches("Standard_D2s_v3", "1", "Regular")
    assert not fault.matches("Standard_D2s_v3", None, "Regular")
    assert not fault.matches("Standard_D4s_v3", "2", "Regular")
    spot = CapacityFault("LowPriorityQuota", priority="Spot")
    assert spot.matches("Standard_D4s_v3", None, "Spot")
    assert not spot.matches("Standard_D4s_v3", None, "Regular")


def test_quota_errors_are_operation_not_allowed_with_the_quota_named() -> None:
    body = CapacityFault("LowPriorityQuota", limit=3).body(
        "Standard_D4s_v3", "eastus", None, "f", 4
    )
    assert body["error"]["code"] == "OperationNotAllowed"
    assert "exceeding approved LowPriorityCores quota" in body["error"]["message"]
    assert "Current Limit: 3" in body["error"]["message"]
    family = CapacityFault("FamilyQuota").body(
        "Standard_D4s_v3", "eastus", None, "standardDSv3Family", 4
    )
    assert "standardDSv3Family Family Cores quota" in family["error"]["message"]
    regional = CapacityFault("RegionalQuota").body("Standard_D4s_v3", "eastus", None, "f", 4)
    assert "Total Regional Cores quota" in regional["error"]["message"]


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: CapacityFault("NoSuchError"), "error"),
        (lambda: CapacityFault("AllocationFailed", priority="Low"), "priority"),
        (lambda: CapacityFault("AllocationFailed", times=0), "times"),
        (lambda: RequestFault(404), "status"),
        (lambda: RequestFault(429, path="("), "path"),
        (lambda: RequestFault(429, retry_after=-1), "retry_after"),
    ],
)
def test_a_bad_fault_names_its_field(make: Any, field: str) -> None:
    with pytest.raises(FaultError, match=field):
        make()


def test_a_throttling_answer_carries_retry_after() -> None:
    status, body, headers = RequestFault(429, retry_after=2).answer()
    assert status == 429
    assert body["error"]["code"] == "TooManyRequests"
    assert headers["Retry-After"] == "2"


def test_an_authorization_denial_names_the_scope_and_is_not_retried() -> None:
    status, body, headers = RequestFault(403, path="/subnets/").answer(SUBNET)
    assert status == 403
    assert body["error"]["code"] == "AuthorizationFailed"
    assert f"over scope '{SUBNET}'" in body["error"]["message"]
    assert "Retry-After" not in headers


# -- request log ---------------------------------------------------------------------------


def record(method: str, path: str, arrived: float, **answer: Any) -> RequestRecord:
    return RequestRecord(method, path, "", arrived, answered=arrived + 0.001, **answer)


def test_the_log_finds_a_poll_before_its_retry_after() -> None:
    log = RequestLog()
    start = record("PUT", "/vm", 10.0, status=201, retry_after=2.0, follow_up="op:1")
    early = record("GET", "/operations/1", 11.0, status=200, retry_after=1.0, follow_up="op:1")
    late = record("GET", "/operations/1", 12.5, status=200, follow_up="op:1")
    for entry in (start, early, late):
        log.add(entry)
    [violation] = log.retry_after_violations()
    assert violation.request is early
    assert violation.previous is start
    assert violation.early_by == pytest.approx(1.001)


def test_the_log_finds_a_retry_before_a_throttling_answer_allowed_it() -> None:
    log = RequestLog()
    log.add(record("GET", "/vm", 1.0, status=429, retry_after=1.0, follow_up="req:GET /vm"))
    log.add(record("GET", "/other", 1.1, status=200))
    log.add(record("GET", "/vm", 1.5, status=200))
    log.add(record("GET", "/vm", 2.5, status=200))
    assert [v.request.arrived for v in log.retry_after_violations()] == [1.5]


# -- ARM semantics -------------------------------------------------------------------------


def test_a_vm_create_is_a_long_running_operation_that_ends_after_its_latency() -> None:
    arm = state(Latency(vm_create=0.3, vm_delete=0, nic_create=0, nic_delete=0))
    status, vm, headers = create(arm, "aks-a")
    assert status == 201
    assert vm["properties"]["provisioningState"] == "Creating"
    assert headers["Retry-After"] == "1"
    status, body, poll_headers = operation(arm, headers)
    assert (status, body["status"]) == (200, "InProgress")
    assert poll_headers["Retry-After"] == "1"
    time.sleep(0.3)
    _, body, poll_headers = operation(arm, headers)
    assert body["status"] == "Succeeded"
    assert "Retry-After" not in poll_headers
    _, vm, _ = arm.handle("GET", f"{VM}/aks-a", API, None)
    assert vm["properties"]["provisioningState"] == "Succeeded"


def test_an_allocation_failure_fails_the_operation_and_leaves_a_failed_vm() -> None:
    arm = state()
    arm.capacity_faults.append(CapacityFault("AllocationFailed", times=1))
    status, _, headers = create(arm, "aks-a")
    assert status == 201
    _, body, _ = operation(arm, headers)
    assert body["status"] == "Failed"
    assert body["error"]["code"] == "AllocationFailed"
    _, vm, _ = arm.handle("GET", f"{VM}/aks-a", API, None)
    assert vm["properties"]["provisioningState"] == "Failed"
    assert arm.capacity_faults == []


def test_sku_not_available_answers_the_put_and_creates_nothing() -> None:
    arm = state()
    arm.capacity_faults.append(CapacityFault("SkuNotAvailable", sku="Standard_D2s_v3", zone="1"))
    status, body, headers = create(arm, "aks-a")
    assert status == 409
    assert body["error"]["code"] == "SkuNotAvailable"
    assert "Standard_D2s_v3" in body["error"]["message"]
    assert headers == {}
    assert arm.vms == {}


@pytest.mark.parametrize(
    ("location", "size", "zones"),
    [
        ("westus2", "Standard_NC6s_v3", ["3"]),  # a zone restriction
        ("westcentralus", "Standard_D16s_v3", None),  # a location restriction
        ("eastus", "Standard_D2s_v3", ["4"]),  # a zone the size is not offered in
    ],
)
def test_restricted_sizes_and_zones_are_not_available(
    location: str, size: str, zones: list[str] | None
) -> None:
    arm = state()
    subnet = arm.add_subnet(seed.NODE_RESOURCE_GROUP, "vnet", location, "10.1.0.0/16", location)
    status, _, _ = arm.handle("PUT", f"{NIC}/aks-a", API, nic_body(location, subnet))
    assert status == 201
    body = vm_body("aks-a", size, location=location, zones=zones)
    status, answer, _ = arm.handle("PUT", f"{VM}/aks-a", API, body)
    assert (status, answer["error"]["code"]) == (409, "SkuNotAvailable")
    body = vm_body("aks-a", "Standard_D2s_v3", location=location, zones=zones and ["1"])
    status, answer, _ = arm.handle("PUT", f"{VM}/aks-a", API, body)
    assert status == 201, answer


def test_a_spot_create_of_a_size_without_low_priority_capability_is_refused() -> None:
    skus = [
        seed.resource_sku(
            seed.SkuSpec("Standard_X2", "x", 2, 8, 0.1, low_priority=False), "eastus", ["1"]
        )
    ]
    arm = ArmState(skus, [], latency=Latency.none())
    arm.handle("PUT", f"{NIC}/aks-a", API, nic_body())
    body = vm_body("aks-a", "Standard_X2")
    body["properties"]["priority"] = "Spot"
    status, answer, _ = arm.handle("PUT", f"{VM}/aks-a", API, body)
    assert (status, answer["error"]["code"]) == (409, "SkuNotAvailable")


def test_an_unknown_group_subscription_or_missing_api_version_is_refused() -> None:
    arm = state()
    status, body, _ = arm.handle(
        "GET", f"{SUB}/resourceGroups/nope/providers/Microsoft.Compute/virtualMachines/a", API, None
    )
    assert (status, body["error"]["code"]) == (404, "ResourceGroupNotFound")
    status, body, _ = arm.handle(
        "GET", "/subscriptions/other/providers/Microsoft.Compute/skus", API, None
    )
    assert (status, body["error"]["code"]) == (404, "SubscriptionNotFound")
    status, body, _ = arm.handle("GET", f"{VM}/a", "", None)
    assert (status, body["error"]["code"]) == (400, "MissingApiVersionParameter")


def test_private_addresses_come_from_the_subnet_after_the_reserved_ones() -> None:
    arm = state()
    addresses = []
    for name in ("a", "b"):
        _, nic, _ = arm.handle("PUT", f"{NIC}/{name}", API, nic_body())
        addresses.append(nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"])
    assert addresses == ["10.224.0.4", "10.224.0.5"]


def test_every_seeded_size_has_a_record_per_region_and_spot_prices_only_where_capable() -> None:
    skus = seed.builtin_skus()
    assert len(skus) == len(seed.BUILTIN_SKUS) * len(seed.REGIONS)
    assert all(len(sku["locations"]) == 1 for sku in skus)
    westcentral = [s for s in skus if s["locations"] == ["westcentralus"]]
    assert all(s["locationInfo"][0]["zones"] == [] for s in westcentral)
    prices = seed.builtin_prices()
    spot_sizes = {p["armSkuName"] for p in prices if p["skuName"].endswith(" Spot")}
    capable = {s.name for s in seed.BUILTIN_SKUS if s.low_priority}
    assert spot_sizes == capable


def test_deleting_a_vm_while_it_is_created_cancels_the_create() -> None:
    arm = state(Latency(vm_create=5, vm_delete=0, nic_create=0, nic_delete=0))
    _, _, created = create(arm, "aks-a")
    status, _, deleted = arm.handle("DELETE", f"{VM}/aks-a", API, None)
    assert status == 202
    _, body, _ = operation(arm, created)
    assert (body["status"], body["error"]["code"]) == ("Canceled", "OperationPreempted")
    _, body, _ = operation(arm, deleted)
    assert body["status"] == "Succeeded"
    assert arm.vms == {}
    [nic] = arm.nics.values()
    assert "virtualMachine" not in nic["properties"]  # detached: its deleteOption is the default


def test_a_withdrawn_image_version_is_no_longer_listed_and_the_definition_stays() -> None:
    arm = state()
    gallery = seed.AKS_UBUNTU_COMMUNITY_GALLERY
    versions = (
        f"{SUB}/providers/Microsoft.Compute/locations/eastus/communityGalleries/{gallery}/"
        "images/2204containerd/versions"
    )
    first, second = (name for name, _ in seed.IMAGE_VERSIONS)

    arm.withdraw_image(gallery, "2204CONTAINERD", first)
    status, body, _ = arm.handle("GET", versions, "api-version=2026-03-03", None)
    assert (status, [v["name"] for v in body["value"]]) == (200, [second])

    arm.withdraw_image(gallery, "2204containerd")
    assert arm.handle("GET", versions, "api-version=2026-03-03", None)[:2] == (200, {"value": []})
    status, body, _ = arm.handle("GET", f"{versions}/{second}", "api-version=2026-03-03", None)
    assert (status, body["error"]["code"]) == (404, "GalleryImageVersionNotFound")
    other = versions.replace("2204containerd", "2204gen2containerd")
    assert len(arm.handle("GET", other, "api-version=2026-03-03", None)[1]["value"]) == 2


def test_clear_drops_resources_and_faults_and_restarts_addresses() -> None:
    arm = state()
    create(arm, "aks-a")
    arm.capacity_faults.append(CapacityFault("AllocationFailed"))
    arm.clear()
    assert (arm.vms, arm.nics, arm.disks, arm.capacity_faults) == ({}, {}, {}, [])
    _, nic, _ = arm.handle("PUT", f"{NIC}/aks-b", API, nic_body())
    assert (
        nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"] == "10.224.0.4"
    )


def test_the_price_list_answers_upstreams_query() -> None:
    arm = state()
    conditions = (
        "priceType eq 'Consumption' and currencyCode eq 'USD' and serviceFamily eq 'Compute' "
        "and serviceName eq 'Virtual Machines' and armRegionName eq 'westus2'"
    )
    query = urlencode({"api-version": "2023-01-01-preview", "$filter": conditions})  # '+' spaces
    status, page, _ = arm.handle("GET", "/api/retail/prices", query, None)
    assert status == 200
    assert page["Count"] == len(page["Items"]) > 0
    assert {item["armRegionName"] for item in page["Items"]} == {"westus2"}
    skus = {item["skuName"] for item in page["Items"]}
    assert {"D2s v3", "D2s v3 Spot", "D2s v3 Low Priority"} <= skus
