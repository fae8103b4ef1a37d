"""The cluster as it will be once the commands in flight are done (``as_it_will_be``): what the
disruption controller decides against while earlier commands wait for their replacements."""

from __future__ import annotations

from karpenter_core.controllers.disruption_queue import as_it_will_be
from karpenter_core.disruption.planner import next_command
from tests.unit.disruption_fixtures import NOW, node, pdb, pod, pods, pool, snapshot

ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
POOLS = [pool(budgets=[{"nodes": "100%"}], requirements=[ON_DEMAND])]


def test_pods_of_nodes_being_deleted_keep_the_capacity_they_will_need():
    # "going" is being drained; its 3 CPU of pods will need a home. Alone, "spare" (a c-4 with
    # 0.5 CPU used) would be replaced by a c-2; with those pods on their way it must not shrink.
    going = node("going", deleting=True, pods=pods("app", "going", 3, cpu="1"))
    spare = node("spare", pods=[pod("one-0", "spare")])
    now = snapshot([going, spare], POOLS)
    command = next_command(now, NOW)
    assert command is not None
    assert [c.name for c in command.candidates] == ["spare"]
    assert [r.instance_type.name for r in command.replacements] == ["c-2"]

    later = as_it_will_be(now)
    assert sorted(p.key for p in later.pending) == [
        "default/app-0",
        "default/app-1",
        "default/app-2",
    ]
    assert all(p.node_name is None for p in later.pending)
    assert next_command(later, NOW) is None


def test_evictions_to_come_use_up_pod_disruption_budgets():
    # One disruption allowed; the pod on the node being deleted takes it, so web-1 is blocked.
    going = node("going", deleting=True, pods=[pod("web-0", "going", labels={"app": "web"})])
    other = node("other", "c-2", pods=[pod("web-1", "other", labels={"app": "web"})])
    room = node("room", "c-8", pods=[pod("big-0", "room", cpu="4")])
    budget = pdb("web", {"app": "web"}, max_unavailable=1, disruptions_allowed=1)
    now = snapshot([going, other, room], POOLS, pdbs=[budget])
    command = next_command(now, NOW)
    assert command is not None and "other" in [c.name for c in command.candidates]

    blocked: dict[str, str] = {}
    later = as_it_will_be(now)
    command = next_command(later, NOW, blocked=blocked)
    assert command is None or "other" not in [c.name for c in command.candidates]
    assert "PodDisruptionBudget default/web allows no disruption" in blocked["other"]
    assert now.pdbs[0]["status"]["disruptionsAllowed"] == 1, "the input is not modified"


def test_a_cluster_with_nothing_being_deleted_is_unchanged():
    now = snapshot([node("a", pods=[pod("one-0", "a")])])
    assert as_it_will_be(now) is now
