"""The Google Cloud clients the provider uses, built once per process (or handed in by the
caller): google-cloud-compute's REST clients, google-cloud-billing's Cloud Catalog client (REST)
and an authorized session for GKE's node pool read.

Credentials are google-auth's application default credentials (Workload Identity on GKE). An
``endpoint`` sends every call there instead of Google's APIs (the fake GCE server in tests,
with anonymous credentials unless others are given).
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
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
CONTAINER_API = "https://container.googleapis.com"
_TIMEOUT = 30.0


class GCPClients:
    """The Compute, Cloud Billing and GKE clients of ``project``, each created on first use;
    given clients are used as they are."""

    def __init__(
        self,
        project: str,
        *,
        endpoint: str | None = None,
        credentials: Any = None,
        given: Mapping[str, Any] | None = None,
    ) -> None:
        self.project = project
        self.endpoint = endpoint
        if credentials is not None:
            given = {"credentials": credentials, **(given or {})}
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
        the application default credentials."""
        return cls(project, endpoint=endpoint, credentials=credentials, given=given)

    @property
    def credentials(self) -> Any:
        """The google-auth credentials every client uses."""
        return self._clients.get("credentials")

    @property
    def instances(self) -> Any:
        """``compute_v1.InstancesClient``."""
        return self._clients.get("instances")

    @property
    def zone_operations(self) -> Any:
        """``compute_v1.ZoneOperationsClient``."""
        return self._clients.get("zone_operations")

    @property
    def machine_types(self) -> Any:
        """``compute_v1.MachineTypesClient``."""
        return self._clients.get("machine_types")

    @property
    def zones(self) -> Any:
        """``compute_v1.ZonesClient``."""
        return self._clients.get("zones")

    @property
    def images(self) -> Any:
        """``compute_v1.ImagesClient``."""
        return self._clients.get("images")

    @property
    def subnetworks(self) -> Any:
        """``compute_v1.SubnetworksClient``."""
        return self._clients.get("subnetworks")

    @property
    def instance_templates(self) -> Any:
        """``compute_v1.InstanceTemplatesClient``."""
        return self._clients.get("instance_templates")

    @property
    def billing(self) -> Any:
        """``billing_v1.CloudCatalogClient`` (REST transport)."""
        return self._clients.get("billing")

    def node_pool(self, location: str, cluster: str, name: str) -> dict[str, Any]:
        """GKE's node pool ``name`` of ``cluster`` in ``location`` (container v1 NodePool
        JSON); ``google.api_core.exceptions.GoogleAPICallError`` when it cannot be read."""
        from google.api_core import exceptions

        base = self.endpoint or CONTAINER_API
        url = (
            f"{base.rstrip('/')}/v1/projects/{self.project}/locations/{location}"
            f"/clusters/{cluster}/nodePools/{name}"
        )
        response = self._clients.get("session").get(url, timeout=_TIMEOUT)
        if response.status_code >= 400:
            raise exceptions.from_http_response(response)
        pool: dict[str, Any] = response.json()
        return pool

    def _build(self, name: str) -> Any:
        """The credentials, or the client ``name`` (it takes the credentials)."""
        if name == "credentials":
            import google.auth
            from google.auth.credentials import AnonymousCredentials

            if self.endpoint:
                return AnonymousCredentials()
            credentials, _ = google.auth.default(scopes=list(SCOPES))
            return credentials
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
