"""The azure-mgmt clients the provider uses, built once per process (or handed in by the caller).

Credentials come from azure-identity's ``DefaultAzureCredential``: workload identity on AKS
(``AZURE_CLIENT_ID``, ``AZURE_TENANT_ID``, ``AZURE_FEDERATED_TOKEN_FILE``, set by the workload
identity webhook), else a service principal from the environment, a managed identity, or the
Azure CLI's login. ``--arm-endpoint-url`` sends every ARM call to another endpoint and
``--arm-ca-bundle`` trusts its CA, for tests against a fake ARM server; then MSAL's instance
discovery (a call to public Azure) is off, so the token endpoint of ``AZURE_AUTHORITY_HOST`` is
used as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpenter_azure.settings import AzureSettings, SettingsError
from karpenter_core.sdk.clients import CloudClients

__all__ = ["ARM_SCOPE", "CLIENTS", "AzureClients"]

CLIENTS = ("credential", "compute", "network")
"""Client names a caller may hand in through ``ProviderContext.clients``."""

ARM_SCOPE = "https://management.azure.com/.default"
"""The token scope of ARM: public Azure's audience, also for a fake ARM endpoint (whose token
endpoint issues tokens for it)."""
_RETRIES = 3
"""Retries of a throttled (429) or failed (5xx) ARM call, each after its Retry-After."""


class AzureClients:
    """A credential and one client per ARM resource provider, created on first use; given
    clients are used as they are."""

    def __init__(self, settings: AzureSettings, given: Mapping[str, Any] | None = None) -> None:
        self._settings = settings
        self._clients = CloudClients("Azure", CLIENTS, given, self._build)

    @property
    def credential(self) -> Any:
        """The token credential every client uses."""
        return self._clients.get("credential")

    @property
    def compute(self) -> Any:
        """``azure.mgmt.compute.ComputeManagementClient``: VMs and resource SKUs."""
        return self._clients.get("compute")

    @property
    def network(self) -> Any:
        """``azure.mgmt.network.NetworkManagementClient``: NICs and subnets."""
        return self._clients.get("network")

    def _connection(self) -> dict[str, Any]:
        """Keyword arguments every pipeline (ARM and token) gets."""
        options: dict[str, Any] = {
            "retry_total": _RETRIES,
            "user_agent": "karpenter-python",
        }
        if self._settings.arm_ca_bundle:
            options["connection_verify"] = self._settings.arm_ca_bundle
        return options

    def _build(self, name: str) -> Any:
        """The credential, or the ARM client ``name`` (it takes the credential)."""
        if name == "credential":
            from azure.identity import DefaultAzureCredential

            extra: dict[str, Any] = {}
            if self._settings.arm_endpoint_url:
                extra["disable_instance_discovery"] = True
            return DefaultAzureCredential(
                exclude_interactive_browser_credential=True, **self._connection(), **extra
            )
        subscription = self._settings.subscription_id
        if not subscription:
            raise SettingsError(
                "no Azure subscription: set --subscription-id (ARM_SUBSCRIPTION_ID)"
            )
        if name == "compute":
            from azure.mgmt.compute import ComputeManagementClient as Client
        else:
            from azure.mgmt.network import NetworkManagementClient as Client  # type: ignore[assignment]
        return Client(
            self.credential,
            subscription,
            base_url=self._settings.arm_endpoint,
            credential_scopes=[ARM_SCOPE],
            **self._connection(),
        )
