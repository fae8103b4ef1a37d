"""The fake GCE server's state: instances with their boot disks, and the zone operations that
create, delete and preempt them (RUNNING until ``operation_delay`` has passed, then DONE)."""

from __future__ import annotations

import datetime
import itertools
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from karpenter_gcp.testing.faults import Faults, google_error

_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
WAIT_LIMIT = 120.0
"""Seconds ``zoneOperations.wait`` waits at most before answering an operation still RUNNING."""


class GCEError(Exception):
    """An error answer in Google's JSON error format."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = google_error(status, reason, message)


def not_found(resource: str) -> GCEError:
    """GCE's 404 for ``resource`` (``projects/p/zones/z/instances/n``)."""
    return GCEError(404, "notFound", f"The resource '{resource}' was not found")


def timestamp(at: float | None = None) -> str:
    """A time as GCE writes it (RFC 3339 with milliseconds and the offset, -07:00)."""
    zone = datetime.timezone(datetime.timedelta(hours=-7))
    moment = datetime.datetime.fromtimestamp(time.time() if at is None else at, zone)
    return moment.isoformat(timespec="milliseconds")


@dataclass
class Operation:
    """A zone operation and what happens when it is done."""

    body: dict[str, Any]
    done_at: float
    finish: Any = None
    error: dict[str, Any] = field(default_factory=dict)


