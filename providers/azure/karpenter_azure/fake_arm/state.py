"""The fake ARM server's resources, operations and lists, independent of requests and HTTP.

``ArmStore`` holds what one fake ARM endpoint knows: VMs, NICs, disks, subnets, image versions,
asynchronous operations, faults, the Resource SKUs and the Retail Prices list. The resource
handlers (``compute``, ``network``, ``galleries``) read and change it; ``arm.ArmState`` adds the
request routing on top, so imports run one way: ``arm`` -> handlers -> ``state``.
"""

from __future__ import annotations

import copy
import ipaddress
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from karpenter_azure.fake_arm import odata, seed
from karpenter_azure.fake_arm.common import (
    COMPUTE,
    NETWORK,
    Answer,
    ArmError,
    bad,
    location_name,
    now,
)
from karpenter_azure.fake_arm.faults import CapacityFault, RequestFault

PRICE_ALIASES = {"priceType": "type"}
"""The Retail Prices API filters ``priceType`` on its items' ``type``."""


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


RESERVED_ADDRESSES = 4
"""Azure keeps the first four addresses of every subnet (network, gateway, two for DNS)."""


@dataclass(slots=True)
class Subnet:
    """A subnet of the fake VNet and the private addresses handed out in it."""

    id: str
    name: str
    location: str
    prefix: str
    next_host: int = RESERVED_ADDRESSES
    nic_ip_configs: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ImageVersion:
    """One version of an AKS node image definition."""

    name: str
    published: str
    exclude_from_latest: bool = False


class ArmStore:
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
        self.creating: dict[str, Operation] = {}
        """Running VM creates by the VM's lower-cased id (a delete cancels them)."""
        self.capacity_faults: list[CapacityFault] = []
        self.request_faults: list[RequestFault] = []
        self._sku_index = {
            (location_name(sku["locations"][0]), str(sku["name"]).lower()): sku
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
            self.subnets[subnet_id.lower()] = Subnet(
                subnet_id, name, location_name(location), prefix
            )
        return subnet_id

    def publish_image(
        self, gallery: str, definition: str, version: str, published: str | None = None
    ) -> None:
        """Add a version of an image definition of a community gallery (also served through
        the gallery's shared image gallery name, see ``seed.GALLERIES``)."""
        with self.lock:
            versions = self.images.setdefault((gallery.lower(), definition.lower()), [])
            versions[:] = [v for v in versions if v.name != version]
            versions.append(ImageVersion(version, published or now()))

    def withdraw_image(self, gallery: str, definition: str, version: str | None = None) -> None:
        """Remove ``version`` of an image definition, or all its versions when None: the
        definition stays and lists no versions, as once its publisher removed them all."""
        with self.lock:
            versions = self.images.get((gallery.lower(), definition.lower()))
            if versions is not None:
                versions[:] = [v for v in versions if version is not None and v.name != version]

    def clear(self) -> None:
        """Drop VMs, NICs, disks, operations and faults (the seeded data stays)."""
        with self.lock:
            self.vms.clear()
            self.nics.clear()
            self.disks.clear()
            self.operations.clear()
            self.creating.clear()
            self.capacity_faults.clear()
            self.request_faults.clear()
            for subnet in self.subnets.values():
                subnet.nic_ip_configs.clear()
                subnet.next_host = RESERVED_ADDRESSES

    def _advance(self) -> None:
        """Complete every operation whose time has come."""
        moment = time.monotonic()
        for operation in self.operations.values():
            if operation.status == "InProgress" and operation.done_at <= moment:
                operation.complete()
                operation.status = "Failed" if operation.error else "Succeeded"
                operation.ended_at = now()

    def advance(self) -> None:
        """Complete the operations whose time has come (tests reading the state call this)."""
        with self.lock:
            self._advance()

    def start_operation(
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
            started_at=now(),
            complete=complete,
            error=error,
        )
        self.operations[operation.id] = operation
        if resource:
            self.creating[resource] = operation
        url = (
            f"{self.base_url}/subscriptions/{self.subscription_id}/providers/{namespace}/"
            f"locations/{location}/operations/{operation.id}?api-version="
        )
        url += "2026-04-01" if namespace == COMPUTE else "2026-03-01"
        return {"Azure-AsyncOperation": url, "Retry-After": str(math.ceil(delay))}

    def operation_status(self, namespace: str, operation_id: str) -> Answer:
        """An operation's status resource, with Retry-After while it runs."""
        operation = self.operations.get(operation_id)
        if operation is None or operation.namespace.lower() != namespace.lower():
            raise ArmError(404, "NotFound", f"The operation '{operation_id}' was not found.")
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

    def page(self, items: Sequence[Any], path: str, params: Mapping[str, str]) -> dict[str, Any]:
        """One page of an ARM list (``value``, and ``nextLink`` while more remain)."""
        try:
            start = int(params.get("$skiptoken") or 0)
        except ValueError:
            raise bad("InvalidParameter", "The $skiptoken is not valid.") from None
        page: dict[str, Any] = {"value": list(items[start : start + self.page_size])}
        if start + self.page_size < len(items):
            rest = _query(params, "$skiptoken")
            page["nextLink"] = f"{self.base_url}{path}?{rest}&$skiptoken={start + self.page_size}"
        return page

    # -- resource SKUs and prices ----------------------------------------------------------

    def list_skus(self, params: Mapping[str, str]) -> Answer:
        """The Resource SKUs list (``$filter=location eq '...'``)."""
        try:
            wanted = odata.parse(params.get("$filter", ""))
        except odata.FilterError as error:
            raise bad("InvalidFilter", str(error)) from None
        skus = [sku for sku in self.skus if wanted({"location": sku["locations"][0]})]
        path = f"/subscriptions/{self.subscription_id}/providers/{COMPUTE}/skus"
        return 200, self.page(skus, path, params), {}

    def list_prices(self, params: Mapping[str, str]) -> Answer:
        """A page of the Retail Prices list (``$filter``, ``$skip``, ``NextPageLink``)."""
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
        return self._sku_index.get((location_name(location), name.lower()))


def _query(params: Mapping[str, str], without: str) -> str:
    """A query string of ``params`` but ``without``, encoded as ARM encodes its next links."""
    return urlencode({k: v for k, v in params.items() if k != without}, quote_via=quote, safe="$")
