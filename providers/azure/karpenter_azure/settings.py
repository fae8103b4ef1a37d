"""Settings of the Azure provider: flags ``--azure-<name>`` or variables
``KARPENTER_AZURE_<NAME>`` (with the Azure provider alone, also ``--<name>`` and the variable each
option names).

The environment variable names are upstream's (the karpenter-provider-azure Helm chart sets
them), so one deployment's values serve both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karpenter_core.sdk.record import ProviderOption
from karpenter_core.sdk.settings import (
    OptionError,
    OptionReader,
    choice,
    fraction,
    items,
    matching,
    missing_options,
    text,
    url,
)

__all__ = [
    "FALLBACK_REGION",
    "NETWORK_PLUGINS",
    "NETWORK_PLUGIN_MODES",
    "OPTIONS",
    "PROVIDER",
    "AzureSettings",
    "SettingsError",
]

NETWORK_PLUGINS = ("azure", "kubenet", "none")
"""Values of ``--network-plugin`` (``none``: bring your own CNI)."""
NETWORK_PLUGIN_MODES = ("overlay", "")
"""Values of ``--network-plugin-mode`` ("" : the node subnet holds the pods' addresses)."""

OPTIONS = (
    ProviderOption(
        "cluster-name",
        "Name of the AKS cluster; tags every VM and NIC Karpenter creates (required to launch)",
        env="CLUSTER_NAME",
        simulate=False,
    ),
    ProviderOption(
        "region",
        "Azure location of the cluster, e.g. eastus (offline, eastus when none is set)",
        env="LOCATION",
    ),
    ProviderOption(
        "subscription-id",
        "Subscription of the cluster's node resource group (required to launch)",
        env="ARM_SUBSCRIPTION_ID",
        simulate=False,
    ),
    ProviderOption(
        "node-resource-group",
        "Resource group AKS manages for the cluster's nodes; VMs and NICs go there (required "
        "to launch)",
        env="AZURE_NODE_RESOURCE_GROUP",
        simulate=False,
    ),
    ProviderOption(
        "vnet-subnet-id",
        "ARM ID of the subnet for nodes of AKSNodeClasses without spec.vnetSubnetID",
        env="VNET_SUBNET_ID",
        simulate=False,
    ),
    ProviderOption(
        "network-plugin",
        "Network plugin of the cluster: azure, kubenet or none (pods per node follow it)",
        default="azure",
        env="NETWORK_PLUGIN",
    ),
    ProviderOption(
        "network-plugin-mode",
        "Network plugin mode: overlay, or empty for pod addresses from the node subnet",
        default="overlay",
        env="NETWORK_PLUGIN_MODE",
    ),
    ProviderOption(
        "node-identities",
        "ARM IDs of the user-assigned identities given to every VM, comma-separated (the "
        "kubelet identity first)",
        env="NODE_IDENTITIES",
        simulate=False,
    ),
    ProviderOption(
        "kubelet-identity-client-id",
        "Client ID of the kubelet identity (nodes' cloud-provider config; drift when it changes)",
        env="KUBELET_IDENTITY_CLIENT_ID",
        simulate=False,
    ),
    ProviderOption(
        "ssh-public-key",
        "OpenSSH public key of the VMs' admin user (required to launch)",
        env="SSH_PUBLIC_KEY",
        simulate=False,
    ),
    ProviderOption(
        "linux-admin-username",
        "Admin user name of the VMs",
        default="azureuser",
        env="LINUX_ADMIN_USERNAME",
        simulate=False,
    ),
    ProviderOption(
        "cluster-endpoint",
        "Kubernetes API endpoint nodes join (https URL; required to launch)",
        env="CLUSTER_ENDPOINT",
        simulate=False,
    ),
    ProviderOption(
        "cluster-ca-bundle",
        "Base64 CA bundle of the API server, written into the nodes' bootstrap kubeconfig",
        env="CLUSTER_CA_BUNDLE",
        simulate=False,
    ),
    ProviderOption(
        "kubelet-bootstrap-token",
        "Bootstrap token (<id>.<secret>) the kubelet joins with (required to launch)",
        env="KUBELET_BOOTSTRAP_TOKEN",
        simulate=False,
    ),
    ProviderOption(
        "vm-memory-overhead-percent",
        "Fraction of a VM's memory the hypervisor keeps",
        default="0.075",
        env="VM_MEMORY_OVERHEAD_PERCENT",
    ),
    ProviderOption(
        "arm-endpoint-url",
        "Azure Resource Manager endpoint (testing against a fake ARM server; default: public "
        "Azure's)",
        env="ARM_ENDPOINT_URL",
        simulate=False,
    ),
    ProviderOption(
        "arm-ca-bundle",
        "PEM file of CAs trusted for ARM and the token endpoint (testing against a fake ARM "
        "server with a test CA)",
        env="ARM_CA_BUNDLE",
        simulate=False,
    ),
)

PROVIDER = "azure"
"""The provider's name, which prefixes its options."""
FALLBACK_REGION = "eastus"
"""The location an offline simulation uses when none is configured."""
PUBLIC_ARM_ENDPOINT = "https://management.azure.com"
"""Public Azure's Resource Manager."""

_REGION = re.compile(r"[a-z][a-z0-9]{1,40}")
"""An Azure location name (``eastus``, ``westeurope2``): lower-case letters and digits."""
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_RESOURCE_GROUP = re.compile(r"[-\w._()]{1,90}")
_NAME = re.compile(r"[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?")
_SUBNET_ID = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/"
    r"virtualNetworks/[^/]+/subnets/[^/]+",
    re.IGNORECASE,
)
_IDENTITY_ID = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.ManagedIdentity/"
    r"userAssignedIdentities/[^/]+",
    re.IGNORECASE,
)
_BOOTSTRAP_TOKEN = re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}")
_SSH_KEY = re.compile(r"(ssh-(rsa|ed25519)|ecdsa-sha2-nistp\d+) [A-Za-z0-9+/=]+( .*)?")
_HTTPS_URL = url("https", example="https://10.0.0.1:443", trailing_slash=False)

