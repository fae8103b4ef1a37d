"""Compute Engine instances of the cluster's nodes: one ``instances.insert`` per NodeClaim.

An instance is named from its NodeClaim (``karpenter-<nodeclaim>``), so a create that is retried
finds what it made: ``launch`` reads the instance in the chosen zone first and returns it when it
is there. A launch is one GET (404), one insert and the reads of its zone operation
(``zoneOperations.wait``, through the same endpoint as every other call; the client library's
own operation poller would go to the real endpoint). A stockout or quota error, answered by the
insert or found in the finished operation, marks the offering (``karpenter_gcp.errors``) and
raises ``InsufficientCapacity``. Spot instances are ``provisioningModel: SPOT`` and deleted when
preempted; every disk is deleted with its instance.

``list`` reads each zone's instances labelled with the cluster's name and keeps those with a
NodePool label; providerIDs are ``gce://<project>/<zone>/<name>`` as the GCE cloud controller
writes them.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions
from google.cloud import compute_v1

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.machines import Machine
from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_core.sdk.types import CreateError, InstanceType, NodeClaimNotFound
from karpenter_gcp.bootstrap import NodeTemplate
from karpenter_gcp.errors import RETRY, capacity_error, error_codes

__all__ = [
    "LABEL_CLUSTER",
    "LABEL_NODECLAIM",
    "LABEL_NODECLASS",
    "LABEL_NODEPOOL",
    "Disk",
    "Instances",
    "LaunchSpec",
    "instance_body",
    "instance_name",
    "machine_of",
    "message_json",
    "parse_provider_id",
    "provider_id",
]

LABEL_CLUSTER = "goog-k8s-cluster-name"
"""GKE's label of the cluster an instance belongs to (its name)."""
LABEL_NODEPOOL = "karpenter-sh-nodepool"
LABEL_NODECLAIM = "karpenter-sh-nodeclaim"
LABEL_NODECLASS = "karpenter-k8s-gcp-gcenodeclass"
IMAGE_METADATA = "karpenter-source-image"
"""Metadata holding the boot image (an instance read back does not name it)."""
GONE = frozenset({"STOPPING", "TERMINATED"})
"""States of an instance on its way out (a deleted or preempted one stops first)."""
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
OPERATION_TIMEOUT = 300.0
_NAME_LIMIT = 63

log = logging.getLogger("karpenter.gcp")


def instance_name(nodeclaim: str) -> str:
    """The instance name of a NodeClaim: ``karpenter-<nodeclaim>``, cut and suffixed with a hash
    when longer than GCE's 63 characters."""
    name = f"karpenter-{nodeclaim}"
    if len(name) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256(nodeclaim.encode()).hexdigest()[:8]
    return f"{name[: _NAME_LIMIT - 9].rstrip('-')}-{digest}"


def provider_id(project: str, zone: str, name: str) -> str:
    """The providerID the GCE cloud controller writes on the node."""
    return f"gce://{project}/{zone}/{name}"


def parse_provider_id(value: str) -> tuple[str, str, str]:
    """(project, zone, name) of a GCE providerID; ``NodeClaimNotFound`` when it is not one."""
    parts = value.removeprefix("gce://").split("/") if value.startswith("gce://") else []
    if len(parts) != 3 or not all(parts):
        raise NodeClaimNotFound(f"{value!r} is not a GCE providerID (gce://project/zone/name)")
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True, slots=True)
class Disk:
    """A disk of the instance: ``category`` is a disk type (``pd-balanced``, ``local-ssd``)."""

    size_gib: int
    category: str = "pd-balanced"
    boot: bool = False


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What to launch for one NodeClaim: one machine type, zone and capacity type."""

    name: str
    machine_type: str
    zone: str
    capacity_type: str
    image: str
    disks: tuple[Disk, ...]
    metadata: Mapping[str, str]
    labels: Mapping[str, str]
    template: NodeTemplate
    max_pods: int = 110
    subnetwork: str = ""
    """Overrides the template's (a URL or ``regions/<r>/subnetworks/<name>``)."""
    private_nodes: bool | None = None
    """No external address when True; the template's choice when None."""
    network_tags: tuple[str, ...] = ()
    service_account: str = ""
    gpu: bool = False
    """A built-in GPU: no live migration."""


