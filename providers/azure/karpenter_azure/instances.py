"""Virtual machines and their network interfaces in the node resource group, through ARM.

One NIC and one VM per NodeClaim, both named ``aks-<nodeclaim>`` (upstream's name), so a create
that is retried finds what it made: ``launch`` reads the VM first and returns it when it exists.
A launch is three ARM calls and the polling of two long-running operations: GET the VM (404),
PUT the NIC, PUT the VM. The VM's OS disk and NIC are deleted with it (``deleteOption:
Delete``); ``delete`` starts deleting the VM and from then on the VM counts as gone; a NIC whose
VM was never made is deleted once no VM has its name.

``list`` pages through ``virtualMachines.list`` of the node resource group and keeps the VMs
tagged for the cluster and a NodePool (upstream asks Azure Resource Graph with the same filter).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.mgmt.core.polling.arm_polling import ARMPolling

from karpenter_azure.settings import AzureSettings
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.types import NodeClaimNotFound

__all__ = [
    "DELETING",
    "TAG_CLUSTER",
    "TAG_NODECLAIM",
    "TAG_NODECLASS",
    "TAG_NODEPOOL",
    "ArmError",
    "Instances",
    "LaunchSpec",
    "VirtualMachine",
    "arm_error",
    "provider_id",
    "resource_name",
    "tag_key",
    "vm_name_of",
]

TAG_CLUSTER = "karpenter.azure.com_cluster"
"""The cluster a VM or NIC belongs to (its name)."""
TAG_NODEPOOL = "karpenter.sh_nodepool"
TAG_NODECLAIM = "karpenter.sh_nodeclaim"
TAG_NODECLASS = "karpenter.azure.com_aksnodeclass"
TAG_BILLING = "compute.aks.billing"
DELETING = "Deleting"
"""The provisioning state of a VM being deleted: gone, for Karpenter (as a terminating EC2
instance is)."""
"""AKS's billing tag, ``linux`` on Linux nodes (upstream sets it)."""

_PROVIDER_ID = re.compile(
    r"azure:///subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/"
    r"virtualMachines/(?P<name>[^/]+)",
    re.IGNORECASE,
)

DEFAULT_POLL_SECONDS = 5.0
"""The wait between two status reads of an operation whose answer gives no Retry-After."""

log = logging.getLogger("karpenter.azure")


class PatientPolling(ARMPolling):
    """ARM's long-running-operation polling that waits the Retry-After of the operation's first
    answer before its first status read too (azure-core's reads the status once at once)."""

    def _poll(self) -> None:
        if not self.finished():
            header = self._pipeline_response.http_response.headers.get("Retry-After", "")
            with contextlib.suppress(ValueError):
                if float(header) > 0:
                    self._sleep(float(header))
        super()._poll()


def tag_key(key: str) -> str:
    """An Azure tag key for a label-style key: ``/`` is not allowed, so it becomes ``_``."""
    return key.replace("/", "_")


def resource_name(nodeclaim: str) -> str:
    """The name of the VM, its NIC and its OS disk for a NodeClaim."""
    return f"aks-{nodeclaim}"


def provider_id(subscription: str, resource_group: str, name: str) -> str:
    """The providerID cloud-provider-azure writes on the node (resource group lower-cased)."""
    return (
        f"azure:///subscriptions/{subscription}/resourceGroups/{resource_group.lower()}"
        f"/providers/Microsoft.Compute/virtualMachines/{name}"
    )


def vm_name_of(provider_id: str) -> str:
    """The VM name in an Azure providerID; ``NodeClaimNotFound`` when it is not one."""
    match = _PROVIDER_ID.fullmatch(provider_id or "")
    if match is None:
        raise NodeClaimNotFound(f"{provider_id!r} is not an Azure VM's providerID")
    return match.group("name")


@dataclass(frozen=True, slots=True)
class ArmError:
    """An ARM error: HTTP status, code and message, and the codes and messages of its
    ``details``."""

    status: int
    code: str
    message: str
    details: tuple[tuple[str, str], ...] = ()

    def codes(self) -> list[tuple[str, str]]:
        """The error's (code, message), then its details'."""
        return [(self.code, self.message), *self.details]


