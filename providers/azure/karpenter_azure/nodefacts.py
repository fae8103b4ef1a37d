"""What drift reads of a Node from the cluster (its kubelet version and labels), cached."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from karpenter_azure.drift import NodeFacts

__all__ = ["NODE_FACTS_TTL", "NodeFactsReader"]

NODE_FACTS_TTL = timedelta(minutes=1)
"""How long a Node's kubelet version and labels, read for drift, are used before read again."""

log = logging.getLogger("karpenter.azure")


class NodeFactsReader:
    """Reads Nodes through ``kube_client`` (a ``kubernetes.client.ApiClient``, None offline) at
    most once per ``NODE_FACTS_TTL`` per Node."""

    def __init__(self, kube_client: Any, clock: Callable[[], datetime]) -> None:
        self._client = kube_client
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[datetime, NodeFacts | None]] = {}

    def read(self, node_name: str | None) -> NodeFacts | None:
        """The kubelet version and labels of the Node; None without one, without a cluster, or
        while the Node is being deleted."""
        if self._client is None or not node_name:
            return None
        now = self._clock()
        with self._lock:
            cached = self._cache.get(node_name)
        if cached is not None and now < cached[0]:
            return cached[1]
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        facts: NodeFacts | None = None
        try:
            response = CoreV1Api(self._client).read_node(node_name, _preload_content=False)
        except ApiException as error:
            if error.status != 404:
                log.warning("reading node %s for drift failed: %s", node_name, error.reason)
                return None
        else:
            facts = _facts(json.loads(response.data))
        with self._lock:
            self._cache = {name: entry for name, entry in self._cache.items() if now < entry[0]}
            self._cache[node_name] = (now + NODE_FACTS_TTL, facts)
        return facts


def _facts(node: dict[str, Any]) -> NodeFacts | None:
    metadata = node.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return None
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return NodeFacts(
        kubelet_version=str(info.get("kubeletVersion") or ""),
        labels=dict(metadata.get("labels") or {}),
    )
