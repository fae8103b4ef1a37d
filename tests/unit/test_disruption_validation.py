"""Validation of a command after the delay (``planner.still_valid``), as upstream validates: the
same candidates, still candidates within the budgets, whose pods still need what the command
launches; not whether the planner would choose the same command again."""

from __future__ import annotations

from karpenter_core.disruption.planner import next_command, still_valid
from tests.unit.disruption_fixtures import NOW, node, pod, pool, snapshot
from tests.unit.scheduling_fixtures import make_pod

ON_DEMAND = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
ALL = [pool(budgets=[{"nodes": "100%"}], requirements=[ON_DEMAND])]


def _names(command: object) -> list[str]:
    return sorted(c.name for c in command.candidates)  # type: ignore[attr-defined]


def _busy() -> list:
    # "a" holds one small pod that fits on "b": deleting "a" saves its price.
    return [
        node("a", pods=[pod("one-0", "a")]),
        node("b", pods=[pod("two-0", "b", cpu="2"), pod("two-1", "b", cpu="1")]),
    ]


def test_a_consolidation_holds_when_the_planner_would_now_choose_another_command():
    before = snapshot(_busy(), ALL)
    command = next_command(before, NOW)
    assert command is not None
    assert (command.reason, _names(command), command.replacements) == ("underutilized", ["a"], [])
    # A node went empty meanwhile: the planner now removes it first, yet the command holds.
    after = snapshot([*_busy(), node("idle")], ALL)
    assert _names(next_command(after, NOW)) == ["idle"]
    valid = still_valid(after, NOW, command)
    assert valid is not None
    assert (valid.reason, _names(valid), valid.replacements) == ("underutilized", ["a"], [])


def test_a_deletion_whose_pods_now_need_a_new_node_is_no_longer_valid():
    command = next_command(snapshot(_busy(), ALL), NOW)
    assert command is not None
    full = [
        node("a", pods=[pod("one-0", "a")]),
        node("b", pods=[pod("two-0", "b", cpu="2"), pod("two-1", "b", cpu="1", memory="1Gi")]),
    ]
    full[1].pods.append(pod("two-2", "b", cpu="800m"))
    assert still_valid(snapshot(full, ALL), NOW, command) is None


def test_a_command_over_the_budget_now_is_no_longer_valid():
    command = next_command(snapshot(_busy(), ALL), NOW)
    assert command is not None
    one = [pool(budgets=[{"nodes": "1"}], requirements=[ON_DEMAND])]
    assert still_valid(snapshot(_busy(), one), NOW, command) is not None
    going = node("going", deleting=True)
    assert still_valid(snapshot([*_busy(), going], one), NOW, command) is None


def test_a_candidate_gone_or_nominated_is_no_longer_valid():
    command = next_command(snapshot(_busy(), ALL), NOW)
    assert command is not None
    assert still_valid(snapshot(_busy()[1:], ALL), NOW, command) is None
    assert still_valid(snapshot(_busy(), ALL), NOW, command, exclude={"a"}) is None


def test_an_empty_node_that_got_a_pod_is_no_longer_valid():
    command = next_command(snapshot([node("idle"), *_busy()], ALL), NOW)
    assert command is not None
    assert (command.reason, _names(command)) == ("empty", ["idle"])
    busy = node("idle", pods=[pod("late-0", "idle")])
    assert still_valid(snapshot([busy, *_busy()], ALL), NOW, command) is None
    assert still_valid(snapshot([node("idle"), *_busy()], ALL), NOW, command) is not None


def test_an_empty_node_a_pending_pod_now_needs_is_no_longer_valid():
    command = next_command(snapshot([node("idle"), *_busy()], ALL), NOW)
    assert command is not None and _names(command) == ["idle"]
    later = snapshot([node("idle"), *_busy()], ALL)
    later.pending = [make_pod("late-0", cpu="3500m")]  # only an empty c-4 holds it
    assert still_valid(later, NOW, command) is None
    later.pending = [make_pod("small-0", cpu="100m")]  # fits on "b": "idle" may still go
    assert still_valid(later, NOW, command) is not None


def test_a_pass_does_not_simulate_again_a_node_that_could_not_be_consolidated_alone():
    # "b" cannot go alone (its pods fit nowhere cheaper); "a" can.
    tried: set[str] = set()
    command = next_command(snapshot(_busy(), ALL), NOW, tried=tried)
    assert command is not None and _names(command) == ["a"]
    assert tried == set()  # "a" came first and succeeded; nothing failed on the way
    cluster = snapshot([node("b", pods=_busy()[1].pods)], ALL)
    assert next_command(cluster, NOW, tried=tried) is None
    assert tried == {"b"}
    # A node in ``tried`` is not simulated alone: with "a" marked too, nothing is found.
    tried.add("a")
    assert next_command(snapshot(_busy(), ALL), NOW, tried=tried) is None
    assert tried == {"a", "b"}
