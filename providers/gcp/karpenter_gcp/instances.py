"""Compute Engine instances of the cluster's nodes: one ``instances.insert`` per NodeClaim.

A NodeClaim's instance is ``karpenter-<nodeclaim>`` in the zone of the cheapest offering it
allows, so a create that is retried finds what it made: ``create`` reads that instance first
and returns it when it is there. A launch is one GET (404), one insert and the reads of its zone
operation (``zoneOperations.wait``, through the same endpoint as every other call; the client
library's operation poller would go to the real one). A stockout or quota error, answered by the
insert or found in the finished operation, marks the offering and raises
``InsufficientCapacity`` (``karpenter_gcp.errors``). Spot instances are deleted when preempted;
every disk is deleted with its instance. ``list`` reads each zone's instances labelled with the
cluster's name; providerIDs are ``gce://<project>/<zone>/<name>``.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions
from google.cloud import compute_v1

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.catalog import RefreshedData
from karpenter_core.sdk.kubelet import taint_text
from karpenter_core.sdk.launch import cheapest_offering, with_registration_taint
from karpenter_core.sdk.machines import Machine
from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_core.sdk.types import (
    CloudProviderError,
    CreateError,
    InstanceType,
    InsufficientCapacity,
    NodeClaimNotFound,
    Offering,
    Requirements,
    launch_request,
)
from karpenter_gcp.bootstrap import NodeTemplate, node_labels, node_metadata, read_template
from karpenter_gcp.clients import GCPClients
from karpenter_gcp.errors import RETRY, calling, error_codes, launch_error
from karpenter_gcp.instancetype import GPU_COUNT
from karpenter_gcp.nodeclass import GCENodeClass
from karpenter_gcp.settings import GCPSettings

__all__ = ["Instances", "instance_body", "instance_name", "machine_of", "provider_id"]

LABEL_CLUSTER = "goog-k8s-cluster-name"
"""GKE's label of the cluster an instance belongs to (its name)."""
LABEL_NODEPOOL, LABEL_NODECLAIM = "karpenter-sh-nodepool", "karpenter-sh-nodeclaim"
LABEL_NODECLASS = "karpenter-k8s-gcp-gcenodeclass"
IMAGE_METADATA = "karpenter-source-image"
"""Metadata naming the boot image (an instance read back does not)."""
GONE = frozenset({"STOPPING", "TERMINATED"})
"""States of an instance on its way out (a deleted or preempted one stops first)."""
OPERATION_TIMEOUT = 300.0
TEMPLATE_REFRESH = timedelta(minutes=10)

log = logging.getLogger("karpenter.gcp")


def instance_name(nodeclaim: str) -> str:
    """``karpenter-<nodeclaim>``, cut and ended with a hash beyond GCE's 63 characters."""
    name = f"karpenter-{nodeclaim}"
    digest = hashlib.sha256(nodeclaim.encode()).hexdigest()[:8]
    return name if len(name) <= 63 else f"{name[:54].rstrip('-')}-{digest}"


def provider_id(project: str, zone: str, name: str) -> str:
    """The providerID the GCE cloud controller writes on the node."""
    return f"gce://{project}/{zone}/{name}"


def _parse(value: str) -> tuple[str, str]:
    """(zone, name) of a GCE providerID; ``NodeClaimNotFound`` when it is not one."""
    parts = value.removeprefix("gce://").split("/") if value.startswith("gce://") else []
    if len(parts) != 3 or not all(parts):
        raise NodeClaimNotFound(f"{value!r} is not a GCE providerID (gce://project/zone/name)")
    return parts[1], parts[2]


