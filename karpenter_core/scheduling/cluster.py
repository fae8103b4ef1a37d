"""What the cluster's objects mean for scheduling, read the same way by ``karpenter simulate``
(from manifests) and by the controller (from its watches), as upstream's cluster state reads them.

- ``not_launchable``: a NodePool being deleted, or not Ready, launches nothing.
- ``daemonset_pods``: a DaemonSet counts as its newest pod, with the template's node affinity.
- ``paired``, ``with_nodeclaim``: a Node paired with its NodeClaim is capacity on its way until
  initialized, and is being deleted while its NodeClaim is.
- ``in_flight``, ``claim_capacity``, ``with_expected_allocatable``: NodeClaims with no Node yet,
  what they hold and what they count against their NodePool's limits.
- ``limit_usage``: what counts against each NodePool's limits, when planning and at create time.
- ``rescheduled_pods``, ``check_budget``, ``budget_selector``: the pods of nodes being deleted,
  which provisioning places again, and the PodDisruptionBudgets that keep some of them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence, Set
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import to_milli
from karpenter_core.apis.v1.nodeclaim import CONDITION_INSTANCE_TERMINATING
from karpenter_core.scheduling.snapshot import DecodeError, describe_value
from karpenter_core.scheduling.taints import Taint, untolerated
from karpenter_core.scheduling.topology import LabelSelector

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.types import InstanceType
    from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot

NODES = "nodes"
"""The pseudo-resource a NodePool limit may set on the number of nodes."""

__all__ = [
    "EPHEMERAL_TAINTS",
    "NODES",
    "add_usage",
    "as_launching",
    "budget_selector",
    "check_budget",
    "claim_capacity",
    "claim_instance_types",
    "currently_reschedulable",
    "daemonset_pods",
    "going",
    "in_flight",
    "limit_usage",
    "nodeclaim_deleting",
    "not_launchable",
    "paired",
    "rescheduled_pods",
    "tolerates_disruption",
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


def going(node: NodeInfo, claim: NodeClaim | None, marked: Set[str] = frozenset()) -> bool:
    """The node is being deleted or marked for deletion: its own ``marked_for_deletion``, its
    NodeClaim being deleted (``nodeclaim_deleting``), or either named in ``marked``."""
    return (
        node.marked_for_deletion
        or node.name in marked
        or (claim is not None and (nodeclaim_deleting(claim) or claim.metadata.name in marked))
    )


def with_nodeclaim(node: NodeInfo, claim: NodeClaim | None) -> None:
    """The node as its NodeClaim makes it (in place): launching until initialized
    (``as_launching``), and marked for deletion while the NodeClaim is being deleted. Without
    a NodeClaim, a node labelled with a NodePool is ``unclaimed`` (not Karpenter's to
    disrupt)."""
    node.nodeclaim = claim
    if claim is None:
        node.unclaimed = node.nodepool is not None
        return
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


def paired(nodes: Iterable[NodeInfo], nodeclaims: Iterable[NodeClaim]) -> dict[str, NodeClaim]:
    """Each Node's NodeClaim, by node name: the NodeClaim with the Node's providerID, else the
    one whose ``status.nodeName`` is the Node (a Node without a providerID yet, or manifests
    written by hand). Both ``simulate`` and the controller pair this way; the registration
    sets ``status.nodeName`` only on the NodeClaim whose providerID the Node has, so in a live
    cluster the second rule pairs nothing the first would not."""
    by_provider_id: dict[str, NodeClaim] = {}
    by_node_name: dict[str, NodeClaim] = {}
    for nodeclaim in nodeclaims:
        if nodeclaim.status.provider_id:
            by_provider_id[nodeclaim.status.provider_id] = nodeclaim
        if nodeclaim.status.node_name:
            by_node_name[nodeclaim.status.node_name] = nodeclaim
    out: dict[str, NodeClaim] = {}
    if not by_provider_id and not by_node_name:
        return out
    for node in nodes:
        claim = by_provider_id.get(node.provider_id) if node.provider_id else None
        if claim is None:
            claim = by_node_name.get(node.name)
        if claim is not None:
            out[node.name] = claim
    return out


def in_flight(
    nodeclaims: Iterable[NodeClaim], nodes: Iterable[NodeInfo], marked: Set[str] = frozenset()
) -> list[NodeClaim]:
    """The NodeClaims with no Node among ``nodes`` yet (``paired``), not being deleted and not
    ``marked`` for deletion (by name): capacity on its way, counted against its NodePool's
    limits. A NodeClaim whose Node is there counts as that node, once."""
    claims = list(nodeclaims)
    return _in_flight(claims, paired(nodes, claims), marked)


def _in_flight(
    claims: Iterable[NodeClaim], pairs: Mapping[str, NodeClaim], marked: Set[str]
) -> list[NodeClaim]:
    with_node = {id(claim) for claim in pairs.values()}
    return [
        claim
        for claim in claims
        if id(claim) not in with_node
        and not nodeclaim_deleting(claim)
        and claim.metadata.name not in marked
    ]


def limit_usage(
    nodes: Sequence[NodeInfo],
    nodeclaims: Iterable[NodeClaim],
    catalog: Mapping[str, InstanceType],
    marked: Set[str] = frozenset(),
) -> dict[str, dict[str, int]]:
    """What counts against each NodePool's limits, by NodePool name (thousandths; ``NODES``:
    the number of nodes), as upstream's cluster state counts it both when the scheduler plans
    and when a NodeClaim is created: each Node or NodeClaim once (a Node with its NodeClaim as
    that Node, ``paired``), its capacity (``claim_capacity`` for a NodeClaim with no Node, or a
    Node that reports none yet), leaving out what is being deleted or marked for deletion (the
    Node's ``marked_for_deletion``, its NodeClaim being deleted, or either named in
    ``marked``)."""
    claims = list(nodeclaims)
    pairs = paired(nodes, claims)
    usage: dict[str, dict[str, int]] = {}
    for node in nodes:
        claim = pairs.get(node.name)
        if going(node, claim, marked):
            continue
        nodepool = node.nodepool
        if not nodepool and claim is not None:
            nodepool = claim.metadata.labels.get(wk.NODEPOOL)
        if nodepool:
            capacity = node.capacity
            if not capacity and claim is not None:
                capacity = claim_capacity(claim, catalog)
            add_usage(usage.setdefault(nodepool, {}), capacity)
    for claim in _in_flight(claims, pairs, marked):
        nodepool = claim.metadata.labels.get(wk.NODEPOOL)
        if nodepool:
            add_usage(usage.setdefault(nodepool, {}), claim_capacity(claim, catalog))
    return usage


def add_usage(usage: dict[str, int], capacity: Mapping[str, int]) -> None:
    """Count one more node of ``capacity`` in a NodePool's ``limit_usage`` (in place)."""
    for resource, amount in capacity.items():
        usage[resource] = usage.get(resource, 0) + amount
    usage[NODES] = usage.get(NODES, 0) + 1000


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


