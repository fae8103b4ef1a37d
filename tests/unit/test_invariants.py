"""The shared invariants: each catches its violation in hand-made observations, and passes a
run that keeps it."""

from __future__ import annotations

from karpenter_conformance.invariants import (
    ClaimView,
    NodeView,
    PDBView,
    PodView,
    Snapshot,
    check_all,
    launched_twice,
    orphaned_instances,
    over_budget,
    pdb_violations,
    pods_not_running,
    stale_disruption_taints,
)

POOL = "default"


def claim(provider_id: str = "", deleting: bool = False) -> ClaimView:
    return ClaimView(provider_id=provider_id, nodepool=POOL, deleting=deleting)


def node(provider_id: str, tainted: bool = False, deleting: bool = False) -> NodeView:
    return NodeView(
        nodepool=POOL, provider_id=provider_id, disrupted_taint=tainted, deleting=deleting
    )


def pod(node_name: str, healthy: bool = True, app: str = "web") -> PodView:
    return PodView(
        namespace="ns",
        labels={"app": app},
        node=node_name,
        phase="Running" if healthy else "Pending",
        healthy=healthy,
    )


# -- launched twice ----------------------------------------------------------------------


def test_launched_twice_catches_a_changed_provider_id() -> None:
    snapshots = [
        Snapshot(0, instances={"p1": ""}, nodeclaims={"a": claim("p1")}),
        Snapshot(1, instances={"p1": "", "p2": ""}, nodeclaims={"a": claim("p2")}),
    ]
    [breach] = launched_twice(snapshots)
    assert breach.invariant == "launched-twice"
    assert "NodeClaim a had instance p1, then p2" in breach.message


def test_launched_twice_catches_two_instances_owned_by_one_nodeclaim() -> None:
    snapshots = [Snapshot(0, instances={"p1": "a", "p2": "a"}, nodeclaims={"a": claim("p1")})]
    [breach] = launched_twice(snapshots)
    assert "NodeClaim a owns 2 instances: ['p1', 'p2']" in breach.message


def test_launched_twice_accepts_one_launch_per_nodeclaim() -> None:
    snapshots = [
        Snapshot(0, instances={}, nodeclaims={"a": claim()}),
        Snapshot(1, instances={"p1": "a"}, nodeclaims={"a": claim("p1")}),
        Snapshot(
            2, instances={"p1": "a", "p2": "b"}, nodeclaims={"a": claim("p1"), "b": claim("p2")}
        ),
    ]
    assert launched_twice(snapshots) == []


# -- orphaned instances ------------------------------------------------------------------


def test_orphaned_instance_after_the_gc_window() -> None:
    snapshots = [Snapshot(t, instances={"p9": ""}, nodeclaims={}) for t in (0, 20, 41)]
    [breach] = orphaned_instances(snapshots, gc_window=40)
    assert breach.invariant == "orphaned-instance"
    assert "instance p9 had no NodeClaim for 41s (GC window 40s)" in breach.message


def test_an_instance_claimed_or_collected_within_the_window_is_fine() -> None:
    snapshots = [
        Snapshot(0, instances={"p1": "", "p9": ""}, nodeclaims={"a": claim()}),
        Snapshot(2, instances={"p1": "", "p9": ""}, nodeclaims={"a": claim("p1")}),
        Snapshot(30, instances={"p1": ""}, nodeclaims={"a": claim("p1")}),
        Snapshot(90, instances={"p1": ""}, nodeclaims={"a": claim("p1")}),
    ]
    assert orphaned_instances(snapshots, gc_window=40) == []


def test_the_orphan_clock_restarts_when_an_instance_is_claimed() -> None:
    snapshots = [
        Snapshot(0, instances={"p1": ""}, nodeclaims={}),
        Snapshot(30, instances={"p1": ""}, nodeclaims={"a": claim("p1")}),
        Snapshot(60, instances={"p1": ""}, nodeclaims={}),
        Snapshot(90, instances={"p1": ""}, nodeclaims={}),
    ]
    assert orphaned_instances(snapshots, gc_window=40) == []


# -- PDBs ---------------------------------------------------------------------------------


