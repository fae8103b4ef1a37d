"""Virtual machines of the fake ARM server (Microsoft.Compute/virtualMachines): create with
ARM's checks and capacity faults, get, list, delete with the NICs and OS disk it owns."""

from __future__ import annotations

import base64
import binascii
import copy
import re
import uuid
from collections.abc import Mapping
from typing import Any

from karpenter_azure.fake_arm import galleries, network, seed
from karpenter_azure.fake_arm.common import (
    COMPUTE,
    Answer,
    ArmError,
    bad,
    location_name,
    not_found,
    now,
)
from karpenter_azure.fake_arm.faults import ASYNC_ERRORS, CapacityFault, arm_error, consume
from karpenter_azure.fake_arm.state import ArmStore


def _vm_id(state: ArmStore, args: Mapping[str, str]) -> str:
    group = state.resource_groups[args["rg"].lower()]
    return (
        f"/subscriptions/{state.subscription_id}/resourceGroups/{group}/providers/"
        f"{COMPUTE}/virtualMachines/{args['name']}"
    )


def get_vm(state: ArmStore, args: Mapping[str, str], params: Mapping[str, str], _: Any) -> Answer:
    """GET a VM (``$expand=instanceView`` adds its statuses)."""
    vm = state.vms.get(_vm_id(state, args).lower())
    if vm is None:
        raise not_found(f"{COMPUTE}/virtualMachines", args["name"], args["rg"])
    return 200, vm_view(vm, "instanceview" in params.get("$expand", "").lower()), {}


def vm_view(vm: Mapping[str, Any], instance_view: bool = False) -> dict[str, Any]:
    """A VM as ARM shows it, with its instance view when asked."""
    view = copy.deepcopy(dict(vm))
    if instance_view:
        state = view["properties"]["provisioningState"]
        statuses = [
            {
                "code": f"ProvisioningState/{state.lower()}",
                "level": "Error" if state == "Failed" else "Info",
                "displayStatus": f"Provisioning {state.lower()}",
                "time": view["properties"]["timeCreated"],
            }
        ]
        if state == "Succeeded":
            statuses.append(
                {"code": "PowerState/running", "level": "Info", "displayStatus": "VM running"}
            )
        view["properties"]["instanceView"] = {
            "computerName": view["properties"].get("osProfile", {}).get("computerName"),
            "hyperVGeneration": view.get("_hyperVGeneration", "V2"),
            "statuses": statuses,
        }
    view.pop("_hyperVGeneration", None)
    return view


def list_vms(state: ArmStore, args: Mapping[str, str], params: Mapping[str, str], _: Any) -> Answer:
    """The VMs of a resource group, paged."""
    group = args["rg"].lower()
    prefix = f"/subscriptions/{state.subscription_id}/resourcegroups/{group}/".lower()
    vms = [vm_view(vm) for key, vm in sorted(state.vms.items()) if key.startswith(prefix)]
    path = (
        prefix.replace("resourcegroups", "resourceGroups") + f"providers/{COMPUTE}/virtualMachines"
    )
    return 200, state.page(vms, path, params), {}


def list_all_vms(
    state: ArmStore, _: Mapping[str, str], params: Mapping[str, str], __: Any
) -> Answer:
    """The VMs of the subscription, paged."""
    vms = [vm_view(vm) for _, vm in sorted(state.vms.items())]
    path = f"/subscriptions/{state.subscription_id}/providers/{COMPUTE}/virtualMachines"
    return 200, state.page(vms, path, params), {}


