"""The fake ARM server's state and its REST semantics, independent of HTTP.

``ArmState.handle(method, path, query, body)`` answers one ARM request with (status, body,
headers). Long-running operations follow ARM's Azure-AsyncOperation pattern: the PUT or DELETE
answers at once (201/202) with an ``Azure-AsyncOperation`` URL and ``Retry-After``; the
operation's status is ``InProgress`` until its latency has passed, then ``Succeeded`` or
``Failed`` with an ARM error. Operations complete lazily, when anything reads the state.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import ipaddress
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from karpenter_azure.fake_arm import odata, seed
from karpenter_azure.fake_arm.faults import (
    ASYNC_ERRORS,
    CapacityFault,
    RequestFault,
    arm_error,
    consume,
)

Answer = tuple[int, Any, dict[str, str]]

COMPUTE = "Microsoft.Compute"
NETWORK = "Microsoft.Network"
RESERVED_ADDRESSES = 4
"""Azure keeps the first four addresses of every subnet (network, gateway, two for DNS)."""
PRICE_ALIASES = {"priceType": "type"}


@dataclass(frozen=True, slots=True)
class Latency:
    """Seconds each long-running operation takes before it completes, and a delay added to
    every ARM answer (``request``). Whole seconds suit ARM's ``Retry-After``, which is one."""

    vm_create: float = 2.0
    vm_delete: float = 1.0
    nic_create: float = 0.0
    nic_delete: float = 0.0
    request: float = 0.0

    @classmethod
    def none(cls) -> Latency:
        """Every operation completes at its first poll (for unit tests)."""
        return cls(0.0, 0.0, 0.0, 0.0, 0.0)