def instance_body(
    nodeclaim: NodeClaim,
    node_class: GCENodeClass,
    instance_type: InstanceType,
    offering: Offering,
    template: NodeTemplate,
    settings: GCPSettings,
) -> dict[str, Any]:
    """The instance (Compute API JSON) launched for ``nodeclaim`` as ``offering``."""
    spec, zone, name = node_class.spec, offering.zone, nodeclaim.metadata.name or ""
    spot = offering.capacity_type == wk.CAPACITY_TYPE_SPOT
    gpus = instance_type.requirements.labels().get(GPU_COUNT, "0")
    max_pods = instance_type.capacity.get("pods", 110_000) // 1000
    claimed = (*nodeclaim.spec.taints, *nodeclaim.spec.startup_taints)
    taints = [taint_text(t) for t in with_registration_taint(claimed)]
    labels = node_labels(nodeclaim.metadata.labels, instance_type.name, offering)
    image = _image(node_class, instance_type)
    kubelet = spec.kubelet_configuration
    settings_of = (
        kubelet.model_dump(by_alias=True, exclude_none=True, mode="json") if kubelet else {}
    )
    metadata = node_metadata(template, labels, taints, max_pods, zone, spec.metadata, settings_of)
    metadata[IMAGE_METADATA] = image
    accounts = [dict(a) for a in template.service_accounts]
    if spec.service_account or settings.service_account:
        email = spec.service_account or settings.service_account
        accounts = [{"email": email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
    boot = next((d.category for d in spec.disks if d.boot), None)
    disks = [_disk(zone, d.size_gib, d.category) for d in spec.disks if not d.boot]
    return {
        "name": instance_name(name),
        "machineType": f"zones/{zone}/machineTypes/{instance_type.name}",
        "disks": [_disk(zone, spec.boot_disk_gib(), boot, image), *disks],
        "networkInterfaces": [
            _interface(node_class, nic, max_pods) for nic in template.network_interfaces
        ],
        "serviceAccounts": accounts,
        "metadata": {"items": [{"key": k, "value": v} for k, v in sorted(metadata.items())]},
        "labels": {
            **template.labels,
            **spec.labels,
            LABEL_CLUSTER: settings.cluster_name,
            LABEL_NODEPOOL: nodeclaim.metadata.labels.get(wk.NODEPOOL, "").replace(".", "_"),
            LABEL_NODECLAIM: name.replace(".", "_"),
            LABEL_NODECLASS: (node_class.metadata.name or "").replace(".", "_"),
        },
        "tags": {"items": list(dict.fromkeys([*template.tags, *spec.network_tags]))},
        "scheduling": {
            "provisioningModel": "SPOT" if spot else "STANDARD",
            "automaticRestart": not spot,
            "onHostMaintenance": "TERMINATE" if spot or gpus not in ("", "0") else "MIGRATE",
        }
        | ({"instanceTerminationAction": "DELETE"} if spot else {}),
    }


def _image(node_class: GCENodeClass, instance_type: InstanceType) -> str:
    """The first resolved image whose requirements the instance type meets."""
    for image in node_class.status.images:
        wanted = Requirements.from_node_selector(r.model_dump() for r in image.requirements)
        if instance_type.requirements.intersects(wanted) is None:
            return image.source_image
    name = node_class.metadata.name
    raise CloudProviderError(
        f"GCENodeClass {name!r} has no resolved image for {instance_type.name}"
    )


def _disk(zone: str, size: int | None, category: str | None, image: str = "") -> dict[str, Any]:
    """A disk deleted with its instance: the boot disk (with ``image``), a persistent one or a
    local SSD."""
    params: dict[str, Any] = {"diskType": f"zones/{zone}/diskTypes/{category or 'pd-balanced'}"}
    if category == "local-ssd":
        return dict(type="SCRATCH", interface="NVME", autoDelete=True, initializeParams=params)
    params["diskSizeGb"] = str(size or 100)
    params |= {"sourceImage": image} if image else {}
    return dict(boot=bool(image), autoDelete=True, type="PERSISTENT", initializeParams=params)


def _interface(node_class: GCENodeClass, nic: Mapping[str, Any], max_pods: int) -> dict[str, Any]:
    """A template's network interface with the GCENodeClass's subnetwork and address choice,
    and a pod range sized for ``max_pods`` as GKE sizes it (twice the addresses, /23 to /28)."""
    prefix = min(max(32 - (2 * max_pods - 1).bit_length(), 23), 28)
    out: dict[str, Any] = {k: nic[k] for k in ("network", "subnetwork", "stackType") if k in nic}
    out["subnetwork"] = node_class.status.subnetwork or out.get("subnetwork", "")
    ranges = [r.get("subnetworkRangeName") for r in nic.get("aliasIpRanges") or ()]
    out["aliasIpRanges"] = [{"ipCidrRange": f"/{prefix}", "subnetworkRangeName": r} for r in ranges]
    network = node_class.spec.network_config
    private = network.enable_private_nodes if network else None
    private = not nic.get("accessConfigs") if private is None else private
    out["accessConfigs"] = [] if private else [{"type": "ONE_TO_ONE_NAT", "name": "external-nat"}]
    return out


def machine_of(project: str, instance: Mapping[str, Any]) -> Machine:
    """What the provider reads of an instance (its Compute API JSON)."""
    zone = str(instance.get("zone", "")).rsplit("/", 1)[-1]
    name, labels = str(instance.get("name", "")), instance.get("labels") or {}
    items = (instance.get("metadata") or {}).get("items") or ()
    created = instance.get("creationTimestamp")
    return Machine(
        id=name,
        provider_id=provider_id(project, zone, name),
        instance_type=str(instance.get("machineType", "")).rsplit("/", 1)[-1],
        capacity_type=wk.CAPACITY_TYPE_SPOT
        if (instance.get("scheduling") or {}).get("provisioningModel") == "SPOT"
        else wk.CAPACITY_TYPE_ON_DEMAND,
        zone=zone,
        created=datetime.fromisoformat(created) if created else None,
        nodeclaim=labels.get(LABEL_NODECLAIM, "").replace("_", "."),
        nodepool=labels.get(LABEL_NODEPOOL, "").replace("_", "."),
        node_class=labels.get(LABEL_NODECLASS, "").replace("_", "."),
        image_id=next((i.get("value", "") for i in items if i.get("key") == IMAGE_METADATA), ""),
        deleting=instance.get("status") in GONE,
    )


def message_json(message: Any) -> dict[str, Any]:
    """A Compute API message as its JSON."""
    return dict(json.loads(type(message).to_json(message)))


class Instances:
    """The cluster's instances in the region's ``zones``, through ``clients`` (``instances``,
    ``zone_operations``; ``node_pool`` and ``instance_templates`` for the node pool's template,
    read on first use and every ``TEMPLATE_REFRESH``)."""

    def __init__(
        self,
        clients: GCPClients,
        settings: GCPSettings,
        zones: Iterable[str],
        unavailable: UnavailableOfferings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._clients, self._settings, self._zones = clients, settings, tuple(zones)
        self._project, self._unavailable = settings.project_id, unavailable
        location, cluster = settings.cluster_location, settings.cluster_name
        self.template = RefreshedData(
            lambda: read_template(clients, self._project, location, cluster, settings.node_pool),
            what="GKE node pool template",
            interval=TEMPLATE_REFRESH,
            clock=clock,
        )

    def create(
        self, nodeclaim: NodeClaim, node_class: GCENodeClass, instance_types: Iterable[InstanceType]
    ) -> Machine:
        """The instance of ``nodeclaim``: the one launched before, else one inserted now as the
        cheapest offering it allows. ``InsufficientCapacity`` when none is left or GCE has no
        capacity or quota for it (the offering marked), ``CreateError`` for other failures."""
        requirements, requests = launch_request(nodeclaim)
        chosen = cheapest_offering(instance_types, requirements, requests)
        if chosen is None:
            raise InsufficientCapacity(
                f"no machine type of GCENodeClass {node_class.metadata.name!r} meets NodeClaim "
                f"{nodeclaim.metadata.name!r} with an available offering"
            )
        instance_type, offering = chosen
        name = instance_name(nodeclaim.metadata.name or "")
        existing = self.find(offering.zone, name)
        if existing is not None:
            if existing.deleting:
                raise CreateError("InstanceDeleting", f"instance {name} is being deleted")
            return existing
        body = instance_body(
            nodeclaim, node_class, instance_type, offering, self.template.current(), self._settings
        )
        return self._launch(body, instance_type, offering)

    def find(self, zone: str, name: str) -> Machine | None:
        """The instance ``name`` in ``zone``, or None when there is none."""
        with calling(f"reading instance {name} in {zone}"):
            try:
                found = self._clients.instances.get(
                    project=self._project, zone=zone, instance=name, retry=RETRY
                )
            except exceptions.NotFound:
                return None
        return machine_of(self._project, message_json(found))

    def get(self, value: str) -> Machine:
        """The instance of providerID ``value``; ``NodeClaimNotFound`` when it is gone or
        going."""
        zone, name = _parse(value)
        machine = self.find(zone, name)
        if machine is None or machine.deleting:
            raise NodeClaimNotFound(f"instance {name!r} not found in zone {zone!r}")
        return machine

    def list(self) -> builtins.list[Machine]:
        """The cluster's instances with a NodePool label (not those on their way out)."""
        label = f"labels.{LABEL_CLUSTER}={self._settings.cluster_name}"
        with calling("listing the cluster's instances"):
            machines = [
                machine_of(self._project, message_json(item))
                for zone in self._zones
                for item in self._clients.instances.list(
                    request={"project": self._project, "zone": zone, "filter": label}, retry=RETRY
                )
            ]
        return [m for m in machines if m.nodepool and not m.deleting]

    def delete(self, value: str) -> None:
        """Start deleting the instance of providerID ``value`` (its disks go with it);
        ``NodeClaimNotFound`` once it is gone or going."""
        machine = self.get(value)
        with calling(f"deleting instance {machine.id}"):
            try:
                self._clients.instances.delete_unary(
                    project=self._project, zone=machine.zone, instance=machine.id, retry=RETRY
                )
            except exceptions.NotFound:
                raise NodeClaimNotFound(f"instance {machine.id!r} is gone") from None
        log.info("deleting instance", extra={"instance": machine.id, "zone": machine.zone})

    def _launch(
        self, body: dict[str, Any], instance_type: InstanceType, offering: Offering
    ) -> Machine:
        """Insert the instance and wait for its operation; a 409 reads it back."""
        request = {
            "project": self._project,
            "zone": offering.zone,
            "instance_resource": compute_v1.Instance.from_json(json.dumps(body)),
            "request_id": str(uuid.uuid4()),
        }
        try:
            operation = self._clients.instances.insert_unary(request=request, retry=RETRY)
        except exceptions.Conflict:
            return self.get(provider_id(self._project, offering.zone, body["name"]))
        except exceptions.GoogleAPIError as error:
            raise launch_error(
                self._unavailable, error_codes(error), body["name"], instance_type, offering
            ) from None
        deadline = time.monotonic() + OPERATION_TIMEOUT
        while operation.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise CreateError("OperationTimeout", f"{operation.name} not done in time")
            with calling(f"waiting for {operation.name}"):
                operation = self._clients.zone_operations.wait(
                    project=self._project, zone=offering.zone, operation=operation.name, retry=RETRY
                )
        if codes := error_codes(operation):
            raise launch_error(self._unavailable, codes, body["name"], instance_type, offering)
        log.info("launched instance", extra={"instance": body["name"], "zone": offering.zone})
        return machine_of(self._project, {**body, "zone": offering.zone})