def put_vm(state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], body: Any) -> Answer:
    """Create a VM (201 and an operation) or update an existing one's tags."""
    vm_id = _vm_id(state, args)
    if not isinstance(body, dict):
        raise bad("InvalidRequestContent", "The request content was invalid: not an object.")
    existing = state.vms.get(vm_id.lower())
    if existing is not None:
        return _update_vm(state, existing, body)
    location = location_name(body.get("location"))
    if not location:
        raise bad("LocationRequired", "The location property is required for this definition.")
    properties = body.get("properties") or {}
    size = str((properties.get("hardwareProfile") or {}).get("vmSize") or "")
    sku = state.sku(location, size)
    if sku is None:
        raise bad(
            "InvalidParameter",
            f"The value {size or 'None'} provided for the VM size is not valid. The valid "
            f"sizes in the current region are listed by the Resource SKUs API.",
            "vmSize",
        )
    zones = [str(zone) for zone in body.get("zones") or []]
    if len(zones) > 1:
        raise bad("InvalidParameter", "A virtual machine can be in one zone only.", "zones")
    zone = zones[0] if zones else None
    priority = str(properties.get("priority") or "Regular")
    if priority == "Low":
        priority = "Spot"
    if priority not in ("Spot", "Regular"):
        raise bad("InvalidParameter", f"Priority '{priority}' is not valid.", "priority")
    _check_available(state, sku, size, location, zone, priority)
    nics = _attachable_nics(state, vm_id, location, properties)
    hyperv = _check_image(state, sku, size, properties)
    _check_os_profile(properties)
    _check_identity(body.get("identity"))
    fault = _capacity_fault(state, size, zone, priority)
    family = str(sku.get("family") or "")
    cores = int(seed.sku_capability(sku, "vCPUs") or 0)
    error = fault.body(size, location, zone, family, cores) if fault else None
    if error is not None and fault is not None and fault.error not in ASYNC_ERRORS:
        raise ArmError(
            409, error["error"]["code"], error["error"]["message"], error["error"].get("target")
        )
    vm = _new_vm(state, vm_id, args["name"], location, body, properties, priority, hyperv)
    state.vms[vm_id.lower()] = vm
    for nic in nics:
        nic["properties"]["virtualMachine"] = {"id": vm_id}
        nic["properties"]["macAddress"] = _mac(nic["id"])
    os_disk = vm["properties"]["storageProfile"]["osDisk"]
    state.disks[os_disk["managedDisk"]["id"].lower()] = {
        "id": os_disk["managedDisk"]["id"],
        "name": os_disk["name"],
        "location": location,
        "managedBy": vm_id,
        "diskSizeGB": os_disk.get("diskSizeGB"),
    }

    def complete() -> None:
        state.creating.pop(vm_id.lower(), None)
        current = state.vms.get(vm_id.lower())
        if current is None or current["properties"]["provisioningState"] != "Creating":
            return
        current["properties"]["provisioningState"] = "Failed" if error else "Succeeded"

    headers = state.start_operation(
        COMPUTE, location, state.latency.vm_create, complete, error, resource=vm_id.lower()
    )
    return 201, vm_view(vm), headers


def _update_vm(state: ArmStore, vm: dict[str, Any], body: Mapping[str, Any]) -> Answer:
    provisioning = vm["properties"]["provisioningState"]
    if provisioning in ("Creating", "Deleting", "Updating"):
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"Operation 'PUT' is not allowed on VM '{vm['name']}' while it is "
            f"{provisioning.lower()}.",
        )
    size = (body.get("properties") or {}).get("hardwareProfile", {}).get("vmSize")
    current = vm["properties"]["hardwareProfile"]["vmSize"]
    if size and size.lower() != current.lower():
        raise ArmError(
            409,
            "PropertyChangeNotAllowed",
            "Changing property 'hardwareProfile.vmSize' is not allowed on this fake.",
            "hardwareProfile.vmSize",
        )
    if "tags" in body:
        vm["tags"] = dict(body.get("tags") or {})
    headers = state.start_operation(COMPUTE, vm["location"], 0.0, lambda: None)
    return 200, vm_view(vm), headers


def _check_available(
    state: ArmStore,
    sku: Mapping[str, Any],
    size: str,
    location: str,
    zone: str | None,
    priority: str,
) -> None:
    info = (sku.get("locationInfo") or [{}])[0]
    zones = {str(z) for z in info.get("zones") or []}
    unavailable = zone is not None and zone not in zones
    for restriction in sku.get("restrictions") or []:
        if restriction.get("type") == "Location":
            unavailable = True
        restricted = (restriction.get("restrictionInfo") or {}).get("zones") or []
        if restriction.get("type") == "Zone" and zone in restricted:
            unavailable = True
    spot_capable = seed.sku_capability(sku, "LowPriorityCapable") == "True"
    if priority == "Spot" and not spot_capable:
        unavailable = True
    if unavailable:
        fault = CapacityFault("SkuNotAvailable")
        error = fault.body(size, location, zone, "", 0)["error"]
        raise ArmError(409, error["code"], error["message"], error["target"])


