"""NodePool controller: template hash annotation, status resources and node count, readiness,
and the per-NodePool gauges (usage, limits, allowed disruptions by reason).

The hash itself is in ``karpenter_core.apis.v1.hashing``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import parse_quantity
from karpenter_core.apis.v1.common import CONDITION_READY
from karpenter_core.apis.v1.hashing import HASH_VERSION, nodepool_hash
from karpenter_core.apis.v1.nodeclaim import CONDITION_DRIFTED
from karpenter_core.apis.v1.nodepool import (
    CONDITION_NODE_CLASS_READY,
    CONDITION_VALIDATION_SUCCEEDED,
    NodePool,
)
from karpenter_core.controllers.objects import (
    nodeclaim_path,
    nodepool_path,
    quantities,
    set_condition,
)
from karpenter_core.controllers.runtime import LoopController
from karpenter_core.disruption.budgets import DRIFTED, EMPTY, UNDERUTILIZED, allowed_disruptions
from karpenter_core.operator import metrics

if TYPE_CHECKING:
    from karpenter_core.controllers.context import Context
    from karpenter_core.scheduling.snapshot import NodeInfo

__all__ = ["NodePoolController", "nodepool_status", "record_metrics"]

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


def _gauge_value(resource: str, quantity: str) -> float:
    """A quantity as upstream's gauges show it: CPU in cores, anything else in whole units."""
    value = parse_quantity(quantity)
    return float(value) if resource == "cpu" else float(math.ceil(value))


def _resource_type(resource: str) -> str:
    return resource.lower().replace("-", "_")


def record_metrics(
    nodepool: NodePool, resources: Mapping[str, str], nodes: Sequence[NodeInfo], now: datetime
) -> None:
    """Set the NodePool's gauges: usage (its status resources), limits (spec.limits), and per
    disruption reason the nodes its budgets allow to be disrupting at once (counted over its
    initialized nodes) and the nodes being disrupted now (deleting or tainted for disruption)."""
    name = nodepool.metadata.name or ""
    metrics.forget_nodepool(name)
    for resource, quantity in resources.items():
        metrics.NODEPOOLS_USAGE.labels(name, _resource_type(resource)).set(
            _gauge_value(resource, quantity)
        )
    for resource, limit in nodepool.spec.limits.items():
        metrics.NODEPOOLS_LIMIT.labels(name, _resource_type(resource)).set(
            _gauge_value(resource, str(limit))
        )
    initialized = [n for n in nodes if n.labels.get(wk.NODE_INITIALIZED) == "true"]
    disrupting = sum(1 for n in initialized if _disrupting(n))
    budgets = [b.model_dump(exclude_none=True) for b in nodepool.spec.disruption.budgets]
    for reason in (EMPTY, DRIFTED, UNDERUTILIZED):
        allowed = allowed_disruptions(budgets, reason, len(initialized), 0, now)
        metrics.NODEPOOLS_ALLOWED_DISRUPTIONS.labels(name, reason).set(allowed)
        metrics.NODEPOOLS_NODES_CONSUMING_BUDGETS.labels(name, reason).set(disrupting)


def _disrupting(node: NodeInfo) -> bool:
    deleted = getattr(node, "deletion_time", None) is not None
    return deleted or node.deleting or any(t.key == wk.DISRUPTED_TAINT_KEY for t in node.taints)


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
        self._published: set[str] = set()

    def reconcile(self) -> None:
        """One pass over the NodePools."""
        state = self.context.state
        nodes_by_pool: dict[str, list[NodeInfo]] = {}
        for node in state.nodes():
            if node.nodepool:
                nodes_by_pool.setdefault(node.nodepool, []).append(node)
        present = set()
        for nodepool in state.nodepools():
            name = nodepool.metadata.name or ""
            present.add(name)
            if nodepool.metadata.deletion_timestamp is not None:
                continue
            try:
                self._reconcile_one(nodepool, nodes_by_pool.get(name, []))
            except Exception:
                log.exception("nodepool %s: reconcile failed", name)
        for name in self._published - present:
            metrics.forget_nodepool(name)
        self._published = present

    def _reconcile_one(self, nodepool: NodePool, nodes: list[NodeInfo]) -> None:
        client = self.context.client
        manifest = nodepool.to_manifest()
        path = nodepool_path(nodepool.metadata.name or "")
        annotations = nodepool.metadata.annotations
        wanted = nodepool_hash(manifest)
        if annotations.get(wk.NODEPOOL_HASH_VERSION) != HASH_VERSION:
            self._restamp_nodeclaims(nodepool.metadata.name or "", wanted)
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
        record_metrics(nodepool, status["resources"], nodes, self.context.now())

    def _restamp_nodeclaims(self, name: str, wanted: str) -> None:
        """The NodePool's hash was computed another way (another hash version: an earlier
        release, or another Karpenter before a cut-over): its NodeClaims of another version get
        this version and, unless already drifted, the current hash, as upstream does; a change
        of how the hash is computed is no drift. Done before the NodePool's own annotations, so
        a failure here is retried on the next pass."""
        for claim in self.context.state.nodeclaims():
            annotations = claim.metadata.annotations
            if (
                claim.metadata.labels.get(wk.NODEPOOL) != name
                or annotations.get(wk.NODEPOOL_HASH_VERSION) == HASH_VERSION
            ):
                continue
            update = {wk.NODEPOOL_HASH_VERSION: HASH_VERSION}
            if not any(c.type == CONDITION_DRIFTED for c in claim.status.conditions):
                update[wk.NODEPOOL_HASH] = wanted
            self.context.client.patch(
                nodeclaim_path(claim.metadata.name or ""), {"metadata": {"annotations": update}}
            )
