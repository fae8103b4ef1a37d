"""The controllers' pure decisions: NodeClaim shape, limits, lifecycle steps, drain plans,
garbage collection and repair, on hand-written objects (no cluster)."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.hashing import HASH_VERSION, nodepool_hash
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import (
    CreateError,
    InstanceType,
    InsufficientCapacity,
    NodeClassNotReady,
    Offering,
    RepairPolicy,
)
from karpenter_core.controllers.context import Context
from karpenter_core.controllers.disruption import stale_disruption_taints
from karpenter_core.controllers.garbage_collection import lost_nodeclaims, orphans
from karpenter_core.controllers.node_repair import repairs
from karpenter_core.controllers.nodeclaim.consolidatable import (
    ConsolidatableController,
    consolidatable_at,
    consolidate_after,
)
from karpenter_core.controllers.nodeclaim.drifted import DriftedController, drifted_condition
from karpenter_core.controllers.nodeclaim.initialization import initialization_blocker
from karpenter_core.controllers.nodeclaim.launch import launch_failure, launched
from karpenter_core.controllers.nodeclaim.lifecycle import (
    LifecycleController,
    Step,
    next_step,
    ready_condition,
)
from karpenter_core.controllers.nodeclaim.liveness import liveness_verdict
from karpenter_core.controllers.nodeclaim.podevents import (
    DEDUPE_WINDOW,
    PodEventsController,
    pod_event_update,
)
from karpenter_core.controllers.nodeclaim.registration import registered_node
from karpenter_core.controllers.nodeclaims import nodeclaim_manifest
from karpenter_core.controllers.nodepool import nodepool_status
from karpenter_core.controllers.objects import nodeclaim_path, set_condition, status_true
from karpenter_core.controllers.provisioning import Batcher, limit_check, without_preemptors
from karpenter_core.controllers.termination import drain_plan, termination_deadline
from karpenter_core.disruption.drift import NodePoolShape
from karpenter_core.operator.kube import Conflict
from karpenter_core.operator.settings import Settings
from karpenter_core.scheduling.cluster import limit_usage, with_expected_allocatable
from karpenter_core.scheduling.scheduler import schedule
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot
from karpenter_core.scheduling.taints import Toleration
from karpenter_core.state.cluster import ClusterNode, ClusterPod, ClusterState

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
GI = 2**30 * 1000


def _type(name: str, cpu: int, price: float) -> InstanceType:
    labels = {
        "node.kubernetes.io/instance-type": name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    }
    offerings = [
        Offering(
            Requirements.from_labels(
                {"topology.kubernetes.io/zone": "zone-a", "karpenter.sh/capacity-type": "spot"}
            ),
            price,
        )
    ]
    capacity = {"cpu": cpu * 1000, "memory": 2 * cpu * GI, "pods": 110_000}
    return InstanceType(name, Requirements.from_labels(labels), offerings, capacity)


CATALOG = [_type("c-2", 2, 0.1), _type("c-4", 4, 0.2), _type("c-8", 8, 0.4)]


def _nodepool(limits: dict[str, str] | None = None, **template: Any) -> NodePool:
    return NodePool.from_manifest(
        {
            "metadata": {"name": "default", "uid": "uid-np"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                    "spec": {
                        "requirements": [
                            {
                                "key": "karpenter.sh/capacity-type",
                                "operator": "In",
                                "values": ["spot"],
                            }
                        ],
                        "nodeClassRef": {"group": "g.sh", "kind": "K", "name": "n"},
                        **template,
                    },
                },
                "limits": limits or {},
            },
        }
    )


def _claim(**status: Any) -> NodeClaim:
    meta = status.pop("metadata", {})
    return NodeClaim.from_manifest(
        {
            "metadata": {
                "name": "default-abc",
                "labels": {"karpenter.sh/nodepool": "default"},
                "creationTimestamp": "2026-01-01T11:59:00Z",
                **meta,
            },
            "spec": {
                "requirements": [
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["c-4", "c-8"],
                    }
                ],
                "nodeClassRef": {"group": "g.sh", "kind": "K", "name": "n"},
                "resources": {"requests": status.pop("requests", {"cpu": "3"})},
                "startupTaints": status.pop("startup_taints", []),
            },
            "status": status,
        }
    )


def _node(**kwargs: Any) -> ClusterNode:
    conditions = kwargs.pop("conditions", [{"type": "Ready", "status": "True"}])
    return ClusterNode.decode(
        {
            "metadata": {"name": "node-1", "labels": kwargs.pop("labels", {})},
            "spec": {"providerID": "p://1", "taints": kwargs.pop("taints", [])},
            "status": {
                "allocatable": kwargs.pop("allocatable", {"cpu": "4"}),
                "conditions": conditions,
            },
        }
    )


def _pod(name: str, **kwargs: Any) -> ClusterPod:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    spec: dict[str, Any] = {"nodeName": "node-1", "containers": [{"name": "c"}]}
    if "owner" in kwargs:
        meta["ownerReferences"] = [{"kind": kwargs.pop("owner"), "name": "o", "controller": True}]
    if "annotations" in kwargs:
        meta["annotations"] = kwargs.pop("annotations")
    if "deleting" in kwargs:
        meta["deletionTimestamp"] = "2026-01-01T11:59:00Z" if kwargs.pop("deleting") else None
    for key in ("priorityClassName", "tolerations", "terminationGracePeriodSeconds"):
        if key in kwargs:
            spec[key] = kwargs.pop(key)
    return ClusterPod.decode({"metadata": meta, "spec": spec, "status": {"phase": "Running"}})


# -- provisioning -----------------------------------------------------------------------------


def test_nodeclaim_manifest_has_upstreams_shape() -> None:
    nodepool = _nodepool(taints=[{"key": "t", "effect": "NoSchedule"}], terminationGracePeriod="1h")
    tolerate = [Toleration("t", "Exists")]
    pods = [
        PodInfo("ns", f"p{i}", {"cpu": 1500, "pods": 1000}, tolerations=tolerate) for i in range(2)
    ]
    snapshot = Snapshot(nodepools=[nodepool], instance_types={"default": CATALOG}, pending=pods)
    results = schedule(snapshot)
    [claim] = results.new_nodeclaims
    manifest = nodeclaim_manifest(claim, nodepool.to_manifest(), claim.instance_types)
    meta, spec = manifest["metadata"], manifest["spec"]
    assert meta["generateName"] == "default-"
    assert meta["finalizers"] == ["karpenter.sh/termination"], "launch needs no write before it"
    assert meta["labels"]["karpenter.sh/nodepool"] == "default"
    assert meta["labels"]["team"] == "a"
    assert meta["labels"]["karpenter.sh/capacity-type"] == "spot"
    assert meta["annotations"]["note"] == "x"
    assert meta["annotations"]["karpenter.sh/nodepool-hash"] == nodepool_hash(
        nodepool.to_manifest()
    )
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "name": "default",
            "uid": "uid-np",
            "blockOwnerDeletion": True,
        }
    ]
    by_key = {r["key"]: r for r in spec["requirements"]}
    assert by_key["node.kubernetes.io/instance-type"]["values"] == ["c-4", "c-8"]
    assert by_key["karpenter.sh/nodepool"]["values"] == ["default"]
    assert spec["resources"]["requests"] == {"cpu": "3", "pods": "2"}
    assert spec["taints"] == [{"key": "t", "effect": "NoSchedule"}]
    assert spec["terminationGracePeriod"] == "1h"
    assert spec["expireAfter"] == "720h"
    NodeClaim.from_manifest({**manifest, "metadata": {**meta, "name": "x"}})  # the API accepts it


def test_nodepool_hash_ignores_requirements_and_order() -> None:
    base = _nodepool(
        taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]
    )
    reordered = _nodepool(
        taints=[{"key": "b", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]
    )
    other_requirements = base.to_manifest()
    other_requirements["spec"]["template"]["spec"]["requirements"] = []
    changed = _nodepool(taints=[{"key": "c", "effect": "NoSchedule"}])
    assert nodepool_hash(base.to_manifest()) == nodepool_hash(reordered.to_manifest())
    assert nodepool_hash(base.to_manifest()) == nodepool_hash(other_requirements)
    assert nodepool_hash(base.to_manifest()) != nodepool_hash(changed.to_manifest())


def test_limit_check_counts_in_flight_claims_and_trims_options() -> None:
    catalog = {it.name: it for it in CATALOG}
    nodepool = _nodepool(limits={"cpu": "10"})

    def used(*claims: NodeClaim) -> dict[str, int]:
        return limit_usage([], claims, catalog).get("default", {})

    in_flight = _claim()  # not launched: counts its largest option, c-8
    check = limit_check(nodepool, CATALOG, used(in_flight))
    assert [it.name for it in check.instance_types] == ["c-2"]
    launched_claim = _claim(capacity={"cpu": "4"})
    check = limit_check(nodepool, CATALOG, used(launched_claim))
    assert [it.name for it in check.instance_types] == ["c-2", "c-4"]
    other = _claim(metadata={"name": "default-def"})
    full = limit_check(nodepool, CATALOG, used(in_flight, other))
    assert full.instance_types == []
    assert full.blocked is not None and "limit cpu=10" in full.blocked
    nodes = limit_check(_nodepool(limits={"nodes": "1"}), CATALOG, used(in_flight))
    assert nodes.blocked is not None and "nodes=1 reached (1 nodes)" in nodes.blocked
    deleting = _claim(metadata={"deletionTimestamp": "2026-01-01T12:00:00Z", "finalizers": ["f"]})
    assert [it.name for it in limit_check(nodepool, CATALOG, used(deleting)).instance_types] == [
        "c-2",
        "c-4",
        "c-8",
    ]


def test_in_flight_claims_get_their_smallest_options_allocatable() -> None:
    [claim] = with_expected_allocatable([_claim()], {it.name: it for it in CATALOG})
    assert claim.status.allocatable["cpu"] == 4


class _Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pods_awaiting_the_kube_scheduler_that_could_preempt_wait_for_its_verdict() -> None:
    def pod(name: str, priority: int) -> PodInfo:
        return PodInfo("default", name, {"cpu": 1000}, priority=priority)

    low = NodeInfo("n1", {}, {"cpu": 4000}, pods=[pod("running", 0)])
    pending = [pod("marked-high", 100), pod("awaiting-high", 100), pod("awaiting-low", 0)]
    awaiting = {"default/awaiting-high", "default/awaiting-low"}
    kept = without_preemptors(pending, awaiting, [low])
    assert [p.name for p in kept] == ["marked-high", "awaiting-low"]
    assert without_preemptors(pending, awaiting, [NodeInfo("n2", {}, {"cpu": 4000})]) == pending


def test_batcher_ends_on_idle_and_on_max() -> None:
    clock = _Clock()
    batcher = Batcher(idle=1.0, maximum=3.0, clock=clock)
    assert not batcher.ready(), "no batch before a trigger"
    batcher.trigger("ns/a")
    clock.now += 0.9
    assert not batcher.ready()
    clock.now += 0.1
    assert batcher.ready(), "idle for 1s after the last new pod"
    assert not batcher.ready(), "the next batch starts with the next trigger"
    batcher.trigger("ns/b")
    for pod in ("c", "d", "e", "f", "g"):  # a new pod every 0.5s keeps the batch open
        clock.now += 0.5
        assert not batcher.ready()
        batcher.trigger(f"ns/{pod}")
    clock.now += 0.5
    assert batcher.ready(), "the maximum cut it short"
    stop = threading.Event()
    stop.set()
    assert not batcher.wait(stop)


# -- lifecycle --------------------------------------------------------------------------------


def test_next_step_walks_the_lifecycle() -> None:
    fin = {"metadata": {"finalizers": ["karpenter.sh/termination"]}}
    assert next_step(_claim(), None) is Step.FINALIZER
    assert next_step(_claim(**fin), None) is Step.LAUNCH
    launched_at = "2026-01-01T11:59:30Z"
    conds = [{"type": "Launched", "status": "True", "lastTransitionTime": launched_at}]
    assert next_step(_claim(**fin, conditions=conds), None) is Step.NONE
    assert next_step(_claim(**fin, conditions=conds), _node()) is Step.REGISTER
    conds.append({"type": "Registered", "status": "True", "lastTransitionTime": launched_at})
    assert next_step(_claim(**fin, conditions=conds), _node()) is Step.INITIALIZE
    conds.append({"type": "Initialized", "status": "True", "lastTransitionTime": launched_at})
    done = _node(labels={"karpenter.sh/initialized": "true"})
    assert next_step(_claim(**fin, conditions=conds), done) is Step.NONE


def test_ready_rolls_up_and_transition_time_moves_only_on_change() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Launched", "True", "Launched", "", NOW)
    ready_condition(status, NOW)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown" and "Registered" in ready["message"]
    later = NOW + timedelta(minutes=1)
    assert not set_condition(status, "Launched", "True", "Launched", "", later)
    for kind in ("Registered", "Initialized"):
        set_condition(status, kind, "True", kind, "", later)
    ready_condition(status, later)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastTransitionTime"] == "2026-01-01T12:01:00Z"
    launched_condition = next(c for c in status["conditions"] if c["type"] == "Launched")
    assert launched_condition["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_launch_failures_map_as_upstream() -> None:
    assert launch_failure(InsufficientCapacity("none")).delete
    assert launch_failure(InsufficientCapacity("none")).metric_reason == "insufficient_capacity"
    assert launch_failure(NodeClassNotReady("no")).reason == "NodeClassNotReady"
    retried = launch_failure(CreateError("QuotaExceeded", "quota"))
    assert (retried.delete, retried.reason, retried.message) == (False, "QuotaExceeded", "quota")
    other = launch_failure(RuntimeError("x" * 1000))
    assert other.reason == "LaunchFailed" and len(other.message) == 300


def test_launched_keeps_the_nodeclaims_own_labels_and_adds_the_providers_annotations() -> None:
    claim = _claim(
        metadata={
            "labels": {"karpenter.sh/nodepool": "default", "team": "mine"},
            "annotations": {"note": "mine", "example.com/hash": "old"},
        }
    )
    created = claim.model_copy(deep=True)
    created.metadata.labels = {
        "team": "provider",
        "kubernetes.io/hostname": "h",
        "topology.kubernetes.io/zone": "zone-a",
    }
    created.metadata.annotations = {"example.com/hash": "42"}
    created.status.provider_id = "p://1"
    labels, annotations, fields = launched(claim, created)
    assert labels["team"] == "mine" and labels["topology.kubernetes.io/zone"] == "zone-a"
    assert annotations == {"note": "mine", "example.com/hash": "42"}
    assert "kubernetes.io/hostname" not in labels
    assert fields == {"providerID": "p://1"}


def test_liveness_deadlines() -> None:
    fresh = _claim()
    assert liveness_verdict(fresh, NOW, 300, 900) is None
    assert liveness_verdict(fresh, NOW + timedelta(minutes=5), 300, 900) is not None
    conds = [{"type": "Launched", "status": "True", "lastTransitionTime": "2026-01-01T11:59:30Z"}]
    unregistered = _claim(conditions=conds)
    assert liveness_verdict(unregistered, NOW + timedelta(minutes=10), 300, 900) is None
    assert "registered" in (
        liveness_verdict(unregistered, NOW + timedelta(minutes=15), 300, 900) or ""
    )


def test_registration_syncs_labels_taints_and_finalizer() -> None:
    claim = {
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
        "spec": {
            "taints": [{"key": "t", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "s", "effect": "NoSchedule"}],
        },
    }
    node = {
        "metadata": {"resourceVersion": "7", "finalizers": ["other"]},
        "spec": {
            "taints": [
                {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                {"key": "t", "effect": "NoSchedule"},
            ]
        },
    }
    patch = registered_node(claim, node)
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["metadata"]["labels"] == {"team": "a", "karpenter.sh/registered": "true"}
    assert patch["metadata"]["annotations"] == {"note": "x"}
    assert patch["metadata"]["finalizers"] == ["other", "karpenter.sh/termination"]
    assert patch["spec"]["taints"] == [
        {"key": "t", "effect": "NoSchedule"},
        {"key": "s", "effect": "NoSchedule"},
    ]


def test_initialization_waits_for_ready_startup_taints_and_extended_resources() -> None:
    claim = _claim(
        requests={"cpu": "1", "example.com/gpu": "1"},
        startup_taints=[{"key": "s", "effect": "NoSchedule"}],
    )
    assert initialization_blocker(claim, _node(conditions=[])) == "node is not Ready"
    tainted = _node(taints=[{"key": "s", "effect": "NoSchedule"}])
    assert "taint s:NoSchedule" in (initialization_blocker(claim, tainted) or "")
    assert "example.com/gpu" in (initialization_blocker(claim, _node()) or "")
    ready = _node(allocatable={"cpu": "4", "example.com/gpu": "1"})
    assert initialization_blocker(claim, ready) is None


# -- termination ------------------------------------------------------------------------------


def test_drain_goes_tier_by_tier() -> None:
    pods = [
        _pod("app"),
        _pod("daemon", owner="DaemonSet"),
        _pod("critical", priorityClassName="system-cluster-critical"),
        _pod("tolerant", tolerations=[{"key": "karpenter.sh/disrupted", "operator": "Exists"}]),
    ]
    plan = drain_plan(pods, NOW, None)
    assert [p.name for p in plan.evict] == ["app"]
    assert plan.waiting == 2  # the daemon and the critical pod wait for their tier
    plan = drain_plan(pods[1:], NOW, None)
    assert [p.name for p in plan.evict] == ["daemon"]
    assert drain_plan(pods[3:], NOW, None).drained


def test_do_not_disrupt_waits_for_the_grace_period_then_is_deleted() -> None:
    pod = _pod(
        "keep",
        annotations={"karpenter.sh/do-not-disrupt": "true"},
        terminationGracePeriodSeconds=30,
    )
    deadline = NOW + timedelta(minutes=5)
    plan = drain_plan([pod], NOW, deadline)
    assert not plan.evict and not plan.delete and plan.waiting == 1
    assert drain_plan([pod], NOW, None).waiting == 1
    plan = drain_plan([pod], deadline - timedelta(seconds=10), deadline)
    assert [(p.name, grace) for p, grace in plan.delete] == [("keep", 10)]


def test_termination_deadline_is_deletion_plus_grace_period() -> None:
    claim = _claim(metadata={"deletionTimestamp": "2026-01-01T12:00:00Z", "finalizers": ["f"]})
    assert termination_deadline(claim) is None
    claim.spec.termination_grace_period = "1m"
    assert termination_deadline(claim) == NOW + timedelta(minutes=1)


# -- garbage collection and repair --------------------------------------------------------


def _instance(provider_id: str) -> NodeClaim:
    claim = _claim()
    claim.status.provider_id = provider_id
    return claim


def test_orphans_need_the_grace_period() -> None:
    seen: dict[str, float] = {}
    instances = [_instance("p://1"), _instance("p://2")]
    claims = [_instance("p://1")]
    assert orphans(instances, claims, seen, 100.0, 30.0) == []
    assert [i.status.provider_id for i in orphans(instances, claims, seen, 131.0, 30.0)] == [
        "p://2"
    ]
    assert orphans(instances, [*claims, _instance("p://2")], seen, 200.0, 30.0) == []
    assert seen == {}


def test_lost_nodeclaims_spare_ready_nodes() -> None:
    conds = [{"type": "Registered", "status": "True", "lastTransitionTime": "2026-01-01T11:00:00Z"}]
    lost = _claim(providerID="p://1", conditions=conds)
    ready = _node()
    assert lost_nodeclaims([], [lost], {"p://1": ready}) == []
    assert lost_nodeclaims([], [lost], {}) == [lost]
    assert lost_nodeclaims([_instance("p://1")], [lost], {}) == []


def test_repair_replaces_unhealthy_nodes_unless_too_many() -> None:
    policy = RepairPolicy("Ready", "False", timedelta(minutes=10))
    healthy = [_node(labels={"karpenter.sh/nodepool": "a"}) for _ in range(9)]
    for i, node in enumerate(healthy):
        node.name = f"ok-{i}"
    broken = ClusterNode.decode(
        {
            "metadata": {"name": "bad", "labels": {"karpenter.sh/nodepool": "a"}},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "lastTransitionTime": "2026-01-01T11:00:00Z",
                    }
                ]
            },
        }
    )
    replace, blocked = repairs([*healthy, broken], [policy], NOW.timestamp())
    assert [(n.name, c) for n, c in replace] == [("bad", "Ready=False")] and blocked == []
    assert repairs([*healthy, broken], [policy], (NOW - timedelta(minutes=55)).timestamp())[0] == []
    replace, blocked = repairs([*healthy[:3], broken], [policy], NOW.timestamp())
    assert replace == [] and blocked == ["a"]


def test_nodepool_status_counts_nodes_and_readiness() -> None:
    nodepool = _nodepool().to_manifest()
    status = nodepool_status(nodepool, [_node(allocatable={"cpu": "4"})], (True, ""), NOW)
    assert status["nodes"] == 1 and status["resources"]["cpu"] == "4"
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready == {"NodeClassReady": "True", "ValidationSucceeded": "True", "Ready": "True"}
    status = nodepool_status(nodepool, [], (False, "missing"), NOW)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "False"


def test_batcher_is_not_extended_by_the_same_pod_again() -> None:
    clock = _Clock()
    batcher = Batcher(idle=1.0, maximum=5.0, clock=clock)
    batcher.trigger("ns/same")
    for _ in range(5):
        clock.now += 0.1
        batcher.trigger("ns/same")
    assert not batcher.ready()
    clock.now = 101.0
    assert batcher.ready(), "idle counts from the first trigger of the pod"


def test_batcher_wait_returns_once_a_batch_completes() -> None:
    batcher = Batcher(idle=0.0, maximum=1.0)
    stop = threading.Event()
    assert not batcher.wait(stop, poll=0.01, timeout=0.0), "no batch started"
    batcher.trigger()
    assert batcher.wait(stop, poll=0.01)


def test_a_batch_begun_during_a_pass_waits_its_idle_window_after_the_pass() -> None:
    batcher = Batcher(idle=0.3, maximum=5.0)
    stop = threading.Event()
    batcher.trigger("ns/during-the-pass")
    time.sleep(0.4)  # the pass goes on past the idle window
    started = time.monotonic()
    assert batcher.wait(stop, poll=0.01)
    assert time.monotonic() - started >= 0.3, "pods arriving right after the pass join the batch"


# -- crash leftovers and consolidation timers -------------------------------------------------

DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def _named_node(name: str, taints: list[dict[str, str]]) -> ClusterNode:
    return ClusterNode.decode({"metadata": {"name": name}, "spec": {"taints": taints}})


def test_stale_disruption_taints_spare_held_and_departing_nodes() -> None:
    other = {"key": "dedicated", "effect": "NoSchedule"}
    nodes = [
        _named_node("leftover", [DISRUPTED]),
        _named_node("held", [DISRUPTED]),
        _named_node("deleting", [DISRUPTED]),
        _named_node("untainted", [other]),
    ]
    stale = stale_disruption_taints(nodes, {"held"}, lambda n: n.name == "deleting")
    assert stale == ["leftover"]
    assert stale_disruption_taints(nodes, (), lambda n: False) == ["deleting", "held", "leftover"]


def test_pod_event_writes_are_deduplicated_and_never_go_back() -> None:
    persisted = NOW - timedelta(seconds=30)
    seen = (NOW - timedelta(seconds=2)).timestamp() + 0.7
    assert pod_event_update(None, seen, NOW) == NOW - timedelta(seconds=2)
    assert pod_event_update(persisted, seen, NOW) == NOW - timedelta(seconds=2)
    assert pod_event_update(persisted, persisted.timestamp(), NOW) is None
    assert pod_event_update(persisted, None, NOW) is None
    recent = NOW - timedelta(seconds=DEDUPE_WINDOW - 1)
    assert pod_event_update(recent, NOW.timestamp(), NOW) is None, "within the window"
    later = recent + timedelta(seconds=DEDUPE_WINDOW)
    assert pod_event_update(recent, NOW.timestamp(), later) == NOW, "written once it has passed"


def _consolidating_pool(after: str) -> NodePool:
    pool = _nodepool()
    pool.spec.disruption.consolidate_after = after
    return pool


def test_consolidatable_counts_from_the_last_pod_event_else_initialization() -> None:
    initialized = NOW - timedelta(minutes=5)
    claim = _claim(
        conditions=[
            {
                "type": "Initialized",
                "status": "True",
                "reason": "Initialized",
                "lastTransitionTime": initialized.isoformat(),
            }
        ]
    )
    after = consolidate_after(_consolidating_pool("30s"))
    assert after == timedelta(seconds=30)
    assert consolidatable_at(claim, after, None) == initialized + timedelta(seconds=30)
    assert consolidatable_at(claim, after, NOW) == NOW + timedelta(seconds=30)
    assert consolidate_after(_consolidating_pool("Never")) is None
    assert consolidate_after(None) is None, "NodePool unknown"
    assert consolidatable_at(claim, None, NOW) is None
    assert consolidatable_at(_claim(), after, NOW) is None, "not initialized"


class _NodeClaimEndpoint:
    """In-memory NodeClaims behind the KubeClient verbs the status writers use: JSON merge
    patches on ``<path>/status``, refused with a Conflict when a given resourceVersion is stale."""

    def __init__(self, claim: NodeClaim) -> None:
        self.objects = {nodeclaim_path(claim.metadata.name or ""): claim.to_manifest()}
        self.objects[next(iter(self.objects))]["metadata"]["resourceVersion"] = "1"
        self.patches: list[dict[str, Any]] = []

    def get(self, path: str) -> dict[str, Any]:
        return copy.deepcopy(self.objects[path])

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path.endswith("/status"), "status goes through the status subresource"
        current = self.objects[path.removesuffix("/status")]
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", path)
        self.patches.append(copy.deepcopy(body))
        current["status"] = {**current.get("status", {}), **body["status"]}
        current["metadata"]["resourceVersion"] = str(
            int(current["metadata"]["resourceVersion"]) + 1
        )
        return copy.deepcopy(current)


def _controller_context(claim: NodeClaim, clock: list[float]) -> tuple[Context, _NodeClaimEndpoint]:
    endpoint = _NodeClaimEndpoint(claim)
    state = ClusterState(endpoint, clock=lambda: clock[0])  # type: ignore[arg-type]
    state.update_nodeclaim(endpoint.get(nodeclaim_path(claim.metadata.name or "")))
    pool = _consolidating_pool("30s").to_manifest()
    pool["metadata"]["resourceVersion"] = "1"
    state.nodepools_informer.inject(pool)
    state.nodes_informer.inject(
        {"metadata": {"name": "node-1", "resourceVersion": "1"}, "spec": {"providerID": "p://1"}}
    )
    context = Context(
        settings=Settings(),
        client=endpoint,  # type: ignore[arg-type]
        state=state,
        provider=None,  # type: ignore[arg-type]
        events=None,  # type: ignore[arg-type]
        clock=lambda: datetime.fromtimestamp(clock[0], UTC),
    )
    return context, endpoint


class _Launches:
    """A provider that records the NodeClaims it is asked to launch."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        self.created.append(nodeclaim.metadata.name or "")
        raise AssertionError("launched before the cluster state synced")


