"""The whole operator with the KWOK provider against the in-process fake Kubernetes API.

The test plays the parts the fake leaves out: the kube-scheduler (marking pods Unschedulable and
binding them) and the kubelet (reporting nodes Ready and pods Running). Everything else is the
real operator: informers, cluster state, provisioning, the NodeClaim lifecycle, termination with
evictions under a PodDisruptionBudget, disruption and garbage collection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from karpenter_conformance.fakekube import FakeKube
from karpenter_conformance.waiting import wait_until
from karpenter_core.apis import labels as wk
from karpenter_core.controllers import build_controllers
from karpenter_core.controllers.disruption import DisruptionController
from karpenter_core.controllers.garbage_collection import GarbageCollector
from karpenter_core.controllers.provisioning import Provisioner
from karpenter_core.controllers.runtime import LoopController
from karpenter_core.operator.kube import KubeClient
from karpenter_core.operator.operator import Controller, Operator
from karpenter_core.operator.settings import Settings
from karpenter_kwok.plugin import karpenter_register_providers

NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODES = "/api/v1/nodes"
PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
TIMEOUT = 20.0


def _controllers(
    replacement_timeout: float | None,
) -> Callable[[Operator], list[Controller]]:
    """Every controller the operator runs, with loop periods of at most a tenth of a second,
    half a second of grace for garbage collection, nominations of a second and, if given,
    ``replacement_timeout`` seconds for a disruption command's replacements to initialize."""

    def build(operator: Operator) -> list[Controller]:
        controllers = build_controllers(operator)
        for controller in controllers:
            if isinstance(controller, LoopController):
                controller.period = min(controller.period, 0.1)
            if isinstance(controller, GarbageCollector):
                controller.grace = 0.5
            if isinstance(controller, Provisioner):
                controller.nomination = 1.0
            if isinstance(controller, DisruptionController) and replacement_timeout is not None:
                controller.timeout = replacement_timeout
        return controllers

    return build


@dataclass
class Cluster:
    """The fake API, an admin client on it, and the running operator."""

    fake: FakeKube
    kube: KubeClient
    operator: Operator
    running: tuple[Operator, threading.Thread, list[int]]
    options: dict[str, float]

    def restart(self) -> None:
        """Stop the operator (its in-memory state gone) and start a new one."""
        _stop(*self.running)
        self.running = _operator(self.kube, **self.options)
        self.operator = self.running[0]

    def nodeclaims(self) -> list[dict[str, Any]]:
        return self.fake.items(NODECLAIMS)

    def pod(self, name: str, cpu: str = "1") -> None:
        """A pod the kube-scheduler found no room for."""
        self.kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}
                    ]
                },
            },
        )
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        self.kube.patch(f"{PODS}/{name}/status", {"status": {"conditions": [condition]}})

    def node_ready(self, name: str) -> None:
        """The kubelet reports the node Ready."""
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        self.kube.patch(f"{NODES}/{name}/status", {"status": {"conditions": [ready]}})

    def bind(self, pod: str, node: str) -> None:
        """The kube-scheduler binds the pod, and its kubelet runs it."""
        self.kube.patch(f"{PODS}/{pod}", {"spec": {"nodeName": node}})
        status = {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        }
        self.kube.patch(f"{PODS}/{pod}/status", {"status": status})


def _nodepool(name: str, **disruption: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {
                            "key": "karpenter.kwok.sh/instance-family",
                            "operator": "In",
                            "values": ["c"],
                        },
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": "default",
                    },
                }
            },
            "disruption": {"consolidateAfter": "Never", **disruption},
        },
    }


def _operator(
    kube: KubeClient, replacement_timeout: float | None = None, validation_delay: float = 0.1
) -> tuple[Operator, threading.Thread, list[int]]:
    """An operator with the KWOK provider on ``kube``, running in a thread (its exit code is
    appended to the list); ``replacement_timeout`` as in ``_controllers``, and
    ``validation_delay`` seconds for DISRUPTION_VALIDATION_DELAY."""
    settings = Settings(
        disable_leader_election=True,
        metrics_port=0,
        health_probe_port=0,
        batch_idle_duration=0.05,
        batch_max_duration=0.3,
        nodeclaim_requeue=0.2,
        disruption_poll_period=0.2,
        disruption_validation_delay=validation_delay,
    )
    [record] = karpenter_register_providers()
    operator = Operator(
        settings,
        record,
        kube,
        controllers=_controllers(replacement_timeout),
        controller_stop_timeout=5.0,
    )
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(operator.run()), daemon=True)
    thread.start()
    wait_until(operator.ready, "the operator's informers synced", timeout=TIMEOUT)
    return operator, thread, result


