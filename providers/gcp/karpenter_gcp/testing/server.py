"""The fake GCE server: the Compute v1 REST paths the provider calls, GKE's node pool read
(container v1) and the Cloud Billing Catalog (billing v1), over plain HTTP on 127.0.0.1, so
that google-cloud-compute and google-cloud-billing run against it unmodified."""

from __future__ import annotations

import json
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from karpenter_core.sdk.fakehttp import Answer, RequestLog, RequestRecord, json_handler
from karpenter_core.sdk.testing import SHUTDOWN_POLL, LoopbackServer, serve_in_background
from karpenter_gcp.testing import fixtures, listing
from karpenter_gcp.testing.faults import Faults, google_error
from karpenter_gcp.testing.state import GCEError, GCEState, not_found

Route = Callable[..., Any]
_P = r"(?P<project>[^/]+)"
_Z = r"(?P<zone>[^/]+)"
_N = r"(?P<name>[^/]+)"


def _id(name: str) -> str:
    """A stable numeric id for a seeded resource."""
    return str(1_000_000_000_000 + zlib.crc32(name.encode()))


def _failure(error: Exception) -> dict[str, Any]:
    """The answer to a request the fake failed on (a bug in it)."""
    return google_error(500, "backendError", f"The fake GCE server failed: {error!r}")


def _seed(module: str, fallback: Callable[..., Any], *args: Any) -> Any:
    """The packaged catalog's seed (``karpenter_gcp.testing.<module>``) when it is there."""
    try:
        seed = __import__(f"karpenter_gcp.testing.{module}", fromlist=["_"])
    except ImportError:
        return fallback(*args)
    return getattr(seed, "machine_types" if module == "seed" else "skus")(*args)


