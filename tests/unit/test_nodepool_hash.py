"""The NodePool controller's hash annotations: a NodePool hashed by another hash version (an
earlier release, or upstream Karpenter before a cut-over) restamps its NodeClaims instead of
drifting them."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.hashing import HASH_VERSION, nodepool_hash
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.controllers.context import Context
from karpenter_core.controllers.nodepool import NodePoolController

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
OLD = {wk.NODEPOOL_HASH: "6821555240831079241", wk.NODEPOOL_HASH_VERSION: "v3"}


def _nodepool(annotations: dict[str, str]) -> NodePool:
    return NodePool.from_manifest(
        {
            "metadata": {"name": "web", "uid": "uid-web", "annotations": annotations},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [],
                        "nodeClassRef": {"group": "g.sh", "kind": "K", "name": "n"},
                    }
                }
            },
        }
    )


def _nodeclaim(name: str, nodepool: str, annotations: dict[str, str], **status: Any) -> NodeClaim:
    return NodeClaim.from_manifest(
        {
            "metadata": {
                "name": name,
                "labels": {wk.NODEPOOL: nodepool},
                "annotations": annotations,
            },
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "g.sh", "kind": "K", "name": "n"},
            },
            "status": status,
        }
    )


class _State:
    def __init__(self, nodepools: list[NodePool], nodeclaims: list[NodeClaim]) -> None:
        self.pools = nodepools
        self.claims = nodeclaims

    def nodepools(self) -> list[NodePool]:
        return self.pools

    def nodeclaims(self) -> list[NodeClaim]:
        return self.claims

    def nodes(self) -> list[Any]:
        return []


class _Client:
    def __init__(self) -> None:
        self.patches: list[tuple[str, Any]] = []

    def patch(self, path: str, body: Any) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}


class _Provider:
    def node_class_readiness(self, nodepool: NodePool) -> Any:
        return SimpleNamespace(ready=True, reason="")


def _reconcile(state: _State) -> list[tuple[str, Any]]:
    client = _Client()
    context = Context(
        settings=None,  # type: ignore[arg-type]
        client=client,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        provider=_Provider(),  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
        clock=lambda: NOW,
    )
    NodePoolController(context).reconcile()
    return client.patches


def _annotation_patches(patches: list[tuple[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        path.rsplit("/", 1)[1]: body["metadata"]["annotations"]
        for path, body in patches
        if "/nodeclaims/" in path
    }


def test_a_hash_version_change_restamps_the_nodepools_nodeclaims() -> None:
    pool = _nodepool(OLD)
    wanted = nodepool_hash(pool.to_manifest())
    drifted = [{"type": "Drifted", "status": "True", "reason": "NodePoolDrifted"}]
    claims = [
        _nodeclaim("kept", "web", OLD),
        _nodeclaim("drifted", "web", OLD, conditions=drifted),
        _nodeclaim(
            "current", "web", {wk.NODEPOOL_HASH: "x", wk.NODEPOOL_HASH_VERSION: HASH_VERSION}
        ),
        _nodeclaim("other-pool", "batch", OLD),
    ]
    patches = _reconcile(_State([pool], claims))

    assert _annotation_patches(patches) == {
        "kept": {wk.NODEPOOL_HASH: wanted, wk.NODEPOOL_HASH_VERSION: HASH_VERSION},
        "drifted": {wk.NODEPOOL_HASH_VERSION: HASH_VERSION},
    }
    [nodepool_patch] = [body for path, body in patches if path.endswith("/nodepools/web")]
    assert nodepool_patch["metadata"]["annotations"] == {
        wk.NODEPOOL_HASH: wanted,
        wk.NODEPOOL_HASH_VERSION: HASH_VERSION,
    }
    first_nodepool = next(i for i, (path, _) in enumerate(patches) if "/nodepools/" in path)
    assert all(i < first_nodepool for i, (path, _) in enumerate(patches) if "/nodeclaims/" in path)


def test_a_nodepool_of_this_hash_version_leaves_its_nodeclaims_alone() -> None:
    pool = _nodepool({})
    wanted = nodepool_hash(pool.to_manifest())
    pool = _nodepool({wk.NODEPOOL_HASH: wanted, wk.NODEPOOL_HASH_VERSION: HASH_VERSION})
    patches = _reconcile(_State([pool], [_nodeclaim("old", "web", OLD)]))
    assert _annotation_patches(patches) == {}
