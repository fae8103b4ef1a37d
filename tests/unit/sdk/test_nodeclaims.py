"""The SDK's NodeClaim calls for a provider's own controllers, against the fake apiserver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from karpenter_conformance.fakekube import FakeKube
from karpenter_core.sdk.nodeclaims import ClusterNodeClaims

NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = FakeKube()
    yield fake
    fake.stop()


def test_list_delete_and_node_uids(kube: FakeKube) -> None:
    kube.put(NODECLAIMS, {"metadata": {"name": "a"}, "status": {"providerID": "x://a"}})
    kube.put("/api/v1/nodes", {"metadata": {"name": "node-a", "uid": "u-1"}})
    cluster = ClusterNodeClaims(kube.api_client())
    assert [c["metadata"]["name"] for c in cluster.nodeclaims()] == ["a"]
    assert cluster.node_uid("node-a") == "u-1"
    assert cluster.node_uid("node-b") is None
    assert cluster.delete_nodeclaim("a") is True
    assert cluster.delete_nodeclaim("a") is False
    assert cluster.nodeclaims() == []
