"""Which nodes disruption may take, carried over case by case from upstream Karpenter's own
tests (kubernetes-sigs/karpenter ``pkg/controllers/disruption/*_test.go``, ``pkg/utils/pod`` and
``pkg/utils/pdb``; each test names its Describe/Context/It path): do-not-disrupt durations,
terminating pods, PodDisruptionBudgets, terminationGracePeriod, NodeClaims being deleted, the
drift order and Nodes without a NodeClaim. The planner is pure; the controller and ``simulate``
share it (``test_disruption_upstream_paths`` runs the same cases through both)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.controllers.termination import drain_plan
from karpenter_core.disruption.balanced import Scorer
from karpenter_core.disruption.budgets import allowed_by_nodepool
from karpenter_core.disruption.candidates import candidates
from karpenter_core.disruption.planner import Options
from karpenter_core.scheduling.cluster import rescheduled_pods, with_nodeclaim
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo
from karpenter_core.state.cluster import ClusterPod
from tests.unit.disruption_fixtures import (
    DAY_OLD,
    DO_NOT_DISRUPT,
    NOW,
    decide,
    node,
    pdb,
    pool,
    snapshot,
    summary,
)
from tests.unit.scheduling_fixtures import pod_manifest

STAMP = "%Y-%m-%dT%H:%M:%SZ"
EVERYTHING = [{"nodes": "100%"}]
DRIFTED = Options(drifted=lambda c: "ImageDrifted")
WEB = {"app": "web"}


def running(
    name: str,
    on: str,
    *,
    annotations: Mapping[str, str] | None = None,
    started: datetime | None = NOW - timedelta(hours=1),
    terminating: bool = False,
    ready: bool = True,
    owner: tuple[str, str] = ("ReplicaSet", "web-rs"),
    tolerations: Sequence[Mapping[str, str]] = (),
    cpu: str = "500m",
) -> PodInfo:
    """A pod bound to ``on`` decoded from its manifest: started at ``started`` (None: no
    ``status.startTime``), Ready or not, asked to terminate or not."""
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if started is not None:
        status["startTime"] = started.strftime(STAMP)
    manifest = pod_manifest(
        name,
        node_name=on,
        cpu=cpu,
        memory="512Mi",
        labels=WEB,
        annotations=annotations,
        owner=owner,
        tolerations=tolerations,
        status=status,
    )
    if terminating:
        manifest["metadata"]["deletionTimestamp"] = NOW.strftime(STAMP)
    return PodInfo.from_manifest(manifest)


def claimed(
    info: NodeInfo,
    *,
    grace: str | None = None,
    drifted_at: datetime | None = None,
    deleting: bool = False,
) -> NodeInfo:
    """``info`` paired with its NodeClaim (as both snapshots pair them): ``grace`` its
    terminationGracePeriod, ``drifted_at`` when its Drifted condition turned True, ``deleting``
    a deletionTimestamp on the NodeClaim (not the Node)."""
    meta: dict[str, Any] = {
        "name": f"{info.name}-claim",
        "labels": {"karpenter.sh/nodepool": "default"},
    }
    if deleting:
        meta["deletionTimestamp"] = NOW.strftime(STAMP)
        meta["finalizers"] = ["karpenter.sh/termination"]
    spec: dict[str, Any] = {
        "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
        "requirements": [],
    }
    if grace is not None:
        spec["terminationGracePeriod"] = grace
    conditions = [
        {
            "type": "Initialized",
            "status": "True",
            "reason": "Initialized",
            "lastTransitionTime": DAY_OLD.strftime(STAMP),
        }
    ]
    if drifted_at is not None:
        conditions.append(
            {
                "type": "Drifted",
                "status": "True",
                "reason": "Drifted",
                "lastTransitionTime": drifted_at.strftime(STAMP),
            }
        )
    claim = NodeClaim.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": meta,
            "spec": spec,
            "status": {
                "providerID": info.provider_id,
                "nodeName": info.name,
                "conditions": conditions,
            },
        }
    )
    with_nodeclaim(info, claim)
    return info


def roomy() -> NodeInfo:
    """A node with room for everything that is never a candidate itself."""
    return node("roomy", "c-8", annotations={DO_NOT_DISRUPT: "true"})


def lone(*pods_: PodInfo, name: str = "a") -> NodeInfo:
    return node(name, pods=list(pods_))


def deleted(nodes: Sequence[NodeInfo], *, now: datetime = NOW, **kwargs: Any) -> list[str]:
    """The nodes the first command takes (one pass)."""
    result = decide(nodes, [pool(budgets=EVERYTHING)], now=now, **kwargs)
    return [n for _, names, _ in summary(result) for n in names]


# --- 1. karpenter.sh/do-not-disrupt with a duration ------------------------------------------


def test_a_duration_still_running_blocks_consolidation():
    # Consolidation/Delete/"does not consolidate nodes with pods that have a duration-based
    # do-not-disrupt annotation that is still active"
    protected = running("web-0", "a", annotations={DO_NOT_DISRUPT: "2m"}, started=NOW)
    result = decide([lone(protected), roomy()], [pool(budgets=EVERYTHING)])
    assert result.commands == []
    assert "protected until 2025-01-06T12:02:00Z" in result.blocked["a"]


def test_a_lapsed_duration_no_longer_blocks_consolidation():
    # Consolidation/Delete/"can consolidate nodes after duration-based do-not-disrupt annotation
    # expires": the same pod, three minutes on.
    protected = running("web-0", "a", annotations={DO_NOT_DISRUPT: "2m"}, started=NOW)
    nodes = [lone(protected), roomy()]
    assert deleted(nodes) == []
    assert deleted(nodes, now=NOW + timedelta(minutes=3)) == ["a"]


def test_an_unreadable_or_non_positive_value_does_not_block():
    # Consolidation/Delete/"can delete nodes, considers invalid do-not-disrupt annotation format
    # as not blocking"; pkg/utils/pod IsDoNotDisruptActive/"should return false and emit event
    # for zero duration" and "... for negative duration"
    for value in ("invalid-format", "0s", "-5m", "false"):
        pod_ = running("web-0", "a", annotations={DO_NOT_DISRUPT: value})
        assert deleted([lone(pod_), roomy()]) == ["a"], value


def test_a_duration_protects_a_pod_whose_start_is_not_known():
    # pkg/utils/pod IsDoNotDisruptActive/"should fail safe when start time is nil"
    pod_ = running("web-0", "a", annotations={DO_NOT_DISRUPT: "5m"}, started=None)
    assert deleted([lone(pod_), roomy()], now=NOW + timedelta(days=20)) == []


def test_drift_waits_for_the_longest_duration_of_the_nodes_pods():
    # Drift/Drift/"should not drift nodes with pods that have a duration-based do-not-disrupt
    # annotation that is still active" and "should not drift nodes until the longest
    # duration-based do-not-disrupt grace period expires across multiple pods"
    pods_ = [
        running("web-0", "a", annotations={DO_NOT_DISRUPT: "1m"}, started=NOW),
        running("web-1", "a", annotations={DO_NOT_DISRUPT: "3m"}, started=NOW),
    ]
    nodes = [lone(*pods_), roomy()]

    def drifted(now: datetime) -> list[str]:
        result = decide(nodes, [pool(budgets=EVERYTHING)], now=now, options=DRIFTED)
        return [n for reason, names, _ in summary(result) if reason == "drifted" for n in names]

    assert drifted(NOW) == []
    assert drifted(NOW + timedelta(minutes=2)) == []
    assert drifted(NOW + timedelta(minutes=4)) == ["a"]


def test_provisioning_places_a_pod_again_once_its_duration_lapsed():
    # pkg/utils/pdb IsCurrentlyReschedulable/"does not consider pod with do-not-disrupt
    # annotation as currently reschedulable", with a duration: the pods of a node being deleted
    # that provisioning places again.
    pod_ = running("web-0", "a", annotations={DO_NOT_DISRUPT: "2m"}, started=NOW)
    cluster = snapshot([node("a", pods=[pod_], deleting=True)])
    assert rescheduled_pods(cluster, NOW.timestamp()) == []
    later = rescheduled_pods(cluster, (NOW + timedelta(minutes=3)).timestamp())
    assert [p.key for p in later] == ["default/web-0"]


def test_the_drain_evicts_a_pod_once_its_duration_lapsed():
    # pkg/utils/pod IsEvictable (the drain evicts what it allows): a pod whose do-not-disrupt
    # duration is running is waited for, and evicted once it lapsed.
    manifest = pod_manifest(
        "web-0",
        node_name="a",
        annotations={DO_NOT_DISRUPT: "2m"},
        status={"phase": "Running", "startTime": NOW.strftime(STAMP)},
    )
    pods_ = [ClusterPod.decode(manifest)]
    assert drain_plan(pods_, NOW + timedelta(minutes=1), None).waiting == 1
    assert drain_plan(pods_, NOW + timedelta(minutes=3), None).evict == pods_


# --- 2. terminating pods ---------------------------------------------------------------------


def test_a_node_whose_only_pods_are_terminating_is_empty():
    # Emptiness/Emptiness/"will consider a node with terminating Deployment pods as empty"
    going = [running(f"web-{i}", "a", terminating=True) for i in range(2)]
    result = decide([lone(*going)], [pool(budgets=EVERYTHING)])
    assert summary(result) == [("empty", ["a"], [])]


def test_a_terminating_statefulset_pod_still_needs_a_home():
    # Emptiness/Emptiness/"will not consider a node with a terminating StatefulSet pod as empty"
    going = running("db-0", "a", terminating=True, owner=("StatefulSet", "db"))
    result = decide([lone(going)], [pool(budgets=EVERYTHING)])
    assert all(reason != "empty" for reason, _, _ in summary(result))
    found, _ = candidates(snapshot([lone(going)]), NOW)
    assert [p.key for p in found[0].pods] == ["default/db-0"]


def test_terminating_pods_do_not_block_through_do_not_disrupt_or_their_budget():
    # Candidate Filtering/"should consider candidates that have do-not-disrupt terminating pods"
    # and "should consider candidates that have fully blocking PDBs on terminating pods"
    protected = running("web-0", "a", terminating=True, annotations={DO_NOT_DISRUPT: "true"})
    budgeted = running("web-1", "b", terminating=True)
    cluster = snapshot(
        [lone(protected), lone(budgeted, name="b")],
        [pool(budgets=EVERYTHING)],
        pdbs=[pdb("web", WEB, max_unavailable=0)],
    )
    found, blocked = candidates(cluster, NOW)
    assert sorted(c.name for c in found) == ["a", "b"]
    assert blocked == {}


# --- 5. PodDisruptionBudgets -----------------------------------------------------------------


def test_unhealthy_pods_pass_a_budget_that_always_allows_their_eviction():
    # Consolidation/Replace/"can replace nodes, considers PDB policy"; pkg/utils/pdb
    # CanEvictPods/"can evict unhealthy pods when UnhealthyPodEvictionPolicy is set to always
    # allow" and "can't evict unhealthy pods when UnhealthyPodEvictionPolicy is not set"
    unhealthy = [running(f"web-{i}", "a", ready=False) for i in range(2)]
    budget = pdb("web", WEB, min_available=2, disruptions_allowed=0)
    assert deleted([lone(*unhealthy), roomy()], pdbs=[budget]) == []
    budget["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    assert deleted([lone(*unhealthy), roomy()], pdbs=[budget]) == ["a"]
    healthy = [running(f"web-{i}", "a") for i in range(2)]
    assert deleted([lone(*healthy), roomy()], pdbs=[budget]) == []


def test_a_budget_covering_a_daemonset_pod_blocks_its_node():
    # Candidate Filtering/"should not consider candidates that have fully blocking PDBs on
    # daemonset pods"; a DaemonSet pod tolerating the disrupted taint is not evicted, so its
    # budget does not count (pkg/utils/pod IsEvictable).
    daemon = running("agent-x", "a", owner=("DaemonSet", "agent"), cpu="100m")
    budget = pdb("agent", WEB, max_unavailable=0)
    result = decide([lone(daemon)], [pool(budgets=EVERYTHING)], pdbs=[budget])
    assert result.commands == []
    assert (
        result.blocked["a"]
        == "PodDisruptionBudget default/agent allows no disruption of default/agent-x"
    )
    everything = [{"operator": "Exists"}]
    tolerant = running("agent-x", "a", owner=("DaemonSet", "agent"), tolerations=everything)
    assert summary(decide([lone(tolerant)], [pool(budgets=EVERYTHING)], pdbs=[budget])) == [
        ("empty", ["a"], [])
    ]


def test_a_budget_covering_a_mirror_pod_does_not_block():
    # Candidate Filtering/"should consider candidates that have fully blocking PDBs on mirror
    # pods"
    mirror = running(
        "static-a", "a", owner=("Node", "a"), annotations={"kubernetes.io/config.mirror": "x"}
    )
    cluster = snapshot([lone(mirror)], pdbs=[pdb("static", WEB, max_unavailable=0)])
    found, blocked = candidates(cluster, NOW)
    assert [c.name for c in found] == ["a"]
    assert blocked == {}


# --- 6. terminationGracePeriod -----------------------------------------------------------------


def test_grace_period_lets_drift_take_a_node_its_pods_protect():
    # Candidate Filtering/"should consider candidates that have do-not-disrupt pods scheduled
    # with a terminationGracePeriod set for eventual disruption" and "... PDB-blocked pods ...";
    # Drift/Drift/"should not create replacements for drifted nodes that have pods with the
    # blocking PDBs when the NodePool's TerminationGracePeriod is not nil": the node drifts,
    # and nothing is launched for the pods eviction will not move.
    protected = running("web-0", "a", annotations={DO_NOT_DISRUPT: "true"})
    budgeted = running("web-1", "b")
    nodes = [
        claimed(lone(protected), grace="5m"),
        claimed(lone(budgeted, name="b"), grace="5m"),
    ]
    pools = [pool(budgets=EVERYTHING)]
    budget = pdb("web", {"app": "web"}, max_unavailable=0)
    result = decide(nodes, pools, options=DRIFTED, pdbs=[budget], rounds=5)
    assert summary(result) == [("drifted", ["a"], []), ("drifted", ["b"], [])]


def test_grace_period_does_not_let_consolidation_take_a_protected_node():
    # Candidate Filtering/"should not consider candidates that have do-not-disrupt pods
    # scheduled with a terminationGracePeriod set for graceful disruption" and "... PDB-blocked
    # pods ..."; Consolidation/Delete/"does not consolidate nodes with karpenter.sh/do-not-disrupt
    # set to true on pods when the NodePool's TerminationGracePeriod is not nil"
    protected = running("web-0", "a", annotations={DO_NOT_DISRUPT: "true"})
    assert deleted([claimed(lone(protected), grace="5m"), roomy()]) == []


def test_without_a_grace_period_protected_nodes_do_not_drift():
    # Candidate Filtering/"should not consider candidates that have do-not-disrupt pods
    # scheduled without a terminationGracePeriod set for eventual disruption"; a do-not-disrupt
    # Node is never a candidate ("should not consider candidates that have do-not-disrupt on
    # nodes").
    protected = running("web-0", "a", annotations={DO_NOT_DISRUPT: "true"})
    node_protected = node("b", annotations={DO_NOT_DISRUPT: "true"})
    nodes = [claimed(lone(protected)), claimed(node_protected, grace="5m")]
    result = decide(nodes, [pool(budgets=EVERYTHING)], options=DRIFTED, rounds=5)
    assert result.commands == []


# --- 7. a NodeClaim being deleted --------------------------------------------------------------


def test_a_node_whose_nodeclaim_is_deleting_is_no_candidate():
    # Candidate Filtering/"should not consider candidates that are deleting" (StateNode.Deleted:
    # the NodeClaim's deletionTimestamp)
    nodes = [claimed(node("a"), deleting=True), claimed(node("b"))]
    found, _ = candidates(snapshot(nodes), NOW)
    assert [c.name for c in found] == ["b"]


# --- 9. drift order --------------------------------------------------------------------------


def test_drift_takes_the_earliest_drifted_node_first():
    # Drift/Drift/"should drift one non-empty node at a time, starting with the earliest drift":
    # the newer node drifted an hour ago, the older one only now.
    older = claimed(
        node("older", created=DAY_OLD - timedelta(days=2), pods=[running("web-0", "older")])
    )
    newer = claimed(
        node("newer", pods=[running("web-1", "newer")]), drifted_at=NOW - timedelta(hours=1)
    )
    result = decide([older, newer], [pool(budgets=[{"nodes": "1"}])], options=DRIFTED)
    assert [names for _, names, _ in summary(result)] == [["newer"]]


# --- Nodes without a NodeClaim -----------------------------------------------------------------


def test_a_labelled_node_without_a_nodeclaim_is_not_managed():
    # Candidate Filtering/"should not consider candidates that are not managed" (StateNode
    # ValidateNodeDisruptable: no NodeClaim) and BuildDisruptionBudgetMapping/"should not
    # consider nodes that are not managed as part of disruption count"
    orphan = node("orphan")
    with_nodeclaim(orphan, None)
    nodes = [orphan, claimed(node("managed"))]
    found, _ = candidates(snapshot(nodes), NOW)
    assert [c.name for c in found] == ["managed"]
    allowed = allowed_by_nodepool([pool(budgets=[{"nodes": "100%"}])], nodes, "Empty", NOW)
    assert allowed == {"default": 1}


def test_a_node_without_a_nodeclaim_is_not_in_a_balanced_nodepools_totals():
    # Upstream's Balanced totals come from its cost tracker: the NodePool's NodeClaims.
    orphan = node("orphan", pods=[running("web-0", "orphan")])
    with_nodeclaim(orphan, None)
    nodes = [orphan, claimed(node("managed", pods=[running("web-1", "managed")]))]
    totals = Scorer(snapshot(nodes, [pool(policy="Balanced")])).totals()
    assert totals["default"].cost == 0.20  # the managed c-4 alone
    assert totals["default"].disruption == 2.0  # 1 for the node, 1 for its pod
