"""What the cluster's objects mean for scheduling, the same in ``karpenter simulate`` (manifests
through ``build_snapshot``) and in the controller (its cluster state and provisioning pass):
DaemonSets sized by their pods, NodeClaims' nodes coming up, the pods of nodes being deleted,
NodePool limits counting NodeClaims in flight, and NodePools that are not Ready.

The catalog is ``scheduling_fixtures.CATALOG``; the NodePool allows its on-demand amd64 types
(c-2, c-4, c-8: 1.9, 3.9 and 7.9 usable CPU).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from typing import Any, Literal, cast

import pytest
import yaml
from pydantic import BaseModel

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import InstanceType
from karpenter_core.controllers import provisioning
from karpenter_core.controllers.context import Context
from karpenter_core.controllers.provisioning import Batcher, Provisioner
from karpenter_core.disruption.candidates import PodDisruptionBudgets
from karpenter_core.manifests import ManifestError, build_snapshot, parse_documents
from karpenter_core.manifests.snapshot_builder import SimulationInput
from karpenter_core.operator.kube import KubeClient
from karpenter_core.operator.settings import Settings
from karpenter_core.scheduling.scheduler import Prepared, Results, schedule
from karpenter_core.state.cluster import ClusterState
from tests.unit.scheduling_fixtures import CATALOG


class ExampleNodeClass(BaseModel):
    """The NodeClass the NodePools below reference."""

    kind: Literal["ExampleNodeClass"] = "ExampleNodeClass"


class Catalog:
    """A provider that offers ``CATALOG`` to every NodePool."""

    name = "example"

    def get_instance_types(self, nodepool: NodePool) -> list[InstanceType]:
        return list(CATALOG)

    def supported_node_classes(self) -> list[type[BaseModel]]:
        return [ExampleNodeClass]


def nodepool(name: str = "default", weight: int = 0, **spec: Any) -> dict[str, Any]:
    """A NodePool of on-demand amd64 nodes; ``spec`` keys go to its spec (``status`` to its
    status, ``startupTaints`` to its template)."""
    status = spec.pop("status", None)
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
        "requirements": [
            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.ARCH, "operator": "In", "values": ["amd64"]},
        ],
    }
    if "startupTaints" in spec:
        template_spec["startupTaints"] = spec.pop("startupTaints")
    obj: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"template": {"spec": template_spec}, **spec},
    }
    if weight:
        obj["spec"]["weight"] = weight
    if status is not None:
        obj["status"] = status
    return obj


def pod(
    name: str,
    cpu: str,
    *,
    node: str | None = None,
    owner: str = "ReplicaSet/web",
    namespace: str = "default",
    meta: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod requesting ``cpu``, owned by ``owner`` (kind/name; "" for none)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": "1"}
    if owner:
        kind, _, owner_name = owner.partition("/")
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": owner_name, "controller": True}
        ]
    metadata.update(meta or {})
    pod_spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        **(spec or {}),
    }
    if node:
        pod_spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def node(name: str, cpu: str = "4", **extra: Any) -> dict[str, Any]:
    """A Node of ``cpu`` CPU; ``extra``: labels, taints, providerID, deletionTimestamp,
    unschedulable."""
    meta: dict[str, Any] = {"name": name, "resourceVersion": "1", "labels": extra.get("labels", {})}
    if "deletionTimestamp" in extra:
        meta["deletionTimestamp"] = extra["deletionTimestamp"]
    spec = {k: extra[k] for k in ("taints", "providerID", "unschedulable") if k in extra}
    resources = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {"capacity": resources, "allocatable": resources},
    }


def nodeclaim(
    name: str, cpu: str = "4", nodepool_name: str = "default", **extra: Any
) -> dict[str, Any]:
    """A launched NodeClaim of ``cpu`` CPU; ``extra``: nodeName (its Node), deletionTimestamp,
    taints, startupTaints."""
    meta: dict[str, Any] = {
        "name": name,
        "resourceVersion": "1",
        "labels": {wk.NODEPOOL: nodepool_name, wk.INSTANCE_TYPE: "c-4"},
    }
    if "deletionTimestamp" in extra:
        meta["deletionTimestamp"] = extra["deletionTimestamp"]
        meta["finalizers"] = [wk.TERMINATION_FINALIZER]
    resources = {"cpu": cpu, "memory": "8Gi", "pods": "110"}
    status: dict[str, Any] = {
        "providerID": f"example://{name}",
        "capacity": resources,
        "allocatable": resources,
    }
    if "nodeName" in extra:
        status["nodeName"] = extra["nodeName"]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta,
        "spec": {
            "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
            "requirements": [{"key": wk.NODEPOOL, "operator": "In", "values": [nodepool_name]}],
            "taints": extra.get("taints", []),
            "startupTaints": extra.get("startupTaints", []),
        },
        "status": status,
    }


def simulate(*objects: dict[str, Any]) -> tuple[SimulationInput, Results]:
    """``karpenter simulate``'s snapshot of the objects, as YAML documents, and its scheduling."""
    text = "\n---\n".join(yaml.safe_dump(obj) for obj in objects)
    built = build_snapshot(parse_documents(text, "input.yaml"), cast("Any", Catalog()))
    return built, schedule(built.snapshot)


