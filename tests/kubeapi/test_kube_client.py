"""KubeClient against the fake and the real apiserver: CRUD, conflicts, patches, finalizers,
the status subresource, field selectors and evictions under PodDisruptionBudgets."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_conformance.waiting import wait_until
from karpenter_core.operator.kube import (
    ApiError,
    Conflict,
    NotFound,
    TooManyRequests,
    retry_on_conflict,
)
from tests.kubeapi.conftest import KubeAPI


def _configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _pod(name: str, node: str = "", labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod no scheduler or kubelet touches (``schedulerName: none``; ``node`` names no Node)."""
    spec: dict[str, Any] = {
        "schedulerName": "none",
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def _running(kube_api: KubeAPI, path: str) -> None:
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    kube_api.client.patch(f"{path}/status", {"status": status})


def test_create_with_generate_name_get_and_paginated_list(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps"
    created = [
        kube_api.client.create(path, {"metadata": {"generateName": "cm-"}, "data": {"i": str(i)}})
        for i in range(5)
    ]
    names = [c["metadata"]["name"] for c in created]
    assert all(n.startswith("cm-") and len(n) > 3 for n in names) and len(set(names)) == 5
    versions = [int(c["metadata"]["resourceVersion"]) for c in created]
    assert versions == sorted(versions), "resourceVersions grow with every write"
    assert kube_api.client.get(f"{path}/{names[2]}")["data"] == {"i": "2"}
    items, version = kube_api.client.list(path, page_size=2)
    assert sorted(i["metadata"]["name"] for i in items) == sorted(names)
    assert int(version) >= versions[-1]
    with pytest.raises(Conflict):
        kube_api.client.create(path, _configmap(names[0]))
    with pytest.raises(NotFound):
        kube_api.client.get(f"{path}/absent")
    with pytest.raises(NotFound):
        kube_api.client.create("/api/v1/namespaces/no-such-namespace/configmaps", _configmap("x"))


def test_a_stale_resource_version_conflicts_and_retry_on_conflict_rereads(
    kube_api: KubeAPI,
) -> None:
    ns = kube_api.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps/shared"
    first = kube_api.client.create(
        f"/api/v1/namespaces/{ns}/configmaps", _configmap("shared", n="0")
    )
    kube_api.client.patch(path, {"data": {"n": "1"}})  # another writer
    with pytest.raises(Conflict):
        kube_api.client.replace(path, {**first, "data": {"n": "x"}})
    with pytest.raises(Conflict):
        kube_api.client.patch(
            path, {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]}}
        )
    attempts: list[str] = []
    stale = [first]

    def bump() -> dict[str, Any]:
        current = stale.pop() if stale else kube_api.client.get(path)
        attempts.append(current["data"]["n"])
        body = {**current, "data": {"n": str(int(current["data"]["n"]) + 1)}}
        return kube_api.client.replace(path, body)

    result = retry_on_conflict(bump, backoff=0.001)
    assert attempts == ["0", "1"], "the stale copy conflicted, the re-read one succeeded"
    assert result["data"] == {"n": "2"}


def test_merge_and_json_patches(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps/p"
    kube_api.client.create(f"/api/v1/namespaces/{ns}/configmaps", _configmap("p", a="1", b="2"))
    merged = kube_api.client.patch(path, {"data": {"a": None, "c": "3"}})
    assert merged["data"] == {"b": "2", "c": "3"}
    patched = kube_api.client.patch(
        path,
        [
            {"op": "test", "path": "/data/b", "value": "2"},
            {"op": "replace", "path": "/data/b", "value": "4"},
        ],
        patch_type="json",
    )
    assert patched["data"] == {"b": "4", "c": "3"}
    with pytest.raises(ApiError) as failed:
        kube_api.client.patch(
            path, [{"op": "test", "path": "/data/b", "value": "2"}], patch_type="json"
        )
    assert failed.value.status == 422
    strategic = kube_api.client.patch(
        path, {"metadata": {"labels": {"x": "y"}}}, patch_type="strategic"
    )
    assert strategic["metadata"]["labels"] == {"x": "y"}


def test_finalizers_hold_a_deleted_object_until_the_last_one_is_removed(
    kube_api: KubeAPI,
) -> None:
    ns = kube_api.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps/held"
    body = _configmap("held")
    body["metadata"]["finalizers"] = ["example.com/a", "example.com/b"]
    kube_api.client.create(f"/api/v1/namespaces/{ns}/configmaps", body)
    kube_api.client.delete(path)
    held = kube_api.client.get(path)
    assert held["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiError) as refused:
        kube_api.client.patch(
            path, {"metadata": {"finalizers": ["example.com/a", "example.com/b", "example.com/c"]}}
        )
    assert refused.value.status == 422
    kube_api.client.patch(path, {"metadata": {"finalizers": ["example.com/b"]}})
    assert kube_api.client.get(path)["metadata"]["finalizers"] == ["example.com/b"]
    kube_api.client.patch(path, {"metadata": {"finalizers": None}})
    with pytest.raises(NotFound):
        kube_api.client.get(path)


def test_status_is_a_subresource_and_field_selectors_filter(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    pods = f"/api/v1/namespaces/{ns}/pods"
    kube_api.client.create(pods, _pod("bound", node="node-x"))
    kube_api.client.create(pods, _pod("pending"))
    ignored = kube_api.client.patch(f"{pods}/pending", {"status": {"phase": "Running"}})
    assert ignored["status"]["phase"] == "Pending", "the object's writes leave status alone"
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    written = kube_api.client.patch(
        f"{pods}/pending/status", {"status": {"conditions": [condition]}}
    )
    assert written["status"]["conditions"][0]["reason"] == "Unschedulable"
    on_node, _ = kube_api.client.list(pods, {"fieldSelector": "spec.nodeName=node-x"})
    assert [p["metadata"]["name"] for p in on_node] == ["bound"]
    kube_api.client.patch(f"{pods}/bound/status", {"status": {"phase": "Succeeded"}})
    live, _ = kube_api.client.list(
        pods, {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
    )
    assert [p["metadata"]["name"] for p in live] == ["pending"]


def test_evictions_respect_pod_disruption_budgets(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    pods = f"/api/v1/namespaces/{ns}/pods"
    for name in ("a", "b"):
        kube_api.client.create(pods, _pod(name, node="node-x", labels={"app": "web"}))
        _running(kube_api, f"{pods}/{name}")
    pdbs = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    kube_api.client.create(
        pdbs,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    if kube_api.backend == "real":  # the controller-manager computes what the budget allows
        wait_until(
            lambda: (
                (kube_api.client.get(f"{pdbs}/web").get("status") or {}).get("disruptionsAllowed")
                == 1
            ),
            "the budget's status",
            timeout=30,
        )
    kube_api.client.evict(ns, "a")
    with pytest.raises(TooManyRequests) as refused:
        kube_api.client.evict(ns, "b")
    assert refused.value.status == 429
    kube_api.client.create(pods, _pod("loose", labels={"app": "web"}))
    kube_api.client.evict(ns, "loose")  # a Pending pod is evicted whatever the budget says
    with pytest.raises(NotFound):
        kube_api.client.evict(ns, "absent")