def _stop(operator: Operator, thread: threading.Thread, result: list[int]) -> None:
    operator.shutdown()
    thread.join(15)
    assert result == [0], "the operator stopped cleanly"


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """An operator with the KWOK provider on a fresh fake API; stopped after the test. An
    indirect parameter gives ``_operator``'s keyword arguments."""
    options: dict[str, float] = getattr(request, "param", {})
    fake = FakeKube()
    kube = KubeClient(fake.api_client())
    fake.put(
        NODECLASSES,
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": "default"},
            "spec": {},
        },
    )
    running = _operator(kube, **options)
    cluster = Cluster(fake, kube, running[0], running, options)
    try:
        yield cluster
    finally:
        _stop(*cluster.running)
        kube.close()
        fake.stop()


def test_pods_awaiting_the_kube_scheduler_launch_only_what_existing_room_cannot_hold(
    cluster: Cluster,
) -> None:
    """Six 1-CPU pods, an existing node with 4 CPU free: NodeClaims for two pods' worth, without
    waiting for an Unschedulable verdict; the four that fit are left to the kube-scheduler. No
    kube-scheduler runs on the fake API, so no pod is ever marked Unschedulable or bound."""
    fake, kube, operator = cluster.fake, cluster.kube, cluster.operator
    kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "existing", "labels": {"kubernetes.io/os": "linux"}},
            "status": {
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    state = operator.state
    wait_until(lambda: state.node("existing"), "the node seen", timeout=TIMEOUT)
    kube.create(NODEPOOLS, _nodepool("web"))
    for n in range(6):
        kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{n}"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}
                    ]
                },
            },
        )

    def requested() -> int:
        claims = fake.items(NODECLAIMS)
        return sum(int(c["spec"]["resources"]["requests"]["cpu"]) for c in claims)

    wait_until(lambda: requested() == 2, "NodeClaims for the 2 pods beyond 4 CPU", timeout=TIMEOUT)
    wait_until(
        lambda: sum(state.nomination(f"default/web-{n}") is not None for n in range(6)) == 2,
        "the 2 pods nominated to the NodeClaims",
        timeout=TIMEOUT,
    )
    time.sleep(1.0)  # several batch windows: later passes launch nothing more for them
    assert requested() == 2
    assert all(state.nomination(f"default/web-{n}") != "existing" for n in range(6)), (
        "the kube-scheduler places the others; they are not nominated"
    )


def _launched_node(cluster: Cluster) -> tuple[str, str]:
    """Wait for one launched NodeClaim; return its name and its Node's name."""
    wait_until(
        lambda: [c for c in cluster.nodeclaims() if (c.get("status") or {}).get("providerID")],
        "a launched NodeClaim",
        timeout=TIMEOUT,
    )
    [claim] = cluster.nodeclaims()
    wait_until(lambda: cluster.fake.items(NODES), "the KWOK node", timeout=TIMEOUT)
    [node] = cluster.fake.items(NODES)
    return claim["metadata"]["name"], node["metadata"]["name"]


def _conditions(obj: dict[str, Any] | None) -> dict[str, str]:
    return {
        c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions") or ()
    }