def test_the_lifecycle_acts_only_once_every_informer_has_synced() -> None:
    # After a restart the NodeClaims may be listed before the Nodes or the NodeClasses: a
    # NodeClaim would look unlaunchable (its NodeClass not found: deleted as without capacity)
    # or unregistered. Nothing is launched, registered or expired until every informer synced.
    clock = [NOW.timestamp()]
    claim = _claim(metadata={"finalizers": ["karpenter.sh/termination"]})
    assert next_step(claim, None) is Step.LAUNCH
    context, endpoint = _controller_context(claim, clock)
    provider = _Launches()
    context.provider = provider  # type: ignore[assignment]
    assert not context.state.synced()
    controller = LifecycleController(context, workers=1)
    try:
        controller.reconcile()
        time.sleep(0.2)
    finally:
        controller.close()
    assert provider.created == []
    assert endpoint.patches == []


def _bound_pod(name: str, scheduled: datetime | None = None) -> dict[str, Any]:
    conditions = []
    if scheduled is not None:
        conditions = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled.isoformat()}
        ]
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running", "conditions": conditions},
    }


def test_pod_events_are_persisted_and_read_back_after_a_restart() -> None:
    initialized = NOW - timedelta(minutes=5)
    claim = _claim(
        providerID="p://1",
        nodeName="node-1",
        conditions=[
            {
                "type": "Initialized",
                "status": "True",
                "reason": "Initialized",
                "lastTransitionTime": initialized.isoformat(),
            }
        ],
    )
    clock = [NOW.timestamp()]
    context, endpoint = _controller_context(claim, clock)
    state = context.state
    podevents = PodEventsController(context)
    consolidatable = ConsolidatableController(context)

    # Initialized five minutes ago, no pod event: consolidatable.
    consolidatable.reconcile()
    written = state.nodeclaim("default-abc")
    assert written is not None and status_true(written, "Consolidatable")

    # A pod is bound now: the time is written and the condition cleared.
    state.pods.synced.set()
    state.pods.inject(_bound_pod("web"))
    podevents.reconcile()
    consolidatable.reconcile()
    assert endpoint.patches[-2] == {"status": {"lastPodEventTime": "2026-01-01T12:00:00Z"}}
    written = state.nodeclaim("default-abc")
    assert written is not None and written.status.last_pod_event_time == NOW
    assert all(c.type != "Consolidatable" for c in written.status.conditions)

    # 30 s later the timer has run out.
    clock[0] += 30
    podevents.reconcile()
    consolidatable.reconcile()
    written = state.nodeclaim("default-abc")
    assert written is not None and status_true(written, "Consolidatable")

    # A restart: the new state lists the pod (bound long ago) and the persisted NodeClaim, and
    # counts from the persisted time, not from its start.
    clock[0] = NOW.timestamp() + 10
    restarted, _ = _controller_context(written, clock)
    restarted.state.pods.inject(_bound_pod("web", scheduled=NOW - timedelta(minutes=4)))
    restarted.state.pods.inject(_bound_pod("unscheduled-condition"))
    assert restarted.state.last_pod_event("node-1") == NOW.timestamp()
    [node] = restarted.state.snapshot({}).nodes
    assert node.last_pod_event == NOW.timestamp()