class _Client:
    """The NodeClaim creates of a provisioning pass, answered as the apiserver would."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        created = copy.deepcopy(obj)
        meta = created["metadata"]
        meta["name"] = f"{meta.pop('generateName')}{len(self.created)}"
        meta["resourceVersion"] = "1"
        self.created.append(created)
        return created


class _Events:
    def publish(self, *args: Any) -> bool:
        return True


def controller(*objects: dict[str, Any]) -> tuple[Provisioner, ClusterState, _Client]:
    """A provisioner on a cluster state holding ``objects`` (as its watches would)."""
    state = ClusterState(cast("KubeClient", None))
    informers = {
        "NodePool": state.nodepools_informer,
        "Node": state.nodes_informer,
        "NodeClaim": state.nodeclaims_informer,
        "Pod": state.pods,
        "DaemonSet": state.daemonsets,
        "PodDisruptionBudget": state.pdbs,
    }
    for obj in objects:
        informers[obj["kind"]].inject(copy.deepcopy(obj))
    client = _Client()
    context = Context(
        Settings(),
        cast("KubeClient", client),
        state,
        cast("Any", Catalog()),
        cast("Any", _Events()),
    )
    return Provisioner(context), state, client


def requested_cpu(claim: dict[str, Any]) -> str:
    return str(claim["spec"]["resources"]["requests"]["cpu"])


# --- DaemonSets: their pods' requests, their templates' node affinity ---------------------------

LINUX = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                    ]
                }
            ]
        }
    }
}
PINNED = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "metadata.name", "operator": "In", "values": ["node-x"]}
                    ]
                }
            ]
        }
    }
}
AGENT = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "agent", "namespace": "kube-system", "resourceVersion": "1"},
    "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {
                "affinity": LINUX,
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "3"}}}],
            },
        },
    },
}


def agent_pod(name: str, cpu: str, created: str) -> dict[str, Any]:
    """A pod of the ``agent`` DaemonSet, pinned to its node as the DaemonSet controller does,
    its requests changed by admission (a LimitRange)."""
    return pod(
        name,
        cpu,
        namespace="kube-system",
        owner="DaemonSet/agent",
        meta={"creationTimestamp": created, "labels": {"app": "agent"}},
        spec={"affinity": PINNED},
    )


AGENT_PODS = (
    agent_pod("agent-new", "1", "2025-06-01T00:00:00Z"),
    agent_pod("agent-old", "2", "2025-01-01T00:00:00Z"),
)


def test_simulate_sizes_a_daemonset_by_its_newest_pod_with_the_templates_affinity() -> None:
    """(upstream: "Daemonsets > should account for overhead using daemonset pod spec instead of
    daemonset spec", "Daemonsets > should remove daemonset node hostname affinity when
    considering daemonset schedulability") The template asks 3 CPU, its newest pod 1 CPU (the
    pod listed first; the older one asks 2). With the pod's own pinned affinity the DaemonSet
    would run nowhere (1.5 CPU); with the template's requests it needs 4.5 CPU."""
    web = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
    web["spec"] = {"replicas": 1, "template": {"spec": pod("x", "1500m")["spec"]}}
    built, results = simulate(nodepool(), AGENT, *AGENT_PODS, web)
    assert [p.key for p in built.snapshot.pending] == ["default/web-0"]
    [claim] = results.new_nodeclaims
    assert claim.requests["cpu"] == 2500
    assert claim.instance_type.name == "c-4"
    assert (
        "DaemonSet kube-system/agent: sized by the requests of its newest pod, which differ from "
        "its template's" in built.notes
    )


