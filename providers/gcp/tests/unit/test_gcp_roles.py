"""The provider's custom IAM role allows every Google Cloud API call the provider makes, and
little else.

The provider's source is scanned with ``ast``: calls ``<x>.<client>.<method>(...)`` (or
``<client>_client.<method>(...)``) whose client is one of ``GCPClients``' Compute clients and
whose method is that client's, and calls of
``<x>.node_pool(...)`` (GKE), are API calls; ``PERMISSIONS`` names the IAM permissions each
needs. A call the table does not know fails the test, so a new call cannot land without its
permission. Cloud Billing's catalog needs no permission.
"""

from __future__ import annotations

import ast
import json
from functools import cache
from importlib import resources
from pathlib import Path

from google.cloud import compute_v1

PACKAGE = Path(__file__).resolve().parents[2] / "karpenter_gcp"
FAKE_ONLY = {"testing", "conformance.py"}
"""The fake GCE server and the conformance profile run only in tests."""
CLIENTS = {
    "instances": compute_v1.InstancesClient,
    "zone_operations": compute_v1.ZoneOperationsClient,
    "instance_templates": compute_v1.InstanceTemplatesClient,
    "machine_types": compute_v1.MachineTypesClient,
    "zones": compute_v1.ZonesClient,
    "images": compute_v1.ImagesClient,
    "subnetworks": compute_v1.SubnetworksClient,
}
GKE = ("", "node_pool")

_CREATE = {
    "compute.instances.create",
    "compute.instances.setLabels",
    "compute.instances.setMetadata",
    "compute.instances.setServiceAccount",
    "compute.instances.setTags",
    "compute.disks.create",
    "compute.images.useReadOnly",
    "compute.subnetworks.use",
    "compute.subnetworks.useExternalIp",
    "iam.serviceAccounts.actAs",
}
PERMISSIONS: dict[tuple[str, str], set[str]] = {
    ("instances", "get"): {"compute.instances.get"},
    ("instances", "list"): {"compute.instances.list"},
    ("instances", "insert_unary"): _CREATE,
    ("instances", "delete_unary"): {"compute.instances.delete", "compute.disks.delete"},
    ("zone_operations", "wait"): {"compute.zoneOperations.get"},
    ("zone_operations", "get"): {"compute.zoneOperations.get"},
    ("zone_operations", "list"): {"compute.zoneOperations.list"},
    ("instance_templates", "get"): {"compute.instanceTemplates.get"},
    ("machine_types", "aggregated_list"): {"compute.machineTypes.list"},
    ("machine_types", "list"): {"compute.machineTypes.list"},
    ("machine_types", "get"): {"compute.machineTypes.get"},
    ("zones", "list"): {"compute.zones.list"},
    ("zones", "get"): {"compute.zones.get"},
    ("images", "get"): {"compute.images.get"},
    ("images", "get_from_family"): {"compute.images.getFromFamily"},
    ("images", "list"): {"compute.images.list"},
    ("subnetworks", "get"): {"compute.subnetworks.get"},
    GKE: {"container.clusters.get"},
}
"""IAM permissions of each call (an instance's disks, subnetwork, image, metadata, labels,
tags and service account are each checked on insert; its disks are deleted with it)."""
GRANTED_ELSEWHERE = {
    "iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser on the nodes' service account "
    "only (in a project role it would cover every service account of the project)",
}


def role() -> dict[str, object]:
    text = resources.files("karpenter_gcp").joinpath("roles", "karpenter.json").read_text()
    return dict(json.loads(text))


def allowed() -> set[str]:
    permissions = role()["includedPermissions"]
    assert isinstance(permissions, list)
    return set(permissions)


@cache
def methods(client: type) -> frozenset[str]:
    return frozenset(m for m in dir(client) if not m.startswith("_"))


def _client_name(owner: ast.expr) -> str:
    """``instances`` of ``clients.instances`` or ``instances_client`` (a bare ``instances`` is
    the provider's own ``Instances``)."""
    if isinstance(owner, ast.Attribute):
        return owner.attr.lstrip("_")
    name = getattr(owner, "id", "")
    return str(name).removesuffix("_client") if str(name).endswith("_client") else ""


def api_calls() -> dict[tuple[str, str], list[str]]:
    """Each API call in the provider's source, with where."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in FAKE_ONLY:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner, method = node.func.value, node.func.attr
            client = _client_name(owner)
            call = None
            if method == GKE[1]:
                call = GKE
            elif client in CLIENTS and method in methods(CLIENTS[client]):
                call = (client, method)
            if call is not None:
                found.setdefault(call, []).append(f"{relative}:{node.lineno}")
    return found


def needed() -> set[str]:
    return set().union(*(PERMISSIONS[c] for c in api_calls() if c in PERMISSIONS))


def test_the_scan_finds_the_launch_calls() -> None:
    calls = api_calls()
    for call in (("instances", "insert_unary"), ("zone_operations", "wait"), GKE):
        assert call in calls


def test_every_call_has_its_permissions_listed() -> None:
    unknown = {call: where for call, where in api_calls().items() if call not in PERMISSIONS}
    assert not unknown, f"API calls without IAM permissions in PERMISSIONS: {unknown}"


def test_the_role_allows_every_call() -> None:
    missing = needed() - allowed() - set(GRANTED_ELSEWHERE)
    assert not missing, f"the role lacks {sorted(missing)}"


def test_the_role_allows_nothing_unused() -> None:
    extra = allowed() - needed()
    assert not extra, f"the role allows permissions no call needs: {sorted(extra)}"
    assert not allowed() & set(GRANTED_ELSEWHERE)


def test_the_role_is_in_gclouds_custom_role_format() -> None:
    assert set(role()) == {"title", "description", "stage", "includedPermissions"}
    assert role()["stage"] == "GA"
    assert not any("*" in p for p in allowed())
