"""A drift command says which drift it acts on: NodePoolDrifted, RequirementsDrifted or the
provider's reason (upstream's drift reasons)."""

from __future__ import annotations

from typing import Any

from karpenter_core.apis.v1.hashing import HASH_VERSION
from karpenter_core.disruption.planner import Options
from karpenter_core.scheduling.snapshot import NodeInfo
from tests.unit.disruption_fixtures import decide, node, pods, pool

ZONE_B = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}
STALE_HASH = {
    "karpenter.sh/nodepool-hash": "1",
    "karpenter.sh/nodepool-hash-version": HASH_VERSION,
}


def busy(name: str, **kwargs: Any) -> NodeInfo:
    """A c-2 node with two pods: it can only be replaced."""
    return node(name, "c-2", pods=pods(f"{name}-app", name, 2, cpu="900m"), **kwargs)


def test_a_changed_template_is_nodepool_drift() -> None:
    [command] = decide([busy("stale", annotations=STALE_HASH)], [pool()]).commands
    assert (command.reason, command.drift_reason) == ("drifted", "NodePoolDrifted")


def test_a_label_outside_the_requirements_is_requirements_drift() -> None:
    [command] = decide([busy("zone-a-node")], [pool(requirements=[ZONE_B])]).commands
    assert (command.reason, command.drift_reason) == ("drifted", "RequirementsDrifted")


def test_the_providers_reason_is_kept() -> None:
    options = Options(drifted=lambda c: "ImageDrifted")
    [command] = decide([busy("old")], [pool()], options=options).commands
    assert (command.reason, command.drift_reason) == ("drifted", "ImageDrifted")


def test_other_commands_have_no_drift_reason() -> None:
    [command] = decide([node("idle")], [pool()]).commands
    assert (command.reason, command.drift_reason) == ("empty", "")