def test_a_pending_pod_gets_a_node_that_registers_and_initializes(cluster: Cluster) -> None:
    cluster.kube.create(NODEPOOLS, _nodepool("web"))
    cluster.pod("web-0", cpu="3")
    claim_name, node_name = _launched_node(cluster)
    claim = cluster.fake.object(f"{NODECLAIMS}/{claim_name}")
    assert claim is not None
    assert claim["metadata"]["labels"][wk.NODEPOOL] == "web"
    assert wk.TERMINATION_FINALIZER in claim["metadata"]["finalizers"]
    assert _conditions(claim)["Launched"] == "True"
    assert cluster.operator.state.nomination("default/web-0") == claim_name
    cluster.node_ready(node_name)

    def initialized() -> bool:
        node = cluster.fake.object(f"{NODES}/{node_name}") or {}
        claim = cluster.fake.object(f"{NODECLAIMS}/{claim_name}")
        return (node.get("metadata") or {}).get("labels", {}).get(
            wk.NODE_INITIALIZED
        ) == "true" and _conditions(claim).get("Ready") == "True"

    wait_until(initialized, "the NodeClaim registered and initialized", timeout=TIMEOUT)
    node = cluster.fake.object(f"{NODES}/{node_name}") or {}
    assert wk.TERMINATION_FINALIZER in node["metadata"]["finalizers"]
    taints = [t["key"] for t in node.get("spec", {}).get("taints") or ()]
    assert wk.UNREGISTERED_TAINT_KEY not in taints
    claim = cluster.fake.object(f"{NODECLAIMS}/{claim_name}")
    assert {k: _conditions(claim)[k] for k in ("Registered", "Initialized")} == {
        "Registered": "True",
        "Initialized": "True",
    }
    assert len(cluster.nodeclaims()) == 1, "one NodeClaim for one pod"


def test_deleting_a_nodeclaim_drains_its_node_within_the_disruption_budget(
    cluster: Cluster,
) -> None:
    cluster.kube.create(NODEPOOLS, _nodepool("web"))
    cluster.pod("web-0")
    claim_name, node_name = _launched_node(cluster)
    cluster.node_ready(node_name)
    wait_until(
        lambda: (
            wk.TERMINATION_FINALIZER
            in ((cluster.fake.object(f"{NODES}/{node_name}") or {}).get("metadata") or {}).get(
                "finalizers", ()
            )
        ),
        "the node registered (its termination finalizer on)",
        timeout=TIMEOUT,
    )
    cluster.bind("web-0", node_name)
    cluster.kube.create(
        PDBS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    wait_until(
        lambda: (
            cluster.operator.state.pod("default/web-0") is not None
            and cluster.operator.state.pod("default/web-0").node_name == node_name
        ),  # type: ignore[union-attr]
        "the bound pod in the cluster state",
        timeout=TIMEOUT,
    )
    cluster.kube.delete(f"{NODECLAIMS}/{claim_name}")

    def refused() -> bool:
        return any(
            m == "POST" and p.endswith("/pods/web-0/eviction") for m, p in cluster.fake.requests
        )

    wait_until(refused, "an eviction tried", timeout=TIMEOUT)
    node = cluster.fake.object(f"{NODES}/{node_name}") or {}
    assert node["metadata"].get("deletionTimestamp"), "the Node is being deleted"
    assert any(t["key"] == wk.DISRUPTED_TAINT_KEY for t in node["spec"].get("taints") or ())
    assert cluster.fake.object(f"{PODS}/web-0") is not None, "the budget holds the pod"
    wait_until(
        lambda: any(
            e.get("reason") == "FailedDraining"
            for e in cluster.fake.items("/api/v1/namespaces/default/events")
        ),
        "a FailedDraining event",
        timeout=TIMEOUT,
    )
    cluster.kube.delete(f"{PDBS}/web")
    wait_until(
        lambda: not cluster.fake.items(NODES) and not cluster.nodeclaims(),
        "the node drained, its instance deleted and both finalizers removed",
        timeout=TIMEOUT,
    )
    assert cluster.fake.object(f"{PODS}/web-0") is None, "the pod was evicted"


def test_disruption_removes_an_empty_node(cluster: Cluster) -> None:
    cluster.kube.create(
        NODEPOOLS,
        _nodepool("web", consolidationPolicy="WhenEmptyOrUnderutilized", consolidateAfter="0s"),
    )
    cluster.pod("web-0")
    claim_name, node_name = _launched_node(cluster)
    cluster.node_ready(node_name)
    cluster.bind("web-0", node_name)
    wait_until(
        lambda: (
            _conditions(cluster.fake.object(f"{NODECLAIMS}/{claim_name}")).get("Ready") == "True"
        ),
        "the NodeClaim ready",
        timeout=TIMEOUT,
    )
    cluster.kube.delete(f"{PODS}/web-0")
    wait_until(
        lambda: not cluster.nodeclaims() and not cluster.fake.items(NODES),
        "the empty node consolidated away",
        timeout=TIMEOUT,
    )


def test_garbage_collection_deletes_an_instance_without_a_nodeclaim(cluster: Cluster) -> None:
    cluster.fake.put(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "leaked", "labels": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"providerID": "kwok://leaked"},
        },
    )
    wait_until(
        lambda: cluster.fake.object(f"{NODES}/leaked") is None,
        "the leaked instance deleted",
        timeout=TIMEOUT,
    )


