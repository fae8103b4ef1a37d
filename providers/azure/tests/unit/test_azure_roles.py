"""The controller's Azure role definitions allow every ARM operation the provider calls, and
little else.

The provider's source is scanned with ``ast``: calls ``<x>.<operation group>.<method>(...)``
whose operation group and method belong to azure-mgmt-compute's or azure-mgmt-network's client
are ARM operations; ``ACTIONS`` names the Azure RBAC actions each needs. A call the table does
not know fails the test, so a new ARM call cannot land without its permission.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path

import pytest
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.network import NetworkManagementClient

PACKAGE = Path(__file__).resolve().parents[2] / "karpenter_azure"
FAKE_ONLY = {"conformance.py", "fake_arm"}
"""The fake ARM server and the conformance profile run only in tests; they need no permission."""
ROLE_FILES = ("karpenter-nodes.json", "karpenter-catalog.json")

_COMPUTE_OPERATIONS = "Microsoft.Compute/locations/operations/read"
_NETWORK_OPERATIONS = "Microsoft.Network/locations/operations/read"
ACTIONS: dict[tuple[str, str], set[str]] = {
    ("virtual_machines", "get"): {"Microsoft.Compute/virtualMachines/read"},
    ("virtual_machines", "list"): {"Microsoft.Compute/virtualMachines/read"},
    ("virtual_machines", "begin_create_or_update"): {
        "Microsoft.Compute/virtualMachines/write",
        "Microsoft.Network/networkInterfaces/join/action",
        "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
        _COMPUTE_OPERATIONS,
    },
    ("virtual_machines", "begin_delete"): {
        "Microsoft.Compute/virtualMachines/delete",
        "Microsoft.Compute/disks/delete",
        _COMPUTE_OPERATIONS,
    },
    ("network_interfaces", "get"): {"Microsoft.Network/networkInterfaces/read"},
    ("network_interfaces", "begin_create_or_update"): {
        "Microsoft.Network/networkInterfaces/write",
        "Microsoft.Network/virtualNetworks/subnets/join/action",
        _NETWORK_OPERATIONS,
    },
    ("network_interfaces", "begin_delete"): {
        "Microsoft.Network/networkInterfaces/delete",
        _NETWORK_OPERATIONS,
    },
    ("subnets", "get"): {"Microsoft.Network/virtualNetworks/subnets/read"},
    ("resource_skus", "list"): {"Microsoft.Compute/skus/read"},
    ("community_gallery_image_versions", "list"): {
        "Microsoft.Compute/locations/communityGalleries/images/versions/read"
    },
}
"""Azure RBAC actions of each ARM operation (with the long-running operation's status reads,
what a VM's NIC and identity references need, and the OS disk its delete removes)."""
IMPLIED = {
    "Microsoft.Network/networkInterfaces/read": "reading back the NIC a VM create references",
}
"""Allowed actions no call above names, and why they are kept."""


def allowed_actions() -> set[str]:
    """Every action the role definitions allow."""
    actions: set[str] = set()
    for name in ROLE_FILES:
        text = resources.files("karpenter_azure").joinpath("roles", name).read_text()
        actions.update(json.loads(text)["Actions"])
    return actions


@cache
def operation_groups() -> dict[str, set[str]]:
    """Operation group attribute -> its public methods, of both clients."""
    groups: dict[str, set[str]] = {}
    for client_type in (ComputeManagementClient, NetworkManagementClient):
        client = client_type(object(), "00000000-0000-0000-0000-000000000000")  # type: ignore[arg-type]
        for attribute, value in vars(client).items():
            if attribute.startswith("_") or not type(value).__name__.endswith("Operations"):
                continue
            methods = {m for m in dir(type(value)) if not m.startswith("_")}
            groups.setdefault(attribute, set()).update(methods)
    return groups


def sources() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in FAKE_ONLY:
            continue
        yield path


def arm_calls() -> dict[tuple[str, str], list[str]]:
    """Each ARM operation called in the provider's source, with where."""
    groups = operation_groups()
    found: dict[tuple[str, str], list[str]] = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and node.func.attr in groups.get(owner.attr, ()):
                where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
                found.setdefault((owner.attr, node.func.attr), []).append(where)
    return found


def test_the_scan_finds_the_launch_calls() -> None:
    calls = arm_calls()
    assert ("virtual_machines", "begin_create_or_update") in calls
    assert ("network_interfaces", "begin_create_or_update") in calls
    assert ("virtual_machines", "list") in calls


def test_every_arm_call_has_its_actions_listed() -> None:
    unknown = {call: where for call, where in arm_calls().items() if call not in ACTIONS}
    assert not unknown, f"ARM calls without RBAC actions in ACTIONS: {unknown}"


def test_the_roles_allow_every_call() -> None:
    needed = set().union(*(ACTIONS[call] for call in arm_calls() if call in ACTIONS))
    missing = needed - allowed_actions()
    assert not missing, f"the role definitions lack {sorted(missing)}"


def test_the_roles_allow_nothing_unused() -> None:
    needed = set().union(*(ACTIONS[call] for call in arm_calls() if call in ACTIONS))
    extra = allowed_actions() - needed - set(IMPLIED)
    assert not extra, f"the role definitions allow actions no call needs: {sorted(extra)}"


def test_the_kubelet_identity_can_be_assigned() -> None:
    assert "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action" in allowed_actions()


@pytest.mark.parametrize("name", ROLE_FILES)
def test_role_definitions_are_custom_roles_without_wildcards(name: str) -> None:
    role = json.loads(resources.files("karpenter_azure").joinpath("roles", name).read_text())
    assert role["IsCustom"] is True
    assert role["AssignableScopes"] == ["/subscriptions/${SUBSCRIPTION_ID}"]
    assert not any("*" in action for action in role["Actions"])
