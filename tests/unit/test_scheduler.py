"""The provisioning scheduler at the foundation's fidelity: resources, selectors, affinity terms,
taints, weights, limits, existing capacity and DaemonSet overhead."""

import pytest

from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import InstanceType, Offering, Overhead
from karpenter_core.scheduling.scheduler import Minimize, schedule
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot
from karpenter_core.scheduling.taints import Taint, Toleration
from karpenter_kwok.catalog import generic_catalog, parse_catalog

GI = 2**30 * 1000
ZONES = ("zone-a", "zone-b")


def instance_type(name, cpu, memory_gi, price, arch="amd64", zones=ZONES, extra=None, spot=True):
    capacity = {"cpu": cpu * 1000, "memory": memory_gi * GI, "pods": 110_000, **(extra or {})}
    offerings = []
    for zone in zones:
        for capacity_type, factor in (("on-demand", 1.0), ("spot", 0.7)):
            if capacity_type == "spot" and not spot:
                continue
            offerings.append(
                Offering(
                    Requirements.from_labels(
                        {
                            "topology.kubernetes.io/zone": zone,
                            "karpenter.sh/capacity-type": capacity_type,
                        }
                    ),
                    round(price * factor, 6),
                )
            )
    requirements = Requirements.from_labels(
        {
            "node.kubernetes.io/instance-type": name,
            "kubernetes.io/arch": arch,
            "kubernetes.io/os": "linux",
        }
    )
    requirements.add(
        *Requirements.from_node_selector(
            [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(zones)},
                {
                    "key": "karpenter.sh/capacity-type",
                    "operator": "In",
                    "values": ["spot", "on-demand"],
                },
                {"key": "example.com/family", "operator": "In", "values": [name.split("-")[0]]},
            ]
        ).values()
    )
    return InstanceType(
        name, requirements, offerings, capacity, Overhead(kube_reserved={"cpu": 100})
    )


CATALOG = [
    instance_type("small-2", 2, 4, 0.10),
    instance_type("medium-4", 4, 8, 0.20),
    instance_type("large-8", 8, 16, 0.40),
    instance_type("arm-4", 4, 8, 0.16, arch="arm64"),
    instance_type("gpu-8", 8, 32, 2.00, extra={"nvidia.com/gpu": 1000}, spot=False),
]


def nodepool(name="default", requirements=(), weight=None, taints=(), limits=None, labels=None):
    spec = {
        "template": {
            "metadata": {"labels": labels or {}},
            "spec": {
                "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
                "requirements": list(requirements),
                "taints": list(taints),
            },
        }
    }
    if weight is not None:
        spec["weight"] = weight
    if limits:
        spec["limits"] = limits
    return NodePool.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def pod(name, cpu=1000, memory=GI, **kwargs):
    return PodInfo("default", name, {"cpu": cpu, "memory": memory, "pods": 1000}, **kwargs)


def run(pods, pools=None, nodes=(), daemonsets=(), catalog=CATALOG, minimize=Minimize.PRICE):
    pools = pools or [nodepool()]
    snapshot = Snapshot(
        nodepools=pools,
        instance_types={p.metadata.name: catalog for p in pools},
        nodes=list(nodes),
        pending=list(pods),
        daemonsets=list(daemonsets),
    )
    return schedule(snapshot, minimize)


def test_picks_the_cheapest_offering_that_fits():
    results = run([pod("a", cpu=3000)])
    (claim,) = results.new_nodeclaims
    assert claim.instance_type.name == "arm-4"
    assert (claim.offering.capacity_type, claim.offering.zone) == ("spot", "zone-a")
    assert claim.price == pytest.approx(0.112)


def test_node_selector_restricts_instance_types():
    results = run([pod("a", node_selector={"kubernetes.io/arch": "amd64"})])
    assert results.new_nodeclaims[0].instance_type.name == "small-2"
    assert all(
        it.requirements["kubernetes.io/arch"].has("amd64")
        for it in results.new_nodeclaims[0].instance_types
    )


