"""The controller's RBAC: a ServiceAccount ``karpenter``, its ClusterRole (least privilege), the
Role for its leader-election Lease, and the bindings; plus the ClusterRole a provider ships in
its own package (``ProviderRecord.cluster_role``), bound to the same ServiceAccount."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

from karpenter_core.cloudprovider.registry import discover

if TYPE_CHECKING:
    from karpenter_core.cloudprovider.plugin import ProviderRecord
    from karpenter_core.operator.kube import KubeClient

__all__ = ["DEFAULT_NAMESPACE", "SERVICE_ACCOUNT", "RBACError", "apply", "manifests"]

SERVICE_ACCOUNT = "karpenter"
DEFAULT_NAMESPACE = "karpenter"
_FILES = ("clusterrole.yaml", "role.yaml", "bindings.yaml")
_RBAC_API = "rbac.authorization.k8s.io/v1"
_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts/{name}",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{name}",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{name}",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
}


class RBACError(ValueError):
    """A provider's ClusterRole file cannot be read or is not one ClusterRole with rules."""


def _load(name: str) -> list[dict[str, Any]]:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _provider_rules(record: ProviderRecord) -> list[dict[str, Any]]:
    """The rules of the provider's ClusterRole file (none when it ships none)."""
    if record.cluster_role is None:
        return []
    where = f"provider {record.name!r}: cluster_role {record.cluster_role}"
    try:
        docs = [d for d in yaml.safe_load_all(record.cluster_role.read_text("utf-8")) if d]
    except (OSError, UnicodeDecodeError) as error:
        raise RBACError(f"{where}: cannot read: {error}") from None
    except yaml.YAMLError as error:
        raise RBACError(f"{where}: not valid YAML: {error}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != "ClusterRole":
        raise RBACError(f"{where}: expected exactly one ClusterRole document")
    rules = docs[0].get("rules")
    if not isinstance(rules, list) or not rules or not all(isinstance(r, dict) for r in rules):
        raise RBACError(f"{where}: rules must be a non-empty list of PolicyRules")
    return rules


def _provider_docs(record: ProviderRecord) -> list[dict[str, Any]]:
    rules = _provider_rules(record)
    if not rules:
        return []
    name = f"karpenter-{record.name}"
    return [
        {
            "apiVersion": _RBAC_API,
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        },
        {
            "apiVersion": _RBAC_API,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": DEFAULT_NAMESPACE}
            ],
        },
    ]


def manifests(
    namespace: str = DEFAULT_NAMESPACE, provider: ProviderRecord | str | None = None
) -> list[dict[str, Any]]:
    """The RBAC objects, with the ServiceAccount, Role and bindings in ``namespace``; with
    ``provider`` (a record, or the name of an installed provider), its ClusterRole
    ``karpenter-<name>`` and binding too (if it ships rules). ``RBACError`` when the provider's
    file is not one ClusterRole; ``UnknownProviderError`` for a name that is not installed."""
    docs = [doc for name in _FILES for doc in _load(name)]
    if isinstance(provider, str):
        provider = discover().provider(provider)
    if provider is not None:
        docs += _provider_docs(provider)
    for doc in docs:
        meta = doc["metadata"]
        if "namespace" in meta:
            meta["namespace"] = namespace
        for subject in doc.get("subjects") or ():
            subject["namespace"] = namespace
    return docs


def apply(client: KubeClient, docs: list[dict[str, Any]]) -> None:
    """Create or update the objects with server-side apply (the namespace must exist)."""
    for doc in docs:
        meta = doc["metadata"]
        path = _PATHS[doc["kind"]].format(namespace=meta.get("namespace", ""), name=meta["name"])
        client.patch(path, doc, "apply")
