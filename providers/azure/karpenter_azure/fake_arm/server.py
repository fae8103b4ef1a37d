"""The fake ARM server: HTTPS on 127.0.0.1 with a test CA, Microsoft Entra ID's token and
OpenID discovery endpoints, the ARM resources of ``arm.ArmState``, the Retail Prices API, and an
admin API (``/fake-arm-api/...``) to inject faults and read what happened.

``FakeARM`` runs it on a thread of the calling process (a context manager, like moto's
``ThreadedMotoServer``); ``python -m karpenter_azure.fake_arm`` runs it as a process.
"""

from __future__ import annotations

import json
import re
import secrets
import ssl
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from karpenter_azure.fake_arm import compute, seed, tls
from karpenter_azure.fake_arm.arm import Answer, ArmState
from karpenter_azure.fake_arm.faults import (
    CapacityFault,
    FaultError,
    RequestFault,
    arm_error,
    consume,
)
from karpenter_azure.fake_arm.log import RequestLog, RequestRecord
from karpenter_azure.fake_arm.state import Latency
from karpenter_core.sdk.fakehttp import ServedFake, json_handler
from karpenter_core.sdk.testing import (
    TLSLoopbackServer,
    TLSRequestHandler,
)

if TYPE_CHECKING:
    from azure.identity import ClientSecretCredential
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.network import NetworkManagementClient


ADMIN_PREFIX = "/fake-arm-api"
TOKEN_LIFETIME = 3599
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
"""The client assertion type of a federated (workload identity) token request."""
_OIDC = re.compile(r"^/(?P<tenant>[^/]+)/v2\.0/\.well-known/openid-configuration$")
_TOKEN = re.compile(r"^/(?P<tenant>[^/]+)/oauth2/v2\.0/token$")
_POLL = re.compile(r"/operations/(?P<id>[^/?]+)$", re.IGNORECASE)