def test_required_node_affinity_terms_are_ored():
    terms = [
        [{"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}],
        [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}],
    ]
    results = run([pod("a", node_affinity_required=terms)])
    assert results.new_nodeclaims[0].offering.zone == "zone-b"
    assert not results.unschedulable


def test_extended_resources_need_a_type_that_has_them():
    gpu_pod = PodInfo("default", "g", {"cpu": 1000, "nvidia.com/gpu": 1000, "pods": 1000})
    results = run([gpu_pod])
    assert results.new_nodeclaims[0].instance_type.name == "gpu-8"
    assert results.new_nodeclaims[0].offering.capacity_type == "on-demand"


def test_pod_too_big_gets_an_actionable_reason():
    results = run([pod("huge", cpu=300_000)])
    assert results.unschedulable == {"default/huge": "no instance type has 300 CPU"}
    assert not results.new_nodeclaims


def test_taints_need_tolerations():
    pools = [nodepool(taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])]
    results = run([pod("a")], pools)
    assert "did not tolerate taint dedicated=ml:NoSchedule" in results.unschedulable["default/a"]
    tolerating = pod("b", tolerations=[Toleration("dedicated", "Equal", "ml", "NoSchedule")])
    assert len(run([tolerating], pools).new_nodeclaims) == 1


def test_heavier_nodepool_wins_and_undefined_custom_labels_are_refused():
    pools = [
        nodepool(
            "cheap",
            requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}],
        ),
        nodepool(
            "preferred",
            weight=50,
            requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        ),
    ]
    results = run([pod("a")], pools)
    assert results.new_nodeclaims[0].nodepool == "preferred"
    labelled = run([pod("b", node_selector={"team": "x"})], pools)
    assert "does not have known values" in labelled.unschedulable["default/b"]


def test_template_labels_select_the_nodepool():
    pools = [nodepool("plain"), nodepool("team-x", labels={"team": "x"})]
    results = run([pod("b", node_selector={"team": "x"})], pools)
    assert results.new_nodeclaims[0].nodepool == "team-x"
    assert results.new_nodeclaims[0].labels["team"] == "x"


def test_limits_count_launched_capacity():
    pools = [nodepool(limits={"cpu": "8"})]
    results = run([pod(f"p{i}", cpu=3500) for i in range(4)], pools)
    assert sum(len(c.pods) for c in results.new_nodeclaims) == 2
    assert sum(c.instance_type.capacity["cpu"] for c in results.new_nodeclaims) <= 8000
    reasons = set(results.unschedulable.values())
    assert reasons == {"would exceed NodePool default limit cpu=8"}


def test_existing_nodes_are_used_first():
    node = NodeInfo(
        "node-a", {"kubernetes.io/arch": "amd64"}, {"cpu": 4000, "memory": 8 * GI, "pods": 110_000}
    )
    busy = pod("running", cpu=2000, node_name="node-a")
    node.pods.append(busy)
    results = run([pod("a", cpu=1000), pod("b", cpu=1000), pod("c", cpu=1000)], nodes=[node])
    assert sorted(p.name for p in results.existing["node-a"]) == ["a", "b"]
    assert [p.name for c in results.new_nodeclaims for p in c.pods] == ["c"]


def test_tainted_existing_node_is_skipped():
    node = NodeInfo(
        "node-a",
        {},
        {"cpu": 4000, "memory": 8 * GI, "pods": 110_000},
        taints=[Taint("k", "v", "NoSchedule")],
    )
    results = run([pod("a")], nodes=[node])
    assert not results.existing
    assert len(results.new_nodeclaims) == 1