# -- the Drifted condition ----------------------------------------------------------------------


_LAUNCHED = {"type": "Launched", "status": "True", "reason": "Launched"}


def _launched_claim(**meta: Any) -> NodeClaim:
    """A launched spot NodeClaim of ``_nodepool()`` stamped with its current hash."""
    labels = {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot"}
    annotations = {
        "karpenter.sh/nodepool-hash": nodepool_hash(_nodepool().to_manifest()),
        "karpenter.sh/nodepool-hash-version": HASH_VERSION,
    }
    conditions = meta.pop("conditions", [_LAUNCHED])
    return _claim(
        metadata={
            "labels": {**labels, **meta.pop("labels", {})},
            "annotations": {**annotations, **meta.pop("annotations", {})},
            **meta,
        },
        providerID="p://1",
        nodeName="node-1",
        conditions=conditions,
    )


def _provider_says(reason: str) -> Callable[[NodeClaim], str | None]:
    return lambda _claim: reason


def _drifted(claim: NodeClaim, pool: NodePool | None, provider: str = "") -> str | None:
    shape = NodePoolShape.of(pool) if pool is not None else None
    return drifted_condition(claim, shape, _provider_says(provider))


def test_drifted_takes_the_nodepools_drift_before_the_providers() -> None:
    # Drift/Drift/"should detect drift", "should detect static drift before cloud provider
    # drift", "should detect node requirement drift before cloud provider drift".
    assert _drifted(_launched_claim(), _nodepool(), "drifted") == "drifted"
    assert _drifted(_launched_claim(), _nodepool()) == ""
    stale = _launched_claim(annotations={"karpenter.sh/nodepool-hash": "test-123"})
    assert _drifted(stale, _nodepool(), "drifted") == "NodePoolDrifted"
    on_demand = _nodepool(
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
        ]
    )
    assert _drifted(_launched_claim(), on_demand, "drifted") == "RequirementsDrifted"


