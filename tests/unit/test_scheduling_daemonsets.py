"""DaemonSet overhead: which DaemonSets run on a new or existing node, and what they take from it.

Cases from upstream Karpenter's ``pkg/controllers/provisioning/suite_test.go`` ("Provisioning >
Daemonsets > ..."), on upstream's fake catalog (``upstream_fake_catalog``): its types have 2 or 4
CPU and 2Gi or 4Gi, so "the pod landed on a 4 CPU / 4Gi type" is how upstream tells that the
DaemonSet's overhead was counted.
"""

from __future__ import annotations

from typing import Any

from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo
from tests.unit.scheduling_fixtures import (
    daemonset,
    make_pod,
    node,
    nodepool,
    pod_manifest,
    run,
)
from tests.unit.upstream_fake_catalog import SIZE, VENDOR_A, default_catalog

CATALOG = default_catalog()


def launched(out: Any, name: str) -> str:
    claim = out.claim_of(name)
    assert claim is not None, out.unschedulable
    return str(claim.instance_type.name)


def pod_without_cpu(name: str, **kwargs: Any) -> PodInfo:
    """A pod that requests memory only (as upstream's ``test.UnschedulablePod`` with no CPU)."""
    manifest = pod_manifest(name, **kwargs)
    del manifest["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    return PodInfo.from_manifest(manifest)


# --- overhead checked for every resource -----------------------------------------------------------


def test_overhead_is_checked_for_resources_the_pod_does_not_request():
    # upstream: "should not schedule if daemonset overhead is too large" (a pod with no requests)
    pod = pod_without_cpu("p", memory="0")
    out = run([pod], daemonsets=[daemonset("huge", cpu="10000", memory="10000Gi")], catalog=CATALOG)
    assert out.unschedulable.keys() == {"default/p"}
    assert "DaemonSets" in out.unschedulable["default/p"]


def test_a_cpu_hungry_daemonset_moves_a_memory_only_pod_to_a_larger_type():
    # The 2 CPU type keeps 1.9 CPU, all of which a 1.9 CPU DaemonSet takes: a pod that asks for
    # memory only still cannot share it (upstream's fits() checks requests plus overhead for every
    # resource), so the 4 CPU type is launched.
    pod = pod_without_cpu("p", memory="100Mi")
    out = run([pod], daemonsets=[daemonset("agent", cpu="1950m", memory="10Mi")], catalog=CATALOG)
    assert launched(out, "p") == "default-instance-type"


def test_an_existing_node_full_of_daemonsets_takes_no_pod():
    # The node has 10Gi of ephemeral storage and a DaemonSet that is not running on it yet asks
    # for 20Gi: nothing fits there, even a pod that asks for no storage (nor on a new node: the
    # catalog's types have no ephemeral storage at all).
    existing = NodeInfo.from_manifest(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {
                "allocatable": {
                    "cpu": "8",
                    "memory": "16Gi",
                    "pods": "110",
                    "ephemeral-storage": "10Gi",
                }
            },
        }
    )
    manifest = pod_manifest("agent", namespace="kube-system", owner=("DaemonSet", "agent"))
    manifest["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "20Gi"
    out = run(
        [make_pod("p", cpu="1", memory="1Gi")],
        nodes=[existing],
        daemonsets=[PodInfo.from_manifest(manifest)],
        catalog=CATALOG,
    )
    assert out.where("p") is None
    assert "DaemonSets" in out.unschedulable["default/p"]


# --- which DaemonSets count ------------------------------------------------------------------------


def test_daemonset_with_a_matching_second_node_affinity_term_counts():
    # upstream: "should consider a daemonset schedulable with multiple node affinity terms"
    pool = nodepool(labels={"foo": "bar"})
    ds = daemonset(
        "agent",
        cpu="2",
        memory="2Gi",
        node_terms=[
            [{"key": "foo", "operator": "In", "values": ["voo"]}],
            [{"key": "foo", "operator": "In", "values": ["bar"]}],
        ],
    )
    out = run(
        [make_pod("p", cpu="1", memory="1Gi")], pools=[pool], daemonsets=[ds], catalog=CATALOG
    )
    assert launched(out, "p") == "default-instance-type"


def test_daemonset_ignores_prefer_no_schedule_taints():
    # upstream: "should consider a daemonset schedulable with a PreferNoSchedule taint"
    pool = nodepool(taints=[{"key": "test", "effect": "PreferNoSchedule"}])
    ds = daemonset("agent", cpu="2", memory="2Gi")
    out = run(
        [make_pod("p", cpu="1", memory="1Gi")], pools=[pool], daemonsets=[ds], catalog=CATALOG
    )
    assert launched(out, "p") == "default-instance-type"


def test_daemonset_without_a_matching_toleration_is_ignored():
    # upstream: "should ignore daemonsets without matching tolerations"
    pool = nodepool(taints=[{"key": "foo", "value": "bar", "effect": "NoSchedule"}])
    ds = daemonset("agent", cpu="2", memory="2Gi")
    pod = make_pod("p", cpu="1", memory="1Gi", tolerations=[{"operator": "Exists"}])
    out = run([pod], pools=[pool], daemonsets=[ds], catalog=CATALOG)
    assert launched(out, "p") == "small-instance-type"


def test_daemonset_with_an_incompatible_preference_counts():
    # upstream: "should consider a daemonset schedulable with an incompatible node affinity
    # preference"
    ds = daemonset(
        "agent",
        cpu="2",
        memory="2Gi",
        node_preferences=[(1, [{"key": "node", "operator": "In", "values": ["invalid"]}])],
    )
    out = run([make_pod("p", cpu="1", memory="1Gi")], daemonsets=[ds], catalog=CATALOG)
    assert launched(out, "p") == "default-instance-type"


def test_daemonsets_filtered_by_instance_type_requirements():
    # upstream: "should filter out daemonsets based on instance type requirements": a 1 CPU
    # DaemonSet runs on small types, a 10 CPU one on large ones; the pod fits a small type with
    # the small DaemonSet.
    small = daemonset(
        "small",
        cpu="1",
        memory="1Mi",
        node_terms=[[{"key": SIZE, "operator": "In", "values": ["small"]}]],
    )
    large = daemonset(
        "large",
        cpu="10",
        memory="1Mi",
        node_terms=[[{"key": SIZE, "operator": "In", "values": ["large"]}]],
    )
    out = run([make_pod("p", cpu="1", memory="1Gi")], daemonsets=[small, large], catalog=CATALOG)
    assert launched(out, "p") == "default-instance-type"


def test_daemonset_host_ports_count_only_where_the_daemonset_runs():
    # upstream: "should not account for daemonset hostports when daemonset would not schedule on
    # selected node": port 8080 is taken on large types only, so a small-type pod may use it.
    on_large = daemonset(
        "large",
        cpu="4",
        memory="4Gi",
        host_ports=[8080],
        node_terms=[[{"key": SIZE, "operator": "In", "values": ["large"]}]],
    )
    on_small = daemonset(
        "small",
        cpu="2",
        memory="2Gi",
        host_ports=[8081],
        node_terms=[[{"key": SIZE, "operator": "In", "values": ["small"]}]],
    )
    pod = make_pod(
        "p",
        cpu="1",
        memory="1Gi",
        host_ports=[8080],
        node_terms=[[{"key": SIZE, "operator": "In", "values": ["small"]}]],
    )
    out = run([pod], daemonsets=[on_large, on_small], catalog=CATALOG)
    assert launched(out, "p") == "default-instance-type"


def test_daemonset_host_port_blocks_the_pod_where_it_runs():
    # upstream: "should account for daemonset hostports"
    ds = daemonset("agent", cpu="2", memory="2Gi", host_ports=[8080])
    out = run(
        [make_pod("p", cpu="1", memory="1Gi", host_ports=[8080])], daemonsets=[ds], catalog=CATALOG
    )
    assert out.unschedulable.keys() == {"default/p"}
    assert not out.claims


def test_daemonset_host_port_narrows_the_types_a_nodeclaim_falls_back_to():
    # A DaemonSet with port 8080 runs on large types only; the NodeClaim of a pod using 8080 keeps
    # no large type among its launch options.
    ds = daemonset(
        "agent",
        cpu="100m",
        memory="1Mi",
        host_ports=[8080],
        node_terms=[[{"key": SIZE, "operator": "In", "values": ["large"]}]],
    )
    out = run(
        [make_pod("p", cpu="1", memory="1Gi", host_ports=[8080])], daemonsets=[ds], catalog=CATALOG
    )
    [claim] = out.claims
    sizes = {it.requirements.labels().get(SIZE) for it in claim.instance_types}
    assert sizes == {"small"}


def test_existing_node_counts_a_daemonset_with_a_matching_second_term_and_prefer_no_schedule():
    # The same rules on an existing node whose DaemonSet pod is not running yet: the second ORed
    # term matches and the PreferNoSchedule taint does not keep it off, so its 3 CPU leave no room
    # for a 2 CPU pod on the 4 CPU node.
    existing = node(
        "n1",
        cpu="4",
        memory="8Gi",
        labels={"foo": "bar"},
        taints=[{"key": "test", "effect": "PreferNoSchedule"}],
    )
    ds = daemonset(
        "agent",
        cpu="3",
        node_terms=[
            [{"key": "foo", "operator": "In", "values": ["voo"]}],
            [{"key": "foo", "operator": "In", "values": ["bar"]}],
        ],
    )
    pod = make_pod("p", cpu="2", memory="1Gi", tolerations=[{"operator": "Exists"}])
    out = run([pod], nodes=[existing], daemonsets=[ds], catalog=CATALOG)
    assert out.where("p") != "n1"
    assert out.where("p") is not None


def test_a_daemonset_asking_for_a_resource_a_node_lacks_leaves_the_node_usable():
    # An existing node without the vendor-a device, and a DaemonSet that asks for one (it cannot
    # run there): the node still takes pods, as upstream counts DaemonSet requests against an
    # existing node only for the resources it has.
    existing = node("n1", cpu="8", memory="16Gi")
    manifest = pod_manifest("agent", namespace="kube-system", owner=("DaemonSet", "agent"))
    manifest["spec"]["containers"][0]["resources"]["requests"][VENDOR_A] = "1"
    out = run(
        [make_pod("p", cpu="1", memory="1Gi")],
        nodes=[existing],
        daemonsets=[PodInfo.from_manifest(manifest)],
        catalog=CATALOG,
    )
    assert out.where("p") == "n1"
