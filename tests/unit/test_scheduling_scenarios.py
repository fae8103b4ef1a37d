"""Upstream Karpenter's scheduling scenarios, ported as facts: a situation and the outcome upstream
produces (``# upstream:`` says which), written against ``schedule(Snapshot(...))`` with pods,
nodes and volumes given as the Kubernetes JSON they are.

Outcomes are counted, not shaped: spread is checked as pods per domain (running pods included),
so any node shapes that respect the constraints pass. A new NodeClaim's domain for a key is the
one value its instance types, offerings and requirements leave (see ``claim_domains``): a
NodeClaim that could still land in two zones does not count as being in either. Where upstream
leaves a pod pending only because it decides zones late (after the launch), the test checks the
constraint instead, so deciding earlier is allowed. The catalog is in ``scheduling_fixtures``.
"""

from __future__ import annotations

import pytest

from karpenter_core.scheduling.scheduler import MAX_INSTANCE_TYPES
from tests.unit.scheduling_fixtures import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    ZONE,
    Outcome,
    affinity,
    bound,
    claim_domains,
    daemonset,
    in_flight,
    instance_type,
    make_pod,
    make_pods,
    node,
    nodepool,
    pvc,
    run,
    selector,
    spread,
    storage_class,
    term,
    zonal_pv,
    zones_in,
)

WEB = {"app": "web"}
S2 = {"security": "s2"}


def zone_sets(out: Outcome, names: list[str]) -> list[set[str]]:
    """For each pod, the zones its node may be in (one for an existing node)."""
    sets = []
    for name in names:
        target = out.where(name)
        assert target is not None, f"{name} was not placed: {out.unschedulable}"
        if target.startswith("new-"):
            sets.append(claim_domains(out.claims[int(target[4:])], ZONE))
        else:
            sets.append({out.domain(name, ZONE)})
    return sets


def assert_same_zone(out: Outcome, names: list[str], zone: str | None = None) -> None:
    """The pods share one node, or nodes each pinned to the same zone."""
    targets = {out.where(n) for n in names}
    assert None not in targets, out.unschedulable
    sets = zone_sets(out, names)
    if len(targets) > 1:
        assert all(len(s) == 1 for s in sets), sets
        assert len(set().union(*sets)) == 1, sets
    if zone is not None:
        assert set().union(*sets) == {zone}, sets


def assert_zones_disjoint(out: Outcome, a: str, b: str) -> None:
    """Whatever zone each of the two pods' nodes lands in, they cannot be the same."""
    first, second = zone_sets(out, [a, b])
    assert not first & second, (first, second)


# --- topology spread: zones ---------------------------------------------------------------------


def test_zone_spread_balances_pods_across_zones():
    # upstream: 4 pods, maxSkew 1 on the zone -> 1, 1, 2
    constraint = spread(ZONE, match_labels=WEB)
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]))
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [1, 1, 2]


def test_zone_spread_with_match_expressions():
    # upstream: a matchExpressions selector spreads the same way -> 1, 1, 2
    constraint = spread(
        ZONE,
        label_selector=selector(
            match_expressions=[{"key": "app", "operator": "In", "values": ["web"]}]
        ),
    )
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]))
    assert out.skew(ZONE, WEB) == [1, 1, 2]


def test_zone_spread_respects_the_nodepool_zones():
    # upstream: a NodePool limited to two zones spreads over those two only -> 2, 2
    pools = [nodepool(requirements=[zones_in("zone-a", "zone-b")])]
    constraint = spread(ZONE, match_labels=WEB)
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]), pools=pools)
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [2, 2]


def test_zone_spread_with_a_zone_template_label_has_one_domain():
    # upstream: a NodePool labelled with one zone is the only domain -> all 4 there
    pools = [nodepool(labels={ZONE: "zone-a"})]
    constraint = spread(ZONE, match_labels=WEB)
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]), pools=pools)
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [4]


def test_zone_spread_with_two_nodepools_each_labelled_with_a_zone():
    # upstream: two NodePools labelled zone-a and zone-b give two domains -> 2, 2
    pools = [
        nodepool("pool-a", labels={ZONE: "zone-a"}),
        nodepool("pool-b", labels={ZONE: "zone-b"}),
    ]
    constraint = spread(ZONE, match_labels=WEB)
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]), pools=pools)
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [2, 2]


def test_zone_spread_counts_pods_on_existing_nodes_and_names_the_key_when_it_blocks():
    # upstream: a running pod in zone-c counts; the NodePool launches in zone-a/b only, so maxSkew 1
    # allows 2 there each (1, 2, 2) and the other 2 pods stay pending
    full = node(
        "node-c", zone="zone-c", cpu="1100m", pods=[bound("old", "node-c", cpu="1100m", labels=WEB)]
    )
    constraint = spread(ZONE, match_labels=WEB)
    pods = make_pods("web", 6, cpu="1100m", labels=WEB, spread_constraints=[constraint])
    pools = [nodepool(requirements=[zones_in("zone-a", "zone-b")])]
    out = run(pods, pools=pools, nodes=[full])
    assert out.skew(ZONE, WEB) == [1, 2, 2]
    assert len(out.unschedulable) == 2
    for reason in out.unschedulable.values():
        assert ZONE in reason


def test_zone_spread_fills_a_non_minimum_domain_up_to_max_skew():
    # upstream: zone-a and zone-b hold 1 pod each, only zone-c can grow; maxSkew 5 -> 1, 1, 6
    nodes = [
        node(
            f"node-{z[-1]}",
            zone=z,
            cpu="1100m",
            pods=[bound(f"old-{z}", f"node-{z[-1]}", cpu="1100m", labels=WEB)],
        )
        for z in ("zone-a", "zone-b")
    ]
    constraint = spread(ZONE, max_skew=5, match_labels=WEB)
    pods = make_pods("web", 10, cpu="1100m", labels=WEB, spread_constraints=[constraint])
    out = run(pods, pools=[nodepool(requirements=[zones_in("zone-c")])], nodes=nodes)
    assert out.skew(ZONE, WEB) == [1, 1, 6]
    assert len(out.unschedulable) == 4


def test_zone_spread_recovers_from_existing_skew_through_the_smallest_domains():
    # upstream: zone-a already holds 3; 3 new pods go to zone-b and zone-c only -> 3, 1, 2
    pods_a = [bound(f"old-{i}", "node-a", cpu="1100m", labels=WEB) for i in range(3)]
    existing = node("node-a", zone="zone-a", cpu="3300m", pods=pods_a)
    constraint = spread(ZONE, match_labels=WEB)
    pods = make_pods("web", 3, cpu="1100m", labels=WEB, spread_constraints=[constraint])
    out = run(pods, nodes=[existing])
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [1, 2, 3]
    assert {out.domain(p.name, ZONE) for p in pods} <= {"zone-b", "zone-c"}


def test_zone_spread_counts_only_matching_pods_of_the_namespace_on_nodes_with_the_key():
    # upstream: pods of other namespaces, with other labels, or on nodes without the zone label do
    # not count; zone-b really holds 0 matching pods, so both new pods go there -> 2, 2, 2
    other = [bound(f"other-ns-{i}", "node-b", namespace="other", labels=WEB) for i in range(3)]
    unrelated = [bound(f"api-{i}", "node-b", labels={"app": "api"}) for i in range(3)]
    nodes = [
        node(
            "node-a",
            zone="zone-a",
            cpu="200m",
            pods=[bound(f"a-{i}", "node-a", labels=WEB) for i in range(2)],
        ),
        node("node-b", zone="zone-b", cpu="600m", pods=other + unrelated),
        node(
            "node-c",
            zone="zone-c",
            cpu="200m",
            pods=[bound(f"c-{i}", "node-c", labels=WEB) for i in range(2)],
        ),
        node("node-x", cpu="400m", pods=[bound(f"x-{i}", "node-x", labels=WEB) for i in range(4)]),
    ]
    constraint = spread(ZONE, match_labels=WEB)
    pods = make_pods("web", 2, labels=WEB, spread_constraints=[constraint])
    out = run(pods, nodes=nodes)
    assert not out.unschedulable
    assert [out.domain(p.name, ZONE) for p in pods] == ["zone-b", "zone-b"]
    assert out.skew(ZONE, WEB) == [2, 2, 2]


def test_spread_whose_selector_matches_no_pod_does_not_constrain():
    # upstream: the selector picks pods that do not exist, so skew never grows: 5 pods share a node
    constraint = spread(HOSTNAME, match_labels=WEB)
    out = run(make_pods("worker", 5, spread_constraints=[constraint]))
    assert not out.unschedulable
    assert len(out.claims) == 1


