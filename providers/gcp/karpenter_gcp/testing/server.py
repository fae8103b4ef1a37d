"""The fake GCE server: the Compute v1 REST paths the provider calls, GKE's node pool read
(container v1) and the Cloud Billing Catalog (billing v1), over plain HTTP on 127.0.0.1, so
that google-cloud-compute and google-cloud-billing run against it unmodified."""

from __future__ import annotations

import copy
import functools
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from karpenter_core.sdk.fakehttp import (
    Answer,
    RequestLog,
    RequestRecord,
    ServedFake,
    json_handler,
)
from karpenter_core.sdk.record import option_env
from karpenter_core.sdk.testing import LoopbackServer
from karpenter_gcp.pricing import COMPUTE_SERVICE
from karpenter_gcp.settings import PROVIDER
from karpenter_gcp.testing import billing, fixtures, listing, seed
from karpenter_gcp.testing.faults import Faults, google_error
from karpenter_gcp.testing.state import GCEError, GCEState

Route = Callable[[dict[str, str], dict[str, str], Any], Any]
"""A route's answer from the path's named parts, the query and the JSON body; None: 404."""
_seed_machine_types = functools.cache(seed.machine_types)
_seed_skus = functools.cache(billing.skus)


def _pattern(key: str) -> tuple[str, re.Pattern[str]]:
    """The method and path pattern of a route's key (see ``FakeGCE._table``)."""
    method, path = key.split(" ", 1)
    path = re.sub(r"^C/", "/compute/v1/projects/{project}/", path)
    return method, re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path))


def _failure(error: Exception) -> dict[str, Any]:
    """The answer to a request the fake failed on (a bug in it)."""
    return google_error(500, "backendError", f"The fake GCE server failed: {error!r}")


