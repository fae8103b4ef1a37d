"""The project's NodePool and NodeClaim CRDs, as served by a real kube-apiserver."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

pytestmark = pytest.mark.integration

GROUP = "karpenter.sh"
VERSION = "v1"
NODE_CLASS_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
MIN_VALUES_MESSAGE = (
    "requirements with 'minValues' must have at least that many values specified in the "
    "'values' field"
)


class ClusterObjects:
    """Creates cluster-scoped karpenter.sh objects and deletes them afterwards."""

    def __init__(self, api: client.CustomObjectsApi):
        self.api = api
        self.created: list[tuple[str, str]] = []

    def create(self, plural: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
        name = f"{kind.lower()}-{uuid.uuid4().hex[:8]}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        }
        created: dict[str, Any] = self.api.create_cluster_custom_object(
            GROUP, VERSION, plural, body
        )
        self.created.append((plural, name))
        return created

    def read(self, plural: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get_cluster_custom_object(GROUP, VERSION, plural, name)
        return found


@pytest.fixture
def objects(kube_client: client.ApiClient) -> Iterator[ClusterObjects]:
    """Creates NodePools and NodeClaims, deleted when the test ends."""
    store = ClusterObjects(client.CustomObjectsApi(kube_client))
    try:
        yield store
    finally:
        for plural, name in store.created:
            store.api.delete_cluster_custom_object(GROUP, VERSION, plural, name)


def _node_pool_spec(requirements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"template": {"spec": {"nodeClassRef": NODE_CLASS_REF, "requirements": requirements}}}


def _rejection(objects: ClusterObjects, requirement: dict[str, Any]) -> str:
    """The API server's message when it refuses a NodePool with this requirement."""
    with pytest.raises(client.ApiException) as caught:
        objects.create("nodepools", "NodePool", _node_pool_spec([requirement]))
    assert caught.value.status == 422
    message: str = json.loads(caught.value.body)["message"]
    return message


def test_node_pool_round_trips(objects: ClusterObjects) -> None:
    requirements = [
        {
            "key": "node.kubernetes.io/instance-type",
            "operator": "In",
            "values": ["c-4x", "m-4x", "r-4x"],
            "minValues": 2,
        },
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]
    created = objects.create("nodepools", "NodePool", _node_pool_spec(requirements))

    spec = objects.read("nodepools", created["metadata"]["name"])["spec"]["template"]["spec"]
    assert spec["nodeClassRef"] == NODE_CLASS_REF
    assert spec["requirements"] == requirements


def test_node_claim_round_trips(objects: ClusterObjects) -> None:
    requirements = [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
    created = objects.create(
        "nodeclaims", "NodeClaim", {"nodeClassRef": NODE_CLASS_REF, "requirements": requirements}
    )

    spec = objects.read("nodeclaims", created["metadata"]["name"])["spec"]
    assert spec["nodeClassRef"] == NODE_CLASS_REF
    assert spec["requirements"] == requirements


def test_unknown_operator_is_rejected(objects: ClusterObjects) -> None:
    message = _rejection(
        objects, {"key": "kubernetes.io/arch", "operator": "Near", "values": ["x"]}
    )
    assert 'requirements[0].operator: Unsupported value: "Near"' in message


def test_min_values_above_the_number_of_values_is_rejected(objects: ClusterObjects) -> None:
    message = _rejection(
        objects,
        {
            "key": "node.kubernetes.io/instance-type",
            "operator": "In",
            "values": ["c-4x"],
            "minValues": 2,
        },
    )
    assert MIN_VALUES_MESSAGE in message


@pytest.mark.parametrize("policy", ["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"])
def test_every_consolidation_policy_is_accepted(objects: ClusterObjects, policy: str) -> None:
    spec = {**_node_pool_spec([]), "disruption": {"consolidationPolicy": policy}}
    created = objects.create("nodepools", "NodePool", spec)

    stored = objects.read("nodepools", created["metadata"]["name"])["spec"]["disruption"]
    assert stored["consolidationPolicy"] == policy


def test_a_misspelt_consolidation_policy_is_rejected(objects: ClusterObjects) -> None:
    spec = {**_node_pool_spec([]), "disruption": {"consolidationPolicy": "balanced"}}
    with pytest.raises(client.ApiException) as caught:
        objects.create("nodepools", "NodePool", spec)
    assert caught.value.status == 422
    message = json.loads(caught.value.body)["message"]
    assert 'spec.disruption.consolidationPolicy: Unsupported value: "balanced"' in message