def _capacity_fault(
    state: ArmStore, size: str, zone: str | None, priority: str
) -> CapacityFault | None:
    for fault in state.capacity_faults:
        if fault.matches(size, zone, priority):
            if consume(fault):
                state.capacity_faults.remove(fault)
            return fault
    return None


def _attachable_nics(
    state: ArmStore, vm_id: str, location: str, properties: Mapping[str, Any]
) -> list[dict[str, Any]]:
    references = (properties.get("networkProfile") or {}).get("networkInterfaces") or []
    if not references:
        raise bad(
            "InvalidParameter",
            "The virtual machine must have at least one network interface.",
            "networkProfile.networkInterfaces",
        )
    nics = []
    for reference in references:
        nic_id = str((reference or {}).get("id") or "")
        nic = state.nics.get(nic_id.lower())
        if nic is None:
            raise bad(
                "InvalidResourceReference",
                f"Resource {nic_id} referenced by resource {vm_id} was not found. Please "
                "make sure that the referenced resource exists, and that both resources "
                "are in the same region.",
            )
        if nic["location"] != location:
            raise bad(
                "InvalidResourceReference",
                f"Resource {nic_id} referenced by resource {vm_id} is in location "
                f"'{nic['location']}', not '{location}'.",
            )
        attached = (nic["properties"].get("virtualMachine") or {}).get("id")
        if attached and attached.lower() != vm_id.lower():
            raise bad(
                "NicInUse",
                f"Network Interface {nic_id} is used by existing resource {attached}.",
            )
        nics.append(nic)
    return nics


def _check_image(
    state: ArmStore, sku: Mapping[str, Any], size: str, properties: Mapping[str, Any]
) -> str:
    """The image's Hyper-V generation (V1 without a gallery image), after checking that it
    exists and that the size can boot it."""
    reference = (properties.get("storageProfile") or {}).get("imageReference") or {}
    image_id = str(
        reference.get("communityGalleryImageId")
        or reference.get("sharedGalleryImageId")
        or reference.get("id")
        or ""
    )
    if not image_id:
        return "V1" if "V1" in (seed.sku_capability(sku, "HyperVGenerations") or "") else "V2"
    version = galleries.image_for(state, image_id)
    if version is None:
        raise ArmError(
            404, "GalleryImageNotFound", f"The gallery image {image_id} is not available."
        )
    definition = image_id.rstrip("/").split("/")[-3]
    architecture, generation = seed.image_definition_traits(definition)
    if (seed.sku_capability(sku, "CpuArchitectureType") or "x64") != architecture:
        raise bad(
            "BadRequest",
            f"The selected VM size '{size}' cannot boot an image of architecture '{architecture}'.",
        )
    if generation not in (seed.sku_capability(sku, "HyperVGenerations") or "V1"):
        raise bad(
            "BadRequest",
            f"The selected VM size '{size}' cannot boot Hypervisor Generation '{generation[1:]}'.",
        )
    return generation


def _check_os_profile(properties: Mapping[str, Any]) -> None:
    custom_data = (properties.get("osProfile") or {}).get("customData")
    if custom_data is None:
        return
    try:
        base64.b64decode(str(custom_data), validate=True)
    except (binascii.Error, ValueError):
        raise bad(
            "InvalidParameter",
            "The value of parameter customData is invalid: it is not base64.",
            "customData",
        ) from None


