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

from karpenter_core.apis.requirements import Requirement, Requirements
from karpenter_core.cloudprovider.types import InstanceType, Offering
from karpenter_core.disruption.planner import Options, Plan, plan
from karpenter_core.scheduling.snapshot import NodeInfo
from tests.unit.disruption_fixtures import NOW, node, pod, pool, snapshot, summary
from tests.unit.scheduling_fixtures import pvc, storage_class
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


def test_a_replacement_must_be_cheaper_in_every_zone_it_may_launch_in():
    # upstream: "Consolidation > Replace > won't replace node if any spot replacement is more
    # expensive": the only replacement type is offered spot at 1.0, 0.2 and 0.4 in three zones;
    # the launch may land in the 1.0 zone, dearer than the 0.5 node, so the node stays.
    current = priced("current-on-demand", ("on-demand", "test-zone-1a", 0.5))
    replacement = priced(
        "potential-spot-replacement",
        ("spot", "test-zone-1a", 1.0),
        ("spot", "test-zone-1b", 0.2),
        ("spot", "test-zone-1c", 0.4),
    )
    catalog = [current, replacement]
    nodes = [on("n-0", current, catalog)]
    result = plan(snapshot(nodes, [pool(budgets=ALL)], catalog=catalog), NOW)
    assert result.commands == []
    # a pod pinned to the cheap zones lets the replacement launch only there: it pays
    nodes = [on("n-0", current, catalog, node_selector={ZONE: "test-zone-1b"})]
    result = plan(snapshot(nodes, [pool(budgets=ALL)], catalog=catalog), NOW)
    assert summary(result) == [("underutilized", ["n-0"], [("potential-spot-replacement", "spot")])]


def test_an_on_demand_replacement_dearer_in_every_allowed_offering_is_refused():
    # upstream: "Consolidation > Replace > won't replace on-demand node if on-demand replacement
    # is more expensive" (its spot offerings are cheaper, but the NodePool allows on-demand only)
    current = priced("current-on-demand", ("on-demand", "test-zone-1a", 0.5))
    replacement = priced(
        "on-demand-replacement",
        ("on-demand", "test-zone-1a", 0.6),
        ("on-demand", "test-zone-1b", 0.6),
        ("spot", "test-zone-1b", 0.2),
        ("spot", "test-zone-1c", 0.3),
    )
    catalog = [current, replacement]
    nodepool = pool(
        budgets=ALL,
        requirements=[{"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
    )
    result = plan(snapshot([on("n-0", current, catalog)], [nodepool], catalog=catalog), NOW)
    assert result.commands == []


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
