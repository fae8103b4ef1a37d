"""The Azure provider's conformance profile: the fake ARM server (``karpenter_azure.fake_arm``).

``start`` serves a ``FakeARM`` over HTTPS on a free local port and puts its service principal,
authority host, endpoint and CA in the environment, so the provider's ``DefaultAzureCredential``
gets its tokens there, in this process and in a controller started from it. VM creates and
deletes take a second (with Retry-After, as ARM answers). ``insufficient_capacity`` makes the
fake fail VM creates of the offering with ``ZonalAllocationFailed`` (a regional offering:
``AllocationFailed``) on their asynchronous operation, as Azure does; ``cloud_errors`` throttles
chosen operations with 429 and Retry-After. The NodeClass is an AKSNodeClass with the status its
controller would write against the fake (AKS node images from the fake's community galleries).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from karpenter_azure.fake_arm import FakeARM, Latency, seed
from karpenter_azure.images import ImageResolver, community_gallery_versions
from karpenter_azure.instances import TAG_CLUSTER, TAG_NODECLASS, provider_id, tag_key
from karpenter_azure.nodeclass import (
    CONDITION_SUBNETS_READY,
    CONDITION_TYPES,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    AKSNodeClass,
    nodeclass_hash,
)
from karpenter_core.apis.v1.common import CONDITION_READY
from karpenter_core.sdk.profiles import EnvironOverlay, condition, is_ready, respecified

__all__ = ["LATENCY", "AzureProfile"]

LATENCY = Latency(vm_create=1.0, vm_delete=1.0, nic_create=0.0, nic_delete=0.0)
"""Operation times of the profile's fake: a VM's create and delete poll once after ARM's
Retry-After of a second; NICs are done at once."""
NODE_CLASS = "default"
IMAGE_FAMILY = "Ubuntu2204"
DRIFTED_IMAGE_FAMILY = "AzureLinux"
"""``drifted`` moves the AKSNodeClass to another image family: its hash and images change."""
KUBERNETES_VERSION = "1.33.2"
"""The version in the profile's AKSNodeClass status (the controller writes the cluster's)."""
UNMANAGED_SIZE = "Standard_D2s_v3"
BOOTSTRAP_TOKEN = "abcdef.0123456789abcdef"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKarpenterConformanceKey conformance"
_IMAGE = (
    f"/CommunityGalleries/{seed.AKS_UBUNTU_COMMUNITY_GALLERY}/images/2204gen2containerd/versions/"
    f"{seed.IMAGE_VERSIONS[-1][0]}"
)
_THROTTLED = {
    "virtualMachines.list": ("GET", r"/virtualMachines$"),
    "virtualMachines.get": ("GET", r"/virtualMachines/[^/]+$"),
    "virtualMachines.createOrUpdate": ("PUT", r"/virtualMachines/[^/]+$"),
    "virtualMachines.delete": ("DELETE", r"/virtualMachines/[^/]+$"),
    "networkInterfaces.createOrUpdate": ("PUT", r"/networkInterfaces/[^/]+$"),
    "networkInterfaces.delete": ("DELETE", r"/networkInterfaces/[^/]+$"),
    "resourceSkus.list": ("GET", r"/skus$"),
}
"""Operations ``cloud_errors`` can throttle: ARM operation id -> (method, path pattern)."""


class AzureProfile:
    """A fake ARM server; faults are capacity errors on VM creates and throttled operations."""

    nodes_via: Literal["registrar", "native"] = "registrar"
    unsupported: Mapping[str, str] = {}

    def __init__(self) -> None:
        self._fake: FakeARM | None = None
        self._environ = EnvironOverlay()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Serve the fake on a free port; its credentials and endpoint go in the environment."""
        self._fake = FakeARM(latency=LATENCY).start()
        self._environ.set(self._fake.env())

    def reset(self) -> None:
        """Drop every VM, NIC, disk and fault."""
        self._server.reset()
        self._server.set_latency(LATENCY)

    def stop(self) -> None:
        """Stop the server and restore the environment."""
        if self._fake is not None:
            self._fake.stop()
            self._fake = None
        self._environ.restore()

    @property
    def _server(self) -> FakeARM:
        if self._fake is None:
            raise RuntimeError("the Azure conformance profile is not started (call start())")
        return self._fake

    # -- what the suite asks for -----------------------------------------------------------

    def settings(self) -> Mapping[str, str]:
        """The fake's endpoint, CA and subscription, and what the cluster would give."""
        fake = self._server
        return {
            "cluster-name": seed.CLUSTER_NAME,
            "region": seed.LOCATION,
            "subscription-id": fake.subscription_id,
            "node-resource-group": seed.NODE_RESOURCE_GROUP,
            "vnet-subnet-id": fake.subnet_id(),
            "ssh-public-key": SSH_KEY,
            "cluster-endpoint": "https://127.0.0.1:6443",
            "kubelet-bootstrap-token": BOOTSTRAP_TOKEN,
            "arm-endpoint-url": fake.url,
            "arm-ca-bundle": fake.ca_file,
        }

    def node_class(self, ready: bool = True) -> dict[str, Any]:
        """The default AKSNodeClass with the status its controller would write."""
        manifest: dict[str, Any] = {
            "apiVersion": "karpenter.azure.com/v1beta1",
            "kind": "AKSNodeClass",
            "metadata": {"name": NODE_CLASS, "generation": 1},
            "spec": {"imageFamily": IMAGE_FAMILY},
        }
        return self._with_status(manifest, ready)

    def drifted(self, node_class: dict[str, Any]) -> dict[str, Any]:
        """``node_class`` on another image family: its hash and its images change."""
        changed = respecified(node_class)
        changed["spec"]["imageFamily"] = DRIFTED_IMAGE_FAMILY
        return self._with_status(changed, is_ready(node_class))

    def insufficient_capacity(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """VM creates of this offering fail on their operation: ``ZonalAllocationFailed`` in a
        zone (``<region>-<n>``), ``AllocationFailed`` for a regional offering."""
        priority = "Spot" if capacity_type == "spot" else "Regular"
        number = zone.rsplit("-", 1)[-1] if zone.startswith(f"{seed.LOCATION}-") else ""
        if number:
            self._server.fail_creates(
                "ZonalAllocationFailed", sku=instance_type, zone=number, priority=priority
            )
        else:
            self._server.fail_creates("AllocationFailed", sku=instance_type, priority=priority)

    def launch_unmanaged(self, tags: Mapping[str, str]) -> str:
        """A VM (and its NIC) made behind the controller's back with ``tags`` and the cluster's
        tag, so the provider's ``list()`` reports it; its providerID."""
        fake = self._server
        group = seed.NODE_RESOURCE_GROUP
        name = "aks-conformance-unmanaged"
        owned = {
            **{tag_key(k): v for k, v in tags.items()},
            TAG_CLUSTER: seed.CLUSTER_NAME,
            TAG_NODECLASS: NODE_CLASS,
        }
        # raw ARM JSON bodies: the typed overloads take models
        network: Any = fake.network_client()
        compute: Any = fake.compute_client()
        nic = network.network_interfaces.begin_create_or_update(
            group, name, _nic_body(name, owned, fake.subnet_id())
        ).result()
        compute.virtual_machines.begin_create_or_update(
            group, name, _vm_body(name, owned, nic.id)
        ).result()
        return provider_id(fake.subscription_id, group, name)

    def cloud_errors(self, actions: Iterable[str]) -> None:
        """The fake answers these ARM operations (``virtualMachines.createOrUpdate``,
        ``virtualMachines.delete``, ... see ``_THROTTLED``) with 429 and Retry-After until
        ``clear_faults``."""
        for action in actions:
            if action not in _THROTTLED:
                raise ValueError(
                    f"unknown ARM operation {action!r}; known: {', '.join(sorted(_THROTTLED))}"
                )
            method, path = _THROTTLED[action]
            self._server.fail_requests(429, method=method, path=path, retry_after=1.0)

    def clear_faults(self) -> None:
        """No capacity errors and no throttling; VMs and NICs stay."""
        self._server.clear_faults()

    # -- helpers ---------------------------------------------------------------------------

    def _with_status(self, manifest: dict[str, Any], ready: bool) -> dict[str, Any]:
        fake = self._server
        node_class = AKSNodeClass.model_validate(manifest)
        resolver = ImageResolver(
            community_gallery_versions(fake.compute_client()),
            seed.LOCATION,
            lambda: datetime.now(UTC),
        )
        images = resolver.resolve(node_class.spec, KUBERNETES_VERSION)
        generation = manifest["metadata"].get("generation", 1)
        failing = "" if ready else CONDITION_SUBNETS_READY
        conditions = [
            condition(
                kind,
                kind != failing,
                "SubnetNotFound" if kind == failing else kind,
                "the subnet is not found (conformance)" if kind == failing else "",
                generation,
            )
            for kind in CONDITION_TYPES
        ]
        conditions.append(
            condition(
                CONDITION_READY,
                ready,
                "Ready" if ready else "SubnetsReadyFalse",
                "" if ready else "the subnet is not ready (conformance)",
                generation,
            )
        )
        manifest["status"] = {
            "images": [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in images],
            "kubernetesVersion": KUBERNETES_VERSION,
            "conditions": conditions,
        }
        manifest["metadata"]["annotations"] = {
            HASH_ANNOTATION: nodeclass_hash(node_class.spec),
            HASH_VERSION_ANNOTATION: HASH_VERSION,
        }
        return manifest


def _nic_body(name: str, tags: Mapping[str, str], subnet_id: str) -> dict[str, Any]:
    """The ARM body of an unmanaged VM's NIC in ``subnet_id``."""
    return {
        "location": seed.LOCATION,
        "tags": dict(tags),
        "properties": {
            "ipConfigurations": [
                {"name": name, "properties": {"primary": True, "subnet": {"id": subnet_id}}}
            ]
        },
    }


def _vm_body(name: str, tags: Mapping[str, str], nic_id: str) -> dict[str, Any]:
    """The ARM body of an unmanaged VM in zone 1 on the NIC ``nic_id``."""
    ssh_key = {"path": "/home/azureuser/.ssh/authorized_keys", "keyData": SSH_KEY}
    return {
        "location": seed.LOCATION,
        "zones": ["1"],
        "tags": dict(tags),
        "properties": {
            "hardwareProfile": {"vmSize": UNMANAGED_SIZE},
            "storageProfile": {
                "imageReference": {"communityGalleryImageId": _IMAGE},
                "osDisk": {"createOption": "FromImage", "deleteOption": "Delete"},
            },
            "osProfile": {
                "computerName": name,
                "adminUsername": "azureuser",
                "linuxConfiguration": {
                    "disablePasswordAuthentication": True,
                    "ssh": {"publicKeys": [ssh_key]},
                },
            },
            "networkProfile": {
                "networkInterfaces": [{"id": nic_id, "properties": {"deleteOption": "Delete"}}]
            },
        },
    }