def rescheduled_pods(snapshot: Snapshot, now: float) -> list[PodInfo]:
    """The pods of the nodes marked for deletion that provisioning places again, as unbound
    copies (upstream's ``CurrentlyReschedulablePods``): not DaemonSet-owned or mirror pods; not
    terminating, except StatefulSet pods (their successor waits for them to go); not protected
    by ``karpenter.sh/do-not-disrupt`` at ``now`` (``PodInfo.do_not_disrupt_active``); not held
    by a PodDisruptionBudget that allows no eviction ever (maxUnavailable 0 or 0%, minAvailable
    100%), nor covered by several budgets (the Eviction API refuses such pods)."""
    nodes = [node for node in snapshot.nodes if node.marked_for_deletion and node.pods]
    if not nodes:
        return []
    out = []
    for pod in currently_reschedulable([p for n in nodes for p in n.pods], snapshot.pdbs, now):
        clone = copy.copy(pod)
        clone.node_name = None
        clone.nominated_node = None
        out.append(clone)
    return out


def currently_reschedulable(
    pods: Iterable[PodInfo], pdbs: Sequence[Mapping[str, Any]], now: float
) -> list[PodInfo]:
    """Those of ``pods`` that are evicted and need a new home when their node goes, as
    ``rescheduled_pods`` describes (``pdbs``: the cluster's PodDisruptionBudgets)."""
    budgets = [_budget(pdb) for pdb in pdbs]
    return [pod for pod in pods if _reschedulable(pod, now) and not _blocked(pod, budgets)]


def _reschedulable(pod: PodInfo, now: float) -> bool:
    if pod.is_daemon() or pod.owner_kind == "Node" or pod.is_mirror():
        return False
    if pod.terminating:
        return pod.owner_kind == "StatefulSet"
    return not pod.do_not_disrupt_active(now)


_SELECTOR_OPERATORS = {"In": True, "NotIn": True, "Exists": False, "DoesNotExist": False}
"""Label selector operators, and whether each takes values."""


