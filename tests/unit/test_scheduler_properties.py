"""No scheduling result ever breaks a hard constraint, whatever the input."""

from hypothesis import given
from hypothesis import strategies as st

from karpenter_core.scheduling.requirements import Requirements
from karpenter_core.scheduling.scheduler import Minimize, schedule
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot
from karpenter_core.scheduling.taints import Toleration, untolerated
from tests.unit.test_scheduler import CATALOG, GI, nodepool

TAINT = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
SELECTORS = [
    {},
    {"kubernetes.io/arch": "arm64"},
    {"kubernetes.io/arch": "amd64"},
    {"topology.kubernetes.io/zone": "zone-b"},
    {"karpenter.sh/capacity-type": "on-demand"},
]


@st.composite
def pods(draw):
    count = draw(st.integers(min_value=0, max_value=25))
    out = []
    for i in range(count):
        requests = {
            "cpu": draw(st.sampled_from([100, 500, 1000, 1900, 3000, 7000, 9000])),
            "memory": draw(st.sampled_from([GI // 4, GI, 4 * GI, 20 * GI])),
            "pods": 1000,
        }
        if draw(st.booleans()) and draw(st.booleans()):
            requests["nvidia.com/gpu"] = 1000
        tolerations = [Toleration("dedicated", "Exists")] if draw(st.booleans()) else []
        out.append(
            PodInfo(
                "default",
                f"p{i}",
                requests,
                node_selector=draw(st.sampled_from(SELECTORS)),
                tolerations=tolerations,
                created=i,
            )
        )
    return out


@st.composite
def snapshots(draw):
    pools = [nodepool("general", limits={"cpu": str(draw(st.integers(4, 200)))})]
    if draw(st.booleans()):
        pools.append(nodepool("tainted", weight=10, taints=[TAINT]))
    nodes = []
    for i in range(draw(st.integers(0, 3))):
        node = NodeInfo(
            f"node-{i}",
            {"kubernetes.io/arch": draw(st.sampled_from(["amd64", "arm64"]))},
            {"cpu": draw(st.sampled_from([2000, 4000])), "memory": 8 * GI, "pods": 110_000},
        )
        nodes.append(node)
    return Snapshot(
        nodepools=pools,
        instance_types={p.metadata.name: CATALOG for p in pools},
        nodes=nodes,
        pending=draw(pods()),
    )


def _fits(requests, allocatable):
    return all(v <= allocatable.get(k, 0) for k, v in requests.items() if v > 0)


@given(snapshots(), st.sampled_from(list(Minimize)))
def test_results_respect_every_hard_constraint(snapshot, minimize):
    results = schedule(snapshot, minimize)
    placed = [p.key for c in results.new_nodeclaims for p in c.pods]
    placed += [p.key for pods in results.existing.values() for p in pods]
    assert len(placed) == len(set(placed))
    assert sorted(placed + list(results.unschedulable)) == sorted(p.key for p in snapshot.pending)

    nodes = {n.name: n for n in snapshot.nodes}
    for name, pods in results.existing.items():
        node = nodes[name]
        total = {}
        for pod in pods:
            assert untolerated(node.taints, pod.tolerations) is None
            assert all(node.labels.get(k) == v for k, v in pod.node_selector.items())
            for k, v in pod.requests.items():
                total[k] = total.get(k, 0) + v
        assert _fits(total, node.allocatable)

    pools = {p.metadata.name: p for p in snapshot.nodepools}
    launched: dict[str, int] = {}
    for claim in results.new_nodeclaims:
        it, offering = claim.instance_type, claim.offering
        assert it in claim.instance_types
        assert _fits(claim.requests, it.allocatable)
        labels = Requirements(it.requirements.values())
        labels.add(*offering.requirements.values())
        for pod in claim.pods:
            assert untolerated(claim.taints, pod.tolerations) is None
            for key, value in pod.node_selector.items():
                assert labels[key].has(value), (key, value, it.name, offering)
        launched[claim.nodepool] = launched.get(claim.nodepool, 0) + it.capacity["cpu"]
    for name, cpu in launched.items():
        limit = pools[name].to_manifest()["spec"].get("limits", {}).get("cpu")
        if limit is not None:
            assert cpu <= int(limit) * 1000