class GCEState:
    """Instances, disks and zone operations of one project and region (all under ``lock``)."""

    def __init__(
        self,
        project: str,
        region: str,
        base: str,
        operation_delay: float,
        machine_types: dict[str, list[dict[str, Any]]],
    ) -> None:
        self.project, self.region, self.base = project, region, base
        self.operation_delay = operation_delay
        self.machine_types = machine_types
        self.lock = threading.RLock()
        self.faults = Faults()
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.disks: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], Operation] = {}
        self._requests: dict[str, str] = {}
        self._ids = itertools.count(7_000_000_000_000_000_001)

    def clear(self) -> None:
        """Drop instances, disks and operations."""
        with self.lock:
            for store in (self.instances, self.disks, self.operations, self._requests):
                store.clear()

    def url(self, path: str) -> str:
        """The selfLink of ``projects/<project>/<path>``."""
        return f"{self.base}/compute/v1/projects/{self.project}/{path}"

    # -- operations ------------------------------------------------------------------------

    def advance(self) -> None:
        """Finish the operations whose time has come."""
        now = time.monotonic()
        for op in self.operations.values():
            if op.body["status"] != "DONE" and op.done_at <= now:
                self._done(op)

    def _done(self, op: Operation) -> None:
        op.body.update(status="DONE", progress=100, endTime=timestamp(), **op.error)
        if op.finish is not None:
            op.finish()

    def _operation(
        self,
        zone: str,
        kind: str,
        target: dict[str, Any],
        delay: float,
        finish: Any = None,
        error: dict[str, Any] | None = None,
    ) -> Operation:
        op_id = str(next(self._ids))
        name = f"operation-{int(time.time() * 1000)}-{op_id[-12:]}"
        body = {
            "kind": "compute#operation",
            "id": op_id,
            "name": name,
            "zone": self.url(f"zones/{zone}"),
            "operationType": kind,
            "targetLink": target["selfLink"],
            "targetId": target["id"],
            "status": "RUNNING",
            "user": "karpenter@test-project.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": timestamp(),
            "startTime": timestamp(),
            "selfLink": self.url(f"zones/{zone}/operations/{name}"),
        }
        op = Operation(body, time.monotonic() + delay, finish, error or {})
        self.operations[(zone, name)] = op
        if delay <= 0:
            self._done(op)
        return op

    def operation(self, zone: str, name: str) -> dict[str, Any]:
        """The zone operation ``name`` as it is now."""
        self.advance()
        op = self.operations.get((zone, name))
        if op is None:
            raise not_found(f"projects/{self.project}/zones/{zone}/operations/{name}")
        return dict(op.body)

    def wait(self, zone: str, name: str) -> dict[str, Any]:
        """The operation once DONE, or as it is after ``WAIT_LIMIT`` seconds."""
        deadline = time.monotonic() + WAIT_LIMIT
        while True:
            with self.lock:
                body = self.operation(zone, name)
                due = self.operations[(zone, name)].done_at
            if body["status"] == "DONE" or time.monotonic() >= deadline:
                return body
            time.sleep(max(0.001, min(due, deadline) - time.monotonic()))

    # -- instances -------------------------------------------------------------------------

    def instance(self, zone: str, name: str) -> dict[str, Any]:
        """The instance ``name`` in ``zone``."""
        self.advance()
        found = self.instances.get((zone, name))
        if found is None:
            raise not_found(f"projects/{self.project}/zones/{zone}/instances/{name}")
        return found

    def insert(self, zone: str, body: dict[str, Any], request_id: str) -> dict[str, Any]:
        """Start creating an instance from ``body``; its zone operation."""
        self.advance()
        if request_id in self._requests:
            return self.operation(zone, self._requests[request_id])
        name = str(body.get("name") or "")
        if not _NAME.fullmatch(name):
            raise GCEError(
                400,
                "invalid",
                f"Invalid value for field 'resource.name': '{name}'. "
                "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'",
            )
        if (zone, name) in self.instances:
            raise GCEError(
                409,
                "alreadyExists",
                f"The resource 'projects/{self.project}/zones/"
                f"{zone}/instances/{name}' already exists",
            )
        machine_type = str(body.get("machineType") or "").rsplit("/", 1)[-1]
        if not any(t["name"] == machine_type for t in self.machine_types.get(zone, ())):
            raise GCEError(
                400,
                "invalid",
                "Invalid value for field 'resource.machineType': "
                f"'{body.get('machineType')}'. Machine type with name "
                f"'{machine_type}' does not exist in zone '{zone}'.",
            )
        self._check_labels(body.get("labels") or {})
        scheduling = {
            "automaticRestart": True,
            "onHostMaintenance": "MIGRATE",
            "provisioningModel": "STANDARD",
            "preemptible": False,
            **(body.get("scheduling") or {}),
        }
        spot = scheduling["provisioningModel"] == "SPOT"
        fault = self.faults.capacity(machine_type, zone, spot)
        if fault is not None and fault.immediate:
            raise GCEError(403, "quotaExceeded", fault.quota_message(self.region, spot))
        instance = self._instance(zone, name, machine_type, body, scheduling)
        if fault is not None:
            error = fault.operation_error(self.project, zone, self.region, spot)
            op = self._operation(zone, "insert", instance, self.operation_delay, None, error)
        else:
            key = (zone, name)
            self.instances[key] = instance
            self._add_disks(zone, instance, body)
            op = self._operation(
                zone,
                "insert",
                instance,
                self.operation_delay,
                lambda: self.instances.get(key, {}).update(status="RUNNING"),
            )
        if request_id:
            self._requests[request_id] = op.body["name"]
        return dict(op.body)

    def _check_labels(self, labels: dict[str, Any]) -> None:
        for key, value in labels.items():
            if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(str(value)):
                raise GCEError(
                    400,
                    "invalid",
                    f"Invalid value for field 'resource.labels': "
                    f"'{key}={value}'. Label keys and values must be lowercase "
                    "letters, digits, '_' and '-' (keys start with a letter).",
                )

    def _instance(
        self,
        zone: str,
        name: str,
        machine_type: str,
        body: dict[str, Any],
        scheduling: dict[str, Any],
    ) -> dict[str, Any]:
        instance_id = str(next(self._ids))
        nics = [
            {
                **nic,
                "name": f"nic{i}",
                "networkIP": f"10.128.0.{len(self.instances) % 250 + 2}",
                "network": nic.get("network") or self.url("global/networks/default"),
                "stackType": "IPV4_ONLY",
                "fingerprint": "ZmFrZQ==",
            }
            for i, nic in enumerate(body.get("networkInterfaces") or [{}])
        ]
        accounts = [
            {
                **a,
                "email": a["email"]
                if a.get("email") not in (None, "default")
                else "123456789012-compute@developer.gserviceaccount.com",
            }
            for a in body.get("serviceAccounts") or ()
        ]
        status = "PROVISIONING" if self.operation_delay > 0 else "RUNNING"
        return {
            **{k: v for k, v in body.items() if k not in ("disks", "sourceInstanceTemplate")},
            "kind": "compute#instance",
            "id": instance_id,
            "name": name,
            "zone": self.url(f"zones/{zone}"),
            "machineType": self.url(f"zones/{zone}/machineTypes/{machine_type}"),
            "status": status,
            "creationTimestamp": timestamp(),
            "selfLink": self.url(f"zones/{zone}/instances/{name}"),
            "labels": dict(body.get("labels") or {}),
            "labelFingerprint": "ZmFrZQ==",
            "scheduling": scheduling,
            "networkInterfaces": nics,
            "serviceAccounts": accounts,
            "metadata": {
                "kind": "compute#metadata",
                "fingerprint": "ZmFrZQ==",
                **(body.get("metadata") or {}),
            },
            "tags": {"fingerprint": "ZmFrZQ==", **(body.get("tags") or {})},
            "cpuPlatform": "Intel Cascade Lake",
            "startRestricted": False,
            "deletionProtection": False,
            "fingerprint": "ZmFrZQ==",
        }

    def _add_disks(self, zone: str, instance: dict[str, Any], body: dict[str, Any]) -> None:
        attached = []
        for index, disk in enumerate(body.get("disks") or ()):
            params = disk.get("initializeParams") or {}
            disk_name = params.get("diskName") or (
                instance["name"] if index == 0 else f"{instance['name']}-{index}"
            )
            link = self.url(f"zones/{zone}/disks/{disk_name}")
            self.disks[(zone, disk_name)] = {
                "kind": "compute#disk",
                "id": str(next(self._ids)),
                "name": disk_name,
                "zone": self.url(f"zones/{zone}"),
                "selfLink": link,
                "status": "READY",
                "sizeGb": str(params.get("diskSizeGb") or 100),
                "type": self.url(
                    f"zones/{zone}/diskTypes/"
                    f"{str(params.get('diskType') or 'pd-standard').rsplit('/', 1)[-1]}"
                ),
                "sourceImage": params.get("sourceImage", ""),
                "users": [instance["selfLink"]],
                "labels": dict(params.get("labels") or {}),
            }
            attached.append(
                {
                    "kind": "compute#attachedDisk",
                    "type": disk.get("type", "PERSISTENT"),
                    "mode": "READ_WRITE",
                    "source": link,
                    "deviceName": disk.get("deviceName") or f"persistent-disk-{index}",
                    "index": index,
                    "boot": bool(disk.get("boot")),
                    "autoDelete": bool(disk.get("autoDelete", index == 0)),
                    "interface": "SCSI",
                    "diskSizeGb": str(params.get("diskSizeGb") or 100),
                }
            )
        instance["disks"] = attached

    def delete(self, zone: str, name: str) -> dict[str, Any]:
        """Start deleting an instance (and the disks it auto-deletes); its zone operation."""
        instance = self.instance(zone, name)
        instance["status"] = "STOPPING"
        op = self._operation(
            zone, "delete", instance, self.operation_delay, lambda: self._remove(zone, name)
        )
        return dict(op.body)

    def _remove(self, zone: str, name: str) -> None:
        instance = self.instances.pop((zone, name), None)
        for disk in (instance or {}).get("disks") or ():
            if disk.get("autoDelete"):
                self.disks.pop((zone, disk["source"].rsplit("/", 1)[-1]), None)

    def preempt(self, name: str) -> dict[str, Any]:
        """Preempt the instance ``name`` (any zone): a DONE ``compute.instances.preempted``
        operation; the instance is deleted when its termination action is DELETE, else
        TERMINATED."""
        self.advance()
        key = next((k for k in self.instances if k[1] == name), None)
        if key is None:
            raise not_found(f"projects/{self.project}/zones/-/instances/{name}")
        instance = self.instances[key]
        op = self._operation(key[0], "compute.instances.preempted", instance, 0)
        op.body.update(user="system", statusMessage="Instance was preempted.")
        if instance["scheduling"].get("instanceTerminationAction") == "DELETE":
            self._remove(*key)
        else:
            instance["status"] = "TERMINATED"
        return dict(op.body)
