"""The cluster as it will be once the commands in flight are done (``as_it_will_be``): what the
disruption controller decides against while earlier commands wait for their replacements."""

from __future__ import annotations

from typing import TYPE_CHECKING

from karpenter_core.disruption.candidates import Candidate
from karpenter_core.disruption.planner import Command, next_command
from karpenter_core.disruption.projection import (
    as_it_will_be,
    as_started,
    waiting_for_replacements,
)
from tests.unit.disruption_fixtures import NOW, node, pdb, pod, pods, pool, snapshot
from tests.unit.scheduling_fixtures import in_flight

if TYPE_CHECKING:
    from karpenter_core.scheduling.snapshot import Snapshot

HOSTNAME = "kubernetes.io/hostname"

ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
POOLS = [pool(budgets=[{"nodes": "100%"}], requirements=[ON_DEMAND])]


def test_pods_of_nodes_being_deleted_keep_the_capacity_they_will_need():
    # "going" is being drained; its 3 CPU of pods will need a home. Alone, "spare" (a c-4 with
    # 0.5 CPU used) would be replaced by a c-2; the pods on their way land on it first, so it
    # stays.
    going = node("going", deleting=True, pods=pods("app", "going", 3, cpu="1"))
    spare = node("spare", pods=[pod("one-0", "spare")])
    now = snapshot([going, spare], POOLS)
    command = next_command(now, NOW)
    assert command is not None
    assert [c.name for c in command.candidates] == ["spare"]
    assert [r.instance_type.name for r in command.replacements] == ["c-2"]

    later = as_it_will_be(now)
    [moved_to] = [n for n in later.nodes if n.name == "spare"]
    assert sorted(p.key for p in moved_to.pods if p.node_name == "spare") == [
        "default/app-0",
        "default/app-1",
        "default/app-2",
        "default/one-0",
    ]
    assert later.pending == []
    assert [p.node_name for p in spare.pods] == ["spare"], "the input is not modified"
    assert next_command(later, NOW) is None


def test_pods_of_nodes_being_deleted_that_fit_nowhere_are_pending():
    going = node("going", deleting=True, pods=pods("app", "going", 3, cpu="1"))
    small = node("small", "c-2", pods=[pod("one-0", "small", cpu="1500m")])
    later = as_it_will_be(snapshot([going, small], POOLS))
    assert sorted(p.key for p in later.pending) == [
        "default/app-0",
        "default/app-1",
        "default/app-2",
    ]
    assert all(p.node_name is None for p in later.pending)
    assert [p.key for n in later.nodes if n.name == "small" for p in n.pods] == ["default/one-0"]


def _web_one_disruption_allowed() -> Snapshot:
    """web-0 on "going" (being deleted), web-1 on "other", big-0 on "room"; web's budget allows
    one disruption."""
    going = node("going", deleting=True, pods=[pod("web-0", "going", labels={"app": "web"})])
    other = node("other", "c-2", pods=[pod("web-1", "other", labels={"app": "web"})])
    room = node("room", "c-8", pods=[pod("big-0", "room", cpu="4")])
    budget = pdb("web", {"app": "web"}, max_unavailable=1, disruptions_allowed=1)
    return snapshot([going, other, room], POOLS, pdbs=[budget])


def test_evictions_to_come_use_up_pod_disruption_budgets():
    # One disruption allowed; the pod on the node being deleted takes it, so web-1 is blocked.
    now = _web_one_disruption_allowed()
    command = next_command(now, NOW)
    assert command is not None and "other" in [c.name for c in command.candidates]

    blocked: dict[str, str] = {}
    later = as_it_will_be(now)
    command = next_command(later, NOW, blocked=blocked)
    assert command is None or "other" not in [c.name for c in command.candidates]
    assert "PodDisruptionBudget default/web allows no disruption" in blocked["other"]
    assert now.pdbs[0]["status"]["disruptionsAllowed"] == 1, "the input is not modified"


def test_a_command_waiting_for_its_replacement_leaves_pod_disruption_budgets_as_they_are():
    # Nothing is evicted from "going" until its replacement is Initialized, so the budget's
    # status still holds and web-1's node may be decided on meanwhile (its drain then waits on
    # the budget, as any eviction does); once "going" drains, the budget is used up.
    now = _web_one_disruption_allowed()
    waiting = as_it_will_be(now, waiting={"going"})
    assert waiting.pdbs[0]["status"]["disruptionsAllowed"] == 1
    command = next_command(waiting, NOW)
    assert command is not None and "other" in [c.name for c in command.candidates]
    assert as_it_will_be(now).pdbs[0]["status"]["disruptionsAllowed"] == 0