def test_the_controller_sizes_a_daemonset_by_its_newest_pod_with_the_templates_affinity() -> None:
    """(upstream: "Daemonsets > should account for overhead using daemonset pod spec instead of
    daemonset spec") The same DaemonSet in the controller's snapshot: the newest pod's requests,
    the template's affinity; the template alone once its pods are gone."""
    _, state, _ = controller(AGENT, *AGENT_PODS)
    [daemon] = state.snapshot({}).daemonsets
    assert (daemon.key, daemon.requests["cpu"], daemon.is_daemon()) == (
        "kube-system/agent",
        1000,
        True,
    )
    assert daemon.node_affinity_required == (
        ({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},),
    )
    for name in ("agent-new", "agent-old"):
        state.pods.forget(f"kube-system/{name}")
    [template] = state.snapshot({}).daemonsets
    assert template.requests["cpu"] == 3000


def test_the_controller_launches_for_the_daemonset_pods_requests() -> None:
    """The NodeClaim the pass creates asks for the pod plus the DaemonSet's pod (1 CPU)."""
    provisioner, _, client = controller(nodepool(), AGENT, *AGENT_PODS, pod("web-0", "1500m"))
    provisioner.provision()
    [created] = client.created
    assert requested_cpu(created) == "2500m"


MATCH_FIELDS_PIN = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-x"]}]}
            ]
        }
    }
}
"""The pin the DaemonSet controller gives each of its pods: ``matchFields`` on the node's name."""


@pytest.mark.parametrize("template_affinity", [True, False])
def test_a_daemonset_pod_pinned_with_match_fields_sizes_its_daemonset(
    template_affinity: bool,
) -> None:
    """(upstream: "Daemonsets > should remove daemonset node hostname affinity when considering
    daemonset schedulability") The DaemonSet controller pins each pod with ``matchFields`` on
    ``metadata.name``, which node requirements do not read: the newest pod (1 CPU) sizes the
    DaemonSet on every new node, with the template's affinity when it has one, in ``simulate``
    and in the controller alike."""
    daemonset = copy.deepcopy(AGENT)
    if not template_affinity:
        del daemonset["spec"]["template"]["spec"]["affinity"]
    pinned = pod(
        "agent-x",
        "1",
        namespace="kube-system",
        owner="DaemonSet/agent",
        meta={"labels": {"app": "agent"}},
        spec={"affinity": MATCH_FIELDS_PIN},
    )
    built, results = simulate(nodepool(), daemonset, pinned, pod("web-0", "1500m"))
    [claim] = results.new_nodeclaims
    assert claim.requests["cpu"] == 2500
    [daemon] = built.snapshot.daemonsets
    expected = (
        (({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},),)
        if template_affinity
        else ((),)
    )
    assert daemon.node_affinity_required == expected
    provisioner, _, client = controller(nodepool(), daemonset, pinned, pod("web-0", "1500m"))
    provisioner.provision()
    [created] = client.created
    assert requested_cpu(created) == "2500m"