def check_budget(pdb: Mapping[str, Any]) -> None:
    """Raise ``DecodeError`` naming the field of a PodDisruptionBudget that provisioning cannot
    read: ``spec`` and ``spec.selector`` not mappings, a ``matchLabels`` value that is not a
    string, a ``matchExpressions`` entry without a key or a known operator, or with values
    that do not fit its operator, ``maxUnavailable`` or ``minAvailable`` neither an integer nor
    a string."""
    spec = pdb.get("spec")
    if spec is None:
        return
    if not isinstance(spec, Mapping):
        raise DecodeError("spec", f"expected a mapping, got {describe_value(spec)}")
    for name in ("maxUnavailable", "minAvailable"):
        value = spec.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | str)):
            raise DecodeError(
                f"spec.{name}", f"expected an integer or a percentage, got {describe_value(value)}"
            )
    selector = spec.get("selector")
    if selector is None:
        return
    if not isinstance(selector, Mapping):
        raise DecodeError("spec.selector", f"expected a mapping, got {describe_value(selector)}")
    labels = selector.get("matchLabels")
    if labels is not None and not isinstance(labels, Mapping):
        raise DecodeError(
            "spec.selector.matchLabels", f"expected a mapping, got {describe_value(labels)}"
        )
    for key, value in (labels or {}).items():
        if not isinstance(value, str):
            raise DecodeError(
                f"spec.selector.matchLabels[{key}]",
                f"expected a string, got {describe_value(value)}",
            )
    expressions = selector.get("matchExpressions")
    path = "spec.selector.matchExpressions"
    if expressions is not None and not isinstance(expressions, list):
        raise DecodeError(path, f"expected a list, got {describe_value(expressions)}")
    for i, expression in enumerate(expressions or ()):
        at = f"{path}[{i}]"
        if not isinstance(expression, Mapping):
            raise DecodeError(at, f"expected a mapping, got {describe_value(expression)}")
        key, operator = expression.get("key"), expression.get("operator")
        if not isinstance(key, str) or not key:
            raise DecodeError(
                f"{at}.key", f"expected a non-empty string, got {describe_value(key)}"
            )
        if operator not in _SELECTOR_OPERATORS:
            raise DecodeError(
                f"{at}.operator",
                f"expected one of {', '.join(_SELECTOR_OPERATORS)}, got {describe_value(operator)}",
            )
        values = expression.get("values")
        if values is not None and (
            not isinstance(values, list) or not all(isinstance(v, str) for v in values)
        ):
            raise DecodeError(
                f"{at}.values", f"expected a list of strings, got {describe_value(values)}"
            )
        if _SELECTOR_OPERATORS[operator] != bool(values):
            need = "takes no values" if values else "needs at least one value"
            raise DecodeError(f"{at}.values", f"operator {operator} {need}")


def budget_selector(pdb: Mapping[str, Any]) -> LabelSelector | None:
    """The pods a PodDisruptionBudget covers; None covers none: no selector, or one that
    ``check_budget`` refuses (the Eviction API treats an invalid selector as matching no pod).
    An empty selector covers every pod of its namespace."""
    try:
        check_budget(pdb)
    except DecodeError:
        return None
    spec = pdb.get("spec") or {}
    return LabelSelector.from_manifest(spec.get("selector"))


def tolerates_disruption(pod: PodInfo) -> bool:
    """The pod tolerates the ``karpenter.sh/disrupted:NoSchedule`` taint: it stays on a node
    being disrupted, so disruption never evicts it."""
    return untolerated((_DISRUPTED,), pod.tolerations) is None


def _budget(pdb: Mapping[str, Any]) -> tuple[str, LabelSelector | None, bool, bool]:
    """(namespace, selector, allows no eviction ever, lets pods that are not Ready go:
    ``unhealthyPodEvictionPolicy: AlwaysAllow``) of a PodDisruptionBudget."""
    meta = pdb.get("metadata") or {}
    selector = budget_selector(pdb)
    spec = pdb.get("spec") if selector is not None else None
    never = isinstance(spec, Mapping) and (
        spec.get("maxUnavailable") in (0, "0%") or spec.get("minAvailable") == "100%"
    )
    unhealthy = (
        isinstance(spec, Mapping) and spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
    )
    return str(meta.get("namespace") or "default"), selector, never, unhealthy


def _blocked(pod: PodInfo, budgets: Sequence[tuple[str, LabelSelector | None, bool, bool]]) -> bool:
    """Evicting the pod can never succeed. Terminating pods and pods that tolerate the disrupted
    taint are not evicted, so no budget holds them."""
    if not budgets or pod.terminating or tolerates_disruption(pod):
        return False
    covering = [
        never and not (unhealthy and pod.not_ready)
        for namespace, selector, never, unhealthy in budgets
        if namespace == pod.namespace and selector is not None and selector.matches(pod.labels)
    ]
    return len(covering) > 1 or any(covering)
