"""Credentials for a ServiceAccount, so tests can run a program as it rather than as admin.

``service_account_kubeconfig`` creates the namespace and ServiceAccount if needed, asks the
TokenRequest API for a bound token, and writes a kubeconfig with the admin kubeconfig's server and
CA and that token. What the identity may do is up to the RBAC objects applied for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

__all__ = ["service_account_kubeconfig"]


def _create(call: Callable[..., Any], *args: Any) -> None:
    """Create an object; one that exists already is fine."""
    try:
        call(*args)
    except client.ApiException as error:
        if error.status != 409:
            raise


def service_account_kubeconfig(
    admin_kubeconfig: Path,
    namespace: str,
    name: str,
    path: Path,
    expiration_seconds: int = 24 * 3600,
) -> Path:
    """Write a kubeconfig for ServiceAccount ``namespace/name`` to ``path`` and return it."""
    api_client = config.new_client_from_config(config_file=str(admin_kubeconfig))
    try:
        core = client.CoreV1Api(api_client)
        _create(core.create_namespace, {"metadata": {"name": namespace}})
        _create(core.create_namespaced_service_account, namespace, {"metadata": {"name": name}})
        request = core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": expiration_seconds}}
        )
        token = request.status.token
    finally:
        api_client.close()
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    user = f"system:serviceaccount:{namespace}:{name}"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": cluster}],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
                "current-context": "local",
            },
            sort_keys=False,
        )
    )
    path.chmod(0o600)
    return path
