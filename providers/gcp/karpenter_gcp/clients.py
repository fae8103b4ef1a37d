"""The Google Cloud clients the provider uses, built once per process (or handed in by the
caller): google-cloud-compute's REST clients, google-cloud-billing's Cloud Catalog client (REST)
and an authorized session for GKE's node pool read.

Credentials are google-auth's application default credentials (Workload Identity on GKE). An
``endpoint`` sends every call there instead of Google's APIs (the fake GCE server in tests),
with anonymous credentials unless others are given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpenter_core.sdk.clients import CloudClients

__all__ = ["CLIENTS", "COMPUTE", "GCPClients"]

COMPUTE = {
    "instances": "InstancesClient",
    "zone_operations": "ZoneOperationsClient",
    "machine_types": "MachineTypesClient",
    "zones": "ZonesClient",
    "images": "ImagesClient",
    "subnetworks": "SubnetworksClient",
    "instance_templates": "InstanceTemplatesClient",
}
"""The Compute v1 clients by name: the class of ``google.cloud.compute_v1`` each is."""
CLIENTS = ("credentials", *COMPUTE, "billing", "session")
"""Client names a caller may hand in through ``ProviderContext.clients``."""
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
CONTAINER_API = "https://container.googleapis.com"
_TIMEOUT = 30.0


class _Client:
    """A client of ``GCPClients`` by its attribute's name, built on first use."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, clients: GCPClients, owner: type | None = None) -> Any:
        return clients._clients.get(self.name)


class GCPClients:
    """The Compute, Cloud Billing and GKE clients of ``project``, each created on first use
    (given ones used as they are): ``credentials`` (google-auth), the ``compute_v1`` clients of
    ``COMPUTE`` and ``billing`` (``billing_v1.CloudCatalogClient``, REST)."""

    credentials = _Client()
    instances = _Client()
    zone_operations = _Client()
    machine_types = _Client()
    zones = _Client()
    images = _Client()
    subnetworks = _Client()
    instance_templates = _Client()
    billing = _Client()

    def __init__(self, project: str, endpoint: str | None, given: Mapping[str, Any]) -> None:
        self.project = project
        self.endpoint = endpoint
        self._clients = CloudClients("GCP", CLIENTS, given, self._build)

    @classmethod
    def create(
        cls,
        project: str,
        *,
        endpoint: str | None = None,
        credentials: Any = None,
        given: Mapping[str, Any] | None = None,
    ) -> GCPClients:
        """The clients of ``project``: against ``endpoint`` (a URL, ``http://`` allowed) with
        anonymous credentials unless ``credentials`` are given; else against Google's APIs with
        the application default credentials. ``given``: clients by name, used as they are."""
        extra = {} if credentials is None else {"credentials": credentials}
        return cls(project, endpoint, {**(given or {}), **extra})

    def node_pool(self, location: str, cluster: str, name: str) -> dict[str, Any]:
        """GKE's node pool ``name`` of ``cluster`` in ``location`` (container v1 NodePool
        JSON); ``google.api_core.exceptions.GoogleAPICallError`` when it cannot be read."""
        from google.api_core import exceptions

        base = (self.endpoint or CONTAINER_API).rstrip("/")
        path = f"projects/{self.project}/locations/{location}/clusters/{cluster}/nodePools/{name}"
        response = self._clients.get("session").get(f"{base}/v1/{path}", timeout=_TIMEOUT)
        if response.status_code >= 400:
            raise exceptions.from_http_response(response)
        pool: dict[str, Any] = response.json()
        return pool

    def _build(self, name: str) -> Any:
        """The credentials, the session or the client ``name`` (they take the credentials)."""
        if name == "credentials":
            import google.auth
            from google.auth.credentials import AnonymousCredentials

            if self.endpoint:
                return AnonymousCredentials()
            return google.auth.default(scopes=SCOPES)[0]
        if name == "session":
            from google.auth.transport.requests import AuthorizedSession

            return AuthorizedSession(self.credentials)
        options = {"api_endpoint": self.endpoint} if self.endpoint else None
        if name == "billing":
            from google.cloud import billing_v1

            return billing_v1.CloudCatalogClient(
                credentials=self.credentials, transport="rest", client_options=options
            )
        from google.cloud import compute_v1

        client_class = getattr(compute_v1, COMPUTE[name])
        return client_class(credentials=self.credentials, client_options=options)