def test_drifted_detects_changes_to_the_nodepools_static_fields() -> None:
    # Drift/NodePool Static Drift/"should detect drift on changes to the static fields"
    # (Labels, Taints, StartupTaints, NodeClassRef Name, ExpireAfter, TerminationGracePeriod).
    changes: list[dict[str, Any]] = [
        {"taints": [{"key": "keytest2taint", "effect": "NoExecute"}]},
        {"startupTaints": [{"key": "keytest2taint", "effect": "NoExecute"}]},
        {"nodeClassRef": {"group": "g.sh", "kind": "K", "name": "testName"}},
        {"expireAfter": "100m"},
        {"terminationGracePeriod": "100m"},
    ]
    for change in changes:
        assert _drifted(_launched_claim(), _nodepool(**change)) == "NodePoolDrifted", change
    labelled = _nodepool()
    labelled.spec.template.metadata.labels["keyLabelTest"] = "valueLabelTest"
    assert _drifted(_launched_claim(), labelled) == "NodePoolDrifted"


def test_drifted_needs_the_nodeclaims_hash_and_our_hash_version() -> None:
    # Drift/NodePool Static Drift/"should not return drifted if karpenter.sh/nodepool-hash
    # annotation is not present on the NodeClaim", "... if the NodeClaim's
    # karpenter.sh/nodepool-hash-version annotation does not match the NodePool's", "... if
    # karpenter.sh/nodepool-hash-version annotation is not present on the NodeClaim".
    no_hash = _launched_claim()
    del no_hash.metadata.annotations["karpenter.sh/nodepool-hash"]
    other_version = _launched_claim(
        annotations={
            "karpenter.sh/nodepool-hash": "test-hash-2",
            "karpenter.sh/nodepool-hash-version": "test-version-2",
        }
    )
    no_version = _launched_claim(annotations={"karpenter.sh/nodepool-hash": "test-hash-111111111"})
    del no_version.metadata.annotations["karpenter.sh/nodepool-hash-version"]
    for claim in (no_hash, other_version, no_version):
        assert _drifted(claim, _nodepool()) == ""


