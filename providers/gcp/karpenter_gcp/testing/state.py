"""The fake GCE server's state: instances with their disks, and the zone operations that
create, delete and preempt them (RUNNING until ``operation_delay`` has passed, then DONE)."""

from __future__ import annotations

import datetime
import itertools
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from karpenter_gcp.testing.faults import Faults, google_error

_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL = re.compile(r"[a-z][a-z0-9_-]{0,62}=[a-z0-9_-]{0,63}")
WAIT_LIMIT = 120.0
"""Seconds ``zoneOperations.wait`` waits at most before answering an operation still RUNNING."""
SERVICE_ACCOUNT = "123456789012-compute@developer.gserviceaccount.com"
"""The project's default compute service account (what ``email: default`` becomes)."""
_FINGERPRINT = "ZmFrZQ=="


class GCEError(Exception):
    """An error answer in Google's JSON error format."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = google_error(status, reason, message)


def not_found(resource: str) -> GCEError:
    """GCE's 404 for ``resource`` (``projects/p/zones/z/instances/n``)."""
    return GCEError(404, "notFound", f"The resource '{resource}' was not found")


def invalid(field_name: str, value: Any, why: str) -> GCEError:
    """GCE's 400 for an invalid field of a request."""
    return GCEError(400, "invalid", f"Invalid value for field '{field_name}': '{value}'. {why}")


def timestamp() -> str:
    """The time as GCE writes it (RFC 3339 with milliseconds and its -07:00 offset)."""
    zone = datetime.timezone(datetime.timedelta(hours=-7))
    return datetime.datetime.now(zone).isoformat(timespec="milliseconds")


@dataclass
class Operation:
    """A zone operation, when it is done, what then happens, and the error it ends with."""

    body: dict[str, Any]
    done_at: float
    finish: Callable[[], None] | None = None
    error: dict[str, Any] = field(default_factory=dict)


