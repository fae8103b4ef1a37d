"""What a disruption simulation sees: the cluster without the nodes it removes, and without
anything standing for them."""

from __future__ import annotations

from karpenter_core.disruption.planner import Options, next_command
from karpenter_core.scheduling.snapshot import Snapshot
from tests.unit.disruption_fixtures import NOW, node, pods, pool
from tests.unit.scheduling_fixtures import CATALOG, in_flight

AMD64 = [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]


def test_a_removed_nodes_own_nodeclaim_is_not_capacity_in_its_simulation():
    # simulate --disrupt reads the NodeClaims with the Nodes. arm-2 no longer meets the NodePool's
    # requirements (drift); its NodeClaim must not look like a launch in flight once the node is
    # removed, or its pods would "fit" there and the drift would launch no replacement.
    nodes = [
        node("n-0", "arm-2", pods=pods("a-x", "n-0", 3, cpu="600m")),
        node("n-1", "c-2", pods=pods("b-x", "n-1", 3, cpu="600m")),
    ]
    claims = [in_flight(n.name, cpu="1900m", memory="4Gi") for n in nodes]
    nodepool = pool(requirements=AMD64, budgets=[{"nodes": "100%"}])
    cluster = Snapshot(
        nodepools=[nodepool],
        instance_types={"default": list(CATALOG)},
        nodes=nodes,
        nodeclaims=claims,
    )
    command = next_command(cluster, NOW, Options())
    assert command is not None
    assert (command.reason, [c.name for c in command.candidates]) == ("drifted", ["n-0"])
    assert [r.instance_type.name for r in command.replacements] == ["c-2"]