def test_daemonset_overhead_is_reserved_on_every_new_node():
    daemon = PodInfo(
        "kube-system",
        "agent",
        {"cpu": 500, "memory": GI // 2, "pods": 1000},
        owner_kind="DaemonSet",
    )
    # 1.5 CPU fits small-2 (1.9 usable) alone, but not with the 0.5 CPU daemon.
    results = run([pod("a", cpu=1500)], daemonsets=[daemon])
    claim = results.new_nodeclaims[0]
    assert claim.instance_type.name == "arm-4"
    assert claim.requests["cpu"] == 2000


def test_daemonset_that_cannot_run_on_the_nodepool_adds_no_overhead():
    daemon = PodInfo(
        "kube-system",
        "gpu-agent",
        {"cpu": 500, "pods": 1000},
        owner_kind="DaemonSet",
        node_selector={"example.com/family": "gpu"},
    )
    pools = [
        nodepool(
            requirements=[
                {"key": "example.com/family", "operator": "In", "values": ["small", "medium"]}
            ]
        )
    ]
    results = run([pod("a", cpu=1500)], pools, daemonsets=[daemon])
    assert results.new_nodeclaims[0].instance_type.name == "small-2"


def test_pods_share_open_nodeclaims_before_new_ones_open():
    results = run([pod(f"p{i}", cpu=1000, memory=GI) for i in range(7)])
    assert sum(len(c.pods) for c in results.new_nodeclaims) == 7
    assert len(results.new_nodeclaims) == 1
    assert results.new_nodeclaims[0].instance_type.name == "large-8"


def test_identical_pods_get_the_cheapest_set_of_nodes():
    # 8 x 1 CPU (spot prices): large-8 for 7 + small-2 for 1 costs 0.28 + 0.07 = 0.35, and
    # three arm-4 nodes holding 3 + 3 + 2 cost 0.336, the cheapest plan.
    results = run([pod(f"p{i}", cpu=1000, memory=GI) for i in range(8)])
    assert [c.instance_type.name for c in results.new_nodeclaims] == ["arm-4"] * 3
    assert results.cost_per_hour == pytest.approx(0.336)


def test_cost_mode_is_never_dearer_than_fewest_nodeclaims_mode():
    pods = [pod(f"p{i}", cpu=1800, memory=GI) for i in range(9)]
    cheap = run(pods)
    few = run(pods, minimize=Minimize.NODECLAIMS)
    assert cheap.cost_per_hour <= few.cost_per_hour
    assert len(few.new_nodeclaims) <= len(cheap.new_nodeclaims)


def test_daemon_and_bound_pods_are_not_scheduled():
    results = run([pod("bound", node_name="elsewhere"), pod("ds", owner_kind="DaemonSet")])
    assert not results.new_nodeclaims and not results.unschedulable


def test_nodepool_without_instance_types_is_a_warning():
    pools = [
        nodepool(
            requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}]
        )
    ]
    results = run([pod("a")], pools)
    assert results.warnings == ["NodePool default: no instance type satisfies its requirements"]
    assert "default/a" in results.unschedulable


def test_in_flight_nodeclaims_receive_pods_before_new_ones_open():
    from karpenter_core.apis.v1.nodeclaim import NodeClaim

    claim = NodeClaim.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
                "requirements": [
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["medium-4"],
                    },
                    {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                ],
            },
        }
    )
    pools = [nodepool()]
    snapshot = Snapshot(
        nodepools=pools,
        instance_types={"default": CATALOG},
        pending=[pod("a", cpu=1000), pod("b", cpu=1000), pod("c", cpu=3000)],
        nodeclaims=[claim],
    )
    results = schedule(snapshot)
    # medium-4 has 3.9 CPU allocatable: the 3 CPU pod takes it, the two 1 CPU pods need a new node.
    assert [p.name for p in results.existing["default-abc"]] == ["c"]
    assert sorted(p.name for c in results.new_nodeclaims for p in c.pods) == ["a", "b"]


def test_daemonset_selecting_a_template_label_counts_on_that_nodepool():
    daemon = PodInfo(
        "kube-system",
        "team-agent",
        {"cpu": 500, "pods": 1000},
        owner_kind="DaemonSet",
        node_selector={"team": "x"},
    )
    pools = [nodepool(labels={"team": "x"})]
    results = run([pod("a", cpu=1500)], pools, daemonsets=[daemon])
    assert results.new_nodeclaims[0].instance_type.name == "arm-4"
    assert results.new_nodeclaims[0].requests["cpu"] == 2000


def test_equal_cost_plans_launch_the_fewest_nodeclaims():
    # KWOK's prices are linear in CPU and memory: two c-8x cost what one c-16x costs, up to
    # float rounding of the sums. 1,000 pods of 1 CPU on its c family: three c-256x (255 pods
    # each), a c-192x (191) and a c-48x (44), as cheap as any plan and the fewest NodeClaims.
    catalog = [
        it
        for it in parse_catalog(generic_catalog(), "kwok")
        if it.name.startswith("c-") and it.name.endswith("-amd64-linux")
    ]
    results = run([pod(f"p{i}", cpu=1000, memory=GI // 4) for i in range(1000)], catalog=catalog)
    names = sorted(c.instance_type.name.split("-")[1] for c in results.new_nodeclaims)
    assert names == ["192x", "256x", "256x", "256x", "48x"]
    assert results.cost_per_hour == pytest.approx(3 * 4.864829 + 3.648622 + 0.912155, abs=1e-5)
