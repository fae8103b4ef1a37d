"""What the cluster's objects mean for scheduling, read the same way by ``karpenter simulate``
(from manifests) and by the controller (from its watches), as upstream's cluster state reads them.

- ``not_launchable``: a NodePool being deleted, or not Ready, launches nothing.
- ``daemonset_pods``: a DaemonSet counts as its newest pod, with the template's node affinity.
- ``with_nodeclaim``: a Node paired with its NodeClaim is capacity on its way until initialized,
  and is being deleted while its NodeClaim is.
- ``in_flight``, ``claim_capacity``, ``with_expected_allocatable``: NodeClaims with no Node yet,
  what they hold and what they count against their NodePool's limits.
- ``rescheduled_pods``: the pods of nodes being deleted, which provisioning places again.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import to_milli
from karpenter_core.apis.v1.nodeclaim import CONDITION_INSTANCE_TERMINATING
from karpenter_core.scheduling.taints import Taint, untolerated
from karpenter_core.scheduling.topology import LabelSelector

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.types import InstanceType
    from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot

__all__ = [
    "EPHEMERAL_TAINTS",
    "as_launching",
    "claim_capacity",
    "claim_instance_types",
    "daemonset_pods",
    "in_flight",
    "nodeclaim_deleting",
    "not_launchable",
    "rescheduled_pods",
    "with_expected_allocatable",
    "with_nodeclaim",
]

EPHEMERAL_TAINTS = frozenset(
    {
        wk.UNREGISTERED_TAINT_KEY,
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
    }
)
"""Taints a new node carries only until it is up; scheduling onto it looks past them."""

_DISRUPTED = Taint(wk.DISRUPTED_TAINT_KEY, "", wk.DISRUPTED_TAINT_EFFECT)


def not_launchable(nodepool: NodePool) -> str | None:
    """Why the NodePool launches nothing now, or None: it is being deleted, or its status has
    conditions and Ready is not True among them. A NodePool whose status was never written (not
    reconciled yet, or a manifest without ``status``) may launch."""
    if nodepool.metadata.deletion_timestamp is not None:
        return "it is being deleted"
    conditions = nodepool.status.conditions
    if not conditions:
        return None
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if ready is None:
        return "its status has no Ready condition"
    if ready.status == "True":
        return None
    why = f"{ready.reason}: {ready.message}" if ready.message else ready.reason
    return f"its Ready condition is {ready.status} ({why})"


def daemonset_pods(daemonsets: Sequence[PodInfo], pods: Iterable[PodInfo]) -> list[PodInfo]:
    """Each DaemonSet (given as its pod template) as the pod it runs, as upstream's provisioner
    sees it: its newest pod among ``pods`` (latest ``created``; of equal times, the last given),
    whose requests admission (a LimitRange, a webhook) may have changed, with the template's
    required node affinity if the template has one (the DaemonSet controller replaces it on each
    pod with a pin to that pod's node); the template itself while the DaemonSet has no pod."""
    newest: dict[tuple[str, str], PodInfo] = {}
    for pod in pods:
        if pod.is_daemon():
            key = (pod.namespace, pod.owner_name)
            found = newest.get(key)
            if found is None or pod.created >= found.created:
                newest[key] = pod
    if not newest:
        return list(daemonsets)
    out = []
    for template in daemonsets:
        running = newest.get((template.namespace, template.name))
        if running is None:
            out.append(template)
            continue
        daemon = running.renamed(template.name)
        if template.node_affinity_required:
            daemon.node_affinity_required = template.node_affinity_required
        daemon.node_name = None
        daemon.nominated_node = None
        out.append(daemon)
    return out


def nodeclaim_deleting(claim: NodeClaim) -> bool:
    """The NodeClaim is being deleted, or its instance is terminating."""
    return claim.metadata.deletion_timestamp is not None or any(
        c.type == CONDITION_INSTANCE_TERMINATING and c.status == "True"
        for c in claim.status.conditions
    )


def with_nodeclaim(node: NodeInfo, claim: NodeClaim) -> None:
    """The node as its NodeClaim makes it (in place): launching until initialized
    (``as_launching``), and marked for deletion while the NodeClaim is being deleted."""
    as_launching(node, claim)
    if nodeclaim_deleting(claim):
        node.marked_for_deletion = node.deleting = True


def as_launching(view: NodeInfo, claim: NodeClaim) -> None:
    """A node of a NodeClaim that is not initialized yet is capacity on its way, as upstream
    treats it: not initialized, its ephemeral and startup taints ignored, the NodeClaim's
    expected allocatable used while the node reports none, and, until the node is registered
    (its labels are copied from the NodeClaim then), the NodeClaim's labels under the node's:
    a Node created a moment before registration would otherwise lack its NodePool's labels, fit
    no pod meant for it, and hide its NodeClaim's capacity from the pass."""
    if view.labels.get(wk.NODE_REGISTERED) != "true":
        view.relabel({**claim.metadata.labels, **view.labels})
    view.initialized = view.labels.get(wk.NODE_INITIALIZED) == "true"
    if view.initialized:
        return
    startup = {(t.key, t.effect) for t in claim.spec.startup_taints}
    view.taints = tuple(
        t for t in view.taints if t.key not in EPHEMERAL_TAINTS and (t.key, t.effect) not in startup
    )
    if not view.allocatable and claim.status.allocatable:
        view.allocatable = {n: to_milli(q) for n, q in claim.status.allocatable.items()}


def in_flight(nodeclaims: Iterable[NodeClaim], nodes: Iterable[NodeInfo]) -> list[NodeClaim]:
    """The NodeClaims with no Node among ``nodes`` yet (matched by providerID or node name),
    not being deleted: capacity on its way, counted against its NodePool's limits. A NodeClaim
    whose Node is there counts as that node, once."""
    registered: set[str] = set()
    for node in nodes:
        registered.add(node.name)
        if node.provider_id:
            registered.add(node.provider_id)
    return [
        claim
        for claim in nodeclaims
        if not nodeclaim_deleting(claim)
        and claim.status.node_name not in registered
        and claim.status.provider_id not in registered
    ]


def claim_instance_types(claim: NodeClaim) -> list[str]:
    """The instance types a NodeClaim may launch as (its ``In`` requirement), if it names them."""
    for requirement in claim.spec.requirements:
        if requirement.key == wk.INSTANCE_TYPE and requirement.operator == "In":
            return list(requirement.values)
    return []


def claim_capacity(claim: NodeClaim, catalog: Mapping[str, InstanceType]) -> dict[str, int]:
    """What a NodeClaim counts against its NodePool's limits (thousandths): its capacity once
    launched, before that the largest amount of each resource among its instance-type options."""
    capacity = {r: to_milli(q) for r, q in claim.status.capacity.items()}
    if capacity:
        return capacity
    for name in claim_instance_types(claim):
        instance_type = catalog.get(name)
        for resource, amount in instance_type.capacity.items() if instance_type else ():
            capacity[resource] = max(capacity.get(resource, 0), amount)
    return capacity


def with_expected_allocatable(
    nodeclaims: Iterable[NodeClaim], catalog: Mapping[str, InstanceType]
) -> list[NodeClaim]:
    """In-flight NodeClaims with ``status.allocatable`` filled in before launch, so the scheduler
    counts the pods they were made for instead of launching for them a second time: the
    per-resource smallest allocatable of its instance-type options (each holds those pods)."""
    out = []
    for nodeclaim in nodeclaims:
        options = [catalog[n] for n in claim_instance_types(nodeclaim) if n in catalog]
        if nodeclaim.status.allocatable or not options:
            out.append(nodeclaim)
            continue
        resources = set.intersection(*(set(it.allocatable) for it in options))
        filled = nodeclaim.model_copy(deep=True)
        filled.status.allocatable = {
            r: Fraction(min(it.allocatable[r] for it in options), 1000) for r in resources
        }
        out.append(filled)
    return out


def rescheduled_pods(snapshot: Snapshot) -> list[PodInfo]:
    """The pods of the nodes marked for deletion that provisioning places again, as unbound
    copies (upstream's ``CurrentlyReschedulablePods``): not DaemonSet-owned or mirror pods; not
    terminating, except StatefulSet pods (their successor waits for them to go); not annotated
    ``karpenter.sh/do-not-disrupt: "true"``; not held by a PodDisruptionBudget that allows no
    eviction ever (maxUnavailable 0 or 0%, minAvailable 100%), nor covered by several budgets
    (the Eviction API refuses such pods)."""
    nodes = [node for node in snapshot.nodes if node.marked_for_deletion and node.pods]
    if not nodes:
        return []
    budgets = [_budget(pdb) for pdb in snapshot.pdbs]
    out = []
    for node in nodes:
        for pod in node.pods:
            if _reschedulable(pod) and not _blocked(pod, budgets):
                clone = copy.copy(pod)
                clone.node_name = None
                clone.nominated_node = None
                out.append(clone)
    return out


def _reschedulable(pod: PodInfo) -> bool:
    if pod.is_daemon() or pod.owner_kind == "Node" or pod.is_mirror():
        return False
    if pod.terminating:
        return pod.owner_kind == "StatefulSet"
    return pod.annotations.get(wk.DO_NOT_DISRUPT) != "true"


def _budget(pdb: Mapping[str, Any]) -> tuple[str, LabelSelector | None, bool]:
    """(namespace, selector, allows no eviction ever) of a PodDisruptionBudget."""
    meta = pdb.get("metadata") or {}
    spec = pdb.get("spec") or {}
    never = spec.get("maxUnavailable") in (0, "0%") or spec.get("minAvailable") == "100%"
    selector = LabelSelector.from_manifest(spec.get("selector"))
    return str(meta.get("namespace") or "default"), selector, never


def _blocked(pod: PodInfo, budgets: Sequence[tuple[str, LabelSelector | None, bool]]) -> bool:
    """Evicting the pod can never succeed. Terminating pods and pods that tolerate the disrupted
    taint are not evicted, so no budget holds them."""
    if not budgets or pod.terminating or untolerated((_DISRUPTED,), pod.tolerations) is None:
        return False
    covering = [
        never
        for namespace, selector, never in budgets
        if namespace == pod.namespace and selector is not None and selector.matches(pod.labels)
    ]
    return len(covering) > 1 or any(covering)