def test_a_command_decided_that_launches_nothing_uses_up_pod_disruption_budgets_at_once():
    # Deleting "going" outright evicts web-0 as soon as the command starts, so the decisions
    # after it see web's budget used up; a command replacing "going" evicts nothing until its
    # replacement is up, so the budget's status holds meanwhile.
    now = _web_one_disruption_allowed()
    going = next(n for n in now.nodes if n.name == "going")
    candidate = Candidate(going, now.nodepools[0], None, None, list(going.pods), 1.0)
    spare = snapshot([node("spare", pods=[pod("one-0", "spare")])], POOLS)
    replacing = next_command(spare, NOW)
    assert replacing is not None and replacing.replacements
    delete = Command("underutilized", [candidate])
    replace = Command("underutilized", [candidate], replacing.replacements)

    assert waiting_for_replacements([delete]) == set()
    assert waiting_for_replacements([delete, replace]) == {"going"}
    allowed = [
        as_it_will_be(now, waiting=waiting_for_replacements([command])).pdbs[0]["status"][
            "disruptionsAllowed"
        ]
        for command in (delete, replace)
    ]
    assert allowed == [0, 1]


def test_a_cluster_with_nothing_being_deleted_is_unchanged():
    now = snapshot([node("a", pods=[pod("one-0", "a")])])
    assert as_it_will_be(now) is now


def test_a_replacement_in_flight_keeps_the_pods_it_was_launched_for():
    # "going"'s pod is to land on the replacement launched for it (a NodeClaim with no Node
    # yet). The pods share no node (hostname anti-affinity), so the replacement is taken and
    # "other" (a c-4 using 0.5 CPU) cannot be deleted onto it: it can only shrink to a c-2.
    apart = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}
        ]
    }
    web = {"labels": {"app": "web"}, "pod_anti_affinity": apart}
    going = node("going", deleting=True, pods=[pod("web-0", "going", **web)])
    other = node("other", pods=[pod("web-1", "other", **web)])
    now = snapshot([going, other], POOLS)
    now.nodeclaims = [in_flight("replacement", cpu="2", memory="4Gi")]

    later = as_it_will_be(now)
    assert later.nodeclaims == []
    [launching] = [n for n in later.nodes if n.name == "replacement"]
    assert not launching.initialized
    assert [(p.key, p.node_name) for p in launching.pods] == [("default/web-0", "replacement")]
    command = next_command(later, NOW)
    assert command is not None
    assert [c.name for c in command.candidates] == ["other"]
    assert [r.instance_type.name for r in command.replacements] == ["c-2"]


def test_a_command_decided_but_not_started_counts_against_the_budget():
    # A round decides a command, then the next one on the cluster as the first will leave it:
    # its candidate is seen as being deleted, so it is not taken again and uses up the budget.
    one = [pool(budgets=[{"nodes": "1"}], requirements=[ON_DEMAND])]
    now = snapshot([node("a"), node("b"), node("c")], one)
    first = next_command(now, NOW)
    assert first is not None
    assert first.reason == "empty"
    assert len(first.candidates) == 1
    assert next_command(now, NOW) is not None
    later = as_it_will_be(as_started(now, {c.name for c in first.candidates}, []))
    assert next_command(later, NOW) is None
    assert [n.name for n in later.nodes if n.deleting] == [first.candidates[0].name]


def test_the_replacements_of_a_command_decided_hold_its_pods():
    # "going"'s pod is to land on the replacement its command will launch (the pods share no
    # node, so not on "other"): the next decision sees that replacement taken, as once the
    # command has started.
    apart = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}
        ]
    }
    web = {"labels": {"app": "web"}, "pod_anti_affinity": apart}
    going = node("going", pods=[pod("web-0", "going", **web)])
    now = snapshot([going, node("other", pods=[pod("web-1", "other", **web)])], POOLS)
    later = as_it_will_be(
        as_started(now, {"going"}, [in_flight("replacement", cpu="2", memory="4Gi")])
    )
    [launching] = [n for n in later.nodes if n.name == "replacement"]
    assert [(p.key, p.node_name) for p in launching.pods] == [("default/web-0", "replacement")]
    assert [n.name for n in later.nodes if n.deleting] == ["going"]