def test_drifted_is_cleared_before_launch_and_left_alone_without_a_nodepool() -> None:
    # Drift/"should remove the status condition from the nodeClaim when the nodeClaim launch
    # condition is unknown" / "... is false", "should not detect drift if the nodePool does not
    # exist".
    for launch in ("Unknown", "False"):
        claim = _launched_claim(
            conditions=[
                {"type": "Launched", "status": launch, "reason": "LaunchFailed"},
                {"type": "Drifted", "status": "True", "reason": "drifted"},
            ]
        )
        assert _drifted(claim, _nodepool(), "drifted") == ""
    assert _drifted(_launched_claim(), None, "drifted") is None


def _drifted_context(
    claim: NodeClaim, clock: list[float], provider: list[str]
) -> tuple[Context, _NodeClaimEndpoint, DriftedController]:
    """The NodeClaim behind an endpoint, ``_nodepool()`` in the state, and a provider whose
    drift is ``provider[0]`` ("!" raises)."""
    context, endpoint = _controller_context(claim, clock)
    pool = _nodepool().to_manifest()
    pool["metadata"]["resourceVersion"] = "2"
    context.state.nodepools_informer.inject(pool)

    class Provider:
        def is_drifted(self, nodeclaim: NodeClaim) -> str:
            if provider[0] == "!":
                raise RuntimeError("cloud unreachable")
            return provider[0]

    context.provider = Provider()  # type: ignore[assignment]
    return context, endpoint, DriftedController(context)


