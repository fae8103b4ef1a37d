"""Disruption cases carried over from upstream Karpenter's own tests
(kubernetes-sigs/karpenter ``pkg/controllers/disruption/*_test.go``): minValues on a trimmed
replacement, a replacement's price across the zones it may launch in, local volumes, and
commands planned on the cluster as the earlier commands leave it. Each test names the
upstream case (Describe > Context > It) it follows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karpenter_core.apis.requirements import Requirement, Requirements
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.types import InstanceType, Offering
from karpenter_core.disruption.planner import Options, Plan, plan
from karpenter_core.scheduling.snapshot import NodeInfo, Snapshot
from tests.unit.disruption_fixtures import NOW, node, pod, pods, pool, snapshot, summary
from tests.unit.scheduling_fixtures import CATALOG, pvc, storage_class
from tests.unit.upstream_fake_catalog import CAPACITY_TYPE, ZONE, fake_instance_type

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
HOSTNAME = "kubernetes.io/hostname"
NODEPOOL = "karpenter.sh/nodepool"
ALL = [{"nodes": "100%"}]


def priced(name: str, *offerings: tuple[str, str, float], cpu: float = 4) -> InstanceType:
    """Upstream's ``fake.NewInstanceType(name, fake.WithOfferings(...))``: a 4-CPU type (unless
    told) offered only as ``offerings`` (capacity type, zone, price), all available."""
    base = fake_instance_type(name, cpu=cpu)
    requirements = Requirements(r for r in base.requirements.values() if r.key not in (ZONE,))
    requirements.add(
        Requirement.new(ZONE, "In", sorted({zone for _, zone, _ in offerings})),
        Requirement.new(CAPACITY_TYPE, "In", sorted({ct for ct, _, _ in offerings})),
    )
    return InstanceType(
        name,
        requirements,
        [
            Offering(Requirements.from_labels({CAPACITY_TYPE: ct, ZONE: z}), p)
            for ct, z, p in offerings
        ],
        base.capacity,
        base.overhead,
    )


def on(
    name: str,
    it: InstanceType,
    catalog: Sequence[InstanceType],
    cpus: Sequence[str] = ("100m",),
    **kwargs: Any,
) -> NodeInfo:
    """A node of ``it`` in its first offering's zone and capacity type, with one pod per CPU
    request in ``cpus`` (``kwargs`` for each pod)."""
    first = it.offerings[0]
    return node(
        name,
        it.name,
        zone=first.zone,
        capacity_type=first.capacity_type,
        catalog=catalog,
        pods=[
            pod(f"{name}-p-{i}", name, cpu=cpu, memory="64Mi", **kwargs)
            for i, cpu in enumerate(cpus)
        ],
    )


def types_of(result: Plan) -> list[list[str]]:
    return [[it.name for it in r.instance_types] for c in result.commands for r in c.replacements]


# --- minValues on the replacement -----------------------------------------------------------------


def _min_values_pool(catalog: Sequence[InstanceType], min_values: int) -> Any:
    """A NodePool naming ``catalog``'s types and two that are not offered (upstream names the
    whole fake catalog before keeping two of its types), with minValues on the type."""
    return pool(
        budgets=ALL,
        requirements=[
            {
                "key": INSTANCE_TYPE,
                "operator": "In",
                "values": [*(it.name for it in catalog), "not-offered-1", "not-offered-2"],
                "minValues": min_values,
            }
        ],
    )


def test_best_effort_min_values_do_not_let_a_trimmed_replacement_through():
    # upstream: "Consolidation > MinValuesPolicy > should not consolidate a node by relaxing min
    # values when policy is set to BestEffort". Two types, minValues 3: the simulation relaxes
    # minValues to the 2 types it has; trimming to the types cheaper than the node leaves 1,
    # below even the relaxed minValues, so the node stays.
    cheap = priced("least-expensive", ("on-demand", "test-zone-1", 0.1))
    dear = priced("most-expensive", ("on-demand", "test-zone-1", 2.0))
    catalog = [cheap, dear]
    nodes = [on("n-0", dear, catalog)]
    options = Options(min_values_policy="BestEffort")
    result = plan(snapshot(nodes, [_min_values_pool(catalog, 3)], catalog=catalog), NOW, options)
    assert result.commands == []


def test_strict_min_values_refuse_a_single_node_replacement_trimmed_below_them():
    # upstream's rule in consolidation.go (computeConsolidation: the replacement's types are
    # trimmed to those cheaper than the candidate, then minValues are checked again), in the
    # setting of the BestEffort case above with minValues 2, which the simulation meets.
    cheap = priced("least-expensive", ("on-demand", "test-zone-1", 0.1))
    dear = priced("most-expensive", ("on-demand", "test-zone-1", 2.0))
    catalog = [cheap, dear]
    nodes = [on("n-0", dear, catalog)]
    result = plan(snapshot(nodes, [_min_values_pool(catalog, 2)], catalog=catalog), NOW)
    assert result.commands == []
    # with a third type cheaper than the node, two remain after trimming: it is replaced
    middle = priced("middle", ("on-demand", "test-zone-1", 0.5))
    catalog = [cheap, middle, dear]
    nodes = [on("n-0", dear, catalog)]
    result = plan(snapshot(nodes, [_min_values_pool(catalog, 2)], catalog=catalog), NOW)
    assert types_of(result) == [["least-expensive", "middle"]]


def test_multi_node_consolidation_refuses_a_merge_whose_same_type_trim_breaks_min_values():
    # upstream: "Consolidation > Replace > should handle failing filterOutSameInstanceType
    # correctly (without a panic) when minValues isn't satisfied". Merging the first two nodes
    # into one "other-on-demand" would leave one type for minValues 2 (the node's own type is
    # trimmed as it is no cheaper than a node being merged); instead one of them is deleted.
    current = priced("current-on-demand", ("on-demand", "test-zone-1a", 0.5), cpu=5)
    other = priced("other-on-demand", ("on-demand", "test-zone-1a", 0.4), cpu=5)
    catalog = [current, other]
    nodepool = pool(
        budgets=ALL,
        requirements=[
            {"key": INSTANCE_TYPE, "operator": "Exists", "minValues": 2},
            {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
        ],
    )
    nodes = [
        on("n-0", current, catalog, ["2"]),
        on("n-1", current, catalog, ["2"]),
        on("n-2", current, catalog, ["2", "2"]),
    ]
    result = plan(snapshot(nodes, [nodepool], catalog=catalog), NOW, rounds=1)
    assert len(result.commands) == 1
    (command,) = result.commands
    assert command.replacements == []
    assert len(command.candidates) == 1
    assert command.candidates[0].name in ("n-0", "n-1")


# --- replacement price across zones ---------------------------------------------------------------


def replacing(*offerings: tuple[str, str, float], nodepool: Any = None, **pod: Any) -> Plan:
    """One pass on a node of upstream's "current-on-demand" type (on-demand at 0.5/h in
    test-zone-1a) with one pod (``pod``: its fields), when the only other type, "replacement",
    is offered as ``offerings``."""
    current = priced("current-on-demand", ("on-demand", "test-zone-1a", 0.5))
    catalog = [current, priced("replacement", *offerings)]
    nodes = [on("n-0", current, catalog, **pod)]
    return plan(snapshot(nodes, [nodepool or pool(budgets=ALL)], catalog=catalog), NOW)


def test_a_replacement_must_be_cheaper_in_every_zone_it_may_launch_in():
    # upstream: "Consolidation > Replace > won't replace node if any spot replacement is more
    # expensive": the only replacement type is offered spot at 1.0, 0.2 and 0.4 in three zones;
    # the launch may land in the 1.0 zone, dearer than the 0.5 node, so the node stays.
    offerings = [("spot", "test-zone-1a", 1.0), ("spot", "test-zone-1b", 0.2)]
    offerings.append(("spot", "test-zone-1c", 0.4))
    assert replacing(*offerings).commands == []
    # a pod pinned to the cheap zone lets the replacement launch only there: it pays
    result = replacing(*offerings, node_selector={ZONE: "test-zone-1b"})
    assert summary(result) == [("underutilized", ["n-0"], [("replacement", "spot")])]


def test_an_on_demand_replacement_dearer_in_every_allowed_offering_is_refused():
    # upstream: "Consolidation > Replace > won't replace on-demand node if on-demand replacement
    # is more expensive" (its spot offerings are cheaper, but the NodePool allows on-demand only)
    on_demand = [{"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]
    result = replacing(
        ("on-demand", "test-zone-1a", 0.6),
        ("on-demand", "test-zone-1b", 0.6),
        ("spot", "test-zone-1b", 0.2),
        ("spot", "test-zone-1c", 0.3),
        nodepool=pool(budgets=ALL, requirements=on_demand),
    )
    assert result.commands == []


def test_an_on_demand_node_replaced_by_spot_is_replaced_by_spot_only():
    # upstream's rule in consolidation.go (computeConsolidation: a replacement that may be spot
    # or on-demand, priced as spot, gets a requirement for spot), in the setting of "won't
    # replace on-demand node if on-demand replacement is more expensive" with both capacity
    # types allowed: the type is cheaper as spot only, so a launch short of spot capacity must
    # fail rather than fall back to a dearer on-demand node.
    result = replacing(
        ("on-demand", "test-zone-1a", 0.6),
        ("spot", "test-zone-1a", 0.2),
        ("spot", "test-zone-1b", 0.3),
    )
    assert summary(result) == [("underutilized", ["n-0"], [("replacement", "spot")])]
    launched = result.commands[0].replacements[0].requirements.get(CAPACITY_TYPE)
    assert launched is not None
    assert sorted(launched.values) == ["spot"]


# --- local volumes --------------------------------------------------------------------------------


def _local_pv(name: str, host: str, source: str) -> dict[str, Any]:
    """A local (or hostPath) PersistentVolume usable only on node ``host``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            source: {"path": "/mnt/local-disks"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": HOSTNAME, "operator": "In", "values": [host]}
                            ]
                        }
                    ]
                }
            },
        },
    }