SettingsError = OptionError
"""A provider setting has a value that cannot be used."""


@dataclass(frozen=True, slots=True)
class AzureSettings:
    """The Azure provider's settings, parsed."""

    cluster_name: str = ""
    region: str = ""
    subscription_id: str = ""
    node_resource_group: str = ""
    vnet_subnet_id: str = ""
    network_plugin: str = "azure"
    network_plugin_mode: str = "overlay"
    node_identities: tuple[str, ...] = ()
    kubelet_identity_client_id: str = ""
    ssh_public_key: str = ""
    linux_admin_username: str = "azureuser"
    cluster_endpoint: str = ""
    cluster_ca_bundle: str = ""
    kubelet_bootstrap_token: str = ""
    vm_memory_overhead_percent: float = 0.075
    arm_endpoint_url: str = ""
    arm_ca_bundle: str = ""

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> AzureSettings:
        """Parse option values keyed by option name (missing or None: the default)."""
        get = OptionReader(PROVIDER, OPTIONS, values)
        return cls(
            cluster_name=get("cluster-name", matching(_NAME, "a cluster name")),
            region=get("region", matching(_REGION, "an Azure location name (e.g. eastus)")),
            subscription_id=get("subscription-id", matching(_GUID, "a subscription ID (GUID)")),
            node_resource_group=get(
                "node-resource-group", matching(_RESOURCE_GROUP, "a resource group")
            ),
            vnet_subnet_id=get("vnet-subnet-id", matching(_SUBNET_ID, "a subnet's ARM ID")),
            network_plugin=get("network-plugin", choice(NETWORK_PLUGINS, fold=True)),
            network_plugin_mode=get("network-plugin-mode", choice(NETWORK_PLUGIN_MODES, fold=True)),
            node_identities=get(
                "node-identities",
                items(matching(_IDENTITY_ID, "a user-assigned identity's ARM ID")),
            ),
            kubelet_identity_client_id=get(
                "kubelet-identity-client-id", matching(_GUID, "a client ID (GUID)")
            ),
            ssh_public_key=get(
                "ssh-public-key",
                matching(
                    _SSH_KEY, "an OpenSSH public key (ssh-rsa AAAA... or ssh-ed25519 AAAA...)"
                ),
            ),
            linux_admin_username=get("linux-admin-username", matching(_NAME, "a Linux user name")),
            cluster_endpoint=get("cluster-endpoint", _HTTPS_URL),
            cluster_ca_bundle=get("cluster-ca-bundle", text),
            kubelet_bootstrap_token=get(
                "kubelet-bootstrap-token",
                matching(_BOOTSTRAP_TOKEN, "a bootstrap token (<6 chars>.<16 chars>)"),
            ),
            vm_memory_overhead_percent=get("vm-memory-overhead-percent", fraction),
            arm_endpoint_url=get("arm-endpoint-url", _HTTPS_URL),
            arm_ca_bundle=get("arm-ca-bundle", text),
        )

    @property
    def arm_endpoint(self) -> str:
        """The Resource Manager endpoint the clients talk to."""
        return self.arm_endpoint_url or PUBLIC_ARM_ENDPOINT

    def launch_problems(self) -> list[str]:
        """The settings a launch needs that are missing, as ``--flag (ENV)`` strings."""
        return missing_options(
            PROVIDER,
            OPTIONS,
            {
                "cluster-name": self.cluster_name,
                "subscription-id": self.subscription_id,
                "node-resource-group": self.node_resource_group,
                "region": self.region,
                "ssh-public-key": self.ssh_public_key,
                "cluster-endpoint": self.cluster_endpoint,
                "kubelet-bootstrap-token": self.kubelet_bootstrap_token,
            },
        )
