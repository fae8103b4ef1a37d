"""The informer against the fake and the real apiserver: list then watch, selectors, bookmarks,
and a re-list after 410 Gone."""

from __future__ import annotations

import threading
from typing import Any

from karpenter_conformance.waiting import wait_until
from karpenter_core.state.informer import Informer
from tests.kubeapi.conftest import KubeAPI


def _data(obj: dict[str, Any]) -> str:
    return str((obj.get("data") or {}).get("k", ""))


def _configmap(name: str, value: str = "x") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"k": value},
    }


def test_the_informer_lists_then_watches_every_change(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps"
    kube_api.client.create(path, _configmap("before"))
    seen: list[tuple[str, str, Any, Any]] = []
    informer = Informer(kube_api.client, path, _data, watch_timeout=30)
    informer.add_handler(lambda *event: seen.append(event))
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        kube_api.client.create(path, _configmap("after", "1"))
        kube_api.client.patch(f"{path}/before", {"data": {"k": "2"}})
        kube_api.client.delete(f"{path}/after")
        wait_until(lambda: len(seen) == 4, "four events", timeout=10)
        assert [(e[0], e[1].split("/")[1], e[2], e[3]) for e in seen] == [
            ("ADDED", "before", None, "x"),
            ("ADDED", "after", None, "1"),
            ("MODIFIED", "before", "x", "2"),
            ("DELETED", "after", "1", None),
        ]
        assert informer.lists == 1
    finally:
        informer.stop()


def test_a_field_selected_watch_drops_objects_that_stop_matching(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    pods = f"/api/v1/namespaces/{ns}/pods"
    spec = {"schedulerName": "none", "containers": [{"name": "c", "image": "pause"}]}
    informer = Informer(
        kube_api.client,
        pods,
        lambda obj: (obj.get("status") or {}).get("phase"),
        params={"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
        watch_timeout=30,
    )
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        kube_api.client.create(pods, {"metadata": {"name": "job"}, "spec": spec})
        wait_until(lambda: f"{ns}/job" in informer.cache, "the pod seen", timeout=10)
        kube_api.client.patch(f"{pods}/job/status", {"status": {"phase": "Succeeded"}})
        wait_until(
            lambda: f"{ns}/job" not in informer.cache, "the finished pod dropped", timeout=10
        )
    finally:
        informer.stop()


def test_bookmarks_move_the_resource_version_of_a_quiet_watch(kube_api: KubeAPI) -> None:
    quiet, busy = kube_api.namespace(), kube_api.namespace()
    path = f"/api/v1/namespaces/{quiet}/configmaps"
    listed = kube_api.client.list(path)[1]
    other = f"/api/v1/namespaces/{busy}/configmaps"
    write = threading.Timer(0.5, lambda: kube_api.client.create(other, _configmap("elsewhere")))
    write.start()
    # the watch cache sends a bookmark shortly before the watch times out, when it has news
    events = list(kube_api.client.watch(path, listed, timeout_seconds=3))
    write.join()
    assert events and {kind for kind, _ in events} == {"BOOKMARK"}, events
    assert int(events[-1][1]["metadata"]["resourceVersion"]) > int(listed)


def test_the_informer_lists_again_after_410_gone(kube_api: KubeAPI) -> None:
    ns = kube_api.namespace()
    path = f"/api/v1/namespaces/{ns}/configmaps"
    kube_api.client.create(path, _configmap("a"))
    informer = Informer(kube_api.client, path, _data, watch_timeout=30, backoff_base=0.05)
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        informer.stop(timeout=0.1)  # away for a while: changes happen and history is expired
        kube_api.client.create(path, _configmap("b"))
        kube_api.client.delete(f"{path}/a")
        if kube_api.fake is not None:
            kube_api.fake.end_watches()
        kube_api.expire_history()
        seen: list[tuple[str, str]] = []
        informer.add_handler(lambda kind, key, old, new: seen.append((kind, key)))
        informer.start()
        wait_until(lambda: informer.lists == 2, "a re-list after 410 Gone", timeout=30)
        assert informer.cache == {f"{ns}/b": "x"}
        assert sorted(seen) == [("ADDED", f"{ns}/b"), ("DELETED", f"{ns}/a")]
    finally:
        informer.stop()