def _new_vm(
    state: ArmStore,
    vm_id: str,
    name: str,
    location: str,
    body: Mapping[str, Any],
    properties: Mapping[str, Any],
    priority: str,
    hyperv: str,
) -> dict[str, Any]:
    props = copy.deepcopy(dict(properties))
    os_profile = props.get("osProfile") or {}
    os_profile.pop("customData", None)
    os_profile.pop("adminPassword", None)
    storage = props.setdefault("storageProfile", {})
    os_disk = storage.setdefault("osDisk", {})
    os_disk.setdefault("name", f"{name}_OsDisk_1_{uuid.uuid4().hex}")
    os_disk.setdefault("createOption", "FromImage")
    os_disk.setdefault("osType", "Linux")
    os_disk.setdefault("deleteOption", "Detach")
    group = vm_id.split("/")[4]
    managed = os_disk.setdefault("managedDisk", {})
    managed["id"] = (
        f"/subscriptions/{state.subscription_id}/resourceGroups/{group}/providers/"
        f"{COMPUTE}/disks/{os_disk['name']}"
    )
    props["priority"] = priority
    props["provisioningState"] = "Creating"
    props["vmId"] = str(uuid.uuid4())
    props["timeCreated"] = now()
    vm: dict[str, Any] = {
        "id": vm_id,
        "name": name,
        "type": f"{COMPUTE}/virtualMachines",
        "location": location,
        "tags": dict(body.get("tags") or {}),
        "properties": props,
        "_hyperVGeneration": hyperv,
    }
    if body.get("zones"):
        vm["zones"] = [str(z) for z in body["zones"]]
    identity = body.get("identity")
    if identity:
        vm["identity"] = _identity(identity)
    return vm


def delete_vm(state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
    """Start deleting a VM (202 and an operation); 204 when there is none."""
    vm_id = _vm_id(state, args)
    vm = state.vms.get(vm_id.lower())
    if vm is None:
        return 204, None, {}
    creating = state.creating.pop(vm_id.lower(), None)
    if creating is not None and creating.status == "InProgress":
        creating.status, creating.ended_at = "Canceled", now()
        creating.error = arm_error(
            "OperationPreempted",
            "Operation execution has been preempted by a more recent operation.",
        )
    vm["properties"]["provisioningState"] = "Deleting"

    def complete() -> None:
        gone = state.vms.pop(vm_id.lower(), None)
        if gone is None:
            return
        for reference in gone["properties"]["networkProfile"]["networkInterfaces"]:
            nic = state.nics.get(str(reference.get("id")).lower())
            if nic is None:
                continue
            option = (reference.get("properties") or {}).get("deleteOption", "Detach")
            if option == "Delete":
                network.remove_nic(state, nic)
            else:
                nic["properties"].pop("virtualMachine", None)
        os_disk = gone["properties"]["storageProfile"]["osDisk"]
        disk_key = os_disk["managedDisk"]["id"].lower()
        if os_disk.get("deleteOption") == "Delete":
            state.disks.pop(disk_key, None)
        elif disk_key in state.disks:
            state.disks[disk_key]["managedBy"] = None

    headers = state.start_operation(COMPUTE, vm["location"], state.latency.vm_delete, complete)
    return 202, None, headers


def _mac(nic_id: str) -> str:
    digest = uuid.uuid5(uuid.NAMESPACE_URL, nic_id).hex[:10].upper()
    return "00-" + "-".join(digest[i : i + 2] for i in range(0, 10, 2))


_IDENTITY_ID = re.compile(
    r"^/subscriptions/[^/]+/resourcegroups/[^/]+/providers/"
    r"microsoft\.managedidentity/userassignedidentities/[^/]+$",
    re.IGNORECASE,
)


def _check_identity(identity: Any) -> None:
    """User-assigned identities must be named by resource id (their existence is not checked)."""
    if not identity:
        return
    for key in (identity or {}).get("userAssignedIdentities") or {}:
        if not _IDENTITY_ID.match(str(key)):
            raise bad(
                "InvalidIdentityValues",
                f"Invalid value for the identities '{key}'. The 'userAssignedIdentities' property "
                "keys should only be ARM resource ids.",
                "identity",
            )


def _identity(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The identity block ARM answers with: principal and client ids for each identity."""
    answer: dict[str, Any] = {"type": identity.get("type", "None")}
    assigned = identity.get("userAssignedIdentities") or {}
    if assigned:
        answer["userAssignedIdentities"] = {
            key: {
                "principalId": str(uuid.uuid5(uuid.NAMESPACE_URL, "principal" + key)),
                "clientId": str(uuid.uuid5(uuid.NAMESPACE_URL, "client" + key)),
            }
            for key in assigned
        }
    return answer