@pytest.mark.parametrize("source", ["local", "hostPath"])
def test_a_node_with_a_local_volume_can_be_replaced(source):
    # upstream: "Simulate Scheduling > can replace node with a local PV (ignoring hostname
    # affinity)". The StatefulSet pod's claim names its volume but, as in upstream's case, has no
    # pv.kubernetes.io/bind-completed annotation: the pod runs, so its claim is not checked again
    # as a pending pod's would be; the volume's hostname affinity is dropped, the node replaced.
    db = pod("db-0", "n-0", owner=("StatefulSet", "db"), claims=["data"])
    claim = pvc("data", storage_class="local-path", volume="pv-0")
    del claim["metadata"]["annotations"]
    claim["status"] = {}
    cluster = replace(
        snapshot([node("n-0", "c-8", pods=[db])], [pool(budgets=ALL)]),
        persistent_volumes=[_local_pv("pv-0", "n-0", source)],
        persistent_volume_claims=[claim],
        storage_classes=[storage_class("local-path")],
    )
    result = plan(cluster, NOW)
    assert [(c, n) for c, n, _ in summary(result)] == [("underutilized", ["n-0"])]
    assert len(result.commands[0].replacements) == 1


# --- later commands planned on the cluster as earlier ones leave it -------------------------------


def claim_of(info: NodeInfo, registered: bool = True, same_name: bool = False) -> NodeClaim:
    """The NodeClaim of a node (its providerID, its node name unless not ``registered`` yet,
    its allocatable), named ``<node>-claim``, or as the node when ``same_name`` (as KWOK's)."""
    status: dict[str, Any] = {
        "providerID": info.provider_id,
        "allocatable": {
            "cpu": f"{info.allocatable['cpu']}m",
            "memory": str(info.allocatable["memory"] // 1000),
            "pods": "110",
        },
    }
    if registered:
        status["nodeName"] = info.name
    return NodeClaim.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": info.name if same_name else f"{info.name}-claim",
                "labels": {NODEPOOL: "default"},
            },
            "spec": {
                "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
                "requirements": [{"key": NODEPOOL, "operator": "In", "values": ["default"]}],
            },
            "status": status,
        }
    )