def test_simulate_notes_an_unbound_pod_of_a_daemonset() -> None:
    """A DaemonSet's pod with no node is not pending, as other skipped pods, it gets a note; its
    requests still size the DaemonSet (it is the newest)."""
    unbound = pod(
        "agent-new",
        "1",
        namespace="kube-system",
        owner="DaemonSet/agent",
        meta={"creationTimestamp": "2025-06-01T00:00:00Z", "labels": {"app": "agent"}},
    )
    built, _ = simulate(nodepool(), AGENT, unbound)
    assert not built.snapshot.pending
    [daemon] = built.snapshot.daemonsets
    assert daemon.requests["cpu"] == 1000
    assert (
        "skipped Pod kube-system/agent-new: a pod of DaemonSet kube-system/agent with no node is "
        "not pending (the DaemonSet runs on every new node; its newest pod sizes it)"
    ) in built.notes


# --- a NodeClaim's Node coming up ----------------------------------------------------------------

AGENT_TAINT = {"key": "example.com/agent", "effect": "NoSchedule"}


@pytest.mark.parametrize("initialized", [False, True])
def test_simulate_places_pods_on_a_node_still_coming_up(initialized: bool) -> None:
    """(upstream: "In-Flight Nodes > Taints > should assume pod will schedule to a tainted node
    with a custom startup taint", "... should assume pod will schedule to a node with ephemeral
    taint node.kubernetes.io/not-ready:NoExecute when the node is uninitialized", "... should not
    assume pod will schedule to a node with startup taints after initialization") Until the
    Node of a NodeClaim is initialized its startup and ephemeral taints are looked past; the
    Node is not registered yet, so it also carries its NodeClaim's labels (the pod selects its
    NodePool). Once initialized (and registered, with its NodePool's label: the pod's selector
    fits it), a startup taint seen again is a taint."""
    registered = {wk.NODEPOOL: "default", wk.NODE_INITIALIZED: "true", wk.NODE_REGISTERED: "true"}
    labels = registered if initialized else {}
    taints = [AGENT_TAINT, {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    up = node("node-a", labels=labels, taints=taints, providerID="example://default-abc")
    claim = nodeclaim("default-abc", startupTaints=[AGENT_TAINT])
    wanting = pod("p", "1", spec={"nodeSelector": {wk.NODEPOOL: "default"}})
    _, results = simulate(nodepool(startupTaints=[AGENT_TAINT]), claim, up, wanting)
    if initialized:
        assert len(results.new_nodeclaims) == 1 and not results.existing
    else:
        assert {n: [p.key for p in ps] for n, ps in results.existing.items()} == {
            "node-a": ["default/p"]
        }
        assert not results.new_nodeclaims


# --- the pods of nodes being deleted -------------------------------------------------------------

GONE = "2025-01-01T00:00:00Z"
GUARD = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "guard", "namespace": "default", "resourceVersion": "1"},
    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
}


def old_node_pods(node_name: str) -> list[dict[str, Any]]:
    """Pods of every kind on a node: only web-0, db-0 and tolerant are to be placed again."""
    guarded = {"labels": {"app": "guarded"}}
    disrupted = {"key": wk.DISRUPTED_TAINT_KEY, "operator": "Exists"}
    return [
        pod("web-0", "1", node=node_name),
        pod("leaving", "1", node=node_name, meta={"deletionTimestamp": GONE}),
        pod("db-0", "1", node=node_name, owner="StatefulSet/db", meta={"deletionTimestamp": GONE}),
        pod("agent", "1", node=node_name, owner="DaemonSet/agent"),
        pod("pinned", "1", node=node_name, meta={"annotations": {wk.DO_NOT_DISRUPT: "true"}}),
        pod("guarded", "1", node=node_name, meta=guarded),
        pod("tolerant", "1", node=node_name, meta=guarded, spec={"tolerations": [disrupted]}),
    ]


MOVED = ["default/db-0", "default/tolerant", "default/web-0"]


