"""The cluster as it will be once the disruption commands in flight are done, pure.

The disruption controller decides each command on the cluster as the commands before it will
leave it: ``as_started`` counts commands decided on but not started yet as started (their
candidates being deleted, their replacements in flight), and ``as_it_will_be`` places the pods
still to be evicted from nodes being deleted (on other nodes or on the replacements in flight)
and takes the evictions to come off the PodDisruptionBudgets, so no decision takes the capacity
a command launched, or the disruptions a budget allows, twice.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from karpenter_core.apis.quantity import to_milli
from karpenter_core.apis.requirements import Requirements
from karpenter_core.disruption.candidates import reschedulable
from karpenter_core.disruption.simulation import bound_to
from karpenter_core.scheduling.cluster import budget_selector
from karpenter_core.scheduling.scheduler import Minimize, schedule
from karpenter_core.scheduling.snapshot import NodeInfo
from karpenter_core.scheduling.taints import Taint

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.disruption.planner import Command
    from karpenter_core.scheduling.snapshot import PodInfo, Snapshot

__all__ = ["as_it_will_be", "as_started", "settle_claims", "waiting_for_replacements"]


def _leaving(pod: PodInfo) -> bool:
    """The pod still has to be evicted (it is not terminating yet)."""
    return not pod.terminating


def _covers(pdb: Mapping[str, Any], pod: PodInfo) -> bool:
    meta = pdb.get("metadata") or {}
    selector = budget_selector(pdb)
    return (
        str(meta.get("namespace") or "default") == pod.namespace
        and selector is not None
        and selector.matches(pod.labels)
    )


def as_it_will_be(
    snapshot: Snapshot,
    ignore_preferences: bool = False,
    min_values_strict: bool = True,
    waiting: Collection[str] = (),
) -> Snapshot:
    """The cluster once its nodes being deleted are gone, as the next decision should see it
    (pure). Their pods still to be evicted (not DaemonSet or mirror pods) are placed first, by
    the provisioning scheduler: those that land on a node or on a NodeClaim in flight (a
    replacement, then seen as the node it will be) are bound there, the others join the
    pending pods, so no decision takes the capacity they are to get. Every PodDisruptionBudget
    with a status allows as many fewer disruptions as it covers such pods on nodes being drained
    (its status may not count those evictions yet), not on the nodes named in ``waiting``
    (commands waiting for their replacements: nothing is evicted from them yet, so the status
    holds; their drains then wait on the budget as any eviction does, as upstream's)."""
    moving = [
        pod
        for node in snapshot.nodes
        if node.deleting
        for pod in reschedulable(node)
        if _leaving(pod)
    ]
    if not moving:
        return snapshot
    draining = [pod for pod in moving if pod.node_name not in waiting]
    unbound = [bound_to(pod, None) for pod in moving]
    results = schedule(
        replace(snapshot, pending=unbound),
        Minimize.NODECLAIMS,
        ignore_preferences=ignore_preferences,
        min_values_strict=min_values_strict,
        rescheduled={pod.key for pod in unbound},
    )
    nodes = []
    placed: set[str] = set()
    for node in snapshot.nodes:
        landed = results.existing.get(node.name) if not node.deleting else None
        if landed:
            node = copy.copy(node)
            node.pods = [*node.pods, *(bound_to(p, node.name) for p in landed)]
            placed.update(p.key for p in landed)
        nodes.append(node)
    claims, launching = settle_claims(snapshot.nodeclaims, results.existing)
    placed.update(p.key for node in launching for p in node.pods)
    nodes.extend(launching)
    pending = [pod for pod in unbound if pod.key not in placed]
    pdbs = []
    for pdb in snapshot.pdbs:
        status = pdb.get("status") or {}
        if "disruptionsAllowed" in status:
            used = sum(1 for pod in draining if _covers(pdb, pod))
            if used:
                allowed = max(int(status["disruptionsAllowed"]) - used, 0)
                pdb = {**pdb, "status": {**status, "disruptionsAllowed": allowed}}
        pdbs.append(pdb)
    return replace(
        snapshot,
        nodes=nodes,
        nodeclaims=claims,
        pending=[*snapshot.pending, *pending],
        pdbs=pdbs,
    )


def as_started(
    snapshot: Snapshot, candidates: Collection[str], replacements: Sequence[NodeClaim]
) -> Snapshot:
    """The cluster as commands decided on but not started yet would leave it once started
    (pure): the nodes named in ``candidates`` being deleted (so they count against their
    NodePools' budgets and ``as_it_will_be`` moves their pods), ``replacements`` in flight."""
    nodes = []
    for node in snapshot.nodes:
        if node.name in candidates and not node.deleting:
            node = copy.copy(node)
            node.deleting = True
        nodes.append(node)
    return replace(snapshot, nodes=nodes, nodeclaims=[*snapshot.nodeclaims, *replacements])


def waiting_for_replacements(commands: Iterable[Command]) -> set[str]:
    """The candidates of ``commands`` that launch replacements: nothing is evicted from them
    until those are Initialized (``as_it_will_be``'s ``waiting``). A command that launches none
    drains as soon as it starts, so its pods use up PodDisruptionBudgets at once."""
    return {c.name for command in commands if command.replacements for c in command.candidates}


def settle_claims(
    nodeclaims: Iterable[NodeClaim], placed: Mapping[str, Sequence[PodInfo]]
) -> tuple[list[NodeClaim], list[NodeInfo]]:
    """``nodeclaims`` that stay in flight, and as the nodes they will be, their pods bound, those
    that ``placed`` (a scheduling result's pods by node or NodeClaim name) puts pods on; one
    whose allocatable is unknown stays in flight."""
    claims = []
    nodes = []
    for claim in nodeclaims:
        landed = placed.get(claim.metadata.name or "")
        launching = _launching(claim) if landed else None
        if not landed or launching is None:
            claims.append(claim)
            continue
        launching.pods = [bound_to(p, launching.name) for p in landed]
        nodes.append(launching)
    return claims, nodes


def _launching(claim: NodeClaim) -> NodeInfo | None:
    """An in-flight NodeClaim as the node it will be (not initialized yet, labelled with its
    single-valued requirements); None while its allocatable is unknown."""
    if not claim.status.allocatable:
        return None
    manifest = claim.to_manifest()
    meta, spec = manifest["metadata"], manifest["spec"]
    requirements = Requirements.from_node_selector(spec.get("requirements") or ())
    requirements.add(*Requirements.from_labels(meta.get("labels") or {}).values())
    return NodeInfo(
        str(meta.get("name") or ""),
        requirements.labels(),
        {name: to_milli(quantity) for name, quantity in claim.status.allocatable.items()},
        taints=[Taint.from_manifest(t) for t in spec.get("taints") or ()],
        initialized=False,
    )