def with_claims(cluster: Snapshot, same_name: bool = False) -> Snapshot:
    return replace(cluster, nodeclaims=[claim_of(n, same_name=same_name) for n in cluster.nodes])


def homeless(cluster: Snapshot, result: Plan) -> list[str]:
    """What is wrong with the cluster the commands leave: a pod of ``cluster`` on no node, on a
    node that does not list it as its node, or on the NodeClaim of a node (which is only ever
    that node, gone or not), or a node whose pods need more than it has."""
    after = result.cluster
    assert after is not None
    registered = {c.metadata.name for c in cluster.nodeclaims if c.status.node_name}
    registered -= {n.name for n in cluster.nodes}
    wrong = [f"pods moved onto NodeClaim {n.name}" for n in after.nodes if n.name in registered]
    names = [n.name for n in after.nodes]
    wrong += [f"{name} is there twice" for name in sorted(set(names)) if names.count(name) > 1]
    where = {p.key: n for n in after.nodes for p in n.pods}
    for p in (p for n in cluster.nodes for p in n.pods):
        if p.key not in where:
            wrong.append(f"{p.key} has no node")
    for n in after.nodes:
        for p in n.pods:
            if p.node_name != n.name:
                wrong.append(f"{p.key} is listed on {n.name} but bound to {p.node_name}")
        for resource, room in n.allocatable.items():
            used = sum(p.requests.get(resource, 0) for p in n.pods)
            if used > room:
                wrong.append(f"{n.name} holds {used} {resource} of {room}")
    return wrong