def arm_error(error: HttpResponseError) -> ArmError:
    """The code, message and details of an ARM error response (a failed long-running
    operation's error included)."""
    code = ""
    message = str(error.message or error)
    details: list[tuple[str, str]] = []
    odata = getattr(error, "error", None)
    if odata is not None:
        code = odata.code or ""
        message = odata.message or message
        details = [(d.code or "", d.message or "") for d in getattr(odata, "details", None) or ()]
    status = error.status_code or (error.response.status_code if error.response else 0)
    return ArmError(int(status or 0), code, message, tuple(details))


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What to launch for one NodeClaim: one size, zone and capacity type."""

    name: str
    """The VM's (and NIC's) name."""
    vm_size: str
    zone: str
    """ARM zone ("1", "2", "3"), or "" for a regional VM."""
    capacity_type: str
    image_id: str
    subnet_id: str
    os_disk_size_gb: int
    custom_data: str
    """Base64 cloud-init the VM boots with."""
    tags: Mapping[str, str]
    accelerated_networking: bool = False
    encryption_at_host: bool = False
    premium_storage: bool = False
    secondary_ips: int = 0
    """Pod addresses from the node subnet (Azure CNI without overlay): maxPods - 1."""


@dataclass(frozen=True, slots=True)
class VirtualMachine:
    """What the provider reads back from a VM."""

    name: str
    vm_size: str
    zone: str
    """ARM zone, "" when regional."""
    capacity_type: str
    image_id: str
    provisioning_state: str
    tags: Mapping[str, str] = field(default_factory=dict)
    created: datetime | None = None
    identities: tuple[str, ...] = ()

    @classmethod
    def from_arm(cls, vm: Any) -> VirtualMachine:
        """From an ARM VM resource (a compute model or its JSON)."""
        body: Mapping[str, Any] = dict(vm)
        props: Mapping[str, Any] = body.get("properties") or {}
        image = (props.get("storageProfile") or {}).get("imageReference") or {}
        created = props.get("timeCreated")
        return cls(
            name=str(body.get("name") or ""),
            vm_size=str((props.get("hardwareProfile") or {}).get("vmSize") or ""),
            zone=next(iter(body.get("zones") or ()), ""),
            capacity_type=(
                wk.CAPACITY_TYPE_SPOT
                if props.get("priority") == "Spot"
                else wk.CAPACITY_TYPE_ON_DEMAND
            ),
            image_id=str(
                image.get("id")
                or image.get("communityGalleryImageId")
                or image.get("sharedGalleryImageId")
                or ""
            ),
            provisioning_state=str(props.get("provisioningState") or ""),
            tags=dict(body.get("tags") or {}),
            created=datetime.fromisoformat(created) if isinstance(created, str) else created,
            identities=tuple(
                sorted(((body.get("identity") or {}).get("userAssignedIdentities") or {}).keys())
            ),
        )


class Instances:
    """VMs and NICs of one cluster in the node resource group."""

    def __init__(self, compute: Any, network: Any, settings: AzureSettings) -> None:
        self._compute = compute
        self._network = network
        self._settings = settings
        self._group = settings.node_resource_group

    def provider_id(self, name: str) -> str:
        """The providerID of the VM ``name``."""
        return provider_id(self._settings.subscription_id, self._group, name)

    def find(self, name: str) -> VirtualMachine | None:
        """The VM ``name``, or None when there is none."""
        try:
            return VirtualMachine.from_arm(self._compute.virtual_machines.get(self._group, name))
        except ResourceNotFoundError:
            return None

    def launch(self, spec: LaunchSpec) -> VirtualMachine:
        """Create the NIC, then the VM, each waiting for its operation; ``HttpResponseError``
        when either fails (the caller maps it and calls ``cleanup``)."""
        nic = self._network.network_interfaces.begin_create_or_update(
            self._group, spec.name, self._nic_body(spec), polling=self._polling()
        ).result()
        vm = self._compute.virtual_machines.begin_create_or_update(
            self._group, spec.name, self._vm_body(spec, nic.id), polling=self._polling()
        ).result()
        return VirtualMachine.from_arm(vm)

    def cleanup(self, name: str) -> None:
        """After a failed launch: delete the VM (when ARM made one) and the NIC, waiting for
        both; failures are logged."""
        for what, begin in (
            (
                "VM",
                lambda: self._compute.virtual_machines.begin_delete(
                    self._group, name, polling=self._polling()
                ),
            ),
            (
                "NIC",
                lambda: self._network.network_interfaces.begin_delete(
                    self._group, name, polling=self._polling()
                ),
            ),
        ):
            try:
                begin().result()
            except ResourceNotFoundError:
                continue
            except HttpResponseError as error:
                log.warning("deleting the %s %s of a failed launch failed: %s", what, name, error)
                return

    def get(self, name: str) -> VirtualMachine:
        """The VM ``name``; ``NodeClaimNotFound`` when it is gone or being deleted."""
        vm = self.find(name)
        if vm is None or vm.provisioning_state == DELETING:
            raise NodeClaimNotFound(f"VM {name!r} not found in resource group {self._group!r}")
        return vm

    def list(self) -> list[VirtualMachine]:
        """The cluster's VMs tagged with a NodePool (not those being deleted)."""
        out = []
        for item in self._compute.virtual_machines.list(self._group):
            vm = VirtualMachine.from_arm(item)
            if (
                vm.tags.get(TAG_CLUSTER) == self._settings.cluster_name
                and TAG_NODEPOOL in vm.tags
                and vm.provisioning_state != DELETING
            ):
                out.append(vm)
        return out

    def delete(self, name: str) -> None:
        """Start deleting the VM (its OS disk and NIC go with it). ``NodeClaimNotFound`` once it
        is being deleted or gone; when it is gone, its NIC is deleted first (a NIC whose VM was
        never made)."""
        vm = self.find(name)
        if vm is not None and vm.provisioning_state != DELETING:
            self._compute.virtual_machines.begin_delete(
                self._group, name, force_deletion=True, polling=self._polling()
            )
            log.info("deleting VM", extra={"vm": name})
            return
        if vm is None:
            with contextlib.suppress(ResourceNotFoundError):
                self._network.network_interfaces.begin_delete(
                    self._group, name, polling=self._polling()
                ).result()
        raise NodeClaimNotFound(f"VM {name!r} not found in resource group {self._group!r}")

    def _polling(self) -> PatientPolling:
        """A polling method for one long-running operation."""
        return PatientPolling(
            DEFAULT_POLL_SECONDS,
            path_format_arguments={"endpoint": self._settings.arm_endpoint},
        )

    # -- request bodies (ARM JSON) ------------------------------------------------------------

    def _nic_body(self, spec: LaunchSpec) -> dict[str, Any]:
        configs: list[dict[str, Any]] = [
            {
                "name": spec.name,
                "properties": {
                    "primary": True,
                    "privateIPAllocationMethod": "Dynamic",
                    "subnet": {"id": spec.subnet_id},
                },
            }
        ]
        configs.extend(
            {
                "name": f"ipconfig{i}",
                "properties": {
                    "primary": False,
                    "privateIPAllocationMethod": "Dynamic",
                    "subnet": {"id": spec.subnet_id},
                },
            }
            for i in range(1, spec.secondary_ips + 1)
        )
        return {
            "location": self._settings.region,
            "tags": dict(spec.tags),
            "properties": {
                "ipConfigurations": configs,
                "enableAcceleratedNetworking": spec.accelerated_networking,
                "enableIPForwarding": False,
            },
        }

    def _vm_body(self, spec: LaunchSpec, nic_id: str) -> dict[str, Any]:
        settings = self._settings
        user = settings.linux_admin_username
        properties: dict[str, Any] = {
            "hardwareProfile": {"vmSize": spec.vm_size},
            "storageProfile": {
                "imageReference": _image_reference(spec.image_id),
                "osDisk": {
                    "name": spec.name,
                    "createOption": "FromImage",
                    "deleteOption": "Delete",
                    "diskSizeGB": spec.os_disk_size_gb,
                    "managedDisk": {
                        "storageAccountType": "Premium_LRS"
                        if spec.premium_storage
                        else "Standard_LRS"
                    },
                },
            },
            "networkProfile": {
                "networkInterfaces": [
                    {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
                ]
            },
            "osProfile": {
                "computerName": spec.name,
                "adminUsername": user,
                "customData": spec.custom_data,
                "linuxConfiguration": {
                    "disablePasswordAuthentication": True,
                    "ssh": {
                        "publicKeys": [
                            {
                                "path": f"/home/{user}/.ssh/authorized_keys",
                                "keyData": settings.ssh_public_key,
                            }
                        ]
                    },
                },
            },
            "priority": "Spot" if spec.capacity_type == wk.CAPACITY_TYPE_SPOT else "Regular",
        }
        if spec.capacity_type == wk.CAPACITY_TYPE_SPOT:
            properties["evictionPolicy"] = "Delete"
            properties["billingProfile"] = {"maxPrice": -1}
        if spec.encryption_at_host:
            properties["securityProfile"] = {"encryptionAtHost": True}
        body: dict[str, Any] = {
            "location": settings.region,
            "tags": dict(spec.tags),
            "properties": properties,
        }
        if spec.zone:
            body["zones"] = [spec.zone]
        if settings.node_identities:
            body["identity"] = {
                "type": "UserAssigned",
                "userAssignedIdentities": {identity: {} for identity in settings.node_identities},
            }
        return body


def _image_reference(image_id: str) -> dict[str, str]:
    """A community gallery image (``/CommunityGalleries/...``), a shared gallery image
    (``/SharedGalleries/...``) or an image by ARM ID."""
    lowered = image_id.lower()
    if lowered.startswith("/communitygalleries/"):
        return {"communityGalleryImageId": image_id}
    if lowered.startswith("/sharedgalleries/"):
        return {"sharedGalleryImageId": image_id}
    return {"id": image_id}
