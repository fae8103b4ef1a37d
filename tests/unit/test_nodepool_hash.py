"""The NodePool controller's hash annotations: a NodePool hashed by another hash version (an
earlier release, or upstream Karpenter before a cut-over) restamps its NodeClaims instead of
drifting them."""

from __future__ import annotations

from typing import Any, cast

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.hashing import HASH_VERSION, nodepool_hash
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from tests.unit.nodepool_fixtures import RecordingClient, StaticState, nodepool_controller

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


def _reconcile(state: StaticState) -> list[tuple[str, Any]]:
    controller = nodepool_controller(state)
    controller.reconcile()
    return cast(RecordingClient, controller.context.client).patches


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
    patches = _reconcile(StaticState([pool], nodeclaims=claims))

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
    patches = _reconcile(StaticState([pool], nodeclaims=[_nodeclaim("old", "web", OLD)]))
    assert _annotation_patches(patches) == {}