def _machine_type(url: str, zone: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A MachineType row as the API answers it (``url``: the project's)."""
    return {
        "kind": "compute#machineType",
        "id": fixtures.resource_id(row["name"]),
        **row,
        "zone": zone,
        "selfLink": f"{url}/zones/{zone}/machineTypes/{row['name']}",
    }


class FakeGCE(ServedFake):
    """A fake Compute Engine (with GKE's node pools and the Billing Catalog) for ``project``
    and ``region``; a context manager. ``machine_types``: MachineType JSON by zone (default:
    ``testing.seed``'s, from the packaged catalog); ``skus``: Billing SKU JSON (default:
    ``testing.billing``'s); ``operation_delay``: seconds an insert or delete runs."""

    thread_name = "fake GCE"

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
        handler = json_handler(self.answer, _failure, name="fake GCE")
        self._server = LoopbackServer(("127.0.0.1", port), handler)
        url = self._url = f"{self.endpoint}/compute/v1"
        self.zones = fixtures.zones(project, region, url)
        rows = _seed_machine_types(region) if machine_types is None else machine_types
        types = {
            zone: {
                r["name"]: _machine_type(f"{url}/projects/{project}", zone, r)
                for r in rows.get(zone, [])
            }
            for zone in self.zones
        }
        self.state = GCEState(project, region, url, types, operation_delay)
        self.skus = list(_seed_skus() if skus is None else skus)
        self.images = fixtures.images(url)
        self.subnetworks = fixtures.subnetworks(project, region, url)
        self.templates = fixtures.instance_templates(project, region, url)
        self.node_pools = fixtures.node_pools(project, region, url)
        self._routes = [(*_pattern(key), route) for key, route in self._table().items()]

    # -- lifecycle and use -----------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The server's base URL (``client_options={"api_endpoint": endpoint}``)."""
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def faults(self) -> Faults:
        """Fault injection: ``stockout``, ``quota``, ``throttle``, ``unavailable``, ``clear``."""
        return self.state.faults

    def env(self) -> dict[str, str]:
        """Environment for a provider process that talks to this server: its project, region,
        cluster, node pool and API endpoint settings (anonymous credentials follow)."""
        values = {
            "project-id": self.project,
            "region": self.region,
            "cluster-name": fixtures.CLUSTER,
            "node-pool": fixtures.NODE_POOL,
            "api-endpoint": self.endpoint,
        }
        return {option_env(PROVIDER, name): value for name, value in values.items()}

    def publish_node_images(self, version: str) -> None:
        """Publish the COS and Ubuntu node images of GKE or Kubernetes ``version``
        (``1.36.3-gke.1200000``, ``v1.36.3``), as GKE does for a new release."""
        with self.state.lock:
            for project, images in fixtures.images(self._url, (version,)).items():
                known = {i["name"] for i in self.images.setdefault(project, [])}
                self.images[project] += [i for i in images if i["name"] not in known]

    def reset(self) -> None:
        """Drop instances, disks, operations, faults and the request log (the seed stays)."""
        self.state.clear()
        self.faults.clear()
        self.requests.clear()

    def preempt(self, instance_name: str) -> dict[str, Any]:
        """Preempt an instance: a ``compute.instances.preempted`` zone operation (returned),
        and the instance deleted (termination action DELETE) or TERMINATED."""
        with self.state.lock:
            return self.state.preempt(instance_name)

    def instances(self) -> list[dict[str, Any]]:
        """Every instance (operations due are finished first)."""
        with self.state.lock:
            self.state.advance()
            return [copy.deepcopy(i) for _, i in sorted(self.state.instances.items())]

    def disks(self) -> list[dict[str, Any]]:
        """Every disk (a boot disk goes with its instance when it auto-deletes)."""
        with self.state.lock:
            self.state.advance()
            return [copy.deepcopy(d) for _, d in sorted(self.state.disks.items())]

    # -- serving ---------------------------------------------------------------------------

    def answer(
        self, method: str, path: str, query: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Answer, RequestRecord]:
        """Answer one request (the responder of the server's JSON handler)."""
        record = RequestRecord(method, path, query, time.monotonic())
        self.requests.add(record)
        failed = self.faults.request(method, path)
        if failed is not None:
            return (failed[0], failed[1], {}), record
        try:
            return (200, self._serve(method, path, query, raw), {}), record
        except GCEError as error:
            return (error.status, error.body, {}), record
        except ValueError as error:  # a body, filter or page size it cannot read
            return (400, google_error(400, "invalid", str(error)), {}), record

    def _serve(self, method: str, path: str, query: str, raw: bytes) -> Any:
        params = {key: values[-1] for key, values in parse_qs(query).items()}
        for verb, pattern, route in self._routes:
            match = pattern.fullmatch(path)
            if match is None or verb != method:
                continue
            parts, body = match.groupdict(), json.loads(raw) if raw else {}
            if path.endswith("/wait"):  # blocks, taking the state's lock only to look
                return route(parts, params, body)
            with self.state.lock:
                self._check_scope(path, parts)
                self.state.advance()
                found = route(parts, params, body)
                if found is None:
                    resource = path.removeprefix("/compute/v1/").removeprefix("/v1/")
                    raise GCEError(404, "notFound", f"The resource '{resource}' was not found")
                return copy.deepcopy(found)
        raise GCEError(404, "notFound", f"The requested URL {path} was not found on this server.")

    def _check_scope(self, path: str, parts: Mapping[str, str]) -> None:
        """403 for another project (images of any project are public), 404 for another zone."""
        project = parts.get("project")
        if project not in (None, self.project) and "/global/images" not in path:
            raise GCEError(403, "forbidden", f"Permission denied on 'projects/{project}'")
        if "zone" in parts and parts["zone"] not in self.zones:
            raise GCEError(
                404,
                "notFound",
                f"The resource 'projects/{project}/zones/{parts['zone']}' was not found",
            )

    def _table(self) -> dict[str, Route]:
        """The routes by ``"<METHOD> <path>"``: ``C/`` stands for ``/compute/v1/projects/
        {project}/``, ``{part}`` for one segment of the path."""
        st, types, images = self.state, self.state.machine_types, self.images
        listed, zone_of = listing.listed, listing.by_zone
        return {
            "GET C/zones": lambda m, q, b: listed(self.zones.values(), q),
            "GET C/zones/{zone}": lambda m, q, b: self.zones.get(m["zone"]),
            "GET C/aggregated/machineTypes": lambda m, q, b: listing.aggregated(
                "machineTypes", {z: list(t.values()) for z, t in types.items()}, q
            ),
            "GET C/zones/{zone}/machineTypes": lambda m, q, b: listed(types[m["zone"]].values(), q),
            "GET C/zones/{zone}/machineTypes/{name}": lambda m, q, b: types[m["zone"]].get(
                m["name"]
            ),
            "GET C/global/images": lambda m, q, b: listed(images.get(m["project"], []), q),
            "GET C/global/images/family/{name}": lambda m, q, b: self._family(m),
            "GET C/global/images/{name}": lambda m, q, b: next(
                (i for i in images.get(m["project"], []) if i["name"] == m["name"]), None
            ),
            "GET C/aggregated/instances": lambda m, q, b: listing.aggregated(
                "instances", zone_of(st.instances), q
            ),
            "GET C/zones/{zone}/instances": lambda m, q, b: listed(
                zone_of(st.instances).get(m["zone"], []), q
            ),
            "POST C/zones/{zone}/instances": lambda m, q, b: st.insert(
                m["zone"], b, q.get("requestId", "")
            ),
            "GET C/zones/{zone}/instances/{name}": lambda m, q, b: st.instance(
                m["zone"], m["name"]
            ),
            "DELETE C/zones/{zone}/instances/{name}": lambda m, q, b: st.delete(
                m["zone"], m["name"]
            ),
            "GET C/zones/{zone}/disks/{name}": lambda m, q, b: st.disks.get((m["zone"], m["name"])),
            "GET C/zones/{zone}/operations": lambda m, q, b: listed(
                [o.body for (z, _), o in st.operations.items() if z == m["zone"]], q
            ),
            "GET C/zones/{zone}/operations/{name}": lambda m, q, b: st.operation(
                m["zone"], m["name"]
            ),
            "POST C/zones/{zone}/operations/{name}/wait": lambda m, q, b: st.wait(
                m["zone"], m["name"]
            ),
            "GET C/regions/{region}/subnetworks/{name}": lambda m, q, b: (
                self.subnetworks.get(m["name"]) if m["region"] == self.region else None
            ),
            "GET C/global/instanceTemplates": lambda m, q, b: listed(self.templates.values(), q),
            "GET C/global/instanceTemplates/{name}": lambda m, q, b: self.templates.get(m["name"]),
            "GET /v1/projects/{project}/locations/{location}/clusters/{cluster}/nodePools/{name}": (
                lambda m, q, b: self.node_pools.get((m["location"], m["cluster"], m["name"]))
            ),
            "GET /v1/services": lambda m, q, b: {"services": [_COMPUTE], "nextPageToken": ""},
            "GET /v1/services/{service}/skus": lambda m, q, b: self._skus(m, q),
        }

    # -- answers ---------------------------------------------------------------------------

    def _family(self, parts: Mapping[str, str]) -> Any:
        """The newest image of a family that is not deprecated."""
        live = [
            i
            for i in self.images.get(parts["project"], [])
            if i["family"] == parts["name"] and "deprecated" not in i
        ]
        return max(live, key=lambda i: str(i["creationTimestamp"]), default=None)

    def _skus(self, parts: Mapping[str, str], params: Mapping[str, str]) -> Any:
        skus = self.skus if f"services/{parts['service']}" == COMPUTE_SERVICE else []
        page, token = listing.page(skus, params, "pageSize")
        return {"skus": page, "nextPageToken": token}


_COMPUTE = {
    "name": COMPUTE_SERVICE,
    "serviceId": COMPUTE_SERVICE.removeprefix("services/"),
    "displayName": "Compute Engine",
    "businessEntityName": "businessEntities/GCP",
}