def test_simulate_places_the_pods_of_a_deleted_node_again() -> None:
    """(upstream: "Deleting Nodes > should re-schedule pods from a deleting node when pods are
    active", "... should not re-schedule pods from a deleting node when pods are not active",
    "... when pods are owned by a DaemonSet", "... should not reschedule pods from a deleting node
    when pods are not active and they are owned by a ReplicaSet", "... should reschedule pods from
    a deleting node when pods are not active and they are owned by a StatefulSet"; provisioning:
    "should schedule all pods on one inflight node when node is in deleting state") Pods that
    will be evicted (or, for a StatefulSet, are going) are pending again; a do-not-disrupt pod,
    a pod a PodDisruptionBudget never lets go, and DaemonSet pods stay."""
    old = node("old", deletionTimestamp=GONE)
    built, results = simulate(nodepool(), old, *old_node_pods("old"), GUARD)
    assert sorted(p.key for p in built.snapshot.pending) == MOVED
    [left] = built.snapshot.nodes
    assert sorted(p.name for p in left.pods) == ["agent", "guarded", "leaving", "pinned"]
    assert "Node old is being deleted: 3 of its pods are scheduled again" in built.notes
    [claim] = results.new_nodeclaims
    assert sorted(p.key for p in claim.pods) == MOVED


@pytest.mark.parametrize(
    ("how", "moved"),
    [("its NodeClaim is being deleted", True), ("it is cordoned", False)],
)
def test_simulate_reads_deletion_from_the_nodeclaim_not_from_a_cordon(
    how: str, moved: bool
) -> None:
    """A Node whose NodeClaim is being deleted is being deleted too (upstream's state node); a
    cordoned node takes no new pods but keeps its own."""
    claim_extra = {"deletionTimestamp": GONE} if moved else {}
    claim = nodeclaim("default-abc", nodeName="old", **claim_extra)
    old = node(
        "old",
        labels={wk.NODEPOOL: "default", wk.NODE_REGISTERED: "true", wk.NODE_INITIALIZED: "true"},
        providerID="example://default-abc",
        **({} if moved else {"unschedulable": True}),
    )
    built, results = simulate(nodepool(), claim, old, pod("web-0", "1", node="old"))
    assert [p.key for p in built.snapshot.pending] == (["default/web-0"] if moved else []), how
    assert len(results.new_nodeclaims) == (1 if moved else 0)


@pytest.mark.parametrize("how", ["marked", "its NodeClaim is being deleted", "cordoned"])
def test_the_controller_provisions_for_the_pods_of_a_node_being_deleted(how: str) -> None:
    """(upstream: "Deleting Nodes > should re-schedule pods from a deleting node when pods are
    active", and the pods the other "Deleting Nodes" cases keep) With no pod pending, a pass
    launches for the pods of a node disruption marked, or whose NodeClaim is being deleted; not
    for those of a cordoned node."""
    claim = nodeclaim("old-claim", nodeName="old")
    labels = {wk.NODEPOOL: "default", wk.NODE_REGISTERED: "true", wk.NODE_INITIALIZED: "true"}
    old = node("old", labels=labels, providerID="example://old-claim")
    provisioner, state, client = controller(nodepool(), claim, old, *old_node_pods("old"), GUARD)
    assert provisioner.provision() is None and not client.created
    if how == "marked":
        state.mark_for_deletion(["old"])
    elif how == "cordoned":
        old["metadata"]["resourceVersion"] = "2"
        old["spec"]["unschedulable"] = True
        cordoned = state.nodes_informer.inject(old)
        assert cordoned is not None and cordoned.deleting
    else:
        claim["metadata"].update(
            resourceVersion="2", deletionTimestamp=GONE, finalizers=[wk.TERMINATION_FINALIZER]
        )
        state.nodeclaims_informer.inject(claim)
    results = provisioner.provision()
    if how == "cordoned":
        assert results is None and not client.created
        return
    assert results is not None
    [launched] = results.new_nodeclaims
    assert sorted(p.key for p in launched.pods) == MOVED
    assert len(client.created) == 1