def _web_pod(cluster: Cluster, name: str, cpu: str, node: str | None = None) -> None:
    """A pod of app=web that shares no node with another (required hostname anti-affinity):
    pending if ``node`` is None, else bound to ``node`` and Running."""
    term = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    }
    if node is not None:
        spec["nodeName"] = node
    cluster.kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": spec,
        },
    )
    if node is None:
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        cluster.kube.patch(f"{PODS}/{name}/status", {"status": {"conditions": [condition]}})
    else:
        cluster.bind(name, node)


def _tainted(cluster: Cluster, names: set[str]) -> set[str]:
    return {
        n["metadata"]["name"]
        for n in cluster.fake.items(NODES)
        if n["metadata"]["name"] in names
        and any(t["key"] == wk.DISRUPTED_TAINT_KEY for t in n["spec"].get("taints") or ())
    }


def _nodes_each_with_a_small_pod(
    cluster: Cluster, nodepool: dict[str, Any], count: int
) -> list[str]:
    """``count`` Ready nodes of ``nodepool`` (created here), each holding one pod ``small-<i>``
    of 100m that shares no node with another, their NodeClaims Ready; then the NodePool's
    consolidateAfter set to 0s. Returns the nodes' names, sorted."""
    cluster.kube.create(NODEPOOLS, nodepool)
    for i in range(count):
        _web_pod(cluster, f"big-{i}", cpu="3")
    wait_until(
        lambda: len(cluster.fake.items(NODES)) == count, f"{count} KWOK nodes", timeout=TIMEOUT
    )
    names = sorted(n["metadata"]["name"] for n in cluster.fake.items(NODES))
    for i, name in enumerate(names):
        cluster.node_ready(name)
        cluster.kube.delete(f"{PODS}/big-{i}")
        _web_pod(cluster, f"small-{i}", cpu="100m", node=name)
    wait_until(
        lambda: (
            len(cluster.nodeclaims()) == count
            and all(_conditions(c).get("Ready") == "True" for c in cluster.nodeclaims())
            and all(
                cluster.operator.state.pod(f"default/small-{i}") is not None for i in range(count)
            )
        ),
        f"{count} ready NodeClaims with their small pods known",
        timeout=TIMEOUT,
    )
    cluster.kube.patch(f"{NODEPOOLS}/web", {"spec": {"disruption": {"consolidateAfter": "0s"}}})
    return names


def _two_commands_in_flight(cluster: Cluster) -> tuple[list[str], set[str]]:
    """Four nodes, each holding one small pod that shares no node with another, so that each
    is replaced by a cheaper node, one command per node; the NodePool's budget allows 2 at
    once, and the replacements stay unready until the test readies them. Returns the four
    nodes and the two whose commands are in flight."""
    nodepool = _nodepool("web", consolidationPolicy="WhenEmptyOrUnderutilized")
    nodepool["spec"]["disruption"]["budgets"] = [{"nodes": "2"}]
    originals = _nodes_each_with_a_small_pod(cluster, nodepool, 4)
    wait_until(
        lambda: len(_tainted(cluster, set(originals))) == 2 and len(cluster.nodeclaims()) == 6,
        "two commands in flight, each with its replacement",
        timeout=TIMEOUT,
    )
    return originals, _tainted(cluster, set(originals))


