"""A NodePoolController on in-memory inputs: a fixed cluster state, a client recording its
patches, and a provider whose NodeClasses are all ready."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.controllers.context import Context
from karpenter_core.controllers.nodepool import NodePoolController
from karpenter_core.state.cluster import ClusterNode

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class StaticState:
    """The NodePools, nodes and NodeClaims the controller reads."""

    def __init__(
        self,
        nodepools: list[NodePool],
        nodes: list[ClusterNode] | None = None,
        nodeclaims: list[NodeClaim] | None = None,
    ) -> None:
        self.pools = nodepools
        self.node_list = nodes or []
        self.claims = nodeclaims or []

    def nodepools(self) -> list[NodePool]:
        return self.pools

    def nodes(self) -> list[ClusterNode]:
        return self.node_list

    def nodeclaims(self) -> list[NodeClaim]:
        return self.claims


class RecordingClient:
    """Records every patch as (path, body)."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, Any]] = []

    def patch(self, path: str, body: Any) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}


class _ReadyProvider:
    def node_class_readiness(self, nodepool: NodePool) -> Any:
        return SimpleNamespace(ready=True, reason="")


def nodepool_controller(state: StaticState) -> NodePoolController:
    """A NodePoolController on ``state``, a ``RecordingClient`` and a clock stopped at NOW."""
    context = Context(
        settings=None,  # type: ignore[arg-type]
        client=RecordingClient(),  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        provider=_ReadyProvider(),  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
        clock=lambda: NOW,
    )
    return NodePoolController(context)
