"""The Azure provider's settings: parsing, defaults, clear errors naming the flag, what a launch
needs, and the clients built from them."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from karpenter_azure.clients import AzureClients
from karpenter_azure.settings import OPTIONS, AzureSettings, SettingsError
from karpenter_core.cli.main import cli

SUBSCRIPTION = "12345678-1234-1234-1234-123456789012"
SUBNET = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/MC_rg_cluster_eastus/providers/"
    "Microsoft.Network/virtualNetworks/aks-vnet/subnets/aks-subnet"
)
IDENTITY = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/MC_rg_cluster_eastus/providers/"
    "Microsoft.ManagedIdentity/userAssignedIdentities/cluster-agentpool"
)


def test_defaults_are_upstreams() -> None:
    settings = AzureSettings.from_mapping({})
    assert settings.network_plugin == "azure"
    assert settings.network_plugin_mode == "overlay"
    assert settings.linux_admin_username == "azureuser"
    assert settings.vm_memory_overhead_percent == 0.075
    assert settings.arm_endpoint == "https://management.azure.com"


def test_every_option_has_an_environment_variable() -> None:
    assert all(option.env for option in OPTIONS)


def test_values_are_parsed() -> None:
    settings = AzureSettings.from_mapping(
        {
            "cluster-name": "prod",
            "region": " westeurope ",
            "subscription-id": SUBSCRIPTION,
            "node-resource-group": "MC_rg_prod_westeurope",
            "vnet-subnet-id": SUBNET,
            "network-plugin": "Kubenet",
            "network-plugin-mode": "",
            "node-identities": f"{IDENTITY}, ",
            "ssh-public-key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG user@host",
            "cluster-endpoint": "https://prod-dns.hcp.westeurope.azmk8s.io:443/",
            "kubelet-bootstrap-token": "abcdef.0123456789abcdef",
            "arm-endpoint-url": "https://127.0.0.1:8443",
        }
    )
    assert settings.region == "westeurope"
    assert settings.network_plugin == "kubenet"
    assert settings.network_plugin_mode == ""
    assert settings.node_identities == (IDENTITY,)
    assert settings.cluster_endpoint == "https://prod-dns.hcp.westeurope.azmk8s.io:443"
    assert settings.arm_endpoint == "https://127.0.0.1:8443"
    assert settings.launch_problems() == []


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("region", "us-east-1", "not an Azure location name"),
        ("subscription-id", "my-subscription", "not a subscription ID"),
        ("vnet-subnet-id", "/subscriptions/x/subnets/y", "not a subnet's ARM ID"),
        ("network-plugin", "calico", "not one of"),
        ("network-plugin-mode", "dynamic", "not one of"),
        ("node-identities", "kubelet", "not a user-assigned identity's ARM ID"),
        ("ssh-public-key", "not a key", "not an OpenSSH public key"),
        ("cluster-endpoint", "http://10.0.0.1", "not an https URL"),
        ("arm-endpoint-url", "localhost:8443", "not an https URL"),
        ("kubelet-bootstrap-token", "secret", "not a bootstrap token"),
        ("vm-memory-overhead-percent", "7.5", "not a fraction"),
    ],
)
def test_a_bad_value_names_the_flag(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=f"^--azure-{name}: .*{message}"):
        AzureSettings.from_mapping({name: value})


def test_launch_problems_name_flag_and_variable() -> None:
    problems = AzureSettings.from_mapping({"region": "eastus"}).launch_problems()
    assert (
        "--azure-subscription-id (KARPENTER_AZURE_SUBSCRIPTION_ID or ARM_SUBSCRIPTION_ID)"
        in problems
    )
    assert (
        "--azure-node-resource-group (KARPENTER_AZURE_NODE_RESOURCE_GROUP or "
        "AZURE_NODE_RESOURCE_GROUP)" in problems
    )
    assert (
        "--azure-kubelet-bootstrap-token (KARPENTER_AZURE_KUBELET_BOOTSTRAP_TOKEN or "
        "KUBELET_BOOTSTRAP_TOKEN)" in problems
    )
    assert not any(p.startswith("--azure-region") for p in problems)


def test_unknown_client_names_are_refused() -> None:
    with pytest.raises(SettingsError, match="unknown Azure clients \\['ec2'\\]"):
        AzureClients(AzureSettings(), {"ec2": object()})


def test_clients_need_a_subscription() -> None:
    clients = AzureClients(AzureSettings(), {"credential": object()})
    with pytest.raises(SettingsError, match="--subscription-id"):
        _ = clients.compute


def test_clients_talk_to_the_endpoint_override() -> None:
    settings = AzureSettings.from_mapping(
        {"subscription-id": SUBSCRIPTION, "arm-endpoint-url": "https://127.0.0.1:8443"}
    )
    clients = AzureClients(settings, {"credential": object()})
    assert clients.compute._config.base_url == "https://127.0.0.1:8443"
    assert clients.network._config.base_url == "https://127.0.0.1:8443"
    assert clients.compute is clients.compute


def test_another_providers_environment_variable_does_not_set_the_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--region`` is one option for every provider that declares it; AWS_REGION is the AWS
    provider's variable and must not reach the Azure provider, which reads LOCATION."""
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("LOCATION", "westus2")
    result = CliRunner().invoke(cli, ["simulate", "--provider", "azure", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["provider"] == "azure"