def instance_body(spec: LaunchSpec) -> dict[str, Any]:
    """The instance resource (Compute API JSON) for ``spec``."""
    spot = spec.capacity_type == wk.CAPACITY_TYPE_SPOT
    scheduling: dict[str, Any] = {
        "provisioningModel": "SPOT" if spot else "STANDARD",
        "automaticRestart": not spot,
        "onHostMaintenance": "TERMINATE" if spot or spec.gpu else "MIGRATE",
    }
    if spot:
        scheduling["instanceTerminationAction"] = "DELETE"
    accounts = [dict(a) for a in spec.template.service_accounts]
    if spec.service_account:
        accounts = [{"email": spec.service_account, "scopes": list(SCOPES)}]
    metadata = {**spec.metadata, IMAGE_METADATA: spec.image}
    return {
        "name": spec.name,
        "machineType": f"zones/{spec.zone}/machineTypes/{spec.machine_type}",
        "disks": [_disk(spec, disk) for disk in sorted(spec.disks, key=lambda d: not d.boot)],
        "networkInterfaces": [_interface(spec, nic) for nic in spec.template.network_interfaces],
        "serviceAccounts": accounts,
        "metadata": {"items": [{"key": k, "value": v} for k, v in sorted(metadata.items())]},
        "labels": {**spec.template.labels, **spec.labels},
        "tags": {"items": list(dict.fromkeys([*spec.template.tags, *spec.network_tags]))},
        "scheduling": scheduling,
    }


def _disk(spec: LaunchSpec, disk: Disk) -> dict[str, Any]:
    disk_type = f"zones/{spec.zone}/diskTypes/{disk.category}"
    if disk.category == "local-ssd":
        scratch = {"diskType": disk_type}
        return {
            "type": "SCRATCH",
            "interface": "NVME",
            "autoDelete": True,
            "initializeParams": scratch,
        }
    params: dict[str, Any] = {"diskType": disk_type, "diskSizeGb": str(disk.size_gib)}
    if disk.boot:
        params["sourceImage"] = spec.image
    return {"boot": disk.boot, "autoDelete": True, "type": "PERSISTENT", "initializeParams": params}


def _interface(spec: LaunchSpec, nic: Mapping[str, Any]) -> dict[str, Any]:
    """A template's network interface, with the NodeClass's subnetwork and address choice and
    a pod range sized for ``max_pods`` (GKE's: twice as many addresses, /23 to /28)."""
    prefix = min(max(32 - (2 * spec.max_pods - 1).bit_length(), 23), 28)
    out: dict[str, Any] = {k: nic[k] for k in ("network", "subnetwork", "stackType") if k in nic}
    if spec.subnetwork:
        out["subnetwork"] = spec.subnetwork
    ranges = [
        {"ipCidrRange": f"/{prefix}", **{k: v for k, v in r.items() if k == "subnetworkRangeName"}}
        for r in nic.get("aliasIpRanges") or ()
    ]
    if ranges:
        out["aliasIpRanges"] = ranges
    private = spec.private_nodes if spec.private_nodes is not None else not nic.get("accessConfigs")
    out["accessConfigs"] = [] if private else [{"type": "ONE_TO_ONE_NAT", "name": "external-nat"}]
    return out


def machine_of(project: str, instance: Mapping[str, Any]) -> Machine:
    """What the provider reads of an instance (its Compute API JSON)."""
    zone = str(instance.get("zone", "")).rsplit("/", 1)[-1]
    name = str(instance.get("name", ""))
    labels: Mapping[str, str] = instance.get("labels") or {}
    items = (instance.get("metadata") or {}).get("items") or ()
    image = next((str(i.get("value", "")) for i in items if i.get("key") == IMAGE_METADATA), "")
    created = instance.get("creationTimestamp")
    spot = (instance.get("scheduling") or {}).get("provisioningModel") == "SPOT"
    return Machine(
        id=name,
        provider_id=provider_id(project, zone, name),
        instance_type=str(instance.get("machineType", "")).rsplit("/", 1)[-1],
        capacity_type=wk.CAPACITY_TYPE_SPOT if spot else wk.CAPACITY_TYPE_ON_DEMAND,
        zone=zone,
        created=datetime.fromisoformat(created) if created else None,
        nodeclaim=labels.get(LABEL_NODECLAIM, ""),
        nodepool=labels.get(LABEL_NODEPOOL, ""),
        node_class=labels.get(LABEL_NODECLASS, ""),
        image_id=image,
        deleting=instance.get("status") in GONE,
    )


def message_json(message: Any) -> dict[str, Any]:
    """A Compute API message as its JSON."""
    return dict(json.loads(type(message).to_json(message)))