def test_min_domains_above_the_domain_count_keeps_one_pod_per_domain():
    # upstream: minDomains 3 with only 2 zones treats the global minimum as 0 -> 1, 1; 1 pending
    pools = [nodepool(requirements=[zones_in("zone-a", "zone-b")])]
    constraint = spread(ZONE, match_labels=WEB, min_domains=3)
    out = run(make_pods("web", 3, labels=WEB, spread_constraints=[constraint]), pools=pools)
    assert out.skew(ZONE, WEB) == [1, 1]
    assert len(out.unschedulable) == 1


@pytest.mark.parametrize("min_domains", [2, 3])
def test_satisfied_min_domains_spreads_normally(min_domains):
    # upstream: with 3 zones and minDomains 2 or 3, 11 pods spread 4, 4, 3
    constraint = spread(ZONE, match_labels=WEB, min_domains=min_domains)
    out = run(make_pods("web", 11, labels=WEB, spread_constraints=[constraint]))
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [3, 4, 4]


# --- topology spread: hostname ------------------------------------------------------------------


def test_hostname_spread_puts_one_pod_per_node():
    # upstream: maxSkew 1 on the hostname -> 4 nodes with 1 pod each
    constraint = spread(HOSTNAME, match_labels=WEB)
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]))
    assert not out.unschedulable
    assert len(out.claims) == 4
    assert out.skew(HOSTNAME, WEB) == [1, 1, 1, 1]


def test_hostname_spread_packs_up_to_max_skew():
    # upstream: maxSkew 4 lets all 4 pods share one node
    constraint = spread(HOSTNAME, max_skew=4, match_labels=WEB)
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]))
    assert out.skew(HOSTNAME, WEB) == [4]
    assert len(out.claims) == 1


def test_hostname_spread_of_two_deployments_shares_nodes():
    # upstream: two deployments of 2 spread by hostname need only 2 nodes
    pods = []
    for app in ("app1", "app2"):
        labels = {"app": app}
        pods += make_pods(
            app, 2, labels=labels, spread_constraints=[spread(HOSTNAME, match_labels=labels)]
        )
    out = run(pods)
    assert not out.unschedulable
    assert len(out.claims) == 2
    assert out.skew(HOSTNAME, {"app": "app1"}) == [1, 1]
    assert out.skew(HOSTNAME, {"app": "app2"}) == [1, 1]


def test_hostname_spread_of_two_deployments_on_different_architectures():
    # upstream: the same two deployments, one amd64 and one arm64, need 4 nodes
    pods = []
    for app, arch in (("app1", "amd64"), ("app2", "arm64")):
        labels = {"app": app}
        pods += make_pods(
            app,
            2,
            labels=labels,
            node_terms=[[{"key": ARCH, "operator": "In", "values": [arch]}]],
            spread_constraints=[spread(HOSTNAME, match_labels=labels)],
        )
    out = run(pods)
    assert not out.unschedulable
    assert len(out.claims) == 4


def test_hostname_spread_prefers_new_nodes_over_a_node_that_already_has_a_matching_pod():
    # upstream: a new node counts 0, so a running node with 1 matching pod (and room) gets no more
    existing = node("node-1", zone="zone-a", pods=[bound("old", "node-1", labels=WEB)])
    constraint = spread(HOSTNAME, match_labels=WEB)
    out = run(make_pods("web", 2, labels=WEB, spread_constraints=[constraint]), nodes=[existing])
    assert not out.unschedulable
    assert "node-1" not in out.results.existing
    assert out.skew(HOSTNAME, WEB) == [1, 1, 1]


# --- topology spread: capacity type and other keys ----------------------------------------------


def test_capacity_type_spread_balances_spot_and_on_demand():
    # upstream: 4 pods spread over capacity types -> 2 spot, 2 on-demand
    constraint = spread(CAPACITY_TYPE, match_labels=WEB)
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]))
    assert not out.unschedulable
    assert out.skew(CAPACITY_TYPE, WEB) == [2, 2]