class FakeGCE:
    """A fake Compute Engine (with GKE's node pools and the Billing Catalog) for ``project``
    and ``region``; a context manager. ``machine_types``: MachineType JSON per zone;
    ``skus``: Billing SKU JSON; ``operation_delay``: seconds an insert or delete runs."""

    def __init__(
        self,
        project: str = "test-project",
        region: str = "us-central1",
        *,
        machine_types: Mapping[str, list[dict[str, Any]]] | None = None,
        skus: list[dict[str, Any]] | None = None,
        operation_delay: float = 0.0,
        port: int = 0,
    ) -> None:
        self.project, self.region = project, region
        self.requests = RequestLog()
        """Every request served: method, path, query, status."""
        self._server = LoopbackServer(
            ("127.0.0.1", port),
            json_handler(self.answer, _failure, name="fake GCE"),
        )
        types = (
            machine_types
            if machine_types is not None
            else _seed("seed", fixtures.machine_types, region)
        )
        self.state = GCEState(project, region, self.endpoint, operation_delay, {})
        self.state.machine_types = {
            zone: [self._machine_type(zone, row) for row in rows] for zone, rows in types.items()
        }
        self.skus = list(skus) if skus is not None else _seed("billing", fixtures.skus)
        self.images = fixtures.images()
        self.subnetworks = {fixtures.SUBNETWORK: fixtures.subnetwork(project, region)}
        self.templates = {
            fixtures.TEMPLATE: fixtures.instance_template(project, region, self._compute)
        }
        self.node_pools = {
            (region, fixtures.CLUSTER, fixtures.NODE_POOL): fixtures.node_pool(
                project, region, self._compute
            )
        }
        self._thread: threading.Thread | None = None
        self._routes = self._route_table()

    # -- lifecycle and use -----------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The server's base URL (``client_options={"api_endpoint": endpoint}``)."""
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def _compute(self) -> str:
        return f"{self.endpoint}/compute/v1"

    @property
    def faults(self) -> Faults:
        """Fault injection: ``stockout``, ``quota``, ``throttle``, ``unavailable``, ``clear``."""
        return self.state.faults

    def start(self) -> FakeGCE:
        """Serve on a daemon thread; returns self."""
        if self._thread is None:
            self._thread = serve_in_background(self._server, "fake GCE")
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until ``stop`` from another thread."""
        self._server.serve_forever(poll_interval=SHUTDOWN_POLL)

    def stop(self) -> None:
        """Stop serving."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeGCE:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Drop instances, disks, operations, faults and the request log (the seed stays)."""
        self.state.clear()
        self.faults.clear()
        self.requests.clear()

    def preempt(self, instance_name: str) -> dict[str, Any]:
        """Preempt an instance: emits a ``compute.instances.preempted`` zone operation (returned)
        and deletes the instance (termination action DELETE) or stops it."""
        with self.state.lock:
            return self.state.preempt(instance_name)

    def instances(self) -> list[dict[str, Any]]:
        """Every instance, operations due finished first."""
        with self.state.lock:
            self.state.advance()
            return [json.loads(json.dumps(i)) for _, i in sorted(self.state.instances.items())]

    def disks(self) -> list[dict[str, Any]]:
        """Every disk (boot disks go with their auto-deleting instance)."""
        with self.state.lock:
            self.state.advance()
            return [dict(d) for _, d in sorted(self.state.disks.items())]

    # -- serving ---------------------------------------------------------------------------

    def answer(
        self, method: str, path: str, query: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Answer, RequestRecord]:
        """Answer one request (the handler's responder)."""
        record = RequestRecord(method, path, query, time.monotonic())
        self.requests.add(record)
        failed = self.faults.request(method, path)
        if failed is not None:
            return (failed[0], failed[1], {}), record
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        try:
            for verb, pattern, route in self._routes:
                match = pattern.fullmatch(path)
                if match and verb == method:
                    body = json.loads(raw) if raw else {}
                    if method == "POST" and path.endswith("/wait"):
                        return (200, self.state.wait(match["zone"], match["name"]), {}), record
                    with self.state.lock:
                        return (
                            200,
                            route(params=params, body=body, **match.groupdict()),
                            {},
                        ), record
            raise GCEError(
                404, "notFound", f"The requested URL {path} was not found on this server."
            )
        except GCEError as error:
            return (error.status, error.body, {}), record
        except (ValueError, KeyError) as error:
            return (400, google_error(400, "badRequest", f"Invalid request: {error}"), {}), record

    def _route_table(self) -> list[tuple[str, re.Pattern[str], Route]]:
        c = f"/compute/v1/projects/{_P}"
        routes: list[tuple[str, str, Route]] = [
            ("GET", f"{c}/zones", self._zones),
            ("GET", f"{c}/zones/{_Z}", self._zone),
            ("GET", f"{c}/aggregated/machineTypes", self._machine_types_aggregated),
            ("GET", f"{c}/zones/{_Z}/machineTypes", self._machine_types),
            ("GET", f"{c}/zones/{_Z}/machineTypes/{_N}", self._machine_type_get),
            ("GET", f"{c}/global/images", self._images),
            ("GET", f"{c}/global/images/family/{_N}", self._image_family),
            ("GET", f"{c}/global/images/{_N}", self._image),
            ("GET", f"{c}/aggregated/instances", self._instances_aggregated),
            ("GET", f"{c}/zones/{_Z}/instances", self._instances),
            ("POST", f"{c}/zones/{_Z}/instances", self._insert),
            ("GET", f"{c}/zones/{_Z}/instances/{_N}", self._instance),
            ("DELETE", f"{c}/zones/{_Z}/instances/{_N}", self._delete),
            ("GET", f"{c}/zones/{_Z}/disks/{_N}", self._disk),
            ("GET", f"{c}/zones/{_Z}/operations", self._operations),
            ("GET", f"{c}/zones/{_Z}/operations/{_N}", self._operation),
            ("POST", f"{c}/zones/{_Z}/operations/{_N}/wait", self._operation),
            ("GET", f"{c}/regions/(?P<region>[^/]+)/subnetworks/{_N}", self._subnetwork),
            ("GET", f"{c}/global/instanceTemplates", self._templates),
            ("GET", f"{c}/global/instanceTemplates/{_N}", self._template),
            (
                "GET",
                f"/v1/projects/{_P}/locations/(?P<location>[^/]+)/clusters/(?P<cluster>[^/]+)"
                f"/nodePools/{_N}",
                self._node_pool,
            ),
            ("GET", "/v1/services", self._services),
            ("GET", "/v1/services/(?P<service>[^/]+)/skus", self._skus),
        ]
        return [(verb, re.compile(pattern), route) for verb, pattern, route in routes]

    # -- compute resources -----------------------------------------------------------------

    def _own(self, project: str) -> None:
        if project != self.project:
            raise GCEError(
                403,
                "forbidden",
                f"Required 'compute.zones.list' permission for 'projects/{project}'",
            )

    def _list(
        self, kind: str, items: list[dict[str, Any]], params: dict[str, str], link: str
    ) -> dict[str, Any]:
        if params.get("filter"):
            items = [i for i in items if listing.matches(i, params["filter"])]
        page, token = listing.page(items, params)
        out: dict[str, Any] = {
            "kind": f"compute#{kind}",
            "id": link,
            "items": page,
            "selfLink": self.state.url(link),
        }
        return {**out, "nextPageToken": token} if token else out

    def _aggregated(
        self, kind: str, key: str, per_zone: dict[str, list[dict[str, Any]]], params: dict[str, str]
    ) -> dict[str, Any]:
        flat = [
            (zone, i)
            for zone, items in sorted(per_zone.items())
            for i in items
            if not params.get("filter") or listing.matches(i, params["filter"])
        ]
        page, token = listing.page(flat, params)
        grouped: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for zone, item in page:
            grouped.setdefault(f"zones/{zone}", {key: []})[key].append(item)
        out: dict[str, Any] = {"kind": f"compute#{kind}", "items": grouped, "unreachables": []}
        return {**out, "nextPageToken": token} if token else out

    def _zone_body(self, zone: str) -> dict[str, Any]:
        return {
            "kind": "compute#zone",
            "id": str(2000 + fixtures.zone_names(self.region).index(zone)),
            "name": zone,
            "status": "UP",
            "region": self.state.url(f"regions/{self.region}"),
            "selfLink": self.state.url(f"zones/{zone}"),
            "availableCpuPlatforms": ["Intel Cascade Lake", "AMD Milan", "Ampere Altra"],
            "supportsPzs": False,
        }

    def _zones(self, project: str, params: dict[str, str], **_: Any) -> dict[str, Any]:
        self._own(project)
        zones = [self._zone_body(z) for z in fixtures.zone_names(self.region)]
        return self._list("zoneList", zones, params, "zones")

    def _zone(self, project: str, zone: str, **_: Any) -> dict[str, Any]:
        self._own(project)
        if zone not in fixtures.zone_names(self.region):
            raise not_found(f"projects/{project}/zones/{zone}")
        return self._zone_body(zone)

    def _machine_type(self, zone: str, row: dict[str, Any]) -> dict[str, Any]:
        return {
            "kind": "compute#machineType",
            "id": _id(row["name"]),
            "description": f"{row.get('guestCpus')} vCPUs, {row.get('memoryMb', 0) / 1024:g} GB RAM",
            "maximumPersistentDisks": 128,
            "maximumPersistentDisksSizeGb": "263168",
            "isSharedCpu": False,
            **row,
            "zone": zone,
            "selfLink": self.state.url(f"zones/{zone}/machineTypes/{row['name']}"),
        }

    def _machine_types_aggregated(self, project: str, params: dict[str, str], **_: Any) -> Any:
        self._own(project)
        return self._aggregated(
            "machineTypeAggregatedList", "machineTypes", self.state.machine_types, params
        )

    def _machine_types(self, project: str, zone: str, params: dict[str, str], **_: Any) -> Any:
        self._zone(project, zone)
        return self._list(
            "machineTypeList",
            self.state.machine_types.get(zone, []),
            params,
            f"zones/{zone}/machineTypes",
        )

    def _machine_type_get(self, project: str, zone: str, name: str, **_: Any) -> Any:
        self._zone(project, zone)
        found = [t for t in self.state.machine_types.get(zone, []) if t["name"] == name]
        if not found:
            raise not_found(f"projects/{project}/zones/{zone}/machineTypes/{name}")
        return found[0]

    def _image_body(self, project: str, image: dict[str, Any]) -> dict[str, Any]:
        link = f"{self._compute}/projects/{project}/global/images/{image['name']}"
        return {
            "kind": "compute#image",
            "id": _id(image["name"]),
            "sourceType": "RAW",
            **image,
            "selfLink": link,
        }

    def _images(self, project: str, params: dict[str, str], **_: Any) -> Any:
        items = [self._image_body(project, i) for i in self.images.get(project, [])]
        return self._list("imageList", items, params, "global/images")

    def _image(self, project: str, name: str, **_: Any) -> Any:
        for image in self.images.get(project, []):
            if image["name"] == name:
                return self._image_body(project, image)
        raise not_found(f"projects/{project}/global/images/{name}")

    def _image_family(self, project: str, name: str, **_: Any) -> Any:
        live = [
            i
            for i in self.images.get(project, [])
            if i.get("family") == name and "deprecated" not in i
        ]
        if not live:
            raise not_found(f"projects/{project}/global/images/family/{name}")
        return self._image_body(project, max(live, key=lambda i: str(i["creationTimestamp"])))

    def _instances_aggregated(self, project: str, params: dict[str, str], **_: Any) -> Any:
        self._own(project)
        self.state.advance()
        per_zone: dict[str, list[dict[str, Any]]] = {}
        for (zone, _name), instance in sorted(self.state.instances.items()):
            per_zone.setdefault(zone, []).append(instance)
        return self._aggregated("instanceAggregatedList", "instances", per_zone, params)

    def _instances(self, project: str, zone: str, params: dict[str, str], **_: Any) -> Any:
        self._zone(project, zone)
        self.state.advance()
        items = [i for (z, _n), i in sorted(self.state.instances.items()) if z == zone]
        return self._list("instanceList", items, params, f"zones/{zone}/instances")

    def _insert(self, project: str, zone: str, params: dict[str, str], body: Any, **_: Any) -> Any:
        self._zone(project, zone)
        return self.state.insert(zone, body, params.get("requestId", ""))

    def _instance(self, project: str, zone: str, name: str, **_: Any) -> Any:
        self._zone(project, zone)
        return self.state.instance(zone, name)

    def _delete(self, project: str, zone: str, name: str, **_: Any) -> Any:
        self._zone(project, zone)
        return self.state.delete(zone, name)

    def _disk(self, project: str, zone: str, name: str, **_: Any) -> Any:
        self._zone(project, zone)
        self.state.advance()
        if (zone, name) not in self.state.disks:
            raise not_found(f"projects/{project}/zones/{zone}/disks/{name}")
        return self.state.disks[(zone, name)]

    def _operations(self, project: str, zone: str, params: dict[str, str], **_: Any) -> Any:
        self._zone(project, zone)
        self.state.advance()
        items = [dict(op.body) for (z, _n), op in self.state.operations.items() if z == zone]
        return self._list("operationList", items, params, f"zones/{zone}/operations")

    def _operation(self, project: str, zone: str, name: str, **_: Any) -> Any:
        self._zone(project, zone)
        return self.state.operation(zone, name)

    def _subnetwork(self, project: str, region: str, name: str, **_: Any) -> Any:
        self._own(project)
        subnet = self.subnetworks.get(name) if region == self.region else None
        if subnet is None:
            raise not_found(f"projects/{project}/regions/{region}/subnetworks/{name}")
        link = f"regions/{region}/subnetworks/{name}"
        return {
            "kind": "compute#subnetwork",
            "id": _id(name),
            **subnet,
            "region": self.state.url(f"regions/{region}"),
            "network": f"{self._compute}/{subnet['network']}",
            "selfLink": self.state.url(link),
        }

    def _template_body(self, template: dict[str, Any]) -> dict[str, Any]:
        link = self.state.url(f"global/instanceTemplates/{template['name']}")
        return {
            "id": _id(template["name"]),
            **template,
            "selfLink": link,
            "creationTimestamp": "2026-11-30T09:00:00.000-07:00",
        }

    def _templates(self, project: str, params: dict[str, str], **_: Any) -> Any:
        self._own(project)
        items = [self._template_body(t) for t in self.templates.values()]
        return self._list("instanceTemplateList", items, params, "global/instanceTemplates")

    def _template(self, project: str, name: str, **_: Any) -> Any:
        self._own(project)
        if name not in self.templates:
            raise not_found(f"projects/{project}/global/instanceTemplates/{name}")
        return self._template_body(self.templates[name])

    # -- GKE and Cloud Billing -------------------------------------------------------------

    def _node_pool(self, project: str, location: str, cluster: str, name: str, **_: Any) -> Any:
        self._own(project)
        pool = self.node_pools.get((location, cluster, name))
        if pool is None:
            raise GCEError(
                404,
                "notFound",
                f"Not found: projects/{project}/locations/"
                f"{location}/clusters/{cluster}/nodePools/{name}.",
            )
        return pool

    def _services(self, params: dict[str, str], **_: Any) -> Any:
        service = {
            "name": f"services/{fixtures.COMPUTE_SERVICE}",
            "serviceId": fixtures.COMPUTE_SERVICE,
            "displayName": "Compute Engine",
            "businessEntityName": "businessEntities/GCP",
        }
        return {"services": [service], "nextPageToken": ""}

    def _skus(self, service: str, params: dict[str, str], **_: Any) -> Any:
        skus = self.skus if service == fixtures.COMPUTE_SERVICE else []
        page, token = listing.page(skus, params, "pageSize")
        return {"skus": page, "nextPageToken": token}