def test_consolidation_runs_commands_in_parallel_within_the_budget(cluster: Cluster) -> None:
    # Two commands wait for their replacements together; the budget holds a third back.
    originals, first = _two_commands_in_flight(cluster)
    for _ in range(10):  # five disruption poll periods: the budget holds the other two back
        threading.Event().wait(0.1)
        assert _tainted(cluster, set(originals)) == first
        assert len(cluster.nodeclaims()) == 6
    assert all(cluster.fake.object(f"{NODES}/{name}") for name in first), "not deleted yet"

    for node in cluster.fake.items(NODES):
        if node["metadata"]["name"] not in originals:
            cluster.node_ready(node["metadata"]["name"])
    wait_until(
        lambda: all(
            (cluster.fake.object(f"{NODES}/{name}") or {"metadata": {"deletionTimestamp": "x"}})[
                "metadata"
            ].get("deletionTimestamp")
            for name in first
        ),
        "both commands finished: their nodes deleted once the replacements initialized",
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize("cluster", [{"validation_delay": 3.0}], indirect=True)
def test_consolidation_commands_decided_in_one_pass_wait_out_one_validation_delay(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # The second command is decided while the first waits for its validation, on the cluster
    # as the first will leave it; both are computed again after one 3 s delay and start
    # together, not a delay apart.
    caplog.set_level("INFO", logger="karpenter.disruption")
    _two_commands_in_flight(cluster)
    starts = [r.created for r in caplog.records if r.getMessage() == "disrupting"]
    assert len(starts) == 2
    assert starts[1] - starts[0] < 1.5


@pytest.mark.parametrize("cluster", [{"validation_delay": 3.0}], indirect=True)
def test_a_command_possible_while_another_waits_waits_one_delay_from_its_own_decision(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # Two nodes go empty a second apart. The second is decided while the first command waits
    # out its 3 s validation delay, and starts 3 s after its own decision: about a second after
    # the first, not a whole delay after it.
    caplog.set_level("INFO", logger="karpenter.disruption")
    nodepool = _nodepool("web", consolidationPolicy="WhenEmpty")
    nodepool["spec"]["disruption"]["budgets"] = [{"nodes": "2"}]
    names = _nodes_each_with_a_small_pod(cluster, nodepool, 2)
    cluster.kube.delete(f"{PODS}/small-0")
    threading.Event().wait(1.0)
    cluster.kube.delete(f"{PODS}/small-1")
    wait_until(lambda: not cluster.fake.items(NODES), "both empty nodes removed", timeout=TIMEOUT)

    starts = [r for r in caplog.records if r.getMessage() == "disrupting"]
    assert [r.nodes for r in starts] == [[names[0]], [names[1]]]
    assert all(r.waited_s >= 3.0 for r in starts)
    assert starts[1].created - starts[0].created < 2.5


def test_a_restart_recomputes_the_commands_in_flight(cluster: Cluster) -> None:
    # The commands lived in the stopped controller's memory. The new one takes the disrupted
    # taint off their nodes and decides again on the cluster as it is: the replacements it
    # finds launching hold the pods, so the same two nodes go without launching anything more.
    _, first = _two_commands_in_flight(cluster)
    # Counted from before the restart: the new controller may delete them before it returns.
    since = len(cluster.fake.requests)
    cluster.restart()
    wait_until(
        lambda: all(
            (cluster.fake.object(f"{NODES}/{name}") or {"metadata": {"deletionTimestamp": "x"}})[
                "metadata"
            ].get("deletionTimestamp")
            for name in first
        ),
        "the two nodes deleted by the restarted controller",
        timeout=TIMEOUT,
    )
    after = cluster.fake.requests[since:]
    deletes = [i for i, (m, p) in enumerate(after) if m == "DELETE" and p.startswith(NODECLAIMS)]
    creates = [i for i, (m, p) in enumerate(after) if m == "POST" and p == NODECLAIMS]
    assert len(deletes) >= 2
    assert not [i for i in creates if i < deletes[1]], "nothing launched before they went"


def _replacements(cluster: Cluster, originals: list[str]) -> set[str]:
    """The NodeClaims that are not those of ``originals`` (the commands' replacements)."""
    return {
        c["metadata"]["name"]
        for c in cluster.nodeclaims()
        if (c.get("status") or {}).get("nodeName") not in originals
    }


def _node_of(cluster: Cluster, claim: str) -> str:
    """The Node of NodeClaim ``claim`` ("" before it registers)."""
    return str(
        ((cluster.fake.object(f"{NODECLAIMS}/{claim}") or {}).get("status") or {}).get("nodeName")
        or ""
    )


def _in_place(cluster: Cluster, name: str) -> bool:
    node = cluster.fake.object(f"{NODES}/{name}")
    return node is not None and not node["metadata"].get("deletionTimestamp")


def _stop_consolidating(cluster: Cluster) -> None:
    """consolidateAfter Never: the commands in flight go on, no new one starts."""
    cluster.kube.patch(f"{NODEPOOLS}/web", {"spec": {"disruption": {"consolidateAfter": "Never"}}})


@pytest.mark.parametrize("cluster", [{"replacement_timeout": 4.0}], indirect=True)
def test_commands_whose_replacements_never_initialize_are_rolled_back(cluster: Cluster) -> None:
    # The replacements stay unready past the 4 s timeout: each command gives up, its
    # candidates untainted and kept, its replacement deleted.
    originals, _ = _two_commands_in_flight(cluster)
    replacements = _replacements(cluster, originals)
    assert len(replacements) == 2
    _stop_consolidating(cluster)
    wait_until(
        lambda: (
            not _tainted(cluster, set(originals))
            and not any(cluster.fake.object(f"{NODECLAIMS}/{r}") for r in replacements)
        ),
        "both commands rolled back",
        timeout=TIMEOUT,
    )
    assert all(_in_place(cluster, name) for name in originals)
    assert not [n for n in originals if cluster.operator.state.marked_for_deletion(n)]
    assert len(cluster.nodeclaims()) == 4
    deleted = {p.rsplit("/", 1)[-1] for m, p in cluster.fake.requests if m == "DELETE"}
    assert not deleted & {c["metadata"]["name"] for c in cluster.nodeclaims()}, (
        "no candidate's NodeClaim deleted"
    )


def test_a_command_whose_replacement_fails_to_launch_is_rolled_back_alone(
    cluster: Cluster,
) -> None:
    # One replacement goes away (as a launch that fails for want of capacity deletes its
    # NodeClaim): that command alone gives up; the other finishes once its replacement is up.
    originals, first = _two_commands_in_flight(cluster)
    _stop_consolidating(cluster)
    lost, kept = sorted(_replacements(cluster, originals))
    cluster.kube.delete(f"{NODECLAIMS}/{lost}")
    wait_until(
        lambda: (
            len(_tainted(cluster, first)) == 1
            and cluster.fake.object(f"{NODECLAIMS}/{lost}") is None
        ),
        "the command of the lost replacement rolled back",
        timeout=TIMEOUT,
    )
    [waiting] = _tainted(cluster, first)
    [rolled_back] = first - {waiting}
    assert all(_in_place(cluster, name) for name in originals)
    wait_until(lambda: _node_of(cluster, kept), "the kept replacement's node", timeout=TIMEOUT)
    kept_node = _node_of(cluster, kept)
    cluster.node_ready(kept_node)
    wait_until(
        lambda: not _in_place(cluster, waiting),
        "the other command finished: its node deleted",
        timeout=TIMEOUT,
    )
    assert _in_place(cluster, rolled_back)
    assert not _tainted(cluster, {rolled_back})
    assert not cluster.operator.state.marked_for_deletion(rolled_back)


def test_a_drift_command_is_logged_with_the_check_that_fired(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.kube.create(NODEPOOLS, _nodepool("web"))
    cluster.pod("web-0")
    claim_name, node_name = _launched_node(cluster)
    cluster.node_ready(node_name)
    cluster.bind("web-0", node_name)
    wait_until(
        lambda: (
            _conditions(cluster.fake.object(f"{NODECLAIMS}/{claim_name}")).get("Ready") == "True"
        ),
        "the NodeClaim ready",
        timeout=TIMEOUT,
    )
    caplog.set_level("INFO", logger="karpenter.disruption")
    cluster.kube.patch(
        f"{NODEPOOLS}/web", {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}}
    )
    wait_until(
        lambda: [r for r in caplog.records if r.getMessage() == "disrupting"],
        "the drift command started",
        timeout=TIMEOUT,
    )
    record = next(r for r in caplog.records if r.getMessage() == "disrupting")
    assert (record.reason, getattr(record, "drift_reason", None)) == ("drifted", "NodePoolDrifted")


def _ready_node_for(cluster: Cluster, pod: str, cpu: str) -> tuple[str, str]:
    """Launch a node for a new pod ``pod`` of app=web (which shares no node with another) and
    bind the pod to it; its NodeClaim's and Node's names once the NodeClaim is Ready."""
    known = {n["metadata"]["name"] for n in cluster.fake.items(NODES)}
    _web_pod(cluster, pod, cpu=cpu)
    wait_until(
        lambda: [n for n in cluster.fake.items(NODES) if n["metadata"]["name"] not in known],
        f"a node for {pod}",
        timeout=TIMEOUT,
    )
    [node] = [n for n in cluster.fake.items(NODES) if n["metadata"]["name"] not in known]
    node_name = node["metadata"]["name"]
    cluster.node_ready(node_name)
    cluster.bind(pod, node_name)
    wait_until(
        lambda: [
            c
            for c in cluster.nodeclaims()
            if (c.get("status") or {}).get("nodeName") == node_name
            and _conditions(c).get("Ready") == "True"
        ],
        f"the NodeClaim of {node_name} ready",
        timeout=TIMEOUT,
    )
    return _claim_of(cluster, node_name), node_name


def _claim_of(cluster: Cluster, node: str) -> str:
    return next(
        c["metadata"]["name"]
        for c in cluster.nodeclaims()
        if (c.get("status") or {}).get("nodeName") == node
    )


def _drift_condition(cluster: Cluster, claim: str) -> tuple[str, str] | None:
    """The reason and lastTransitionTime of the NodeClaim's True Drifted condition."""
    conditions = ((cluster.fake.object(f"{NODECLAIMS}/{claim}") or {}).get("status") or {}).get(
        "conditions"
    ) or ()
    return next(
        (
            (c["reason"], c["lastTransitionTime"])
            for c in conditions
            if c["type"] == "Drifted" and c["status"] == "True"
        ),
        None,
    )


def test_drift_takes_the_earliest_drifted_node_first(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # Drift/Drift/"should drift one non-empty node at a time, starting with the earliest drift":
    # the newer node drifts first (its instance type no longer allowed), the older one a second
    # later (the template changed); once the Drifted budget allows one node, the newer one is
    # disrupted first, where age alone would take the older.
    nodepool = _nodepool("web")
    nodepool["spec"]["disruption"]["budgets"] = [{"nodes": "0", "reasons": ["Drifted"]}]
    cluster.kube.create(NODEPOOLS, nodepool)
    older_claim, older_node = _ready_node_for(cluster, "web-0", cpu="1")
    time.sleep(1.1)  # creation times have a resolution of a second
    newer_claim, newer_node = _ready_node_for(cluster, "web-1", cpu="3")
    newer_type, older_type = (
        (cluster.fake.object(f"{NODES}/{name}") or {})["metadata"]["labels"][wk.INSTANCE_TYPE]
        for name in (newer_node, older_node)
    )
    assert newer_type != older_type

    requirements = nodepool["spec"]["template"]["spec"]["requirements"]
    excluded = {"key": wk.INSTANCE_TYPE, "operator": "NotIn", "values": [newer_type]}
    cluster.kube.patch(
        f"{NODEPOOLS}/web",
        {"spec": {"template": {"spec": {"requirements": [*requirements, excluded]}}}},
    )
    wait_until(
        lambda: _drift_condition(cluster, newer_claim), "the newer node drifted", timeout=TIMEOUT
    )
    first = _drift_condition(cluster, newer_claim)
    assert first is not None and first[0] == "RequirementsDrifted"
    assert _drift_condition(cluster, older_claim) is None
    time.sleep(1.1)  # so do transition times
    cluster.kube.patch(
        f"{NODEPOOLS}/web", {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}}
    )
    wait_until(
        lambda: _drift_condition(cluster, older_claim), "the older node drifted", timeout=TIMEOUT
    )
    wait_until(
        lambda: (_drift_condition(cluster, newer_claim) or ("",))[0] == "NodePoolDrifted",
        "the newer node's drift reason updated",
        timeout=TIMEOUT,
    )
    assert _drift_condition(cluster, newer_claim) == ("NodePoolDrifted", first[1]), (
        "the reason changed, not when the node drifted"
    )

    caplog.set_level("INFO", logger="karpenter.disruption")
    cluster.kube.patch(f"{NODEPOOLS}/web", {"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}})
    wait_until(
        lambda: [r for r in caplog.records if r.getMessage() == "disrupting"],
        "a drift command started",
        timeout=TIMEOUT,
    )
    started = next(r for r in caplog.records if r.getMessage() == "disrupting")
    assert (started.reason, started.nodes) == ("drifted", [newer_node])
