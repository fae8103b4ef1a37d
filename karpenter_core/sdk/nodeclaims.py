"""The apiserver calls a provider's own controllers make on NodeClaims (an interruption or
preemption controller): list them, delete one, read the uid of a Node to address an Event."""

from __future__ import annotations

import json
from typing import Any

from karpenter_core.apis import labels as wk

__all__ = ["NODECLAIM_PLURAL", "NODECLAIM_VERSION", "ClusterNodeClaims"]

NODECLAIM_VERSION = "v1"
NODECLAIM_PLURAL = "nodeclaims"


class ClusterNodeClaims:
    """NodeClaims (manifests) and Nodes through a ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client as k8s

        self._custom = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._api_exception = k8s.ApiException

    def nodeclaims(self) -> list[dict[str, Any]]:
        """Every NodeClaim, as its manifest."""
        response = self._custom.list_cluster_custom_object(
            wk.GROUP, NODECLAIM_VERSION, NODECLAIM_PLURAL, _preload_content=False
        )
        return list(json.loads(response.data).get("items") or [])

    def delete_nodeclaim(self, name: str) -> bool:
        """Delete NodeClaim ``name``; False when it was already gone."""
        try:
            self._custom.delete_cluster_custom_object(
                wk.GROUP, NODECLAIM_VERSION, NODECLAIM_PLURAL, name, _preload_content=False
            )
        except self._api_exception as error:
            if error.status == 404:
                return False
            raise
        return True

    def node_uid(self, name: str) -> str | None:
        """The uid of Node ``name``; None when there is no such Node."""
        try:
            response = self._core.read_node(name, _preload_content=False)
        except self._api_exception as error:
            if error.status == 404:
                return None
            raise
        return str(json.loads(response.data)["metadata"].get("uid", ""))