class ArmError(Exception):
    """An ARM error answer."""

    def __init__(self, status: int, code: str, message: str, target: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.body = arm_error(code, message, target)


@dataclass(slots=True)
class Operation:
    """An asynchronous operation (Azure-AsyncOperation)."""

    id: str
    namespace: str
    location: str
    done_at: float
    started_at: str
    complete: Callable[[], None]
    error: dict[str, Any] | None = None
    status: str = "InProgress"
    ended_at: str | None = None


@dataclass(slots=True)
class ImageVersion:
    """One version of an AKS node image definition."""

    name: str
    published: str
    exclude_from_latest: bool = False


@dataclass(slots=True)
class Subnet:
    """A subnet of the fake VNet and the private addresses handed out in it."""

    id: str
    name: str
    location: str
    prefix: str
    next_host: int = RESERVED_ADDRESSES
    nic_ip_configs: list[str] = field(default_factory=list)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def _not_found(kind: str, name: str, group: str) -> ArmError:
    return ArmError(
        404,
        "ResourceNotFound",
        f"The Resource '{kind}/{name}' under resource group '{group}' was not found. "
        "For more details please go to https://aka.ms/ARMResourceNotFoundFix",
    )


def _bad(code: str, message: str, target: str | None = None) -> ArmError:
    return ArmError(400, code, message, target)


def _location(value: Any) -> str:
    return str(value or "").replace(" ", "").lower()


_SUB = r"/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourcegroups/(?P<rg>[^/]+)"
_ROUTES: list[tuple[str, str, str]] = [
    ("GET", _SUB + r"/providers/microsoft\.compute/skus", "list_skus"),
    ("GET", _RG + r"/providers/microsoft\.compute/virtualmachines/(?P<name>[^/]+)", "get_vm"),
    ("PUT", _RG + r"/providers/microsoft\.compute/virtualmachines/(?P<name>[^/]+)", "put_vm"),
    ("DELETE", _RG + r"/providers/microsoft\.compute/virtualmachines/(?P<name>[^/]+)", "delete_vm"),
    ("GET", _RG + r"/providers/microsoft\.compute/virtualmachines", "list_vms"),
    ("GET", _SUB + r"/providers/microsoft\.compute/virtualmachines", "list_all_vms"),
    ("GET", _RG + r"/providers/microsoft\.network/networkinterfaces/(?P<name>[^/]+)", "get_nic"),
    ("PUT", _RG + r"/providers/microsoft\.network/networkinterfaces/(?P<name>[^/]+)", "put_nic"),
    (
        "DELETE",
        _RG + r"/providers/microsoft\.network/networkinterfaces/(?P<name>[^/]+)",
        "delete_nic",
    ),
    ("GET", _RG + r"/providers/microsoft\.network/networkinterfaces", "list_nics"),
    ("GET", _SUB + r"/providers/microsoft\.network/networkinterfaces", "list_all_nics"),
    (
        "GET",
        _RG + r"/providers/microsoft\.network/virtualnetworks/(?P<vnet>[^/]+)"
        r"/subnets/(?P<name>[^/]+)",
        "get_subnet",
    ),
    (
        "GET",
        _SUB + r"/providers/microsoft\.compute/locations/(?P<location>[^/]+)"
        r"/communitygalleries/(?P<gallery>[^/]+)/images/(?P<image>[^/]+)/versions",
        "list_community_versions",
    ),
    (
        "GET",
        _SUB + r"/providers/microsoft\.compute/locations/(?P<location>[^/]+)"
        r"/communitygalleries/(?P<gallery>[^/]+)/images/(?P<image>[^/]+)"
        r"/versions/(?P<version>[^/]+)",
        "get_community_version",
    ),
    (
        "GET",
        _RG + r"/providers/microsoft\.compute/galleries/(?P<gallery>[^/]+)"
        r"/images/(?P<image>[^/]+)/versions",
        "list_gallery_versions",
    ),
    (
        "GET",
        _RG + r"/providers/microsoft\.compute/galleries/(?P<gallery>[^/]+)"
        r"/images/(?P<image>[^/]+)/versions/(?P<version>[^/]+)",
        "get_gallery_version",
    ),
    (
        "GET",
        _SUB + r"/providers/(?P<namespace>microsoft\.compute|microsoft\.network)"
        r"/locations/(?P<location>[^/]+)/operations/(?P<operation>[^/]+)",
        "get_operation",
    ),
    ("GET", r"/api/retail/prices", "list_prices"),
]
_COMPILED = [(m, re.compile(p + r"/?$", re.IGNORECASE), h) for m, p, h in _ROUTES]


def route(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    """The handler name and path parameters for ``method`` on ``path``, or None."""
    known_path = False
    for route_method, pattern, handler in _COMPILED:
        match = pattern.match(path)
        if match:
            known_path = True
            if route_method == method:
                return handler, match.groupdict()
    if known_path:
        return "method_not_allowed", {}
    return None


class ArmState:
    """Resources, operations and faults of one fake ARM endpoint (thread-safe).

    ``skus``: Resource SKUs records (one location each); ``prices``: Retail Prices items;
    ``latency``: operation times; ``resource_groups``: the groups that exist (others are
    ``ResourceGroupNotFound``); ``page_size``: items per page of ARM lists and of the price list.
    """

    def __init__(
        self,
        skus: Iterable[Mapping[str, Any]],
        prices: Iterable[Mapping[str, Any]],
        *,
        latency: Latency,
        subscription_id: str = seed.SUBSCRIPTION_ID,
        resource_groups: Iterable[str] = (seed.RESOURCE_GROUP, seed.NODE_RESOURCE_GROUP),
        page_size: int = 100,
    ) -> None:
        self.latency = latency
        self.subscription_id = subscription_id
        self.page_size = page_size
        self.base_url = ""
        """Where clients reach this state (set by the server; used in URLs it hands out)."""
        self.lock = threading.RLock()
        self.skus = [copy.deepcopy(dict(sku)) for sku in skus]
        self.prices = [dict(item) for item in prices]
        self.resource_groups = {group.lower(): group for group in resource_groups}
        self.vms: dict[str, dict[str, Any]] = {}
        self.nics: dict[str, dict[str, Any]] = {}
        self.disks: dict[str, dict[str, Any]] = {}
        self.subnets: dict[str, Subnet] = {}
        self.images: dict[tuple[str, str], list[ImageVersion]] = {}
        self.operations: dict[str, Operation] = {}
        self._creating: dict[str, Operation] = {}
        self.capacity_faults: list[CapacityFault] = []
        self.request_faults: list[RequestFault] = []
        self._sku_index = {
            (_location(sku["locations"][0]), str(sku["name"]).lower()): sku
            for sku in self.skus
            if sku.get("resourceType") == "virtualMachines" and sku.get("locations")
        }
        for name, prefix in seed.SUBNETS.items():
            self.add_subnet(seed.NODE_RESOURCE_GROUP, seed.VNET_NAME, name, prefix)
        for gallery, (_, _, definitions) in seed.GALLERIES.items():
            for definition in definitions:
                for version, published in seed.IMAGE_VERSIONS:
                    self.publish_image(gallery, definition, version, published)

    # -- seeding -------------------------------------------------------------------------

    def add_resource_group(self, name: str) -> None:
        """Make a resource group exist."""
        with self.lock:
            self.resource_groups[name.lower()] = name

    def add_subnet(
        self,
        resource_group: str,
        vnet: str,
        name: str,
        prefix: str,
        location: str = seed.LOCATION,
    ) -> str:
        """Create a subnet (and its resource group); returns its resource id."""
        ipaddress.ip_network(prefix)
        self.add_resource_group(resource_group)
        subnet_id = (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{resource_group}/providers/"
            f"{NETWORK}/virtualNetworks/{vnet}/subnets/{name}"
        )
        with self.lock:
            self.subnets[subnet_id.lower()] = Subnet(subnet_id, name, _location(location), prefix)
        return subnet_id

    def publish_image(
        self, gallery: str, definition: str, version: str, published: str | None = None
    ) -> None:
        """Add a version of an image definition of a community gallery (also served through
        the gallery's shared image gallery name, see ``seed.GALLERIES``)."""
        with self.lock:
            versions = self.images.setdefault((gallery.lower(), definition.lower()), [])
            versions[:] = [v for v in versions if v.name != version]
            versions.append(ImageVersion(version, published or _now()))

    def clear(self) -> None:
        """Drop VMs, NICs, disks, operations and faults (the seeded data stays)."""
        with self.lock:
            self.vms.clear()
            self.nics.clear()
            self.disks.clear()
            self.operations.clear()
            self._creating.clear()
            self.capacity_faults.clear()
            self.request_faults.clear()
            for subnet in self.subnets.values():
                subnet.nic_ip_configs.clear()
                subnet.next_host = RESERVED_ADDRESSES

    # -- request handling ----------------------------------------------------------------

    def handle(self, method: str, path: str, query: str, body: Any) -> Answer:
        """Answer one request (the path without query; the query string as sent)."""
        params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        found = route(method, path)
        if found is None:
            return 404, arm_error("NotFound", f"No route for {method} {path}."), {}
        handler, args = found
        try:
            if handler == "method_not_allowed":
                raise ArmError(405, "MethodNotAllowed", f"{method} is not allowed on {path}.")
            if handler != "list_prices" and "api-version" not in params:
                raise _bad(
                    "MissingApiVersionParameter",
                    "The api-version query parameter (?api-version=) is required for all requests.",
                )
            with self.lock:
                self._advance()
                self._check_scope(handler, args)
                answer: Answer = getattr(self, "_" + handler)(args, params, body)
            return answer
        except ArmError as error:
            return error.status, error.body, {}

    def _check_scope(self, handler: str, args: Mapping[str, str]) -> None:
        sub = args.get("sub")
        if sub is None:
            return
        gallery = handler in ("list_gallery_versions", "get_gallery_version")
        allowed = {self.subscription_id.lower()} | (
            {seed.SIG_SUBSCRIPTION_ID} if gallery else set()
        )
        if sub.lower() not in allowed:
            raise ArmError(
                404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found."
            )
        group = args.get("rg")
        if group is not None and not gallery and group.lower() not in self.resource_groups:
            raise ArmError(
                404, "ResourceGroupNotFound", f"Resource group '{group}' could not be found."
            )

    def _advance(self) -> None:
        """Complete every operation whose time has come."""
        now = time.monotonic()
        for operation in self.operations.values():
            if operation.status == "InProgress" and operation.done_at <= now:
                operation.complete()
                operation.status = "Failed" if operation.error else "Succeeded"
                operation.ended_at = _now()

    def advance(self) -> None:
        """Complete the operations whose time has come (tests reading the state call this)."""
        with self.lock:
            self._advance()

    def _start(
        self,
        namespace: str,
        location: str,
        delay: float,
        complete: Callable[[], None],
        error: dict[str, Any] | None = None,
        resource: str = "",
    ) -> dict[str, str]:
        """Start an operation; the headers that announce it. ``resource`` (a lower-cased id)
        names the resource it creates, so that deleting it meanwhile cancels the create."""
        operation = Operation(
            id=str(uuid.uuid4()),
            namespace=namespace,
            location=location,
            done_at=time.monotonic() + delay,
            started_at=_now(),
            complete=complete,
            error=error,
        )
        self.operations[operation.id] = operation
        if resource:
            self._creating[resource] = operation
        url = (
            f"{self.base_url}/subscriptions/{self.subscription_id}/providers/{namespace}/"
            f"locations/{location}/operations/{operation.id}?api-version="
        )
        url += "2026-04-01" if namespace == COMPUTE else "2026-03-01"
        return {"Azure-AsyncOperation": url, "Retry-After": str(math.ceil(delay))}

    def _get_operation(self, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
        operation = self.operations.get(args["operation"])
        if operation is None or operation.namespace.lower() != args["namespace"].lower():
            raise ArmError(404, "NotFound", f"The operation '{args['operation']}' was not found.")
        body: dict[str, Any] = {
            "name": operation.id,
            "status": operation.status,
            "startTime": operation.started_at,
        }
        headers = {}
        if operation.status == "InProgress":
            remaining = max(0.0, operation.done_at - time.monotonic())
            headers["Retry-After"] = str(math.ceil(remaining))
        else:
            body["endTime"] = operation.ended_at
        if operation.status in ("Failed", "Canceled") and operation.error:
            body["error"] = operation.error["error"]
        return 200, body, headers

    def _page(self, items: Sequence[Any], path: str, params: Mapping[str, str]) -> dict[str, Any]:
        """One page of an ARM list (``value``, and ``nextLink`` while more remain)."""
        try:
            start = int(params.get("$skiptoken") or 0)
        except ValueError:
            raise _bad("InvalidParameter", "The $skiptoken is not valid.") from None
        page: dict[str, Any] = {"value": list(items[start : start + self.page_size])}
        if start + self.page_size < len(items):
            rest = _query(params, "$skiptoken")
            page["nextLink"] = f"{self.base_url}{path}?{rest}&$skiptoken={start + self.page_size}"
        return page

    # -- resource SKUs and prices ----------------------------------------------------------

    def _list_skus(self, _: Mapping[str, str], params: Mapping[str, str], __: Any) -> Answer:
        try:
            wanted = odata.parse(params.get("$filter", ""))
        except odata.FilterError as error:
            raise _bad("InvalidFilter", str(error)) from None
        skus = [sku for sku in self.skus if wanted({"location": sku["locations"][0]})]
        path = f"/subscriptions/{self.subscription_id}/providers/{COMPUTE}/skus"
        return 200, self._page(skus, path, params), {}

    def _list_prices(self, _: Mapping[str, str], params: Mapping[str, str], __: Any) -> Answer:
        try:
            wanted = odata.parse(params.get("$filter", ""), PRICE_ALIASES)
        except odata.FilterError as error:
            return 400, {"Error": {"Code": "InvalidFilter", "Message": str(error)}}, {}
        items = [item for item in self.prices if wanted(item)]
        try:
            skip = int(params.get("$skip") or 0)
        except ValueError:
            return 400, {"Error": {"Code": "InvalidSkip", "Message": "$skip is not a number"}}, {}
        page = items[skip : skip + self.page_size]
        next_link = None
        if skip + self.page_size < len(items):
            rest = _query(params, "$skip")
            next_link = f"{self.base_url}/api/retail/prices?{rest}&$skip={skip + self.page_size}"
        body = {
            "BillingCurrency": "USD",
            "CustomerEntityId": "Default",
            "CustomerEntityType": "Retail",
            "Items": page,
            "NextPageLink": next_link,
            "Count": len(page),
        }
        return 200, body, {}

    def sku(self, location: str, name: str) -> dict[str, Any] | None:
        """The Resource SKUs record of size ``name`` in ``location``."""
        return self._sku_index.get((_location(location), name.lower()))

    # -- virtual machines ---------------------------------------------------------------

    def _vm_id(self, args: Mapping[str, str]) -> str:
        group = self.resource_groups[args["rg"].lower()]
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{group}/providers/"
            f"{COMPUTE}/virtualMachines/{args['name']}"
        )

    def _get_vm(self, args: Mapping[str, str], params: Mapping[str, str], _: Any) -> Answer:
        vm = self.vms.get(self._vm_id(args).lower())
        if vm is None:
            raise _not_found(f"{COMPUTE}/virtualMachines", args["name"], args["rg"])
        return 200, self._vm_view(vm, "instanceview" in params.get("$expand", "").lower()), {}

    def _vm_view(self, vm: Mapping[str, Any], instance_view: bool = False) -> dict[str, Any]:
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

    def _list_vms(self, args: Mapping[str, str], params: Mapping[str, str], _: Any) -> Answer:
        group = args["rg"].lower()
        prefix = f"/subscriptions/{self.subscription_id}/resourcegroups/{group}/".lower()
        vms = [self._vm_view(vm) for key, vm in sorted(self.vms.items()) if key.startswith(prefix)]
        path = (
            prefix.replace("resourcegroups", "resourceGroups")
            + f"providers/{COMPUTE}/virtualMachines"
        )
        return 200, self._page(vms, path, params), {}

    def _list_all_vms(self, _: Mapping[str, str], params: Mapping[str, str], __: Any) -> Answer:
        vms = [self._vm_view(vm) for _, vm in sorted(self.vms.items())]
        path = f"/subscriptions/{self.subscription_id}/providers/{COMPUTE}/virtualMachines"
        return 200, self._page(vms, path, params), {}

    def _put_vm(self, args: Mapping[str, str], _: Mapping[str, str], body: Any) -> Answer:
        vm_id = self._vm_id(args)
        if not isinstance(body, dict):
            raise _bad("InvalidRequestContent", "The request content was invalid: not an object.")
        existing = self.vms.get(vm_id.lower())
        if existing is not None:
            return self._update_vm(existing, body)
        location = _location(body.get("location"))
        if not location:
            raise _bad("LocationRequired", "The location property is required for this definition.")
        properties = body.get("properties") or {}
        size = str((properties.get("hardwareProfile") or {}).get("vmSize") or "")
        sku = self.sku(location, size)
        if sku is None:
            raise _bad(
                "InvalidParameter",
                f"The value {size or 'None'} provided for the VM size is not valid. The valid "
                f"sizes in the current region are listed by the Resource SKUs API.",
                "vmSize",
            )
        zones = [str(zone) for zone in body.get("zones") or []]
        if len(zones) > 1:
            raise _bad("InvalidParameter", "A virtual machine can be in one zone only.", "zones")
        zone = zones[0] if zones else None
        priority = str(properties.get("priority") or "Regular")
        if priority == "Low":
            priority = "Spot"
        if priority not in ("Spot", "Regular"):
            raise _bad("InvalidParameter", f"Priority '{priority}' is not valid.", "priority")
        self._check_available(sku, size, location, zone, priority)
        nics = self._attachable_nics(vm_id, location, properties)
        hyperv = self._check_image(sku, size, properties)
        self._check_os_profile(properties)
        _check_identity(body.get("identity"))
        fault = self._capacity_fault(size, zone, priority)
        family = str(sku.get("family") or "")
        cores = int(seed.sku_capability(sku, "vCPUs") or 0)
        error = fault.body(size, location, zone, family, cores) if fault else None
        if error is not None and fault is not None and fault.error not in ASYNC_ERRORS:
            raise ArmError(
                409, error["error"]["code"], error["error"]["message"], error["error"].get("target")
            )
        vm = self._new_vm(vm_id, args["name"], location, body, properties, priority, hyperv)
        self.vms[vm_id.lower()] = vm
        for nic in nics:
            nic["properties"]["virtualMachine"] = {"id": vm_id}
            nic["properties"]["macAddress"] = _mac(nic["id"])
        os_disk = vm["properties"]["storageProfile"]["osDisk"]
        self.disks[os_disk["managedDisk"]["id"].lower()] = {
            "id": os_disk["managedDisk"]["id"],
            "name": os_disk["name"],
            "location": location,
            "managedBy": vm_id,
            "diskSizeGB": os_disk.get("diskSizeGB"),
        }

        def complete() -> None:
            self._creating.pop(vm_id.lower(), None)
            current = self.vms.get(vm_id.lower())
            if current is None or current["properties"]["provisioningState"] != "Creating":
                return
            current["properties"]["provisioningState"] = "Failed" if error else "Succeeded"

        headers = self._start(
            COMPUTE, location, self.latency.vm_create, complete, error, resource=vm_id.lower()
        )
        return 201, self._vm_view(vm), headers

    def _update_vm(self, vm: dict[str, Any], body: Mapping[str, Any]) -> Answer:
        state = vm["properties"]["provisioningState"]
        if state in ("Creating", "Deleting", "Updating"):
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'PUT' is not allowed on VM '{vm['name']}' while it is {state.lower()}.",
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
        headers = self._start(COMPUTE, vm["location"], 0.0, lambda: None)
        return 200, self._vm_view(vm), headers

    def _check_available(
        self, sku: Mapping[str, Any], size: str, location: str, zone: str | None, priority: str
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

    def _capacity_fault(self, size: str, zone: str | None, priority: str) -> CapacityFault | None:
        for fault in self.capacity_faults:
            if fault.matches(size, zone, priority):
                if consume(fault):
                    self.capacity_faults.remove(fault)
                return fault
        return None

    def _attachable_nics(
        self, vm_id: str, location: str, properties: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        references = (properties.get("networkProfile") or {}).get("networkInterfaces") or []
        if not references:
            raise _bad(
                "InvalidParameter",
                "The virtual machine must have at least one network interface.",
                "networkProfile.networkInterfaces",
            )
        nics = []
        for reference in references:
            nic_id = str((reference or {}).get("id") or "")
            nic = self.nics.get(nic_id.lower())
            if nic is None:
                raise _bad(
                    "InvalidResourceReference",
                    f"Resource {nic_id} referenced by resource {vm_id} was not found. Please "
                    "make sure that the referenced resource exists, and that both resources "
                    "are in the same region.",
                )
            if nic["location"] != location:
                raise _bad(
                    "InvalidResourceReference",
                    f"Resource {nic_id} referenced by resource {vm_id} is in location "
                    f"'{nic['location']}', not '{location}'.",
                )
            attached = (nic["properties"].get("virtualMachine") or {}).get("id")
            if attached and attached.lower() != vm_id.lower():
                raise _bad(
                    "NicInUse",
                    f"Network Interface {nic_id} is used by existing resource {attached}.",
                )
            nics.append(nic)
        return nics

    def _check_image(self, sku: Mapping[str, Any], size: str, properties: Mapping[str, Any]) -> str:
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
        version = self._image_for(image_id)
        if version is None:
            raise ArmError(
                404, "GalleryImageNotFound", f"The gallery image {image_id} is not available."
            )
        definition = image_id.rstrip("/").split("/")[-3]
        architecture, generation = seed.image_definition_traits(definition)
        if (seed.sku_capability(sku, "CpuArchitectureType") or "x64") != architecture:
            raise _bad(
                "BadRequest",
                f"The selected VM size '{size}' cannot boot an image of architecture "
                f"'{architecture}'.",
            )
        if generation not in (seed.sku_capability(sku, "HyperVGenerations") or "V1"):
            raise _bad(
                "BadRequest",
                f"The selected VM size '{size}' cannot boot Hypervisor Generation "
                f"'{generation[1:]}'.",
            )
        return generation

    def _image_for(self, image_id: str) -> ImageVersion | None:
        """The image version an image reference names (community or shared image gallery)."""
        parts = image_id.strip("/").split("/")
        lowered = [p.lower() for p in parts]
        gallery = None
        if len(parts) == 6 and lowered[0] == "communitygalleries":
            gallery = parts[1]
        elif len(parts) >= 12 and lowered[6] == "galleries":
            gallery = self._community_name(parts[3], parts[7])
        if gallery is None or lowered[-2] != "versions" or lowered[-4] != "images":
            return None
        versions = self.images.get((gallery.lower(), parts[-3].lower())) or []
        return next((v for v in versions if v.name == parts[-1]), None)

    @staticmethod
    def _community_name(resource_group: str, gallery: str) -> str | None:
        for community, (group, name, _) in seed.GALLERIES.items():
            if group.lower() == resource_group.lower() and name.lower() == gallery.lower():
                return community
        return None

    @staticmethod
    def _check_os_profile(properties: Mapping[str, Any]) -> None:
        custom_data = (properties.get("osProfile") or {}).get("customData")
        if custom_data is None:
            return
        try:
            base64.b64decode(str(custom_data), validate=True)
        except (binascii.Error, ValueError):
            raise _bad(
                "InvalidParameter",
                "The value of parameter customData is invalid: it is not base64.",
                "customData",
            ) from None

    def _new_vm(
        self,
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
            f"/subscriptions/{self.subscription_id}/resourceGroups/{group}/providers/"
            f"{COMPUTE}/disks/{os_disk['name']}"
        )
        props["priority"] = priority
        props["provisioningState"] = "Creating"
        props["vmId"] = str(uuid.uuid4())
        props["timeCreated"] = _now()
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

    def _delete_vm(self, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
        vm_id = self._vm_id(args)
        vm = self.vms.get(vm_id.lower())
        if vm is None:
            return 204, None, {}
        creating = self._creating.pop(vm_id.lower(), None)
        if creating is not None and creating.status == "InProgress":
            creating.status, creating.ended_at = "Canceled", _now()
            creating.error = arm_error(
                "OperationPreempted",
                "Operation execution has been preempted by a more recent operation.",
            )
        vm["properties"]["provisioningState"] = "Deleting"

        def complete() -> None:
            gone = self.vms.pop(vm_id.lower(), None)
            if gone is None:
                return
            for reference in gone["properties"]["networkProfile"]["networkInterfaces"]:
                nic = self.nics.get(str(reference.get("id")).lower())
                if nic is None:
                    continue
                option = (reference.get("properties") or {}).get("deleteOption", "Detach")
                if option == "Delete":
                    self._remove_nic(nic)
                else:
                    nic["properties"].pop("virtualMachine", None)
            os_disk = gone["properties"]["storageProfile"]["osDisk"]
            disk_key = os_disk["managedDisk"]["id"].lower()
            if os_disk.get("deleteOption") == "Delete":
                self.disks.pop(disk_key, None)
            elif disk_key in self.disks:
                self.disks[disk_key]["managedBy"] = None

        headers = self._start(COMPUTE, vm["location"], self.latency.vm_delete, complete)
        return 202, None, headers

    # -- network interfaces and subnets --------------------------------------------------

    def _nic_id(self, args: Mapping[str, str]) -> str:
        group = self.resource_groups[args["rg"].lower()]
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{group}/providers/"
            f"{NETWORK}/networkInterfaces/{args['name']}"
        )

    def _get_nic(self, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
        nic = self.nics.get(self._nic_id(args).lower())
        if nic is None:
            raise _not_found(f"{NETWORK}/networkInterfaces", args["name"], args["rg"])
        return 200, copy.deepcopy(nic), {}

    def _list_nics(self, args: Mapping[str, str], params: Mapping[str, str], _: Any) -> Answer:
        prefix = f"/subscriptions/{self.subscription_id}/resourcegroups/{args['rg']}/".lower()
        nics = [copy.deepcopy(n) for key, n in sorted(self.nics.items()) if key.startswith(prefix)]
        path = (
            prefix.replace("resourcegroups", "resourceGroups")
            + f"providers/{NETWORK}/networkInterfaces"
        )
        return 200, self._page(nics, path, params), {}

    def _list_all_nics(self, _: Mapping[str, str], params: Mapping[str, str], __: Any) -> Answer:
        nics = [copy.deepcopy(n) for _, n in sorted(self.nics.items())]
        path = f"/subscriptions/{self.subscription_id}/providers/{NETWORK}/networkInterfaces"
        return 200, self._page(nics, path, params), {}

    def _put_nic(self, args: Mapping[str, str], _: Mapping[str, str], body: Any) -> Answer:
        nic_id = self._nic_id(args)
        if not isinstance(body, dict):
            raise _bad("InvalidRequestFormat", "Cannot parse the request: not an object.")
        location = _location(body.get("location"))
        if not location:
            raise _bad("LocationRequired", "The location property is required for this definition.")
        properties = body.get("properties") or {}
        configs = properties.get("ipConfigurations") or []
        if not configs:
            raise _bad(
                "NetworkInterfaceMustHaveAtLeastOneIpConfiguration",
                f"Network interface {nic_id} must have at least one IP configuration.",
            )
        existing = self.nics.get(nic_id.lower())
        status = 200 if existing else 201
        old_configs = {
            c["name"]: c for c in (existing or {}).get("properties", {}).get("ipConfigurations", [])
        }
        ip_configs = []
        for index, config in enumerate(configs):
            name = str(config.get("name") or f"ipconfig{index + 1}")
            config_props = config.get("properties") or {}
            subnet_id = str((config_props.get("subnet") or {}).get("id") or "")
            subnet = self.subnets.get(subnet_id.lower())
            if subnet is None:
                raise _bad(
                    "InvalidResourceReference",
                    f"Resource {subnet_id} referenced by resource {nic_id} was not found. Please "
                    "make sure that the referenced resource exists, and that both resources are "
                    "in the same region.",
                )
            if subnet.location != location:
                raise _bad(
                    "InvalidResourceReference",
                    f"Subnet {subnet_id} referenced by resource {nic_id} is in location "
                    f"'{subnet.location}', not '{location}'.",
                )
            old = old_configs.get(name)
            address = (
                old["properties"]["privateIPAddress"] if old else self._allocate(subnet, nic_id)
            )
            props = copy.deepcopy(dict(config_props))
            props.update(
                {
                    "provisioningState": "Succeeded",
                    "privateIPAddress": address,
                    "privateIPAllocationMethod": "Dynamic",
                    "privateIPAddressVersion": "IPv4",
                    "primary": bool(config_props.get("primary", index == 0)),
                    "subnet": {"id": subnet.id},
                }
            )
            ip_configs.append(
                {
                    "id": f"{nic_id}/ipConfigurations/{name}",
                    "name": name,
                    "type": f"{NETWORK}/networkInterfaces/ipConfigurations",
                    "properties": props,
                }
            )
        nic_props = copy.deepcopy(dict(properties))
        nic_props.update(
            {
                "provisioningState": "Succeeded",
                "resourceGuid": (existing or {}).get("properties", {}).get("resourceGuid")
                or str(uuid.uuid4()),
                "ipConfigurations": ip_configs,
                "enableAcceleratedNetworking": bool(properties.get("enableAcceleratedNetworking")),
                "enableIPForwarding": bool(properties.get("enableIPForwarding")),
                "nicType": "Standard",
                "dnsSettings": properties.get("dnsSettings") or {"dnsServers": []},
            }
        )
        if existing and existing["properties"].get("virtualMachine"):
            nic_props["virtualMachine"] = existing["properties"]["virtualMachine"]
            nic_props["macAddress"] = existing["properties"].get("macAddress")
        nic = {
            "id": nic_id,
            "name": args["name"],
            "type": f"{NETWORK}/networkInterfaces",
            "location": location,
            "etag": f'W/"{uuid.uuid4()}"',
            "tags": dict(body.get("tags") or {}),
            "properties": nic_props,
        }
        self.nics[nic_id.lower()] = nic
        headers = self._start(NETWORK, location, self.latency.nic_create, lambda: None)
        return status, copy.deepcopy(nic), headers

    def _allocate(self, subnet: Subnet, nic_id: str) -> str:
        network = ipaddress.ip_network(subnet.prefix)
        if subnet.next_host >= network.num_addresses - 1:
            raise _bad(
                "SubnetIsFull",
                f"Subnet {subnet.name} with address prefix {subnet.prefix} does not have enough "
                f"capacity for 1 IP address for {nic_id}.",
            )
        address = network.network_address + subnet.next_host
        subnet.next_host += 1
        subnet.nic_ip_configs.append(nic_id)
        return str(address)

    def _delete_nic(self, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
        nic_id = self._nic_id(args)
        nic = self.nics.get(nic_id.lower())
        if nic is None:
            return 204, None, {}
        attached = (nic["properties"].get("virtualMachine") or {}).get("id")
        if attached:
            raise _bad(
                "NicInUse",
                f"Network Interface {nic_id} is used by existing resource {attached}. In order "
                "to delete the network interface, it must be dissociated from the resource.",
            )
        nic["properties"]["provisioningState"] = "Deleting"
        headers = self._start(
            NETWORK, nic["location"], self.latency.nic_delete, lambda: self._remove_nic(nic)
        )
        return 202, None, headers

    def _remove_nic(self, nic: Mapping[str, Any]) -> None:
        self.nics.pop(str(nic["id"]).lower(), None)
        for config in nic["properties"]["ipConfigurations"]:
            subnet = self.subnets.get(config["properties"]["subnet"]["id"].lower())
            if subnet is not None and nic["id"] in subnet.nic_ip_configs:
                subnet.nic_ip_configs.remove(nic["id"])

    def _get_subnet(self, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
        group = self.resource_groups[args["rg"].lower()]
        subnet_id = (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{group}/providers/"
            f"{NETWORK}/virtualNetworks/{args['vnet']}/subnets/{args['name']}"
        )
        subnet = self.subnets.get(subnet_id.lower())
        if subnet is None:
            raise _not_found(
                f"{NETWORK}/virtualNetworks/{args['vnet']}/subnets", args["name"], args["rg"]
            )
        body = {
            "id": subnet.id,
            "name": subnet.name,
            "type": f"{NETWORK}/virtualNetworks/subnets",
            "etag": f'W/"{uuid.uuid5(uuid.NAMESPACE_URL, subnet.id)}"',
            "properties": {
                "provisioningState": "Succeeded",
                "addressPrefix": subnet.prefix,
                "ipConfigurations": [
                    {"id": f"{nic}/ipConfigurations/ipconfig1"} for nic in subnet.nic_ip_configs
                ],
                "privateEndpointNetworkPolicies": "Disabled",
                "privateLinkServiceNetworkPolicies": "Enabled",
            },
        }
        return 200, body, {}

    # -- node images -----------------------------------------------------------------------

    def _versions(self, gallery: str | None, image: str) -> list[ImageVersion]:
        versions = self.images.get(((gallery or "").lower(), image.lower()))
        if versions is None:
            raise ArmError(
                404,
                "GalleryImageNotFound",
                f"The gallery image '{image}' of gallery '{gallery}' is not found.",
            )
        return versions

    def _community_version(self, args: Mapping[str, str], version: ImageVersion) -> dict:
        gallery, image = args["gallery"], args["image"]
        return {
            "name": version.name,
            "location": _location(args["location"]),
            "type": "Microsoft.Compute/locations/communityGalleries/images/versions",
            "identifier": {
                "uniqueId": f"/CommunityGalleries/{gallery}/Images/{image}/Versions/{version.name}"
            },
            "properties": {
                "publishedDate": version.published,
                "excludeFromLatest": version.exclude_from_latest,
                "storageProfile": {"osDiskImage": {"diskSizeGB": 30, "hostCaching": "ReadOnly"}},
            },
        }

    def _list_community_versions(
        self, args: Mapping[str, str], params: Mapping[str, str], _: Any
    ) -> Answer:
        versions = self._versions(args["gallery"], args["image"])
        values = [self._community_version(args, v) for v in versions]
        path = (
            f"/subscriptions/{args['sub']}/providers/{COMPUTE}/locations/{args['location']}/"
            f"communityGalleries/{args['gallery']}/images/{args['image']}/versions"
        )
        return 200, self._page(values, path, params), {}

    def _get_community_version(
        self, args: Mapping[str, str], _: Mapping[str, str], __: Any
    ) -> Answer:
        versions = self._versions(args["gallery"], args["image"])
        version = next((v for v in versions if v.name == args["version"]), None)
        if version is None:
            raise ArmError(
                404,
                "GalleryImageVersionNotFound",
                f"The gallery image version '{args['version']}' is not found.",
            )
        return 200, self._community_version(args, version), {}

    def _gallery_version(self, args: Mapping[str, str], version: ImageVersion) -> dict:
        version_id = (
            f"/subscriptions/{args['sub']}/resourceGroups/{args['rg']}/providers/{COMPUTE}/"
            f"galleries/{args['gallery']}/images/{args['image']}/versions/{version.name}"
        )
        return {
            "id": version_id,
            "name": version.name,
            "type": "Microsoft.Compute/galleries/images/versions",
            "location": seed.LOCATION,
            "properties": {
                "provisioningState": "Succeeded",
                "publishingProfile": {
                    "publishedDate": version.published,
                    "excludeFromLatest": version.exclude_from_latest,
                    "targetRegions": [{"name": region} for region in seed.REGIONS],
                },
                "storageProfile": {"osDiskImage": {"sizeInGB": 30, "hostCaching": "ReadOnly"}},
            },
        }

    def _list_gallery_versions(
        self, args: Mapping[str, str], params: Mapping[str, str], _: Any
    ) -> Answer:
        gallery = self._community_name(args["rg"], args["gallery"])
        values = [self._gallery_version(args, v) for v in self._versions(gallery, args["image"])]
        path = (
            f"/subscriptions/{args['sub']}/resourceGroups/{args['rg']}/providers/{COMPUTE}/"
            f"galleries/{args['gallery']}/images/{args['image']}/versions"
        )
        return 200, self._page(values, path, params), {}

    def _get_gallery_version(
        self, args: Mapping[str, str], _: Mapping[str, str], __: Any
    ) -> Answer:
        gallery = self._community_name(args["rg"], args["gallery"])
        versions = self._versions(gallery, args["image"])
        version = next((v for v in versions if v.name == args["version"]), None)
        if version is None:
            raise ArmError(
                404,
                "GalleryImageVersionNotFound",
                f"The gallery image version '{args['version']}' is not found.",
            )
        return 200, self._gallery_version(args, version), {}


def _query(params: Mapping[str, str], without: str) -> str:
    """A query string of ``params`` but ``without``, encoded as ARM encodes its next links."""
    return urlencode({k: v for k, v in params.items() if k != without}, quote_via=quote, safe="$")


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
            raise _bad(
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