class FakeARM(ServedFake):
    """A fake Azure Resource Manager (and Entra ID token endpoint, and Retail Prices API).

    ``skus`` (Resource SKUs records) and ``prices`` (Retail Prices items) default to the
    built-in set of ``seed``; ``latency`` to ``Latency()`` (a VM create takes 2 s; use
    ``Latency.none()`` in unit tests). ``tls_dir`` receives the CA and the serving certificate
    (a temporary directory when None). ``port`` 0 picks a free port.
    """

    thread_name = "fake ARM"

    def __init__(
        self,
        *,
        skus: Iterable[Mapping[str, Any]] | None = None,
        prices: Iterable[Mapping[str, Any]] | None = None,
        latency: Latency | None = None,
        subscription_id: str = seed.SUBSCRIPTION_ID,
        tenant_id: str = seed.TENANT_ID,
        client_id: str = seed.CLIENT_ID,
        client_secret: str = seed.CLIENT_SECRET,
        resource_groups: Iterable[str] = (seed.RESOURCE_GROUP, seed.NODE_RESOURCE_GROUP),
        page_size: int = 100,
        port: int = 0,
        tls_dir: Path | None = None,
    ) -> None:
        self.subscription_id = subscription_id
        self.tenant_id = tenant_id
        self.client_id = client_id
        self.client_secret = client_secret
        self.state = ArmState(
            seed.builtin_skus() if skus is None else skus,
            seed.builtin_prices() if prices is None else prices,
            latency=latency or Latency(),
            subscription_id=subscription_id,
            resource_groups=resource_groups,
            page_size=page_size,
        )
        self.requests = RequestLog()
        """Every request to ARM, the token endpoint and the price list (not the admin API)."""
        self._tokens: set[str] = set()
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        if tls_dir is None:
            self._temp = tempfile.TemporaryDirectory(prefix="fake-arm-")
            tls_dir = Path(self._temp.name)
        self.tls = tls.generate(tls_dir)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.tls.cert, self.tls.key)
        handler = json_handler(
            self.answer,
            lambda error: arm_error("FakeFailure", f"The fake ARM server failed: {error!r}"),
            base=TLSRequestHandler,
            name="fake ARM",
            headers=lambda: {"x-ms-request-id": str(uuid.uuid4())},
        )
        self._server = TLSLoopbackServer(("127.0.0.1", port), handler, context)
        self.state.base_url = self.url

    # -- lifecycle -----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop serving and remove the temporary TLS directory."""
        super().stop()
        if self._temp is not None:
            self._temp.cleanup()
            self._temp = None

    # -- where and how to connect ---------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL of ARM, of the token authority and of the price list."""
        return f"https://127.0.0.1:{self._server.server_port}"

    @property
    def authority(self) -> str:
        """The authority host for azure-identity (``authority=`` or ``AZURE_AUTHORITY_HOST``)."""
        return f"127.0.0.1:{self._server.server_port}"

    @property
    def ca_file(self) -> str:
        """Path of the CA certificate clients must trust (``connection_verify=``)."""
        return str(self.tls.ca)

    @property
    def prices_url(self) -> str:
        """The Retail Prices API's address on this server."""
        return f"{self.url}/api/retail/prices"

    def credential(self) -> ClientSecretCredential:
        """azure-identity's ClientSecretCredential, unmodified, getting its tokens here."""
        from azure.identity import ClientSecretCredential

        return ClientSecretCredential(
            self.tenant_id,
            self.client_id,
            self.client_secret,
            authority=self.authority,
            disable_instance_discovery=True,
            connection_verify=self.ca_file,
        )

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments that point an azure-mgmt client here."""
        return {"base_url": self.url, "connection_verify": self.ca_file}

    def compute_client(self, **kwargs: Any) -> ComputeManagementClient:
        """An azure-mgmt-compute client for this server with this server's credential."""
        from azure.mgmt.compute import ComputeManagementClient

        return ComputeManagementClient(
            self.credential(), self.subscription_id, **self.client_kwargs(), **kwargs
        )

    def network_client(self, **kwargs: Any) -> NetworkManagementClient:
        """An azure-mgmt-network client for this server with this server's credential."""
        from azure.mgmt.network import NetworkManagementClient

        return NetworkManagementClient(
            self.credential(), self.subscription_id, **self.client_kwargs(), **kwargs
        )

    def env(self) -> dict[str, str]:
        """Environment for a provider process that talks to this server: the service
        principal azure-identity's environment credential reads, its authority host, and the
        provider's ARM endpoint, CA bundle and subscription settings."""
        return {
            "AZURE_TENANT_ID": self.tenant_id,
            "AZURE_CLIENT_ID": self.client_id,
            "AZURE_CLIENT_SECRET": self.client_secret,
            "AZURE_AUTHORITY_HOST": self.authority,
            "ARM_ENDPOINT_URL": self.url,
            "ARM_CA_BUNDLE": self.ca_file,
            "ARM_SUBSCRIPTION_ID": self.subscription_id,
        }

    def issue_token(self) -> str:
        """A bearer token ARM accepts, issued without the token endpoint."""
        token = "fake-arm." + secrets.token_urlsafe(24)
        with self.state.lock:
            self._tokens.add(token)
        return token

    # -- faults --------------------------------------------------------------------------

    def fail_creates(self, error: str, **match: Any) -> CapacityFault:
        """Fail VM creates with a capacity error (see ``CapacityFault`` for ``match``)."""
        fault = CapacityFault(error, **match)
        with self.state.lock:
            self.state.capacity_faults.append(fault)
        return fault

    def fail_requests(self, status: int, **match: Any) -> RequestFault:
        """Answer matching requests with 403, 429, 500 or 503 (see ``RequestFault``)."""
        fault = RequestFault(status, **match)
        with self.state.lock:
            self.state.request_faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        """Drop every injected fault."""
        with self.state.lock:
            self.state.capacity_faults.clear()
            self.state.request_faults.clear()

    # -- state for tests -----------------------------------------------------------------

    def set_latency(self, latency: Latency) -> None:
        """Use ``latency`` for operations started from now on."""
        with self.state.lock:
            self.state.latency = latency

    def reset(self) -> None:
        """Drop VMs, NICs, disks, operations, faults and the request log (seeded SKUs, prices,
        images, subnets and resource groups stay)."""
        self.state.clear()
        self.requests.clear()

    def vms(self) -> list[dict[str, Any]]:
        """Every VM as ARM shows it (operations whose time has come are completed first)."""
        with self.state.lock:
            self.state.advance()
            return [compute.vm_view(vm) for _, vm in sorted(self.state.vms.items())]

    def nics(self) -> list[dict[str, Any]]:
        """Every network interface as ARM shows it."""
        with self.state.lock:
            self.state.advance()
            return [json.loads(json.dumps(nic)) for _, nic in sorted(self.state.nics.items())]

    def disks(self) -> list[dict[str, Any]]:
        """Every OS disk (``managedBy`` is None once its VM is gone and the disk stayed)."""
        with self.state.lock:
            self.state.advance()
            return [dict(disk) for _, disk in sorted(self.state.disks.items())]

    def publish_image(
        self, gallery: str, definition: str, version: str, published: str | None = None
    ) -> None:
        """Publish a new version of an AKS node image (see ``ArmState.publish_image``)."""
        self.state.publish_image(gallery, definition, version, published)

    def add_subnet(self, resource_group: str, vnet: str, name: str, prefix: str) -> str:
        """Create a subnet in the default location; returns its id."""
        return self.state.add_subnet(resource_group, vnet, name, prefix)

    def withdraw_image(self, gallery: str, definition: str, version: str | None = None) -> None:
        """Remove a version of an AKS node image, or every version when ``version`` is None
        (see ``ArmState.withdraw_image``)."""
        self.state.withdraw_image(gallery, definition, version)

    def subnet_id(self, name: str = "aks-subnet") -> str:
        """The id of a seeded subnet of the cluster's VNet."""
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{seed.NODE_RESOURCE_GROUP}/"
            f"providers/Microsoft.Network/virtualNetworks/{seed.VNET_NAME}/subnets/{name}"
        )

    # -- serving -------------------------------------------------------------------------

    def answer(
        self, method: str, path: str, query: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Answer, RequestRecord | None]:
        """Answer one HTTP request; the record is None for the admin API."""
        if path.startswith(ADMIN_PREFIX):
            return self._admin(method, path.removeprefix(ADMIN_PREFIX), raw), None
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        record = RequestRecord(
            method, path, query, time.monotonic(), api_version=params.get("api-version", "")
        )
        poll = _POLL.search(path)
        if poll:
            record.follow_up = f"op:{poll.group('id')}"
        self.requests.add(record)
        oidc, token = _OIDC.match(path), _TOKEN.match(path)
        if oidc and method == "GET":
            return self._openid(oidc.group("tenant")), record
        if token and method == "POST":
            return self._token(token.group("tenant"), raw), record
        with self.state.lock:
            fault = next((f for f in self.state.request_faults if f.matches(method, path)), None)
            if fault is not None and consume(fault):
                self.state.request_faults.remove(fault)
        if fault is not None:
            record.follow_up = f"req:{method} {path}"
            return fault.answer(path), record
        if not path.lower().startswith("/api/retail/") and not self._authorized(headers):
            return _unauthorized(self), record
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            error = arm_error("InvalidRequestContent", "The request content is not valid JSON.")
            return (400, error, {}), record
        delay = self.state.latency.request
        if delay:
            time.sleep(delay)
        answer = self.state.handle(method, path, query, body)
        async_url = answer[2].get("Azure-AsyncOperation")
        if async_url:
            record.follow_up = f"op:{_POLL.search(urlsplit(async_url).path).group('id')}"  # type: ignore[union-attr]
        return answer, record

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        value = headers.get("Authorization") or ""
        scheme, _, token = value.partition(" ")
        with self.state.lock:
            return scheme.lower() == "bearer" and token in self._tokens

    def _openid(self, tenant: str) -> Answer:
        if tenant != self.tenant_id:
            return _aad_error(400, "invalid_tenant", f"AADSTS90002: Tenant '{tenant}' not found.")
        base = f"{self.url}/{tenant}"
        document = {
            "issuer": f"{base}/v2.0",
            "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
            "token_endpoint": f"{base}/oauth2/v2.0/token",
            "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
            "jwks_uri": f"{self.url}/{tenant}/discovery/v2.0/keys",
            "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
            "subject_types_supported": ["pairwise"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt"],
            "scopes_supported": ["openid", "profile", "email", "offline_access"],
            "tenant_region_scope": "NA",
        }
        return 200, document, {}

    def _token(self, tenant: str, raw: bytes) -> Answer:
        form = {k: v[-1] for k, v in parse_qs(raw.decode(errors="replace")).items()}
        if tenant != self.tenant_id:
            return _aad_error(400, "invalid_request", f"AADSTS90002: Tenant '{tenant}' not found.")
        if form.get("grant_type") != "client_credentials":
            return _aad_error(
                400, "unsupported_grant_type", "AADSTS70003: The grant type is not supported."
            )
        if form.get("client_id") != self.client_id:
            return _aad_error(
                400,
                "unauthorized_client",
                f"AADSTS700016: Application with identifier '{form.get('client_id')}' was not "
                f"found in the directory '{tenant}'.",
            )
        assertion = form.get("client_assertion")
        if assertion is not None and form.get("client_assertion_type") != JWT_BEARER:
            return _aad_error(
                400, "invalid_request", "AADSTS50027: The client assertion type is not supported."
            )
        if assertion is None and form.get("client_secret") != self.client_secret:
            return _aad_error(
                401, "invalid_client", "AADSTS7000215: Invalid client secret provided."
            )
        body = {
            "token_type": "Bearer",
            "expires_in": TOKEN_LIFETIME,
            "ext_expires_in": TOKEN_LIFETIME,
            "access_token": self.issue_token(),
        }
        return 200, body, {}

    def _admin(self, method: str, path: str, raw: bytes) -> Answer:
        try:
            body = json.loads(raw) if raw else {}
            return self._admin_action(method, path.rstrip("/"), body)
        except (FaultError, TypeError, ValueError, KeyError) as error:
            return 400, {"error": {"code": "BadRequest", "message": str(error)}}, {}

    def _admin_action(self, method: str, path: str, body: Any) -> Answer:
        if (method, path) == ("POST", "/reset"):
            self.reset()
            return 200, {"reset": True}, {}
        if (method, path) == ("GET", "/state"):
            with self.state.lock:
                faults = {
                    "capacity": [f.to_dict() for f in self.state.capacity_faults],
                    "request": [f.to_dict() for f in self.state.request_faults],
                }
            return (
                200,
                {"vms": self.vms(), "nics": self.nics(), "disks": self.disks(), "faults": faults},
                {},
            )
        if (method, path) == ("POST", "/faults/capacity"):
            return 201, self.fail_creates(**body).to_dict(), {}
        if (method, path) == ("POST", "/faults/request"):
            return 201, self.fail_requests(**body).to_dict(), {}
        if (method, path) == ("DELETE", "/faults"):
            self.clear_faults()
            return 200, {"cleared": True}, {}
        if (method, path) == ("GET", "/requests"):
            return 200, {"requests": [asdict(r) for r in self.requests]}, {}
        if (method, path) == ("DELETE", "/requests"):
            self.requests.clear()
            return 200, {"cleared": True}, {}
        if (method, path) == ("GET", "/requests/retry-after-violations"):
            violations = [
                {
                    "request": asdict(v.request),
                    "previous": asdict(v.previous),
                    "early_by": v.early_by,
                }
                for v in self.requests.retry_after_violations()
            ]
            return 200, {"violations": violations}, {}
        if (method, path) == ("POST", "/images"):
            self.publish_image(
                body["gallery"], body["definition"], body["version"], body.get("published")
            )
            return 201, body, {}
        if (method, path) == ("PUT", "/latency"):
            names = {f.name for f in fields(Latency)}
            unknown = set(body) - names
            if unknown:
                raise ValueError(
                    f"latency: unknown fields {sorted(unknown)}; known: {sorted(names)}"
                )
            latency = Latency(**{**asdict(self.state.latency), **body})
            self.set_latency(latency)
            return 200, asdict(latency), {}
        return (
            404,
            {"error": {"code": "NotFound", "message": f"no admin action {method} {path}"}},
            {},
        )


def _aad_error(status: int, error: str, description: str) -> Answer:
    body = {
        "error": error,
        "error_description": description,
        "error_codes": [int(description[6:].split(":")[0])],
        "timestamp": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
        "trace_id": str(uuid.uuid4()),
        "correlation_id": str(uuid.uuid4()),
    }
    return status, body, {}


def _unauthorized(fake: FakeARM) -> Answer:
    challenge = (
        f'Bearer authorization_uri="{fake.url}/{fake.tenant_id}", error="invalid_token", '
        'error_description="The authentication failed because of missing or invalid token."'
    )
    body = arm_error(
        "InvalidAuthenticationToken",
        "The access token is missing or invalid.",
    )
    return 401, body, {"WWW-Authenticate": challenge}