class Instances:
    """The cluster's instances in ``zones`` of ``project``, through ``clients`` (``instances``,
    ``zone_operations``)."""

    def __init__(
        self,
        clients: Any,
        project: str,
        cluster_name: str,
        zones: Sequence[str],
        unavailable: UnavailableOfferings,
    ) -> None:
        self._clients = clients
        self._project = project
        self._cluster = cluster_name
        self._zones = tuple(zones)
        self._unavailable = unavailable

    def find(self, zone: str, name: str) -> Machine | None:
        """The instance ``name`` in ``zone``, or None when there is none."""
        try:
            found = self._clients.instances.get(
                project=self._project, zone=zone, instance=name, retry=RETRY
            )
        except exceptions.NotFound:
            return None
        return machine_of(self._project, message_json(found))

    def launch(self, spec: LaunchSpec, instance_type: InstanceType) -> Machine:
        """The instance for ``spec``: the one already there, else inserted and waited for.
        ``InsufficientCapacity`` (the offering marked) when GCE has no capacity or quota for it,
        ``CreateError`` for any other failure."""
        existing = self.find(spec.zone, spec.name)
        if existing is not None:
            if existing.deleting:
                raise CreateError("InstanceDeleting", f"instance {spec.name} is being deleted")
            log.info("found the instance launched before", extra={"instance": spec.name})
            return existing
        body = instance_body(spec)
        try:
            operation = self._clients.instances.insert_unary(
                request={
                    "project": self._project,
                    "zone": spec.zone,
                    "instance_resource": compute_v1.Instance.from_json(json.dumps(body)),
                    "request_id": str(uuid.uuid4()),
                },
                retry=RETRY,
            )
        except exceptions.Conflict:
            return self._found(spec)
        except exceptions.GoogleAPICallError as error:
            raise self._failure(spec, instance_type, error_codes(error)) from None
        operation = self._wait(spec.zone, operation)
        codes = error_codes(operation)
        if codes:
            raise self._failure(spec, instance_type, codes)
        log.info("launched instance", extra={"instance": spec.name, "zone": spec.zone})
        return machine_of(self._project, {**body, "zone": spec.zone, "status": "PROVISIONING"})

    def get(self, value: str) -> Machine:
        """The instance of providerID ``value``; ``NodeClaimNotFound`` when it is gone or
        going."""
        _, zone, name = parse_provider_id(value)
        machine = self.find(zone, name)
        if machine is None or machine.deleting:
            raise NodeClaimNotFound(f"instance {name!r} not found in zone {zone!r}")
        return machine

    def list(self) -> list[Machine]:
        """The cluster's instances with a NodePool label (not those on their way out)."""
        out = []
        for zone in self._zones:
            pages = self._clients.instances.list(
                request={
                    "project": self._project,
                    "zone": zone,
                    "filter": f"labels.{LABEL_CLUSTER}={self._cluster}",
                },
                retry=RETRY,
            )
            for item in pages:
                machine = machine_of(self._project, message_json(item))
                if machine.nodepool and not machine.deleting:
                    out.append(machine)
        return out

    def delete(self, value: str) -> None:
        """Start deleting the instance of providerID ``value`` (its disks go with it);
        ``NodeClaimNotFound`` once it is gone or going."""
        _, zone, name = parse_provider_id(value)
        machine = self.find(zone, name)
        if machine is None or machine.deleting:
            raise NodeClaimNotFound(f"instance {name!r} not found in zone {zone!r}")
        try:
            self._clients.instances.delete_unary(
                project=self._project, zone=zone, instance=name, retry=RETRY
            )
        except exceptions.NotFound:
            raise NodeClaimNotFound(f"instance {name!r} not found in zone {zone!r}") from None
        log.info("deleting instance", extra={"instance": name, "zone": zone})

    def _wait(self, zone: str, operation: Any) -> Any:
        """The operation once DONE (``zoneOperations.wait`` answers when it is, or after a
        while)."""
        deadline = time.monotonic() + OPERATION_TIMEOUT
        while operation.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise CreateError("OperationTimeout", f"{operation.name} not done in time")
            operation = self._clients.zone_operations.wait(
                project=self._project, zone=zone, operation=operation.name, retry=RETRY
            )
        return operation

    def _found(self, spec: LaunchSpec) -> Machine:
        """After an insert answered 409: the instance a concurrent create made."""
        machine = self.find(spec.zone, spec.name)
        if machine is None:
            raise CreateError("Conflict", f"instance {spec.name} exists but cannot be read")
        return machine

    def _failure(
        self, spec: LaunchSpec, instance_type: InstanceType, codes: builtins.list[tuple[str, str]]
    ) -> Exception:
        zones = [o.zone for o in instance_type.offerings if o.capacity_type == spec.capacity_type]
        mapped = capacity_error(
            self._unavailable, codes, spec.machine_type, spec.zone, spec.capacity_type, zones
        )
        if mapped is not None:
            return mapped
        code, message = codes[0] if codes else ("LaunchFailed", "")
        return CreateError(
            code or "LaunchFailed",
            f"launching instance {spec.name} ({spec.machine_type}, {spec.capacity_type}, "
            f"{spec.zone}) failed: {message}",
        )
