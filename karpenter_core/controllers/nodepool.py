"""NodePool controller: template hash annotation, status resources and node count, readiness.

The hash itself is in ``karpenter_core.apis.v1.hashing``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import parse_quantity
from karpenter_core.apis.v1.common import CONDITION_READY
from karpenter_core.apis.v1.hashing import HASH_VERSION, nodepool_hash
from karpenter_core.apis.v1.nodepool import (
    CONDITION_NODE_CLASS_READY,
    CONDITION_VALIDATION_SUCCEEDED,
    NodePool,
)
from karpenter_core.controllers.objects import nodepool_path, quantities, set_condition
from karpenter_core.controllers.runtime import LoopController

if TYPE_CHECKING:
    from karpenter_core.controllers.context import Context
    from karpenter_core.scheduling.snapshot import NodeInfo

__all__ = ["NodePoolController", "nodepool_status"]

log = logging.getLogger("karpenter.nodepool")


def nodepool_status(
    nodepool: Mapping[str, Any],
    nodes: Iterable[NodeInfo],
    readiness: tuple[bool, str],
    now: datetime,
) -> dict[str, Any]:
    """The NodePool's status given its Nodes (capacity summed) and NodeClass readiness.

    ValidationSucceeded is True: the cluster state only holds NodePools that pass the model's
    validation (which mirrors the CRD's), so an invalid one never reaches this point."""
    status: dict[str, Any] = {
        "conditions": list((nodepool.get("status") or {}).get("conditions") or ())
    }
    total: dict[str, int] = {}
    count = 0
    for node in nodes:
        count += 1
        for resource, amount in node.capacity.items():
            total[resource] = total.get(resource, 0) + amount
    total["nodes"] = count * 1000
    status["resources"] = quantities(total)
    status["nodes"] = count
    ready, reason = readiness
    set_condition(
        status,
        CONDITION_NODE_CLASS_READY,
        "True" if ready else "False",
        "NodeClassReady" if ready else "NodeClassNotReady",
        "" if ready else reason,
        now,
    )
    set_condition(
        status,
        CONDITION_VALIDATION_SUCCEEDED,
        "True",
        "ValidationSucceeded",
        "",
        now,
    )
    blocking = [
        c["type"]
        for c in status["conditions"]
        if c["type"] in (CONDITION_NODE_CLASS_READY, CONDITION_VALIDATION_SUCCEEDED)
        and c["status"] != "True"
    ]
    set_condition(
        status,
        CONDITION_READY,
        "False" if blocking else "True",
        "NotReady" if blocking else "Ready",
        f"{', '.join(blocking)} not True" if blocking else "",
        now,
    )
    return status


def _same_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def key(status: Mapping[str, Any]) -> tuple[Any, ...]:
        conditions = sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message", ""))
            for c in status.get("conditions") or ()
        )
        resources = {k: parse_quantity(v) for k, v in (status.get("resources") or {}).items()}
        return (conditions, resources, status.get("nodes", 0))

    return key(old) == key(new)


class NodePoolController(LoopController):
    """Keeps every NodePool's hash annotation and status current."""

    name = "nodepool"

    def __init__(self, context: Context, period: float = 5.0) -> None:
        super().__init__()
        self.context = context
        self.period = period

    def reconcile(self) -> None:
        """One pass over the NodePools."""
        state = self.context.state
        nodes_by_pool: dict[str, list[NodeInfo]] = {}
        for node in state.nodes():
            if node.nodepool:
                nodes_by_pool.setdefault(node.nodepool, []).append(node)
        for nodepool in state.nodepools():
            if nodepool.metadata.deletion_timestamp is not None:
                continue
            name = nodepool.metadata.name or ""
            try:
                self._reconcile_one(nodepool, nodes_by_pool.get(name, []))
            except Exception:
                log.exception("nodepool %s: reconcile failed", name)

    def _reconcile_one(self, nodepool: NodePool, nodes: list[NodeInfo]) -> None:
        client = self.context.client
        manifest = nodepool.to_manifest()
        path = nodepool_path(nodepool.metadata.name or "")
        annotations = nodepool.metadata.annotations
        wanted = nodepool_hash(manifest)
        if (
            annotations.get(wk.NODEPOOL_HASH) != wanted
            or annotations.get(wk.NODEPOOL_HASH_VERSION) != HASH_VERSION
        ):
            patch = {wk.NODEPOOL_HASH: wanted, wk.NODEPOOL_HASH_VERSION: HASH_VERSION}
            client.patch(path, {"metadata": {"annotations": patch}})
        readiness = self.context.provider.node_class_readiness(nodepool)
        status = nodepool_status(
            manifest, nodes, (readiness.ready, readiness.reason), self.context.now()
        )
        if not _same_status(manifest.get("status") or {}, status):
            client.patch(path + "/status", {"status": status})