def test_later_commands_never_move_pods_onto_the_nodeclaims_of_nodes_already_removed():
    # (no upstream case: upstream decides one command at a time on the live cluster, whose
    # removed nodes' NodeClaims are being deleted.) Three half-empty c-4 nodes, each with its
    # NodeClaim: the first command merges them into one c-8; the NodeClaims of the nodes it
    # removed must not pass for launches in flight that a second command could move the pods to.
    nodes = [node(f"n-{i}", "c-4", pods=pods(f"p{i}", f"n-{i}", 1, cpu="1500m")) for i in range(3)]
    cluster = with_claims(snapshot(nodes, [pool(budgets=ALL)]))
    result = plan(cluster, NOW)
    assert summary(result) == [("underutilized", ["n-0", "n-1", "n-2"], [("c-8", "spot")])]
    assert homeless(cluster, result) == []


def test_a_node_whose_nodeclaim_has_its_name_stays_one_node_when_pods_move_onto_it():
    # (no upstream case: see above.) KWOK names a node as its NodeClaim. Deleting the small node
    # moves its pod onto the big one; the big one's NodeClaim is that node, not a second one.
    nodes = [
        node("big", "c-8", capacity_type="spot", pods=pods("a", "big", 1, cpu="6")),
        node("small", "c-2", pods=pods("b", "small", 1, cpu="500m")),
    ]
    cluster = with_claims(snapshot(nodes, [pool(budgets=ALL)]), same_name=True)
    result = plan(cluster, NOW)
    assert summary(result)
    assert homeless(cluster, result) == []


TYPES = ["c-2", "c-4", "c-8", "arm-2", "arm-4"]
AMD64 = [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Snapshot, Options]:
    """Up to 6 nodes (arm ones drifted when the NodePool asks for amd64, all expired when it
    has an expireAfter), each with its NodeClaim and up to 4 pods that fit it, and now and then
    a NodeClaim still launching."""
    count = draw(st.integers(min_value=1, max_value=6))
    nodes = []
    for i in range(count):
        it = draw(st.sampled_from(TYPES))
        room = next(t for t in CATALOG if t.name == it).allocatable["cpu"]
        cpus = draw(st.lists(st.sampled_from([100, 400, 900, 1500]), max_size=4))
        kept = []
        for cpu in cpus:
            if sum(kept) + cpu <= room:
                kept.append(cpu)
        nodes.append(
            node(
                f"n-{i}",
                it,
                zone=draw(st.sampled_from(["zone-a", "zone-b"])),
                capacity_type=draw(st.sampled_from(["on-demand", "spot"])),
                pods=[
                    pod(f"p{i}-{j}", f"n-{i}", cpu=f"{cpu}m", memory="64Mi")
                    for j, cpu in enumerate(kept)
                ],
            )
        )
    nodepool = pool(
        budgets=ALL,
        requirements=AMD64 if draw(st.booleans()) else (),
        expire_after="1h" if draw(st.integers(0, 4)) == 0 else None,
    )
    cluster = with_claims(snapshot(nodes, [nodepool]), same_name=draw(st.booleans()))
    if draw(st.booleans()):
        cluster.nodeclaims.append(claim_of(node("launching", "c-4"), registered=False))
    options = Options(spot_to_spot=draw(st.booleans()))
    return cluster, options


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_list_of_commands_leaves_a_pod_without_a_node_that_fits_it(case):
    cluster, options = case
    result = plan(cluster, NOW, options)
    assert homeless(cluster, result) == []
