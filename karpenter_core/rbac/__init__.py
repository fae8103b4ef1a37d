"""The controller's RBAC: a ServiceAccount ``karpenter``, its ClusterRole (least privilege), the
Role for its leader-election Lease, and the bindings; plus each provider's extra rules
(``providers/<name>.yaml``)."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from karpenter_core.operator.kube import KubeClient

__all__ = ["SERVICE_ACCOUNT", "apply", "manifests"]

SERVICE_ACCOUNT = "karpenter"
DEFAULT_NAMESPACE = "karpenter"
_FILES = ("clusterrole.yaml", "role.yaml", "bindings.yaml")
_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts/{name}",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{name}",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{name}",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
}


def _load(name: str) -> list[dict[str, Any]]:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc]


def manifests(
    namespace: str = DEFAULT_NAMESPACE, provider: str | None = None
) -> list[dict[str, Any]]:
    """The RBAC objects, with the ServiceAccount, Role and bindings in ``namespace``; with
    ``provider``, that provider's rules too (if it ships any)."""
    names = list(_FILES)
    if provider and resources.files(__package__).joinpath(f"providers/{provider}.yaml").is_file():
        names.append(f"providers/{provider}.yaml")
    docs = [doc for name in names for doc in _load(name)]
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