def pdb(**spec: int | str) -> PDBView:
    return PDBView("ns", "web", {"app": "web"}, expected=3, **spec)  # type: ignore[arg-type]


def test_pdb_violated_by_disrupting_two_pods_at_once() -> None:
    nodes = {"n1": node("p1"), "n2": node("p2"), "n3": node("p3")}
    draining = {"n1": node("p1", tainted=True), "n2": node("p2", tainted=True), "n3": node("p3")}
    full = {"ns/a": pod("n1"), "ns/b": pod("n2"), "ns/c": pod("n3")}
    snapshots = [
        Snapshot(0, nodes=nodes, pods=full, pdbs=[pdb(max_unavailable=1)]),
        Snapshot(1, nodes=draining, pods={"ns/c": pod("n3")}, pdbs=[pdb(max_unavailable=1)]),
    ]
    [breach] = pdb_violations(snapshots)
    assert breach.invariant == "pdb-violated"
    assert "PDB ns/web had 1 healthy pods (at least 2 of 3 required)" in breach.message
    assert "['ns/a', 'ns/b']" in breach.message


def test_pdb_min_available_percentage() -> None:
    nodes = {"n1": node("p1"), "n2": node("p2"), "n3": node("p3")}
    full = {"ns/a": pod("n1"), "ns/b": pod("n2"), "ns/c": pod("n3")}
    after = {"ns/b": pod("n2"), "ns/c": pod("n3")}
    gone = {"n2": node("p2"), "n3": node("p3")}
    strict = [pdb(min_available="100%")]
    assert pdb_violations(
        [
            Snapshot(0, nodes=nodes, pods=full, pdbs=strict),
            Snapshot(1, nodes=gone, pods=after, pdbs=strict),
        ]
    )
    loose = [pdb(min_available="50%")]
    assert not pdb_violations(
        [
            Snapshot(0, nodes=nodes, pods=full, pdbs=loose),
            Snapshot(1, nodes=gone, pods=after, pdbs=loose),
        ]
    )


def test_pdb_one_at_a_time_and_scale_down_are_fine() -> None:
    nodes = {"n1": node("p1"), "n2": node("p2"), "n3": node("p3")}
    full = {"ns/a": pod("n1"), "ns/b": pod("n2"), "ns/c": pod("n3")}
    one_drained = {"n1": node("p1", tainted=True), "n2": node("p2"), "n3": node("p3")}
    budget = [pdb(max_unavailable=1)]
    drained = [
        Snapshot(0, nodes=nodes, pods=full, pdbs=budget),
        Snapshot(1, nodes=one_drained, pods={"ns/b": pod("n2"), "ns/c": pod("n3")}, pdbs=budget),
    ]
    assert pdb_violations(drained) == []
    scaled_down = [
        Snapshot(0, nodes=nodes, pods=full, pdbs=budget),
        Snapshot(1, nodes=nodes, pods={"ns/c": pod("n3")}, pdbs=budget),
    ]
    assert pdb_violations(scaled_down) == []


# -- budgets --------------------------------------------------------------------------------


def test_over_budget_when_more_nodes_disrupted_than_allowed() -> None:
    tainted = {"n1": node("p1", tainted=True), "n2": node("p2", deleting=True), "n3": node("p3")}
    [breach] = over_budget([Snapshot(0, nodes=tainted, budgets={POOL: 1})])
    assert breach.invariant == "over-budget"
    assert f"NodePool {POOL} had 2 nodes disrupted at once; its budget allows 1" in breach.message


def test_within_budget() -> None:
    one = {"n1": node("p1", tainted=True), "n2": node("p2"), "n3": node("p3")}
    assert over_budget([Snapshot(0, nodes=one, budgets={POOL: 1})]) == []


# -- pods and taints ----------------------------------------------------------------------


def test_pods_not_running() -> None:
    snapshot = Snapshot(0, pods={"ns/a": pod("n1"), "ns/b": pod("", healthy=False)})
    [breach] = pods_not_running(snapshot)
    assert breach.message == "pod ns/b is Pending"
    assert pods_not_running(snapshot, namespaces=["other"]) == []


