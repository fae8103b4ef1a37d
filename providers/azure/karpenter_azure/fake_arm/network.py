"""Network interfaces and subnets of the fake ARM server (Microsoft.Network): NICs with
private addresses from their subnet, attached to and detached from VMs; subnet reads."""

from __future__ import annotations

import copy
import ipaddress
import uuid
from collections.abc import Mapping
from typing import Any

from karpenter_azure.fake_arm.common import NETWORK, Answer, bad, location_name, not_found
from karpenter_azure.fake_arm.state import ArmStore, Subnet


def _nic_id(state: ArmStore, args: Mapping[str, str]) -> str:
    group = state.resource_groups[args["rg"].lower()]
    return (
        f"/subscriptions/{state.subscription_id}/resourceGroups/{group}/providers/"
        f"{NETWORK}/networkInterfaces/{args['name']}"
    )


def get_nic(state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
    """GET a network interface."""
    nic = state.nics.get(_nic_id(state, args).lower())
    if nic is None:
        raise not_found(f"{NETWORK}/networkInterfaces", args["name"], args["rg"])
    return 200, copy.deepcopy(nic), {}


def list_nics(
    state: ArmStore, args: Mapping[str, str], params: Mapping[str, str], _: Any
) -> Answer:
    """The network interfaces of a resource group, paged."""
    prefix = f"/subscriptions/{state.subscription_id}/resourcegroups/{args['rg']}/".lower()
    nics = [copy.deepcopy(n) for key, n in sorted(state.nics.items()) if key.startswith(prefix)]
    path = (
        prefix.replace("resourcegroups", "resourceGroups")
        + f"providers/{NETWORK}/networkInterfaces"
    )
    return 200, state.page(nics, path, params), {}


def list_all_nics(
    state: ArmStore, _: Mapping[str, str], params: Mapping[str, str], __: Any
) -> Answer:
    """The network interfaces of the subscription, paged."""
    nics = [copy.deepcopy(n) for _, n in sorted(state.nics.items())]
    path = f"/subscriptions/{state.subscription_id}/providers/{NETWORK}/networkInterfaces"
    return 200, state.page(nics, path, params), {}


def put_nic(state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], body: Any) -> Answer:
    """Create (201) or update (200) a network interface, with an operation."""
    nic_id = _nic_id(state, args)
    if not isinstance(body, dict):
        raise bad("InvalidRequestFormat", "Cannot parse the request: not an object.")
    location = location_name(body.get("location"))
    if not location:
        raise bad("LocationRequired", "The location property is required for this definition.")
    properties = body.get("properties") or {}
    configs = properties.get("ipConfigurations") or []
    if not configs:
        raise bad(
            "NetworkInterfaceMustHaveAtLeastOneIpConfiguration",
            f"Network interface {nic_id} must have at least one IP configuration.",
        )
    existing = state.nics.get(nic_id.lower())
    status = 200 if existing else 201
    old_configs = {
        c["name"]: c for c in (existing or {}).get("properties", {}).get("ipConfigurations", [])
    }
    ip_configs = []
    for index, config in enumerate(configs):
        name = str(config.get("name") or f"ipconfig{index + 1}")
        config_props = config.get("properties") or {}
        subnet_id = str((config_props.get("subnet") or {}).get("id") or "")
        subnet = state.subnets.get(subnet_id.lower())
        if subnet is None:
            raise bad(
                "InvalidResourceReference",
                f"Resource {subnet_id} referenced by resource {nic_id} was not found. Please "
                "make sure that the referenced resource exists, and that both resources are "
                "in the same region.",
            )
        if subnet.location != location:
            raise bad(
                "InvalidResourceReference",
                f"Subnet {subnet_id} referenced by resource {nic_id} is in location "
                f"'{subnet.location}', not '{location}'.",
            )
        old = old_configs.get(name)
        address = old["properties"]["privateIPAddress"] if old else _allocate(state, subnet, nic_id)
        props = copy.deepcopy(dict(config_props))
        props.update(
            {
                "provisioningState": "Succeeded",
                "privateIPAddress": address,
                "privateIPAllocationMethod": "Dynamic",
                "privateIPAddressVersion": "IPv4",
                "primary": bool(config_props.get("primary", index == 0)),
                "subnet": {"id": subnet.id},
            }
        )
        ip_configs.append(
            {
                "id": f"{nic_id}/ipConfigurations/{name}",
                "name": name,
                "type": f"{NETWORK}/networkInterfaces/ipConfigurations",
                "properties": props,
            }
        )
    nic_props = copy.deepcopy(dict(properties))
    nic_props.update(
        {
            "provisioningState": "Succeeded",
            "resourceGuid": (existing or {}).get("properties", {}).get("resourceGuid")
            or str(uuid.uuid4()),
            "ipConfigurations": ip_configs,
            "enableAcceleratedNetworking": bool(properties.get("enableAcceleratedNetworking")),
            "enableIPForwarding": bool(properties.get("enableIPForwarding")),
            "nicType": "Standard",
            "dnsSettings": properties.get("dnsSettings") or {"dnsServers": []},
        }
    )
    if existing and existing["properties"].get("virtualMachine"):
        nic_props["virtualMachine"] = existing["properties"]["virtualMachine"]
        nic_props["macAddress"] = existing["properties"].get("macAddress")
    nic = {
        "id": nic_id,
        "name": args["name"],
        "type": f"{NETWORK}/networkInterfaces",
        "location": location,
        "etag": f'W/"{uuid.uuid4()}"',
        "tags": dict(body.get("tags") or {}),
        "properties": nic_props,
    }
    state.nics[nic_id.lower()] = nic
    headers = state.start_operation(NETWORK, location, state.latency.nic_create, lambda: None)
    return status, copy.deepcopy(nic), headers