@pytest.mark.parametrize(
    ("when", "expected", "pending"),
    [("DoNotSchedule", [1, 2], 3), ("ScheduleAnyway", [1, 5], 0)],
)
def test_capacity_type_spread_against_a_running_spot_pod(when, expected, pending):
    # upstream: 1 pod runs on spot and the NodePool launches on-demand only: DoNotSchedule stops at
    # 2 on-demand (1, 2; 3 pending), ScheduleAnyway places all 5 (1, 5)
    spot = node(
        "spot-1",
        labels={CAPACITY_TYPE: "spot"},
        cpu="1100m",
        pods=[bound("old", "spot-1", cpu="1100m", labels=WEB)],
    )
    pools = [
        nodepool(requirements=[{"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}])
    ]
    constraint = spread(CAPACITY_TYPE, match_labels=WEB, when=when)
    pods = make_pods("web", 5, cpu="1100m", labels=WEB, spread_constraints=[constraint])
    out = run(pods, pools=pools, nodes=[spot])
    assert out.skew(CAPACITY_TYPE, WEB) == expected
    assert len(out.unschedulable) == pending
    for reason in out.unschedulable.values():
        assert CAPACITY_TYPE in reason


def test_capacity_type_spread_ignores_domains_the_pods_required_affinity_excludes():
    # upstream: pods that require spot in zone-b do not count the running on-demand pod's domain
    # (nodeAffinityPolicy Honor), so all 5 schedule on spot -> 1, 5
    on_demand = node(
        "od-1",
        zone="zone-a",
        labels={CAPACITY_TYPE: "on-demand"},
        cpu="100m",
        pods=[bound("old", "od-1", labels=WEB)],
    )
    constraint = spread(CAPACITY_TYPE, match_labels=WEB)
    pods = make_pods(
        "web",
        5,
        labels=WEB,
        node_terms=[
            [zones_in("zone-b"), {"key": CAPACITY_TYPE, "operator": "In", "values": ["spot"]}]
        ],
        spread_constraints=[constraint],
    )
    out = run(pods, nodes=[on_demand])
    assert not out.unschedulable
    assert out.skew(CAPACITY_TYPE, WEB) == [1, 5]


def test_capacity_type_spread_limited_by_node_selectors():
    # upstream: 5 pods select spot and 5 on-demand; each group sees one domain -> 5, 5
    constraint = spread(CAPACITY_TYPE, match_labels=WEB, when="ScheduleAnyway")
    pods = make_pods(
        "spot",
        5,
        labels=WEB,
        node_selector={CAPACITY_TYPE: "spot"},
        spread_constraints=[constraint],
    )
    pods += make_pods(
        "od",
        5,
        labels=WEB,
        node_selector={CAPACITY_TYPE: "on-demand"},
        spread_constraints=[constraint],
    )
    out = run(pods)
    assert not out.unschedulable
    assert out.skew(CAPACITY_TYPE, WEB) == [5, 5]


def test_spread_on_architecture_counts_a_running_pod():
    # upstream: spread works on any key; 1 pod runs on amd64 and the NodePool is arm64 only, so
    # maxSkew 1 allows 2 on arm64 -> 1, 2
    amd = node(
        "amd-1", labels={ARCH: "amd64"}, cpu="2", pods=[bound("old", "amd-1", cpu="2", labels=WEB)]
    )
    pools = [nodepool(requirements=[{"key": ARCH, "operator": "In", "values": ["arm64"]}])]
    constraint = spread(ARCH, match_labels=WEB)
    pods = make_pods("web", 5, cpu="2", labels=WEB, spread_constraints=[constraint])
    out = run(pods, pools=pools, nodes=[amd])
    assert out.skew(ARCH, WEB) == [1, 2]
    assert len(out.unschedulable) == 3


# --- topology spread: matchLabelKeys, node inclusion policies -----------------------------------


def test_match_label_keys_spread_each_revision_separately():
    # upstream: matchLabelKeys [pod-template-hash] spreads each revision on its own: 2 nodes, each
    # with one pod of each revision (2 pods per node counted by the app selector)
    constraint = spread(HOSTNAME, match_labels=WEB, match_label_keys=["pod-template-hash"])
    pods = make_pods(
        "web-a", 2, labels={**WEB, "pod-template-hash": "a"}, spread_constraints=[constraint]
    )
    pods += make_pods(
        "web-b", 2, labels={**WEB, "pod-template-hash": "b"}, spread_constraints=[constraint]
    )
    out = run(pods)
    assert not out.unschedulable
    assert out.skew(HOSTNAME, WEB) == [2, 2]
    for claim in out.claims:
        assert sorted(p.labels["pod-template-hash"] for p in claim.pods) == ["a", "b"]


def test_match_label_keys_naming_a_missing_label_is_ignored():
    # upstream: a key the pods do not carry is ignored -> one pod per node
    constraint = spread(HOSTNAME, match_labels=WEB, match_label_keys=["pod-template-hash"])
    out = run(make_pods("web", 4, labels=WEB, spread_constraints=[constraint]))
    assert out.skew(HOSTNAME, WEB) == [1, 1, 1, 1]


@pytest.mark.parametrize(("policy", "expected"), [(None, [1]), ("Ignore", [1]), ("Honor", [5])])
def test_node_taints_policy(policy, expected):
    # upstream: tainted nodes in domains foo and bar count as (empty) domains unless
    # nodeTaintsPolicy is Honor; the NodePool only launches in baz -> Ignore (the default) places 1,
    # Honor places all 5
    taint = {"key": "dedicated", "value": "other", "effect": "NoSchedule"}
    nodes = [
        node(f"node-{v}", labels={"fake-label": v}, cpu="100m", taints=[taint])
        for v in ("foo", "bar")
    ]
    pools = [nodepool(labels={"fake-label": "baz"})]
    constraint = spread("fake-label", match_labels=WEB, node_taints_policy=policy)
    pods = make_pods("web", 5, cpu="1", labels=WEB, spread_constraints=[constraint])
    out = run(pods, pools=pools, nodes=nodes)
    assert out.skew("fake-label", WEB) == expected
    assert len(out.unschedulable) == 5 - sum(expected)


@pytest.mark.parametrize(("policy", "expected"), [("Ignore", [1]), (None, [5]), ("Honor", [5])])
def test_node_affinity_policy(policy, expected):
    # upstream: nodes in domains foo and bar do not match the pods' node selector; they count as
    # domains only with nodeAffinityPolicy Ignore -> Ignore places 1, Honor (the default) all 5
    nodes = [
        node(f"node-{v}", labels={"fake-label": v, "selector": "mismatch"}, cpu="100m")
        for v in ("foo", "bar")
    ]
    pools = [nodepool(labels={"fake-label": "baz", "selector": "value"})]
    constraint = spread("fake-label", match_labels=WEB, node_affinity_policy=policy)
    pods = make_pods(
        "web",
        5,
        cpu="1",
        labels=WEB,
        node_selector={"selector": "value"},
        spread_constraints=[constraint],
    )
    out = run(pods, pools=pools, nodes=nodes)
    assert out.skew("fake-label", WEB) == expected
    assert len(out.unschedulable) == 5 - sum(expected)


@pytest.mark.parametrize(("policy", "expected"), [("Ignore", [1]), ("Honor", [2])])
def test_node_taints_policy_with_domains_from_a_tainted_nodepool(policy, expected):
    # upstream: a tainted NodePool that pods do not tolerate offers domain bar; with Ignore it counts
    # (so only 1 pod lands in foo), with Honor it does not (both land in foo)
    pools = [
        nodepool(
            "plain", requirements=[{"key": "fake-label", "operator": "In", "values": ["foo"]}]
        ),
        nodepool(
            "tainted",
            requirements=[{"key": "fake-label", "operator": "In", "values": ["bar"]}],
            taints=[{"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}],
        ),
    ]
    constraint = spread("fake-label", match_labels=WEB, node_taints_policy=policy)
    out = run(make_pods("web", 2, labels=WEB, spread_constraints=[constraint]), pools=pools)
    assert out.skew("fake-label", WEB) == expected


# --- topology spread combined with node affinity and other spreads ------------------------------


def test_zone_spread_is_limited_by_node_selectors():
    # upstream: pods selecting one zone each see only that domain -> 5 in zone-a, 10 in zone-b
    constraint = spread(ZONE, match_labels=WEB)
    pods = make_pods(
        "a", 5, labels=WEB, node_selector={ZONE: "zone-a"}, spread_constraints=[constraint]
    )
    pods += make_pods(
        "b", 10, labels=WEB, node_selector={ZONE: "zone-b"}, spread_constraints=[constraint]
    )
    out = run(pods)
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [5, 10]


def test_zone_spread_is_limited_by_required_node_affinity():
    # upstream: required affinity to zone-a/zone-b limits the domains -> 5, 5
    constraint = spread(ZONE, match_labels=WEB)
    pods = make_pods(
        "web",
        10,
        labels=WEB,
        node_terms=[[zones_in("zone-a", "zone-b")]],
        spread_constraints=[constraint],
    )
    out = run(pods)
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [5, 5]
    assert {out.domain(p.name, ZONE) for p in pods} == {"zone-a", "zone-b"}


def test_zone_spread_is_not_limited_by_preferred_node_affinity():
    # upstream: a preference for zone-a/zone-b does not shrink the domains -> 2, 2, 2
    constraint = spread(ZONE, match_labels=WEB)
    pods = make_pods(
        "web",
        6,
        labels=WEB,
        node_preferences=[(1, [zones_in("zone-a", "zone-b")])],
        spread_constraints=[constraint],
    )
    out = run(pods)
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [2, 2, 2]


def test_zone_and_hostname_spread_together():
    # upstream: both constraints hold at once: zones 3, 3, 3 and no node above 3
    constraints = [spread(ZONE, match_labels=WEB), spread(HOSTNAME, max_skew=3, match_labels=WEB)]
    out = run(make_pods("web", 9, labels=WEB, spread_constraints=constraints))
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [3, 3, 3]
    assert max(out.skew(HOSTNAME, WEB)) <= 3


def test_zone_and_capacity_type_spread_together():
    # upstream: both constraints hold at once: zones 2, 2, 2 and capacity types 3, 3
    constraints = [spread(ZONE, match_labels=WEB), spread(CAPACITY_TYPE, match_labels=WEB)]
    out = run(make_pods("web", 6, labels=WEB, spread_constraints=constraints))
    assert not out.unschedulable
    assert out.skew(ZONE, WEB) == [2, 2, 2]
    assert out.skew(CAPACITY_TYPE, WEB) == [3, 3]


# --- pod affinity -------------------------------------------------------------------------------


def test_empty_pod_affinity_and_anti_affinity_blocks_schedule():
    # upstream: empty podAffinity / podAntiAffinity blocks constrain nothing
    out = run([make_pod("plain", pod_affinity={}, pod_anti_affinity={})])
    assert not out.unschedulable
    assert len(out.claims) == 1


def test_pod_affinity_on_hostname_follows_its_target():
    # upstream: a pod with required affinity to another pending pod lands on the same node, even
    # among 10 hostname-spread pods
    pods = make_pods(
        "spread", 10, labels=WEB, spread_constraints=[spread(HOSTNAME, match_labels=WEB)]
    )
    pods.append(make_pod("target", cpu="200m", labels=S2))
    pods.append(make_pod("follower", pod_affinity=affinity(required=[term(HOSTNAME, S2)])))
    out = run(pods)
    assert not out.unschedulable
    assert out.where("follower") == out.where("target")


def test_pod_affinity_on_architecture_with_hostname_spread():
    # upstream: affinity on the arch key puts the follower on the target's architecture, while the
    # shared hostname spread keeps them on different nodes
    tsc = [spread(HOSTNAME, match_labels=S2)]
    target = make_pod(
        "target", cpu="2", labels=S2, node_selector={ARCH: "arm64"}, spread_constraints=tsc
    )
    follower = make_pod(
        "follower",
        cpu="1",
        labels=S2,
        spread_constraints=tsc,
        pod_affinity=affinity(required=[term(ARCH, S2)]),
    )
    out = run([target, follower])
    assert not out.unschedulable
    assert out.where("target") != out.where("follower")
    assert out.domain("follower", ARCH) == "arm64"


def test_self_affinity_on_hostname_bootstraps_one_node():
    # upstream: pods that select themselves with hostname affinity all go to one new node
    pods = make_pods("s2", 3, labels=S2, pod_affinity=affinity(required=[term(HOSTNAME, S2)]))
    out = run(pods)
    assert not out.unschedulable
    assert len({out.where(p.name) for p in pods}) == 1


def test_self_affinity_on_hostname_fills_one_node_and_leaves_the_rest_pending():
    # upstream: only the first empty domain may be bootstrapped; once it holds a pod, the others must
    # join it: c-8 holds 7 pods of 1 CPU, the other 3 stay pending for pod affinity
    pods = make_pods(
        "s2", 10, cpu="1", labels=S2, pod_affinity=affinity(required=[term(HOSTNAME, S2)])
    )
    out = run(pods)
    placed = out.placed()
    assert len(placed) == 7
    assert len(set(placed.values())) == 1
    assert len(out.unschedulable) == 3
    for reason in out.unschedulable.values():
        assert "affinity" in reason


def test_self_affinity_on_zone_keeps_pods_in_one_zone():
    # upstream: self-selecting zonal affinity puts every pod in one zone
    pods = make_pods("s2", 3, labels=S2, pod_affinity=affinity(required=[term(ZONE, S2)]))
    out = run(pods)
    assert not out.unschedulable
    assert_same_zone(out, [p.name for p in pods])


def test_self_affinity_on_zone_with_a_zone_constraint():
    # upstream: the bootstrapped domain respects the pods' own node affinity -> all in zone-c
    pods = make_pods(
        "s2",
        3,
        labels=S2,
        node_terms=[[zones_in("zone-c")]],
        pod_affinity=affinity(required=[term(ZONE, S2)]),
    )
    out = run(pods)
    assert not out.unschedulable
    assert_same_zone(out, [p.name for p in pods], zone="zone-c")


def test_self_affinity_with_incompatible_zone_selectors_bootstraps_twice():
    # upstream: when no matching pod is in a domain the pod may use, a self-selecting pod bootstraps
    # again: one node in zone-b, one in zone-c
    s1 = {"security": "s1"}
    zonal = affinity(required=[term(ZONE, s1)])
    first = make_pod("first", labels=s1, node_terms=[[zones_in("zone-b")]], pod_affinity=zonal)
    second = make_pod("second", labels=s1, node_terms=[[zones_in("zone-c")]], pod_affinity=zonal)
    out = run([first, second])
    assert not out.unschedulable
    assert out.domain("first", ZONE) == "zone-b"
    assert out.domain("second", ZONE) == "zone-c"
    assert out.where("first") != out.where("second")


def test_pod_affinity_to_a_running_pod_uses_its_node():
    # upstream: affinity counts running pods: the follower joins the node that runs the target
    existing = node("node-1", zone="zone-a", pods=[bound("db", "node-1", labels={"app": "db"})])
    follower = make_pod("web", pod_affinity=affinity(required=[term(HOSTNAME, {"app": "db"})]))
    out = run([follower], nodes=[existing])
    assert not out.unschedulable
    assert out.where("web") == "node-1"


def test_pod_affinity_to_a_running_pod_by_zone_pins_new_nodes_to_its_zone():
    # upstream: a full node in zone-b runs the target; followers get new nodes in zone-b
    existing = node(
        "node-b", zone="zone-b", cpu="100m", pods=[bound("db", "node-b", labels={"app": "db"})]
    )
    pods = make_pods("web", 3, cpu="1", pod_affinity=affinity(required=[term(ZONE, {"app": "db"})]))
    out = run(pods, nodes=[existing])
    assert not out.unschedulable
    assert {out.domain(p.name, ZONE) for p in pods} == {"zone-b"}


def test_pod_affinity_to_no_pod_is_unschedulable_with_a_reason():
    # upstream: affinity to pods that do not exist (and do not include the pod) cannot be met
    pods = make_pods("web", 3, pod_affinity=affinity(required=[term(ZONE, S2)]))
    out = run(pods)
    assert not out.claims
    assert set(out.unschedulable) == {p.key for p in pods}
    for reason in out.unschedulable.values():
        assert "affinity" in reason
        assert "anti-affinity" not in reason


def test_pod_affinity_with_a_zone_constrained_target_in_the_same_batch():
    # upstream: the target must be in zone-a, so the 10 followers (queued before it) land there too
    target = make_pod("web-target", labels=S2, node_terms=[[zones_in("zone-a")]])
    followers = make_pods("web", 10, pod_affinity=affinity(required=[term(ZONE, S2)]))
    out = run([*followers, target])
    assert not out.unschedulable
    assert_same_zone(out, [p.name for p in [*followers, target]], zone="zone-a")


def test_pod_affinity_to_an_unpinned_target_never_splits_zones():
    # upstream: the target's zone is decided only at launch, so the followers stay pending this
    # round; deciding the zone earlier is fine, as long as every placed follower shares it
    target = make_pod("target", labels=S2)
    followers = make_pods("web", 10, pod_affinity=affinity(required=[term(ZONE, S2)]))
    out = run([*followers, target])
    assert out.where("target") is not None
    placed = [p.name for p in followers if out.where(p.name) is not None]
    if placed:
        assert_same_zone(out, ["target", *placed])
    for pod in followers:
        if pod.key in out.unschedulable:
            assert "affinity" in out.unschedulable[pod.key]


def test_chained_affinities_schedule_whatever_the_queue_order():
    # upstream: db <- web <- cache <- ui (each requires the previous on its hostname); pods that fail
    # only because their target is not placed yet are retried, so all four share a node
    db, web, cache, ui = ({"tier": t} for t in ("db", "web", "cache", "ui"))
    pods = [
        make_pod("a-ui", labels=ui, pod_affinity=affinity(required=[term(HOSTNAME, cache)])),
        make_pod("b-cache", labels=cache, pod_affinity=affinity(required=[term(HOSTNAME, web)])),
        make_pod("c-web", labels=web, pod_affinity=affinity(required=[term(HOSTNAME, db)])),
        make_pod("d-db", labels=db),
    ]
    out = run(pods)
    assert not out.unschedulable
    assert len({out.where(p.name) for p in pods}) == 1


def test_pod_affinity_only_matches_its_own_namespace_by_default():
    # upstream: the target runs in another namespace and the term names none -> no match
    target = make_pod("target", namespace="other", cpu="200m", labels=S2)
    follower = make_pod("follower", pod_affinity=affinity(required=[term(HOSTNAME, S2)]))
    out = run([target, follower])
    assert out.where("target", "other") is not None
    assert "default/follower" in out.unschedulable


@pytest.mark.parametrize(
    "scope",
    [{"namespaces": ["other"]}, {"namespace_selector": {}}],
    ids=["namespace-list", "empty-namespace-selector"],
)
def test_pod_affinity_across_namespaces(scope):
    # upstream: listing the namespace, or an empty namespaceSelector (all namespaces), matches the
    # target in another namespace -> same node
    target = make_pod("target", namespace="other", cpu="200m", labels=S2)
    follower = make_pod("follower", pod_affinity=affinity(required=[term(HOSTNAME, S2, **scope)]))
    out = run([target, follower])
    assert not out.unschedulable
    assert out.where("follower") == out.where("target", "other")


def test_preferred_pod_affinity_is_honoured_when_possible():
    # upstream: preferred affinity is tried as if required first -> the follower joins the target
    target = make_pod("target", cpu="1", labels=S2)
    follower = make_pod(
        "follower", cpu="500m", pod_affinity=affinity(preferred=[(50, term(HOSTNAME, S2))])
    )
    out = run([target, follower])
    assert not out.unschedulable
    assert out.where("follower") == out.where("target")


def test_preferred_pod_affinity_to_no_pod_is_relaxed():
    # upstream: a preference for pods that do not exist is dropped and the pod schedules
    pods = make_pods(
        "spread", 10, labels=WEB, spread_constraints=[spread(HOSTNAME, match_labels=WEB)]
    )
    pods.append(make_pod("hopeful", pod_affinity=affinity(preferred=[(50, term(HOSTNAME, S2))])))
    out = run(pods)
    assert not out.unschedulable


def test_preferred_pod_affinity_conflicting_with_a_required_spread_is_relaxed():
    # upstream: 3 pods one per host (spread) prefer the target's host; all schedule on 3 nodes
    target = make_pod("target", labels=S2)
    followers = make_pods(
        "web",
        3,
        labels=WEB,
        spread_constraints=[spread(HOSTNAME, match_labels=WEB)],
        pod_affinity=affinity(preferred=[(50, term(HOSTNAME, S2))]),
    )
    out = run([*followers, target])
    assert not out.unschedulable
    assert out.skew(HOSTNAME, WEB) == [1, 1, 1]


# --- pod anti-affinity --------------------------------------------------------------------------


def test_self_anti_affinity_on_hostname_puts_one_pod_per_node():
    # upstream: self-selecting hostname anti-affinity -> one node per pod
    pods = make_pods(
        "web", 3, labels=WEB, pod_anti_affinity=affinity(required=[term(HOSTNAME, WEB)])
    )
    out = run(pods)
    assert not out.unschedulable
    assert len({out.where(p.name) for p in pods}) == 3


@pytest.mark.parametrize("avoider_first", [True, False])
def test_anti_affinity_on_hostname_separates_two_pods_in_either_order(avoider_first):
    # upstream: anti-affinity is symmetric for placement, whichever pod is queued first
    names = ("a", "b") if avoider_first else ("b", "a")
    avoider = make_pod(names[0], pod_anti_affinity=affinity(required=[term(HOSTNAME, S2)]))
    target = make_pod(names[1], labels=S2)
    out = run([avoider, target])
    assert not out.unschedulable
    assert out.where(names[0]) != out.where(names[1])


def test_anti_affinity_on_zone_with_a_pod_in_every_zone_is_unschedulable():
    # upstream: pods labelled s2 are pinned to each zone, so a pod avoiding s2 by zone cannot go
    # anywhere; the reason names the anti-affinity
    pods = [
        make_pod(f"s2-{z}", cpu="2", labels=S2, node_selector={ZONE: z})
        for z in ("zone-a", "zone-b", "zone-c")
    ]
    avoider = make_pod("avoider", pod_anti_affinity=affinity(required=[term(ZONE, S2)]))
    out = run([*pods, avoider])
    assert all(out.where(p.name) for p in pods)
    assert list(out.unschedulable) == ["default/avoider"]
    reason = out.unschedulable["default/avoider"]
    # the reason names the rule, a pod it keeps away from and the key
    assert "anti-affinity" in reason and "default/s2-zone-" in reason and ZONE in reason


def test_anti_affinity_of_pending_pods_blocks_a_matching_pod():
    # upstream: 3 zone-pinned pods each avoid s2 by zone; an s2 pod (no rules of its own) is left
    # without a zone
    anti = affinity(required=[term(ZONE, S2)])
    guards = [
        make_pod(f"guard-{z}", cpu="2", node_selector={ZONE: z}, pod_anti_affinity=anti)
        for z in ("zone-a", "zone-b", "zone-c")
    ]
    out = run([*guards, make_pod("s2", labels=S2)])
    assert all(out.where(p.name) for p in guards)
    assert list(out.unschedulable) == ["default/s2"]
    reason = out.unschedulable["default/s2"]
    assert "anti-affinity" in reason and "default/guard-zone-" in reason and ZONE in reason


def test_anti_affinity_of_running_pods_blocks_a_matching_pod():
    # upstream: running pods in every zone avoid s2 by zone; an s2 pod cannot schedule anywhere,
    # though the nodes have room
    anti = affinity(required=[term(ZONE, S2)])
    nodes = [
        node(
            f"node-{z[-1]}",
            zone=z,
            pods=[bound(f"guard-{z}", f"node-{z[-1]}", pod_anti_affinity=anti)],
        )
        for z in ("zone-a", "zone-b", "zone-c")
    ]
    out = run([make_pod("s2", labels=S2), make_pod("other")], nodes=nodes)
    assert list(out.unschedulable) == ["default/s2"]
    reason = out.unschedulable["default/s2"]
    assert "anti-affinity" in reason and "default/guard-zone-" in reason and ZONE in reason
    assert out.where("other") is not None


def test_anti_affinity_of_a_running_pod_on_hostname_only_blocks_its_node():
    # upstream: a running pod avoiding s2 by hostname keeps s2 pods off its node, not off new ones
    anti = affinity(required=[term(HOSTNAME, S2)])
    existing = node(
        "node-1", zone="zone-a", pods=[bound("guard", "node-1", pod_anti_affinity=anti)]
    )
    out = run([make_pod("s2", labels=S2), make_pod("other")], nodes=[existing])
    assert not out.unschedulable
    assert out.where("s2") != "node-1"
    assert out.where("other") == "node-1"


def test_preferred_anti_affinity_of_running_pods_does_not_block():
    # upstream: running pods only prefer to avoid s2 -> the s2 pod schedules
    anti = affinity(preferred=[(10, term(ZONE, S2))])
    nodes = [
        node(
            f"node-{z[-1]}",
            zone=z,
            pods=[bound(f"guard-{z}", f"node-{z[-1]}", pod_anti_affinity=anti)],
        )
        for z in ("zone-a", "zone-b", "zone-c")
    ]
    out = run([make_pod("s2", labels=S2)], nodes=nodes)
    assert not out.unschedulable


def test_preferred_anti_affinity_of_pending_pods_does_not_block():
    # upstream: zone-pinned pods that only prefer to avoid s2 leave room for the s2 pod
    anti = affinity(preferred=[(10, term(ZONE, S2))])
    guards = [
        make_pod(f"guard-{z}", cpu="2", node_selector={ZONE: z}, pod_anti_affinity=anti)
        for z in ("zone-a", "zone-b", "zone-c")
    ]
    out = run([*guards, make_pod("s2", labels=S2)])
    assert not out.unschedulable


def test_anti_affinity_against_an_unpinned_pod_never_shares_its_zone():
    # upstream ("Schrodinger"): a pod avoiding s2 by zone is placed first, in a zone decided only at
    # launch, so the s2 pod stays pending this round; deciding earlier is fine if zones differ
    avoider = make_pod("avoider", cpu="2", pod_anti_affinity=affinity(required=[term(ZONE, S2)]))
    out = run([avoider, make_pod("s2", labels=S2)])
    assert out.where("avoider") is not None
    if out.where("s2") is not None:
        assert_zones_disjoint(out, "avoider", "s2")
    else:
        assert "anti-affinity" in out.unschedulable["default/s2"]


def test_anti_affinity_against_an_unpinned_target_never_shares_its_zone():
    # upstream: the s2 target schedules first (bigger) in an undecided zone, so the avoider stays
    # pending this round; deciding earlier is fine if zones differ
    target = make_pod("target", cpu="2", labels=S2)
    avoider = make_pod("avoider", pod_anti_affinity=affinity(required=[term(ZONE, S2)]))
    out = run([target, avoider])
    assert out.where("target") is not None
    if out.where("avoider") is not None:
        assert_zones_disjoint(out, "target", "avoider")
    else:
        assert "anti-affinity" in out.unschedulable["default/avoider"]


def test_self_anti_affinity_on_zone_allows_at_most_one_pod_per_zone():
    # upstream: late zone commitment places one pod per round; at most 3 can ever share 3 zones
    pods = make_pods("s2", 4, labels=S2, pod_anti_affinity=affinity(required=[term(ZONE, S2)]))
    out = run(pods)
    placed = [p.name for p in pods if out.where(p.name) is not None]
    assert 1 <= len(placed) <= 3
    sets = zone_sets(out, placed)
    for i, first in enumerate(sets):
        for second in sets[i + 1 :]:
            assert not first & second, sets
    for pod in pods:
        if pod.name not in placed:
            assert "anti-affinity" in out.unschedulable[pod.key]


def test_anti_affinity_on_architecture():
    # upstream: the avoider must not share the s2 pod's architecture (the s2 pod is arm64)
    tsc = [spread(HOSTNAME, match_labels=S2)]
    target = make_pod(
        "target", cpu="2", labels=S2, node_selector={ARCH: "arm64"}, spread_constraints=tsc
    )
    avoider = make_pod(
        "avoider",
        cpu="1",
        labels=S2,
        spread_constraints=tsc,
        pod_anti_affinity=affinity(required=[term(ARCH, S2)]),
    )
    out = run([target, avoider])
    assert not out.unschedulable
    assert out.domain("target", ARCH) == "arm64"
    assert out.domain("avoider", ARCH) == "amd64"


def test_preferred_self_anti_affinity_is_honoured_when_possible():
    # upstream: preferred anti-affinity is tried as if required first -> one node per pod
    pods = make_pods(
        "web", 3, labels=WEB, pod_anti_affinity=affinity(preferred=[(50, term(HOSTNAME, WEB))])
    )
    out = run(pods)
    assert not out.unschedulable
    assert len({out.where(p.name) for p in pods}) == 3


def test_preferred_anti_affinity_is_relaxed_when_every_zone_is_taken():
    # upstream: 3 spread pods occupy every zone; 10 pods preferring to avoid them still schedule
    spreaders = make_pods("web", 3, labels=WEB, spread_constraints=[spread(ZONE, match_labels=WEB)])
    avoiders = make_pods("avoid", 10, pod_anti_affinity=affinity(preferred=[(50, term(ZONE, WEB))]))
    out = run([*spreaders, *avoiders])
    assert not out.unschedulable


# --- preference relaxation ----------------------------------------------------------------------


def test_preferred_node_affinity_is_honoured():
    # upstream: the heaviest preferred term is tried as a requirement first -> zone-b, though
    # zone-a would be chosen on price (every zone costs the same; ties go to zone-a)
    out = run([make_pod("web", node_preferences=[(1, [zones_in("zone-b")])])])
    assert out.domain("web", ZONE) == "zone-b"


def test_preferred_node_affinity_falls_back_to_lighter_terms():
    # upstream: the heaviest term (an instance type that does not exist) is dropped first, then the
    # next heaviest (zone-b) holds; the lightest (zone-c) is never needed
    preferences = [
        (100, [{"key": INSTANCE_TYPE, "operator": "In", "values": ["does-not-exist"]}]),
        (50, [zones_in("zone-b")]),
        (1, [zones_in("zone-c")]),
    ]
    out = run([make_pod("web", node_preferences=preferences)])
    assert out.domain("web", ZONE) == "zone-b"


def test_unsatisfiable_preferred_node_affinity_is_relaxed_entirely():
    # upstream: every preferred term is dropped if none can be met
    preferences = [
        (1, [zones_in("nowhere")]),
        (1, [{"key": INSTANCE_TYPE, "operator": "In", "values": ["nothing"]}]),
    ]
    out = run([make_pod("web", node_preferences=preferences)])
    assert not out.unschedulable


def test_preference_conflicting_with_a_requirement_is_dropped():
    # upstream: required zone-c wins over a preference for anything but zone-c
    out = run(
        [
            make_pod(
                "web",
                node_terms=[[zones_in("zone-c")]],
                node_preferences=[(1, [{"key": ZONE, "operator": "NotIn", "values": ["zone-c"]}])],
            )
        ]
    )
    assert out.domain("web", ZONE) == "zone-c"


def test_self_contradicting_preference_is_dropped():
    # upstream: a preferred term that contradicts itself is dropped and the pod schedules
    term_exprs = [zones_in("invalid"), {"key": ZONE, "operator": "NotIn", "values": ["invalid"]}]
    out = run([make_pod("web", node_preferences=[(1, term_exprs)])])
    assert not out.unschedulable


def test_required_node_affinity_terms_are_tried_in_order():
    # upstream: ORed terms are tried first to last (dropping the first while more remain): the first
    # satisfiable one (zone-c) wins over a later one (zone-a) that would be as cheap
    terms = [[zones_in("invalid")], [zones_in("zone-c")], [zones_in("zone-a")]]
    out = run([make_pod("web", node_terms=terms)])
    assert out.domain("web", ZONE) == "zone-c"


def test_the_last_required_node_affinity_term_is_never_relaxed():
    # upstream: a single unsatisfiable required term leaves the pod pending
    out = run([make_pod("web", node_terms=[[zones_in("invalid")]])])
    assert not out.claims
    assert "default/web" in out.unschedulable


def test_preferred_pod_affinity_is_relaxed_before_preferred_node_affinity():
    # upstream: the s2 pod runs in zone-a; the pod prefers both s2's zone and zone-b. Relaxation
    # drops preferred pod affinity first, so it lands in zone-b
    existing = node(
        "node-a", zone="zone-a", cpu="100m", pods=[bound("target", "node-a", labels=S2)]
    )
    pod = make_pod(
        "web",
        node_preferences=[(1, [zones_in("zone-b")])],
        pod_affinity=affinity(preferred=[(100, term(ZONE, S2))]),
    )
    out = run([pod], nodes=[existing])
    assert out.domain("web", ZONE) == "zone-b"


def test_preferred_pod_anti_affinity_is_relaxed_before_preferred_node_affinity():
    # upstream: the s2 pod runs in zone-b; the pod prefers zone-b and prefers to avoid s2's zone.
    # Relaxation drops preferred anti-affinity first, so it lands in zone-b
    existing = node(
        "node-b", zone="zone-b", cpu="100m", pods=[bound("target", "node-b", labels=S2)]
    )
    pod = make_pod(
        "web",
        node_preferences=[(1, [zones_in("zone-b")])],
        pod_anti_affinity=affinity(preferred=[(100, term(ZONE, S2))]),
    )
    out = run([pod], nodes=[existing])
    assert out.domain("web", ZONE) == "zone-b"


def test_preferred_node_affinity_is_relaxed_before_schedule_anyway_spread():
    # upstream: zone-c already holds 2 matching pods; the pod prefers zone-c but its ScheduleAnyway
    # spread forbids it. Preferred node affinity is dropped first, so the spread still holds
    existing = node(
        "node-c",
        zone="zone-c",
        cpu="200m",
        pods=[bound(f"old-{i}", "node-c", labels=WEB) for i in range(2)],
    )
    pod = make_pod(
        "web",
        labels=WEB,
        node_preferences=[(1, [zones_in("zone-c")])],
        spread_constraints=[spread(ZONE, match_labels=WEB, when="ScheduleAnyway")],
    )
    out = run([pod], nodes=[existing])
    assert out.domain("web", ZONE) in {"zone-a", "zone-b"}


def test_schedule_anyway_spread_is_honoured_when_possible():
    # upstream: ScheduleAnyway is tried as DoNotSchedule first -> 1, 1, 1
    constraint = spread(ZONE, match_labels=WEB, when="ScheduleAnyway")
    out = run(make_pods("web", 3, labels=WEB, spread_constraints=[constraint]))
    assert out.skew(ZONE, WEB) == [1, 1, 1]


def test_prefer_no_schedule_nodepool_is_avoided_when_another_fits():
    # upstream: a NodePool tainted PreferNoSchedule is skipped while another NodePool can launch
    pools = [
        nodepool(
            "tainted",
            weight=100,
            taints=[{"key": "foo", "value": "bar", "effect": "PreferNoSchedule"}],
        ),
        nodepool("plain"),
    ]
    out = run([make_pod("web")], pools=pools)
    assert [c.nodepool for c in out.claims] == ["plain"]


def test_prefer_no_schedule_taint_is_tolerated_last():
    # upstream: with only a PreferNoSchedule-tainted NodePool the pod still schedules there, but only
    # after every other preference was dropped: its preference for zone-b is gone by then
    pools = [
        nodepool("tainted", taints=[{"key": "foo", "value": "bar", "effect": "PreferNoSchedule"}])
    ]
    out = run([make_pod("web", node_preferences=[(1, [zones_in("zone-b")])])], pools=pools)
    assert not out.unschedulable
    (claim,) = out.claims
    assert ("foo", "bar", "PreferNoSchedule") in [tuple(t) for t in claim.taints]
    assert claim_domains(claim, ZONE) != {"zone-b"}


# --- minValues ----------------------------------------------------------------------------------

TWO_TYPES = {"key": INSTANCE_TYPE, "operator": "In", "values": ["c-2", "c-4"], "minValues": 2}


def test_min_values_strict_refuses_a_nodeclaim_with_too_few_types():
    # upstream: only c-4 holds 3 CPU, one instance type where minValues wants 2 -> not scheduled
    out = run([make_pod("big", cpu="3")], pools=[nodepool(requirements=[TWO_TYPES])])
    assert not out.claims
    assert "minvalues" in out.unschedulable["default/big"].lower()


def test_min_values_best_effort_relaxes():
    # upstream: with MIN_VALUES_POLICY=BestEffort the same pod schedules on c-4
    out = run(
        [make_pod("big", cpu="3")],
        pools=[nodepool(requirements=[TWO_TYPES])],
        min_values_strict=False,
    )
    assert not out.unschedulable
    assert out.claims[0].instance_type.name == "c-4"
    assert out.claims[0].min_values_relaxed  # upstream annotates the NodeClaim


def test_min_values_keeps_enough_types_on_every_nodeclaim():
    # upstream: 2 pods of 1.5 CPU fit together only on c-4; minValues 2 needs c-2 and c-4 both as
    # options, so each pod gets its own NodeClaim offering both
    out = run(make_pods("web", 2, cpu="1500m"), pools=[nodepool(requirements=[TWO_TYPES])])
    assert not out.unschedulable
    assert len(out.claims) == 2
    for claim in out.claims:
        assert {it.name for it in claim.instance_types} == {"c-2", "c-4"}


TWO_ZONE_CATALOG = [
    instance_type("c-2", 2, 4, 0.10, zones=("zone-a", "zone-b")),
    instance_type("c-4", 4, 8, 0.20, zones=("zone-a", "zone-b")),
]
THREE_ZONES = {
    "key": ZONE,
    "operator": "In",
    "values": list(("zone-a", "zone-b", "zone-c")),
    "minValues": 3,
}


@pytest.mark.parametrize(("policy", "scheduled"), [("Strict", False), ("BestEffort", True)])
def test_min_values_on_zones(policy, scheduled):
    # upstream: minValues 3 on zones with types offered in 2 zones: Strict refuses, BestEffort launches
    out = run(
        [make_pod("web")],
        pools=[nodepool(requirements=[THREE_ZONES])],
        catalog=TWO_ZONE_CATALOG,
        min_values_strict=policy == "Strict",
    )
    assert bool(out.claims) is scheduled
    assert all(c.min_values_relaxed for c in out.claims)
    if not scheduled:
        assert "minvalues" in out.unschedulable["default/web"].lower()


@pytest.mark.parametrize(("policy", "pool"), [("Strict", "fallback"), ("BestEffort", "preferred")])
def test_min_values_best_effort_relaxes_before_falling_back_to_another_nodepool(policy, pool):
    # upstream: BestEffort relaxes minValues on the heavier NodePool rather than moving to the next;
    # Strict moves on (only c-8 holds 5 CPU, minValues asks for 3 types)
    pools = [
        nodepool(
            "preferred",
            weight=100,
            requirements=[{"key": INSTANCE_TYPE, "operator": "Exists", "minValues": 3}],
        ),
        nodepool("fallback"),
    ]
    out = run([make_pod("big", cpu="5")], pools=pools, min_values_strict=policy == "Strict")
    assert [c.nodepool for c in out.claims] == [pool]
    assert [c.min_values_relaxed for c in out.claims] == [policy == "BestEffort"]


# --- limits and weights -------------------------------------------------------------------------


def test_node_count_limit():
    # upstream: limits.nodes 2 with one pod per node -> 2 scheduled, the third pending for the limit
    pods = make_pods(
        "web", 3, labels=WEB, pod_anti_affinity=affinity(required=[term(HOSTNAME, WEB)])
    )
    out = run(pods, pools=[nodepool(limits={"nodes": "2"})])
    assert len(out.claims) == 2
    assert len(out.unschedulable) == 1
    assert "limit" in next(iter(out.unschedulable.values()))


def test_limits_count_the_capacity_of_existing_nodes():
    # upstream: remaining = limits - capacity of the NodePool's nodes: 10 - 8 leaves room for one
    # 2 CPU node; the second pod is pending for the cpu limit
    existing = node(
        "node-1",
        labels={"karpenter.sh/nodepool": "default"},
        cpu="8",
        pods=[bound("old", "node-1", cpu="8")],
    )
    out = run(
        make_pods("web", 2, cpu="1500m"), pools=[nodepool(limits={"cpu": "10"})], nodes=[existing]
    )
    assert len(out.claims) == 1
    assert all(it.capacity["cpu"] <= 2000 for it in out.claims[0].instance_types)
    (reason,) = out.unschedulable.values()
    assert "limit" in reason and "cpu" in reason


def test_limits_hold_for_every_instance_type_a_nodeclaim_may_launch():
    # upstream: a NodeClaim counts against the limits with the largest type it may launch, so the
    # limit holds whichever option the provider picks; upstream places 2 of these 6 pods (its first
    # NodeClaim may grow to c-8) and never fewer
    pods = make_pods(
        "web",
        6,
        cpu="1500m",
        labels=WEB,
        pod_anti_affinity=affinity(required=[term(HOSTNAME, WEB)]),
    )
    out = run(pods, pools=[nodepool(limits={"cpu": "10"})])
    assert sum(max(it.capacity["cpu"] for it in c.instance_types) for c in out.claims) <= 10_000
    assert len(out.claims) >= 2
    for reason in out.unschedulable.values():
        assert "limit" in reason


def test_heavier_nodepool_at_its_limit_overflows_to_the_next():
    # upstream: NodePools are tried by weight; once the heavy one's limit is used, the next takes over
    pools = [nodepool("primary", weight=100, limits={"cpu": "4"}), nodepool("overflow")]
    out = run(make_pods("web", 3, cpu="3"), pools=pools)
    assert not out.unschedulable
    pods_by_pool = {c.nodepool: 0 for c in out.claims}
    for claim in out.claims:
        pods_by_pool[claim.nodepool] += len(claim.pods)
    assert pods_by_pool == {"primary": 1, "overflow": 2}


def test_heavier_nodepool_wins_over_a_cheaper_one():
    # upstream: weight decides before price: the arm64-only NodePool (dearer) is used
    pools = [
        nodepool(
            "arm", weight=10, requirements=[{"key": ARCH, "operator": "In", "values": ["arm64"]}]
        ),
        nodepool("any"),
    ]
    out = run([make_pod("web")], pools=pools)
    assert [c.nodepool for c in out.claims] == ["arm"]
    assert out.claims[0].instance_type.name == "arm-2"


def test_nodepools_of_equal_weight_are_taken_by_name():
    # upstream: weight descending, then name
    out = run([make_pod("web")], pools=[nodepool("b-pool"), nodepool("a-pool")])
    assert [c.nodepool for c in out.claims] == ["a-pool"]


# --- DaemonSet overhead -------------------------------------------------------------------------


def test_daemonset_overhead_is_counted_once_per_node():
    # upstream: a NodeClaim's requests are its pods plus one copy of each DaemonSet
    out = run(make_pods("web", 3, cpu="1"), daemonsets=[daemonset("agent", cpu="500m")])
    assert not out.unschedulable
    assert len(out.claims) == 1
    assert out.claims[0].instance_type.name == "c-4"
    assert out.claims[0].requests["cpu"] == 3500


@pytest.mark.parametrize(("tolerates", "expected"), [(False, "c-2"), (True, "c-4")])
def test_daemonset_that_does_not_tolerate_the_nodepool_adds_no_overhead(tolerates, expected):
    # upstream: DaemonSets without a matching toleration will not run on the NodePool's nodes
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    toleration = [{"key": "dedicated", "operator": "Exists"}]
    agent = daemonset("agent", cpu="1", tolerations=toleration if tolerates else ())
    pod = make_pod("web", cpu="1500m", tolerations=toleration)
    out = run([pod], pools=[nodepool(taints=[taint])], daemonsets=[agent])
    assert out.claims[0].instance_type.name == expected


@pytest.mark.parametrize(("arch", "expected"), [(None, "c-2"), ("arm64", "arm-4")])
def test_daemonset_overhead_depends_on_the_instance_type(arch, expected):
    # upstream: a DaemonSet selecting arm64 adds overhead to arm64 types only
    agent = daemonset("arm-agent", cpu="1", node_selector={ARCH: "arm64"})
    pod = make_pod("web", cpu="1500m", node_selector={ARCH: arch} if arch else None)
    out = run([pod], daemonsets=[agent])
    assert out.claims[0].instance_type.name == expected


def test_daemonset_larger_than_every_node_leaves_pods_pending():
    # upstream: overhead too large for any type -> the pod cannot schedule
    out = run([make_pod("web", cpu="1")], daemonsets=[daemonset("huge", cpu="7500m")])
    assert not out.claims
    assert "default/web" in out.unschedulable


@pytest.mark.parametrize(("selector_arch", "on_node"), [(None, False), ("arm64", True)])
def test_existing_node_reserves_room_for_daemonsets_not_yet_running(selector_arch, on_node):
    # upstream: a node's free room accounts for the DaemonSet pods that will still land on it, and
    # only for those compatible with the node
    existing = node("node-1", zone="zone-a", labels={ARCH: "amd64"}, cpu="4")
    agent = daemonset(
        "agent", cpu="1", node_selector={ARCH: selector_arch} if selector_arch else None
    )
    out = run([make_pod("web", cpu="3500m")], nodes=[existing], daemonsets=[agent])
    assert not out.unschedulable
    assert (out.where("web") == "node-1") is on_node


# --- existing and in-flight capacity ------------------------------------------------------------


def test_existing_nodes_are_filled_before_new_ones_open():
    # upstream: pods go to existing nodes with room first
    existing = node("node-1", zone="zone-a", cpu="2")
    out = run(make_pods("web", 3, cpu="500m"), nodes=[existing])
    assert not out.claims
    assert len(out.results.existing["node-1"]) == 3


def test_initialized_nodes_are_tried_before_uninitialized_ones():
    # upstream: existing nodes are ordered initialized first, then by name
    nodes = [node("a-new", zone="zone-a", initialized=False), node("b-ready", zone="zone-a")]
    out = run([make_pod("web")], nodes=nodes)
    assert out.where("web") == "b-ready"


def test_deleting_nodes_take_no_pods():
    # upstream: a node being deleted is not a place for pending pods
    out = run([make_pod("web")], nodes=[node("node-1", zone="zone-a", deleting=True)])
    assert out.where("web") == "new-0"


def test_in_flight_nodeclaim_takes_compatible_pods():
    # upstream: an in-flight NodeClaim in zone-b takes a pod allowed in zone-a or zone-b; a pod that
    # needs zone-a gets a new NodeClaim
    claim = in_flight("default-b", requirements=[zones_in("zone-b")])
    pods = [
        make_pod("needs-a", node_selector={ZONE: "zone-a"}),
        make_pod("a-or-b", node_terms=[[zones_in("zone-a", "zone-b")]]),
    ]
    out = run(pods, nodeclaims=[claim])
    assert not out.unschedulable
    assert out.where("a-or-b") == "default-b"
    assert out.domain("needs-a", ZONE) == "zone-a"


def test_deleting_in_flight_nodeclaim_takes_no_pods():
    # upstream: a NodeClaim being deleted is not capacity to wait for
    claim = in_flight("default-b", deleting=True)
    out = run([make_pod("web")], nodeclaims=[claim])
    assert out.where("web") == "new-0"


# --- host ports ---------------------------------------------------------------------------------


def test_pods_with_the_same_host_port_get_different_nodes():
    # upstream: two pods on hostPort 8080 cannot share a node; a pod on 8081 can join either
    pods = [
        make_pod("a", host_ports=[8080]),
        make_pod("b", host_ports=[8080]),
        make_pod("c", host_ports=[8081]),
    ]
    out = run(pods)
    assert not out.unschedulable
    assert out.where("a") != out.where("b")
    assert len(out.claims) == 2


def test_host_port_conflicts_with_running_pods_depend_on_the_protocol():
    # upstream: a running pod holds 80/TCP on node-1: 80/UDP fits there, 80/TCP needs a new node
    existing = node(
        "node-1", zone="zone-a", pods=[bound("proxy", "node-1", host_ports=[(80, "TCP")])]
    )
    pods = [make_pod("udp", host_ports=[(80, "UDP")]), make_pod("tcp", host_ports=[(80, "TCP")])]
    out = run(pods, nodes=[existing])
    assert not out.unschedulable
    assert out.where("udp") == "node-1"
    assert out.where("tcp") != "node-1"


def test_daemonset_host_ports_are_reserved_on_new_nodes():
    # upstream: a DaemonSet on hostPort 8080 runs on every node, so a pod on 8080 has nowhere to go
    agent = daemonset("agent", cpu="100m", host_ports=[8080])
    out = run([make_pod("web", host_ports=[8080])], daemonsets=[agent])
    assert not out.claims
    assert "port" in out.unschedulable["default/web"].lower()


# --- volume topology ----------------------------------------------------------------------------


def test_bound_zonal_volume_pins_the_zone():
    # upstream: a PVC bound to a PV in zone-b puts the pod in zone-b
    out = run(
        [make_pod("db", claims=["data"])],
        pvs=[zonal_pv("pv-1", "zone-b", claim="data")],
        pvcs=[pvc("data", volume="pv-1")],
        storage_classes=[storage_class()],
    )
    assert out.domain("db", ZONE) == "zone-b"


def test_bound_volume_in_several_zones_allows_any_of_them():
    # upstream: a PV reachable from zone-a and zone-b keeps the pod in those zones
    out = run(
        [make_pod("db", claims=["data"])],
        pvs=[zonal_pv("pv-1", "zone-a", "zone-b", claim="data")],
        pvcs=[pvc("data", volume="pv-1")],
        storage_classes=[storage_class()],
    )
    assert claim_domains(out.claim_of("db"), ZONE) <= {"zone-a", "zone-b"}


def test_unbound_claim_follows_the_storage_class_allowed_topologies():
    # upstream: an unbound claim of a WaitForFirstConsumer class goes where the class allows: zone-c
    out = run(
        [make_pod("db", claims=["data"])],
        pvcs=[pvc("data")],
        storage_classes=[storage_class(zones=["zone-c"])],
    )
    assert out.domain("db", ZONE) == "zone-c"


def test_unbound_claim_without_allowed_topologies_goes_anywhere():
    # upstream: a class without allowedTopologies adds no zone requirement
    out = run(
        [make_pod("db", claims=["data"])], pvcs=[pvc("data")], storage_classes=[storage_class()]
    )
    assert not out.unschedulable


def test_volume_zone_conflicting_with_the_node_selector_is_unschedulable():
    # upstream: the PV is in zone-a and the pod requires zone-b -> no node can hold it
    out = run(
        [make_pod("db", claims=["data"], node_selector={ZONE: "zone-b"})],
        pvs=[zonal_pv("pv-1", "zone-a", claim="data")],
        pvcs=[pvc("data", volume="pv-1")],
        storage_classes=[storage_class()],
    )
    assert not out.claims
    assert "default/db" in out.unschedulable


def test_storage_class_zones_conflicting_with_the_node_selector_are_unschedulable():
    # upstream: the class allows zone-c only and the pod requires zone-a
    out = run(
        [make_pod("db", claims=["data"], node_selector={ZONE: "zone-a"})],
        pvcs=[pvc("data")],
        storage_classes=[storage_class(zones=["zone-c"])],
    )
    assert not out.claims
    assert "default/db" in out.unschedulable


@pytest.mark.parametrize(
    ("pvcs", "classes"),
    [
        ([], [storage_class()]),
        ([pvc("data")], [storage_class(binding_mode="Immediate")]),
        ([pvc("data", storage_class="missing")], []),
    ],
    ids=["missing-claim", "immediate-unbound", "missing-class"],
)
def test_pod_with_an_unusable_claim_is_not_scheduled_and_says_which(pvcs, classes):
    # upstream: a missing claim, an unbound Immediate claim or an unbound claim of a missing class
    # make the pod invalid; it is not scheduled (the reason names the claim), the others still are
    pods = [make_pod("db", claims=["data"]), make_pod("web")]
    out = run(pods, pvcs=pvcs, storage_classes=classes)
    assert out.where("db") is None
    assert "data" in out.unschedulable["default/db"]
    assert out.where("web") is not None


# --- reasons ------------------------------------------------------------------------------------


def test_reason_for_a_pod_no_instance_type_holds_names_what_it_asks_for():
    # upstream reports that no instance type fits; here the reason says what the pod asked for,
    # e.g. "no instance type has 16 CPU and arm64 in zone-b"
    out = run([make_pod("big", cpu="16", node_selector={ARCH: "arm64", ZONE: "zone-b"})])
    reason = out.unschedulable["default/big"]
    assert "16 CPU" in reason and "arm64" in reason and "zone-b" in reason


def test_reason_for_a_pod_blocked_by_affinity_names_the_key():
    # upstream: pod affinity that no domain satisfies; the reason names the rule and the key
    out = run([make_pod("web", pod_affinity=affinity(required=[term(HOSTNAME, S2)]))])
    reason = out.unschedulable["default/web"]
    assert "affinity" in reason and HOSTNAME in reason


# --- pods that are not scheduled ----------------------------------------------------------------


def test_pods_that_are_not_the_provisioners_to_schedule_are_ignored():
    # upstream: DaemonSet pods, mirror pods, bound pods and preempting pods are not provisioned for
    pods = [
        make_pod("ds-pod", owner=("DaemonSet", "agent")),
        make_pod(
            "mirror", owner=("Node", "node-1"), annotations={"kubernetes.io/config.mirror": "abc"}
        ),
        make_pod("bound", node_name="node-elsewhere"),
        make_pod("preempting", status={"phase": "Pending", "nominatedNodeName": "node-9"}),
        make_pod("web"),
    ]
    out = run(pods)
    assert set(out.placed()) == {"default/web"}
    assert not out.unschedulable


# --- instance-type options ----------------------------------------------------------------------


def test_nodeclaim_lists_every_type_that_holds_its_pods_cheapest_first():
    # upstream: a NodeClaim keeps every compatible type that fits, ordered by price, for the
    # provider to fall back on: 3 CPU fits c-4 (0.14 spot), arm-4 (0.168) and c-8 (0.28)
    out = run([make_pod("web", cpu="3")])
    (claim,) = out.claims
    assert [it.name for it in claim.instance_types] == ["c-4", "arm-4", "c-8"]
    assert claim.instance_type.name == "c-4"


def test_nodeclaim_options_are_the_600_cheapest():
    # upstream: options are truncated to the 600 cheapest types
    catalog = [
        instance_type(f"t-{i:03d}", 2 + i % 3, 8, round(10.0 - i * 0.01, 2), zones=("zone-a",))
        for i in range(700)
    ]
    out = run([make_pod("web")], catalog=catalog)
    (claim,) = out.claims
    assert MAX_INSTANCE_TYPES == 600
    assert len(claim.instance_types) == 600
    prices = [min(o.price for o in it.offerings) for it in claim.instance_types]
    assert prices == sorted(prices)
    assert {it.name for it in claim.instance_types} == {f"t-{i:03d}" for i in range(100, 700)}
    assert claim.instance_types[0] is claim.instance_type