def test_stale_disruption_taint() -> None:
    snapshots = [Snapshot(t, nodes={"n1": node("p1", tainted=True)}) for t in (0, 10, 31)]
    [breach] = stale_disruption_taints(snapshots, window=30)
    assert breach.invariant == "stale-disruption-taint"
    assert "node n1 kept the karpenter.sh/disrupted taint for 31s" in breach.message


def test_a_taint_on_a_node_going_away_is_not_stale() -> None:
    snapshots = [
        Snapshot(0, nodes={"n1": node("p1", tainted=True)}),
        Snapshot(10, nodes={"n1": node("p1", tainted=True, deleting=True)}),
        Snapshot(60, nodes={"n1": node("p1", tainted=True, deleting=True)}),
        Snapshot(61, nodes={}),
    ]
    assert stale_disruption_taints(snapshots, window=30) == []


def test_check_all_gathers_every_invariant() -> None:
    snapshots = [
        Snapshot(0, instances={"p1": "", "p9": ""}, nodeclaims={"a": claim("p1")}),
        Snapshot(
            100,
            instances={"p1": "", "p9": ""},
            nodeclaims={"a": claim("p1")},
            pods={"ns/x": pod("", healthy=False)},
        ),
    ]
    found = {b.invariant for b in check_all(snapshots, gc_window=40, taint_window=30)}
    assert found == {"orphaned-instance", "pod-not-running"}
    assert check_all([], gc_window=40, taint_window=30) == []


# -- observing a cluster -------------------------------------------------------------------


def test_observe_reads_the_cluster_and_the_provider() -> None:
    from types import SimpleNamespace

    from karpenter_conformance.fakekube import FakeKube
    from karpenter_conformance.invariants import Recorder, observe

    fake = FakeKube()
    fake.put(
        "/apis/karpenter.sh/v1/nodeclaims",
        {
            "metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": POOL}},
            "status": {"providerID": "fake://i-1"},
        },
    )
    fake.put(
        "/apis/karpenter.sh/v1/nodepools",
        {"metadata": {"name": POOL}, "spec": {"disruption": {"budgets": [{"nodes": "1"}]}}},
    )
    fake.put(
        "/api/v1/nodes",
        {
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": POOL}},
            "spec": {
                "providerID": "fake://i-1",
                "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
            },
        },
    )
    fake.put(
        "/api/v1/namespaces/ns/pods",
        {
            "metadata": {"name": "p1", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    fake.put(
        "/apis/policy/v1/namespaces/ns/poddisruptionbudgets",
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"expectedPods": 1},
        },
    )
    instance = SimpleNamespace(
        metadata=SimpleNamespace(name="c1", labels={"karpenter.sh/nodepool": POOL}),
        status=SimpleNamespace(provider_id="fake://i-1"),
    )
    provider = SimpleNamespace(list=lambda: [instance])
    api = fake.api_client()
    try:
        snapshot = observe(api, provider, ["ns"], nodepool=POOL, now=lambda: 7.0)
        recorder = Recorder(lambda: observe(api, provider, ["ns"]), interval=0.05).start()
        recorded = recorder.stop()
    finally:
        api.close()
        fake.stop()
    assert snapshot == Snapshot(
        at=7.0,
        instances={"fake://i-1": "c1"},
        nodeclaims={"c1": claim("fake://i-1")},
        nodes={"n1": node("fake://i-1", tainted=True)},
        pods={
            "ns/p1": PodView(
                namespace="ns", labels={"app": "web"}, node="n1", phase="Running", healthy=True
            )
        },
        pdbs=[
            PDBView(
                namespace="ns", name="web", match_labels={"app": "web"}, min_available=1, expected=1
            )
        ],
        budgets={POOL: 1},
    )
    assert recorded and recorder.failures == 0, recorder.last_error


def test_a_recorder_keeps_the_error_of_a_failed_look() -> None:
    from karpenter_conformance.invariants import Recorder

    def look() -> Snapshot:
        raise TypeError("no such argument")

    recorder = Recorder(look, interval=0.05).start()
    assert recorder.stop() == []
    assert recorder.failures >= 1
    assert recorder.last_error == "TypeError: no such argument"