def _drift_condition(context: Context) -> tuple[str, str, datetime] | None:
    written = context.state.nodeclaim("default-abc")
    assert written is not None
    found = next((c for c in written.status.conditions if c.type == "Drifted"), None)
    return None if found is None else (found.status, found.reason, found.last_transition_time)


def test_the_drifted_condition_is_written_kept_and_removed() -> None:
    # Drift/"should detect drift" and "should remove the status condition from the nodeClaim if
    # the nodeClaim is no longer drifted", through the status subresource; the transition time
    # stays when only the reason changes, and a provider that fails changes nothing.
    clock = [NOW.timestamp()]
    provider = ["drifted"]
    context, endpoint, controller = _drifted_context(_launched_claim(), clock, provider)
    controller.reconcile()
    assert _drift_condition(context) == ("True", "drifted", NOW)
    controller.reconcile()
    assert len(endpoint.patches) == 1, "an unchanged condition is not written again"

    clock[0] += 60
    provider[0] = "AMIDrift"
    controller.reconcile()
    assert _drift_condition(context) == ("True", "AMIDrift", NOW)

    provider[0] = "!"
    controller.reconcile()
    assert _drift_condition(context) == ("True", "AMIDrift", NOW)

    provider[0] = ""
    controller.reconcile()
    assert _drift_condition(context) is None
    assert len(endpoint.patches) == 3


def test_a_deleting_nodeclaim_keeps_its_drifted_condition() -> None:
    clock = [NOW.timestamp()]
    deleting = _launched_claim(
        deletionTimestamp="2026-01-01T11:59:30Z", finalizers=["karpenter.sh/termination"]
    )
    _, endpoint, controller = _drifted_context(deleting, clock, ["drifted"])
    controller.reconcile()
    assert endpoint.patches == []