def _allocate(state: ArmStore, subnet: Subnet, nic_id: str) -> str:
    network = ipaddress.ip_network(subnet.prefix)
    if subnet.next_host >= network.num_addresses - 1:
        raise bad(
            "SubnetIsFull",
            f"Subnet {subnet.name} with address prefix {subnet.prefix} does not have enough "
            f"capacity for 1 IP address for {nic_id}.",
        )
    address = network.network_address + subnet.next_host
    subnet.next_host += 1
    subnet.nic_ip_configs.append(nic_id)
    return str(address)


def delete_nic(state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
    """Start deleting a detached network interface; 204 when there is none."""
    nic_id = _nic_id(state, args)
    nic = state.nics.get(nic_id.lower())
    if nic is None:
        return 204, None, {}
    attached = (nic["properties"].get("virtualMachine") or {}).get("id")
    if attached:
        raise bad(
            "NicInUse",
            f"Network Interface {nic_id} is used by existing resource {attached}. In order "
            "to delete the network interface, it must be dissociated from the resource.",
        )
    nic["properties"]["provisioningState"] = "Deleting"
    headers = state.start_operation(
        NETWORK, nic["location"], state.latency.nic_delete, lambda: remove_nic(state, nic)
    )
    return 202, None, headers


def remove_nic(state: ArmStore, nic: Mapping[str, Any]) -> None:
    """Drop a network interface from the state and its addresses from its subnet."""
    state.nics.pop(str(nic["id"]).lower(), None)
    for config in nic["properties"]["ipConfigurations"]:
        subnet = state.subnets.get(config["properties"]["subnet"]["id"].lower())
        if subnet is not None and nic["id"] in subnet.nic_ip_configs:
            subnet.nic_ip_configs.remove(nic["id"])


def get_subnet(state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], __: Any) -> Answer:
    """GET a subnet with the IP configurations in it."""
    group = state.resource_groups[args["rg"].lower()]
    subnet_id = (
        f"/subscriptions/{state.subscription_id}/resourceGroups/{group}/providers/"
        f"{NETWORK}/virtualNetworks/{args['vnet']}/subnets/{args['name']}"
    )
    subnet = state.subnets.get(subnet_id.lower())
    if subnet is None:
        raise not_found(
            f"{NETWORK}/virtualNetworks/{args['vnet']}/subnets", args["name"], args["rg"]
        )
    body = {
        "id": subnet.id,
        "name": subnet.name,
        "type": f"{NETWORK}/virtualNetworks/subnets",
        "etag": f'W/"{uuid.uuid5(uuid.NAMESPACE_URL, subnet.id)}"',
        "properties": {
            "provisioningState": "Succeeded",
            "addressPrefix": subnet.prefix,
            "ipConfigurations": [
                {"id": f"{nic}/ipConfigurations/ipconfig1"} for nic in subnet.nic_ip_configs
            ],
            "privateEndpointNetworkPolicies": "Disabled",
            "privateLinkServiceNetworkPolicies": "Enabled",
        },
    }
    return 200, body, {}
