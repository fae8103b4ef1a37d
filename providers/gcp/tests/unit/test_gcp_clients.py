"""GCPClients: the Compute and Billing clients aimed at an endpoint with anonymous credentials,
handed-in clients used as they are, and GKE's node pool read's errors."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials

from karpenter_core.sdk.settings import OptionError
from karpenter_gcp.clients import COMPUTE, GCPClients

ENDPOINT = "http://127.0.0.1:9"


def test_an_endpoint_gets_anonymous_credentials_and_every_client_uses_it() -> None:
    clients = GCPClients.create("p", endpoint=ENDPOINT)
    assert isinstance(clients.credentials, AnonymousCredentials)
    for name in COMPUTE:
        client = getattr(clients, name)
        assert type(client).__name__ == COMPUTE[name]
        assert client._transport._host == ENDPOINT
    assert clients.billing._transport._host == ENDPOINT
    assert clients.instances is clients.instances  # built once


def test_without_an_endpoint_google_apis_and_the_default_credentials_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = AnonymousCredentials()
    asked: list[Any] = []

    def default(scopes: list[str]) -> tuple[Any, str]:
        asked.append(scopes)
        return found, "p"

    monkeypatch.setattr("google.auth.default", default)
    clients = GCPClients.create("p")
    assert clients.instances._transport._host == "https://compute.googleapis.com"
    assert clients.credentials is found
    assert asked == [["https://www.googleapis.com/auth/cloud-platform"]]


def test_given_credentials_and_clients_are_used_as_they_are() -> None:
    credentials, instances = AnonymousCredentials(), object()
    clients = GCPClients.create(
        "p", endpoint=ENDPOINT, credentials=credentials, given={"instances": instances}
    )
    assert clients.credentials is credentials
    assert clients.instances is instances


def test_an_unknown_client_name_is_refused() -> None:
    with pytest.raises(OptionError, match="unknown GCP clients"):
        GCPClients.create("p", given={"dns": object()})


class _Request:
    method = "GET"
    url = "http://fake/v1/..."


class _Response:
    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        self.status_code = status
        self._payload = payload
        self.request = _Request()
        self.text = ""

    def json(self) -> dict[str, Any]:
        return self._payload


class _Session:
    def __init__(self, response: _Response) -> None:
        self.response = response
        self.urls: list[str] = []

    def get(self, url: str, timeout: float) -> _Response:
        self.urls.append(url)
        return self.response


def test_node_pool_reads_gke_and_raises_google_errors() -> None:
    session = _Session(_Response(200, {"name": "default-pool"}))
    clients = GCPClients.create("p", given={"session": session})
    assert clients.node_pool("us-central1", "c", "default-pool") == {"name": "default-pool"}
    assert session.urls == [
        "https://container.googleapis.com/v1/projects/p/locations/us-central1/clusters/c"
        "/nodePools/default-pool"
    ]
    session.response = _Response(404, {"error": {"code": 404, "message": "Not found: pool."}})
    with pytest.raises(exceptions.NotFound, match="Not found: pool"):
        clients.node_pool("us-central1", "c", "missing")