class GCEState:
    """Instances, disks and zone operations of one project and region (all under ``lock``)."""

    def __init__(
        self,
        project: str,
        region: str,
        url: str,
        machine_types: Mapping[str, Mapping[str, Any]],
        operation_delay: float,
    ) -> None:
        self.project, self.region, self.url = project, region, f"{url}/projects/{project}"
        self.machine_types = machine_types
        self.operation_delay = operation_delay
        self.lock = threading.RLock()
        self.faults = Faults()
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.disks: dict[tuple[str, str], dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], Operation] = {}
        self._request_ids: dict[str, tuple[str, str]] = {}
        self._ids = itertools.count(7_000_000_000_000_000_001)

    def clear(self) -> None:
        """Drop instances, disks and operations."""
        with self.lock:
            for store in (self.instances, self.disks, self.operations, self._request_ids):
                store.clear()

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

    def _start(
        self,
        zone: str,
        kind: str,
        target: Mapping[str, Any],
        finish: Callable[[], None] | None = None,
        error: dict[str, Any] | None = None,
        delay: float | None = None,
    ) -> dict[str, Any]:
        op_id = str(next(self._ids))
        name = f"operation-{int(time.time() * 1000)}-{op_id[-12:]}"
        body = {
            "kind": "compute#operation",
            "id": op_id,
            "name": name,
            "zone": f"{self.url}/zones/{zone}",
            "operationType": kind,
            "targetLink": target["selfLink"],
            "targetId": target["id"],
            "status": "RUNNING",
            "user": "karpenter@test-project.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": timestamp(),
            "startTime": timestamp(),
            "selfLink": f"{self.url}/zones/{zone}/operations/{name}",
        }
        delay = self.operation_delay if delay is None else delay
        op = self.operations[(zone, name)] = Operation(
            body, time.monotonic() + delay, finish, error or {}
        )
        if delay <= 0:
            self._done(op)
        return dict(body)

    def operation(self, zone: str, name: str) -> dict[str, Any]:
        """The zone operation ``name`` as it is now."""
        self.advance()
        op = self.operations.get((zone, name))
        if op is None:
            raise not_found(f"projects/{self.project}/zones/{zone}/operations/{name}")
        return dict(op.body)

    def wait(self, zone: str, name: str) -> dict[str, Any]:
        """The operation once DONE, or as it is after ``WAIT_LIMIT`` seconds (takes the lock
        itself: the caller must not hold it)."""
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

    def insert(self, zone: str, body: dict[str, Any], request_id: str = "") -> dict[str, Any]:
        """Start creating an instance from ``body`` (a retried ``request_id`` gets the first
        operation again); its zone operation."""
        if request_id in self._request_ids:
            return self.operation(*self._request_ids[request_id])
        name, machine_type = self._check(zone, body)
        scheduling = {"automaticRestart": True, "onHostMaintenance": "MIGRATE"}
        scheduling |= {"provisioningModel": "STANDARD", **(body.get("scheduling") or {})}
        spot = scheduling["provisioningModel"] == "SPOT"
        fault = self.faults.capacity(machine_type, zone, spot)
        if fault is not None and fault.immediate:
            raise GCEError(403, "quotaExceeded", fault.quota_message(self.region, spot))
        instance = self._instance(zone, name, machine_type, body, scheduling)
        if fault is not None:
            self._drop_disks(zone, instance, every=True)
            error = fault.operation_error(self.project, zone, self.region, spot)
            op = self._start(zone, "insert", instance, error=error)
        else:
            self.instances[(zone, name)] = instance
            op = self._start(zone, "insert", instance, lambda: instance.update(status="RUNNING"))
        if request_id:
            self._request_ids[request_id] = (zone, op["name"])
        return op

    def _check(self, zone: str, body: Mapping[str, Any]) -> tuple[str, str]:
        """The name and machine type of an instance to insert, or the 400/409 GCE answers."""
        self.advance()
        name = str(body.get("name") or "")
        if not _NAME.fullmatch(name):
            raise invalid("resource.name", name, f"Must be a match of regex '{_NAME.pattern}'")
        if (zone, name) in self.instances:
            resource = f"projects/{self.project}/zones/{zone}/instances/{name}"
            raise GCEError(409, "alreadyExists", f"The resource '{resource}' already exists")
        machine_type = str(body.get("machineType") or "").rsplit("/", 1)[-1]
        if machine_type not in self.machine_types.get(zone, {}):
            why = f"Machine type with name '{machine_type}' does not exist in zone '{zone}'."
            raise invalid("resource.machineType", body.get("machineType"), why)
        for key, value in (body.get("labels") or {}).items():
            if not _LABEL.fullmatch(f"{key}={value}"):
                why = "Label keys and values may hold lowercase letters, digits, '_' and '-'."
                raise invalid("resource.labels", f"{key}={value}", why)
        return name, machine_type

    def _instance(
        self,
        zone: str,
        name: str,
        machine_type: str,
        body: Mapping[str, Any],
        scheduling: dict[str, Any],
    ) -> dict[str, Any]:
        link = f"{self.url}/zones/{zone}/instances/{name}"
        address = f"10.128.{len(self.instances) // 250}.{len(self.instances) % 250 + 2}"
        nics = [
            {"network": f"{self.url}/global/networks/default", **nic, "name": f"nic{i}"}
            | {"networkIP": address, "stackType": "IPV4_ONLY", "fingerprint": _FINGERPRINT}
            for i, nic in enumerate(body.get("networkInterfaces") or [{}])
        ]
        accounts = [
            {**a, "email": SERVICE_ACCOUNT if a.get("email") in (None, "default") else a["email"]}
            for a in body.get("serviceAccounts") or ()
        ]
        return {
            **body,
            "kind": "compute#instance",
            "id": str(next(self._ids)),
            "zone": f"{self.url}/zones/{zone}",
            "machineType": f"{self.url}/zones/{zone}/machineTypes/{machine_type}",
            "status": "PROVISIONING" if self.operation_delay > 0 else "RUNNING",
            "creationTimestamp": timestamp(),
            "selfLink": link,
            "labels": dict(body.get("labels") or {}),
            "labelFingerprint": _FINGERPRINT,
            "scheduling": scheduling,
            "networkInterfaces": nics,
            "serviceAccounts": accounts,
            "metadata": {"kind": "compute#metadata", **(body.get("metadata") or {})},
            "tags": {"fingerprint": _FINGERPRINT, **(body.get("tags") or {})},
            "disks": [self._disk(zone, name, link, i, d) for i, d in enumerate(body["disks"])]
            if body.get("disks")
            else [],
            "cpuPlatform": "Intel Cascade Lake",
            "fingerprint": _FINGERPRINT,
        }

    def _disk(
        self, zone: str, instance: str, user: str, index: int, disk: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Create the disk ``disk`` asks for (or take its ``source``); the attached disk."""
        params = disk.get("initializeParams") or {}
        name = params.get("diskName") or (instance if index == 0 else f"{instance}-{index}")
        link = disk.get("source") or f"{self.url}/zones/{zone}/disks/{name}"
        size = str(params.get("diskSizeGb") or 100)
        if not disk.get("source"):
            kind = str(params.get("diskType") or "pd-standard").rsplit("/", 1)[-1]
            self.disks[(zone, name)] = {
                "kind": "compute#disk",
                "id": str(next(self._ids)),
                "name": name,
                "zone": f"{self.url}/zones/{zone}",
                "sizeGb": size,
                "status": "READY",
                "type": f"{self.url}/zones/{zone}/diskTypes/{kind}",
                "sourceImage": params.get("sourceImage", ""),
                "labels": dict(params.get("labels") or {}),
                "users": [user],
                "selfLink": link,
            }
        attached = {"type": "PERSISTENT", "deviceName": f"persistent-disk-{index}", **disk}
        attached.pop("initializeParams", None)
        return attached | {
            "kind": "compute#attachedDisk",
            "source": link,
            "index": index,
            "mode": "READ_WRITE",
            "boot": bool(disk.get("boot")),
            "autoDelete": bool(disk.get("autoDelete", False)),
            "interface": "SCSI",
            "diskSizeGb": size,
        }

    def delete(self, zone: str, name: str) -> dict[str, Any]:
        """Start deleting an instance (with the disks it auto-deletes); its zone operation."""
        instance = self.instance(zone, name)
        instance["status"] = "STOPPING"
        return self._start(zone, "delete", instance, lambda: self._remove(zone, name))

    def _remove(self, zone: str, name: str) -> None:
        self._drop_disks(zone, self.instances.pop((zone, name), {}))

    def _drop_disks(self, zone: str, instance: Mapping[str, Any], every: bool = False) -> None:
        """Delete the disks ``instance`` auto-deletes (``every``: all it created)."""
        for disk in instance.get("disks") or ():
            if every or disk.get("autoDelete"):
                self.disks.pop((zone, disk["source"].rsplit("/", 1)[-1]), None)

    def preempt(self, name: str) -> dict[str, Any]:
        """Preempt the instance ``name`` (in any zone): a DONE ``compute.instances.preempted``
        operation; the instance is deleted when its termination action is DELETE, else
        TERMINATED."""
        self.advance()
        key = next((k for k in self.instances if k[1] == name), None)
        if key is None:
            raise not_found(f"projects/{self.project}/zones/-/instances/{name}")
        instance = self.instances[key]
        op = self._start(key[0], "compute.instances.preempted", instance, delay=0)
        update = {"user": "system", "statusMessage": "Instance was preempted."}
        self.operations[(key[0], op["name"])].body.update(update)
        if instance["scheduling"].get("instanceTerminationAction") == "DELETE":
            self._remove(*key)
        else:
            instance["status"] = "TERMINATED"
        return {**op, **update}
