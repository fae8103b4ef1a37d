"""Operator building blocks that need no cluster: rate limit, event dedupe, logs, metrics, probes."""

import io
import json
import logging
import urllib.error
import urllib.request

import pytest

from karpenter_core.operator import logs, metrics
from karpenter_core.operator.events import Deduper, reference
from karpenter_core.operator.health import Probes
from karpenter_core.operator.kube import Conflict, Gone, TokenBucket, TooManyRequests, _error
from karpenter_core.operator.state import ClusterNode, ClusterPod


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now += 10  # refills, but never beyond the burst
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    assert bucket.reserve() > 0


def test_deduper_suppresses_repeats_for_the_window() -> None:
    clock = FakeClock()
    deduper = Deduper(window=120, clock=clock)
    key = ("Pod", "ns", "p", "", "Nominated", "m")
    assert deduper.admit(key)
    assert not deduper.admit(key)
    assert deduper.admit((*key[:-1], "other message"))
    clock.now += 119
    assert not deduper.admit(key)
    clock.now += 1
    assert deduper.admit(key)


def test_reference_of_decoded_objects_and_manifests() -> None:
    pod = ClusterPod.decode(
        {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"containers": []}}
    )
    assert reference(pod) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
    }
    node = ClusterNode.decode({"metadata": {"name": "n"}, "status": {}})
    assert reference(node)["kind"] == "Node"
    manifest = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "a"}}
    assert reference(manifest) == {**manifest, "metadata": {"name": "a"}}


def test_pending_pod_rule() -> None:
    def pod(**status: object) -> ClusterPod:
        base = {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": []},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
                **status,
            },
        }
        return ClusterPod.decode(base)

    assert pod().is_pending()
    assert not pod(nominatedNodeName="n1").is_pending()
    assert not pod(conditions=[]).is_pending()
    bound = ClusterPod.decode(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "nodeName": "n1"},
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ]
            },
        }
    )
    assert not bound.is_pending()
    daemon = pod()
    daemon.owner_kind = "DaemonSet"
    assert not daemon.is_pending()


def test_api_errors_map_to_types() -> None:
    assert isinstance(_error(409, b'{"reason":"AlreadyExists","message":"x"}', {}), Conflict)
    assert isinstance(_error(410, b"{}", {}), Gone)
    throttled = _error(429, b"{}", {"Retry-After": "3"})
    assert isinstance(throttled, TooManyRequests) and throttled.retry_after == 3


def test_json_logs_carry_bound_context() -> None:
    stream = io.StringIO()
    logs.configure("debug", stream)
    log = logging.getLogger("karpenter.test")
    with logs.bind(controller="provisioner", nodepool="default"):
        log.info("launched", extra={"nodeclaim": "default-abc"})
    log.debug("outside")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "launched"
    assert first["level"] == "info"
    assert (first["controller"], first["nodepool"], first["nodeclaim"]) == (
        "provisioner",
        "default",
        "default-abc",
    )
    assert "nodepool" not in second
    logging.getLogger().handlers.clear()


class _Provider:
    name = "fake"

    def get(self, provider_id: str) -> str:
        raise KeyError(provider_id)

    def list(self) -> list[str]:
        return ["a"]


def _sample(name: str, labels: dict[str, str]) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_instrument_times_calls_and_counts_errors() -> None:
    provider = metrics.instrument(_Provider())
    labels = {"controller": "gc", "method": "get", "provider": "fake"}
    before = _sample("karpenter_cloudprovider_errors_total", {**labels, "error": "KeyError"})
    with logs.bind(controller="gc"):
        assert provider.list() == ["a"]
        with pytest.raises(KeyError):
            provider.get("x")
    after = _sample("karpenter_cloudprovider_errors_total", {**labels, "error": "KeyError"})
    assert after == before + 1
    list_labels = {**labels, "method": "list"}
    assert _sample("karpenter_cloudprovider_duration_seconds_count", list_labels) >= 1
    assert provider.name == "fake"


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_probes_serve_health_readiness_and_metrics() -> None:
    ready = {"value": False}
    probes = Probes(0, 0, ready=lambda: ready["value"]).start()
    try:
        assert probes.metrics_port != probes.health_port
        assert _get(probes.health_port, "/healthz")[0] == 200
        assert _get(probes.health_port, "/readyz")[0] == 503
        ready["value"] = True
        assert _get(probes.health_port, "/readyz")[0] == 200
        status, body = _get(probes.metrics_port, "/metrics")
        assert status == 200 and "karpenter_nodeclaims_created_total" in body
        assert _get(probes.metrics_port, "/nope")[0] == 404
    finally:
        probes.stop()


def test_a_launching_node_is_capacity_on_its_way() -> None:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.operator.state import _as_launching

    claim = NodeClaim.from_manifest(
        {
            "metadata": {"name": "c"},
            "spec": {
                "nodeClassRef": {"group": "g.sh", "kind": "K", "name": "n"},
                "requirements": [],
                "startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}],
            },
            "status": {"allocatable": {"cpu": "4"}},
        }
    )
    taints = [
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "example.com/agent", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    ]
    node = ClusterNode.decode({"metadata": {"name": "n"}, "spec": {"taints": taints}})
    _as_launching(node, claim)
    assert not node.initialized
    assert [t.key for t in node.taints] == ["dedicated"]
    assert node.allocatable == {"cpu": 4000}
    ready = ClusterNode.decode(
        {
            "metadata": {"name": "n", "labels": {"karpenter.sh/initialized": "true"}},
            "spec": {"taints": taints},
        }
    )
    _as_launching(ready, claim)
    assert ready.initialized and len(ready.taints) == 4
