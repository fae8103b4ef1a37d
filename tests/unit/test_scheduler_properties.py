"""No scheduling result ever breaks a hard constraint, whatever the input."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpenter_core.apis.requirements import Requirements
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


ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
APPS = ["plain", "spread", "lonely"]
CONSTRAINTS = {
    "plain": ((), None),
    # at most one pod of this app more in one zone than in another
    "spread": (
        [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "spread"}},
            }
        ],
        None,
    ),
    # never two pods of this app on one node
    "lonely": (
        (),
        {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "lonely"}}}
            ]
        },
    ),
}


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
        app = draw(st.sampled_from(APPS))
        out.append(
            PodInfo(
                "default",
                f"p{i}",
                requests,
                labels={"app": app},
                # Spread pods count only pods on nodes matching their own node selector
                # (nodeAffinityPolicy Honor): without one, they all measure the same skew.
                node_selector={} if app == "spread" else draw(st.sampled_from(SELECTORS)),
                tolerations=tolerations,
                created=i,
                topology_spread=CONSTRAINTS[app][0],
                pod_anti_affinity=CONSTRAINTS[app][1],
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


@pytest.mark.slow  # 150 generated clusters through the whole scheduler: seconds of CPU
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

    # Topology: one "lonely" pod per node; "spread" pods within skew 1 over the zones they reached
    # (only zones the scheduler opened NodeClaims in count, existing nodes have no zone label).
    for pods in [c.pods for c in results.new_nodeclaims] + list(results.existing.values()):
        assert sum(p.labels.get("app") == "lonely" for p in pods) <= 1
    zones: dict[str, int] = {}
    for claim in results.new_nodeclaims:
        if any(p.labels.get("app") == "spread" for p in claim.pods):
            zone = claim.requirements.get(ZONE)
            assert zone is not None and len(zone.values) == 1 and not zone.complement
        for p in claim.pods:
            if p.labels.get("app") == "spread":
                zone = claim.offering.zone
                zones[zone] = zones.get(zone, 0) + 1
    if zones:
        counts = [zones.get(z, 0) for z in ("zone-a", "zone-b")]
        assert max(counts) - min(counts) <= 1, zones

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