@pytest.mark.parametrize("how", ["marked", "deleted", "its NodeClaim is being deleted", "tainted"])
def test_a_node_being_deleted_starts_a_provisioning_pass(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """(upstream: the provisioner's node trigger) Without pending pods, a node marked for
    deletion or being deleted starts a pass at every resync; a ``karpenter.sh/disrupted`` taint
    left on a node that is neither does not."""
    monkeypatch.setattr(provisioning, "RESYNC_PERIOD", 0.05)
    taint = {"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}
    extra: dict[str, Any] = {"deletionTimestamp": GONE} if how == "deleted" else {}
    old = node("old", taints=[taint], providerID="example://old-claim", **extra)
    claim_extra = {"deletionTimestamp": GONE} if how.startswith("its NodeClaim") else {}
    provisioner, state, _ = controller(old, nodeclaim("old-claim", nodeName="old", **claim_extra))
    if how == "marked":
        state.mark_for_deletion(["old"])
    for informer in state.informers():
        informer.synced.set()
    provisioner.batcher = Batcher(0.01, 0.05)
    passes: list[int] = []
    stop = threading.Event()

    def counted() -> None:
        passes.append(1)
        if len(passes) == 2:  # the first pass is the one every start makes
            stop.set()

    monkeypatch.setattr(provisioner, "provision", counted)
    runner = threading.Thread(target=provisioner.run, args=(stop,), daemon=True)
    runner.start()
    runner.join(5 if how != "tainted" else 0.5)
    stop.set()
    runner.join(5)
    assert len(passes) == (1 if how == "tainted" else 2)


BAD_BUDGETS = [
    ({"spec": [1]}, "spec: expected a mapping, got a list"),
    (
        {"spec": {"selector": {"matchExpressions": [{"key": "app", "values": ["guarded"]}]}}},
        "spec.selector.matchExpressions[0].operator: expected one of In, NotIn, Exists, "
        "DoesNotExist, got null",
    ),
    (
        {"spec": {"selector": {"matchLabels": ["app"]}}},
        "spec.selector.matchLabels: expected a mapping, got a list",
    ),
    ({"spec": {"maxUnavailable": [0]}}, "spec.maxUnavailable: expected an integer or a percentage"),
]


def bad_budget(fields: dict[str, Any]) -> dict[str, Any]:
    return {**GUARD, **copy.deepcopy(fields)}


@pytest.mark.parametrize(("fields", "message"), BAD_BUDGETS)
def test_simulate_names_the_field_of_a_pod_disruption_budget_it_cannot_read(
    fields: dict[str, Any], message: str
) -> None:
    """A PodDisruptionBudget provisioning cannot read is reported with its field, not a
    traceback, also when a node is being deleted (its pods are placed again)."""
    old = node("old", deletionTimestamp=GONE)
    with pytest.raises(ManifestError) as info:
        simulate(nodepool(), old, pod("web-0", "1", node="old"), bad_budget(fields))
    assert f"PodDisruptionBudget default/guard: {message}" in str(info.value)


@pytest.mark.parametrize(("fields", "message"), BAD_BUDGETS)
def test_the_controller_reads_a_pod_disruption_budget_it_cannot_read_as_covering_no_pod(
    fields: dict[str, Any], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad PodDisruptionBudget from the API (the apiserver validates them, so only a
    mistake elsewhere gets one here) does not stop provisioning: it covers no pod, as the
    Eviction API treats an invalid selector, with a warning; disruption reads it the same way."""
    claim = nodeclaim("old-claim", nodeName="old")
    labels = {wk.NODEPOOL: "default", wk.NODE_REGISTERED: "true", wk.NODE_INITIALIZED: "true"}
    old = node("old", labels=labels, providerID="example://old-claim")
    guarded = pod("guarded", "1", node="old", meta={"labels": {"app": "guarded"}})
    with caplog.at_level(logging.WARNING, "karpenter.state"):
        provisioner, state, client = controller(nodepool(), claim, old, guarded, bad_budget(fields))
    assert f"PodDisruptionBudget default/guard: {message}" in caplog.text
    state.mark_for_deletion(["old"])
    results = provisioner.provision()
    assert results is not None and len(client.created) == 1
    [launched] = results.new_nodeclaims
    assert [p.key for p in launched.pods] == ["default/guarded"]
    snapshot = state.snapshot({})
    budgets = PodDisruptionBudgets(snapshot.pdbs, snapshot.nodes[0].pods)
    assert budgets.blocking(snapshot.nodes[0].pods[0]) is None


# --- NodePool limits and readiness ---------------------------------------------------------------


DEDICATED = [{"key": "dedicated", "value": "other", "effect": "NoSchedule"}]
"""A taint that keeps the pods below off the NodeClaims and nodes already there."""


def test_simulate_counts_nodeclaims_in_flight_against_limits() -> None:
    """(upstream: "Resource Limits > should not schedule when limits are exceeded") A NodeClaim
    with no Node yet uses 4 of the 6 CPU the NodePool may have: a node of 4 CPU would exceed it."""
    limited = nodepool(limits={"cpu": "6"})
    _, results = simulate(limited, nodeclaim("default-abc", taints=DEDICATED), pod("p", "3"))
    assert not results.new_nodeclaims
    assert "would exceed NodePool default limit cpu=6" in results.unschedulable["default/p"]


def test_simulate_counts_a_nodeclaim_and_its_node_once() -> None:
    """(upstream: "Resource Limits > should not schedule to a nodepool after a scheduling round
    if limits would be exceeded") A registered NodeClaim is its Node: 4 of 6 CPU used, so a
    node of 2 CPU fits the limit; counted twice it would not."""
    limited = nodepool(limits={"cpu": "6"})
    claim = nodeclaim("default-abc", nodeName="n")
    registered = node(
        "n",
        labels={wk.NODEPOOL: "default", wk.NODE_REGISTERED: "true", wk.NODE_INITIALIZED: "true"},
        providerID="example://default-abc",
        taints=DEDICATED,
    )
    _, results = simulate(limited, claim, registered, pod("p", "1"))
    [launched] = results.new_nodeclaims
    assert launched.instance_type.name == "c-2"


def test_simulate_counts_nodeclaims_in_flight_against_a_node_limit() -> None:
    """(upstream: "Resource Limits > should not schedule if limits would be exceeded (node)")"""
    claim = nodeclaim("default-abc", taints=DEDICATED)
    _, results = simulate(nodepool(limits={"nodes": "1"}), claim, pod("p", "1"))
    assert not results.new_nodeclaims and "default/p" in results.unschedulable


def test_the_controller_falls_back_to_the_next_nodepool_when_nodeclaims_fill_the_limit() -> None:
    """The heavier NodePool's NodeClaim in flight fills its limit, so the pass launches from the
    next NodePool instead of planning a NodeClaim its limit check then refuses."""
    provisioner, _, client = controller(
        nodepool("first", weight=10, limits={"cpu": "6"}),
        nodepool("second"),
        nodeclaim("first-abc", nodepool_name="first", taints=DEDICATED),
        pod("p", "3"),
    )
    provisioner.provision()
    [created] = client.created
    assert created["metadata"]["labels"][wk.NODEPOOL] == "second"


@pytest.mark.parametrize("how", ["its NodeClaim is being deleted", "marked"])
def test_the_controller_launches_within_a_limit_a_nodeclaim_going_away_no_longer_uses(
    how: str,
) -> None:
    """(upstream: "Resource Limits > should schedule if limits would be met", with cluster
    state leaving out what is marked for deletion) A NodeClaim with no Node that is being
    deleted, or marked for deletion, counts against its NodePool's limits neither when the
    pass plans nor when it creates: the heavier NodePool launches for the pod."""
    extra = {"deletionTimestamp": GONE} if how.startswith("its") else {}
    provisioner, state, client = controller(
        nodepool("first", weight=10, limits={"cpu": "6"}),
        nodepool("second"),
        nodeclaim("first-abc", nodepool_name="first", taints=DEDICATED, **extra),
        pod("p", "3"),
    )
    if how == "marked":
        state.mark_for_deletion(["first-abc"])
    results = provisioner.provision()
    assert results is not None and not results.unschedulable
    [created] = client.created
    assert created["metadata"]["labels"][wk.NODEPOOL] == "first"


def test_a_node_being_deleted_uses_none_of_its_nodepools_limits() -> None:
    """(upstream: cluster state's NodePool resources leave out nodes marked for deletion) A
    Node being deleted leaves its NodePool's limits: with 4 of 6 CPU on it, a node of 4 CPU
    for its pod fits, in ``simulate`` and in the controller."""
    labels = {wk.NODEPOOL: "default", wk.NODE_REGISTERED: "true", wk.NODE_INITIALIZED: "true"}
    old = node("old", labels=labels, deletionTimestamp=GONE)
    objects = (nodepool(limits={"cpu": "6"}), old, pod("web-0", "3", node="old"))
    built, results = simulate(*objects)
    assert [p.key for p in built.snapshot.pending] == ["default/web-0"]
    [launched] = results.new_nodeclaims
    assert launched.instance_type.name == "c-4"
    provisioner, _, client = controller(*objects)
    provisioner.provision()
    [created] = client.created
    assert requested_cpu(created) == "3"


def test_a_prepared_cluster_gives_back_only_what_its_removed_nodes_counted() -> None:
    """Disruption's runs on a ``Prepared`` cluster decide as a run compiled from the reduced
    cluster alone: removing a node being deleted (which counted nothing against the limits)
    and a live one gives back one node, not two (pods of 5 CPU, one per node)."""
    labels = {wk.NODEPOOL: "default", wk.NODE_REGISTERED: "true", wk.NODE_INITIALIZED: "true"}
    built, _ = simulate(
        nodepool(limits={"nodes": "2"}),
        node("going", labels=labels, deletionTimestamp=GONE),
        node("live", labels=labels),
        *(pod(f"p{i}", "5", spec={"nodeSelector": {wk.NODEPOOL: "default"}}) for i in range(3)),
    )
    reduced = dataclasses.replace(built.snapshot, nodes=[])
    alone = schedule(reduced)
    prepared = schedule(reduced, prepared=Prepared(built.snapshot))
    assert len(alone.new_nodeclaims) == len(prepared.new_nodeclaims) == 2
    assert len(alone.unschedulable) == len(prepared.unschedulable) == 1


def test_the_controller_pairs_a_node_with_its_nodeclaim_by_node_name() -> None:
    """A Node without a providerID yet is its NodeClaim's when the NodeClaim names it
    (``status.nodeName``), in the controller as in ``simulate``: the NodeClaim being deleted
    makes the Node being deleted, and it is not also a NodeClaim in flight."""
    claim = nodeclaim("old-claim", nodeName="old", deletionTimestamp=GONE)
    labels = {wk.NODEPOOL: "default", wk.NODE_REGISTERED: "true", wk.NODE_INITIALIZED: "true"}
    objects = (nodepool(), claim, node("old", labels=labels))
    _, state, _ = controller(*objects)
    snapshot = state.snapshot({"default": list(CATALOG)})
    [seen] = snapshot.nodes
    assert seen.marked_for_deletion and not snapshot.nodeclaims
    assert state.being_deleted() == ["old"]
    built, _ = simulate(*objects)
    [simulated] = built.snapshot.nodes
    assert simulated.marked_for_deletion


NOT_READY = {
    "conditions": [
        {
            "type": "Ready",
            "status": "False",
            "reason": "NodeClassNotReady",
            "message": "NodeClass x is not ready",
            "lastTransitionTime": GONE,
        }
    ]
}


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (
            {"status": NOT_READY},
            "its Ready condition is False (NodeClassNotReady: NodeClass x is not ready)",
        ),
        ({"metadata": {"deletionTimestamp": GONE, "finalizers": ["x"]}}, "it is being deleted"),
    ],
)
def test_simulate_launches_nothing_from_a_nodepool_not_ready_or_deleted(
    extra: dict[str, Any], reason: str
) -> None:
    """(upstream: "Scheduling Logic > should not schedule pods with nodePool which is not
    ready"; provisioning: "should ignore NodePools that are deleting")"""
    pool = nodepool(**({"status": extra["status"]} if "status" in extra else {}))
    pool["metadata"].update(extra.get("metadata", {}))
    built, results = simulate(pool, pod("p", "1"))
    said = f"NodePool default launches nothing: {reason}"
    assert not built.snapshot.nodepools and not results.new_nodeclaims
    assert said in built.notes
    assert built.unserved == {"default": said}
