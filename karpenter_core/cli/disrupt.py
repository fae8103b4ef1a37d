"""``karpenter simulate --disrupt``: the disruption commands for the cluster in the manifests.

The plan is computed on the cluster as the controller would find it once provisioning has acted:
the pending pods provisioning placed are bound where it placed them, and its new NodeClaims are
nodes still launching (capacity, not yet candidates). Pods bound in the input or placed by
provisioning therefore give the same plan.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import click

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.types import CloudProvider, Offering
from karpenter_core.disruption.candidates import Candidate
from karpenter_core.disruption.planner import Command, Plan, as_node
from karpenter_core.scheduling.scheduler import NewNodeClaim, Results
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot

__all__ = [
    "after_provisioning",
    "command_json",
    "drift_check",
    "print_disruption",
    "with_pod_events",
]


def _nodeclaim_of(node: NodeInfo, claims: Sequence[NodeClaim]) -> NodeClaim | None:
    """The NodeClaim of ``node``: same provider ID, else its status names the node."""
    for claim in claims:
        if node.provider_id and claim.status.provider_id == node.provider_id:
            return claim
    return next((c for c in claims if c.status.node_name == node.name), None)


def with_pod_events(snapshot: Snapshot) -> Snapshot:
    """The snapshot with each node's last pod event taken from its NodeClaim's
    ``status.lastPodEventTime`` (consolidateAfter counts from it)."""
    nodes = []
    for node in snapshot.nodes:
        claim = _nodeclaim_of(node, snapshot.nodeclaims)
        event = claim.status.last_pod_event_time if claim is not None else None
        if event is not None:
            node = copy.copy(node)
            node.last_pod_event = event.timestamp()
        nodes.append(node)
    return replace(snapshot, nodes=nodes)


def after_provisioning(snapshot: Snapshot, results: Results, now: datetime) -> Snapshot:
    """The cluster once provisioning's ``results`` have landed: pending pods placed on existing
    nodes are bound there, each new NodeClaim is a launching (not initialized) node holding its
    pods. Pods it could not place, or placed on in-flight NodeClaims, stay pending."""
    nodes = []
    for node in snapshot.nodes:
        placed = results.existing.get(node.name)
        if placed:
            node = copy.copy(node)
            node.pods = [*node.pods, *(_bound(p, node.name) for p in placed)]
        nodes.append(node)
    taken = {n.name for n in nodes}
    for claim in results.new_nodeclaims:
        name = next(
            f"{claim.nodepool}-launching-{i}"
            for i in range(len(taken) + 1)
            if f"{claim.nodepool}-launching-{i}" not in taken
        )
        taken.add(name)
        nodes.append(as_node(claim, name, now.timestamp(), initialized=False))
    bound = {p.key for n in nodes for p in n.pods}
    pending = [p for p in snapshot.pending if p.key not in bound]
    return replace(snapshot, nodes=nodes, pending=pending)


def _bound(pod: PodInfo, node_name: str) -> PodInfo:
    clone = copy.copy(pod)
    clone.node_name = node_name
    return clone


def drift_check(
    provider: CloudProvider, nodeclaims: Sequence[NodeClaim], notes: list[str]
) -> Callable[[Candidate], str]:
    """The planner's ``drifted`` callback: the provider's ``is_drifted`` on the node's NodeClaim
    (asked once per node). A provider that fails is noted in ``notes``; the node counts as not
    drifted."""
    answers: dict[str, str] = {}

    def drifted(candidate: Candidate) -> str:
        name = candidate.name
        if name not in answers:
            answers[name] = ""
            claim = _nodeclaim_of(candidate.node, nodeclaims)
            if claim is not None:
                try:
                    answers[name] = provider.is_drifted(claim) or ""
                except Exception as err:  # a provider's bug must not end the simulation
                    notes.append(
                        f"NodeClaim {claim.metadata.name}: the {provider.name} provider's drift "
                        f"check failed ({type(err).__name__}: {err}); taken as not drifted"
                    )
        return answers[name]

    return drifted


def _price(price: float, offering: Offering) -> str:
    """The price, marked ``~`` when the provider only estimates it."""
    return f"~{price:.6f}" if offering.estimated else f"{price:.6f}"


def _claims_json(claims: Sequence[NewNodeClaim]) -> list[dict[str, Any]]:
    return [
        {
            "nodepool": r.nodepool,
            "instance_type": r.instance_type.name,
            "capacity_type": r.offering.capacity_type,
            "zone": r.offering.zone,
            "price": round(r.price, 6),
            "price_estimated": r.offering.estimated,
            "pods": [p.key for p in r.pods],
        }
        for r in claims
    ]


def command_json(command: Command) -> dict[str, Any]:
    """One command for ``-o json``; ``provisioned`` is the new capacity provisioning launches
    afterwards for the pods (expiration), which ``savings_per_hour`` already subtracts;
    ``drift_reason`` says which drift a drift command acts on ("" for other reasons);
    ``balanced_scores`` are the move's scores for the Balanced NodePools it takes nodes from."""
    return {
        "reason": command.reason,
        "drift_reason": command.drift_reason,
        "nodes": [c.name for c in command.candidates],
        "replacements": _claims_json(command.replacements),
        "provisioned": _claims_json(command.provisioned),
        "savings_per_hour": round(command.savings_per_hour, 6),
        "balanced_scores": [
            {
                "nodepool": s.nodepool,
                "score": round(s.value, 6),
                "savings_fraction": round(s.savings_fraction, 6),
                "disruption_fraction": round(s.disruption_fraction, 6),
            }
            for s in command.scores
        ],
    }


def _describe(claims: Sequence[NewNodeClaim]) -> str:
    return ", ".join(
        f"{r.instance_type.name} {r.offering.capacity_type} {r.offering.zone} "
        f"{_price(r.price, r.offering)}"
        for r in claims
    )


def print_disruption(disruption: Plan) -> None:
    """The plan as text: one line per command, then every node left alone with the reason."""
    click.echo("\nDisruption:")
    if not disruption.commands:
        click.echo("  nothing to do")
    for command in disruption.commands:
        nodes = ", ".join(c.name for c in command.candidates)
        replaced = _describe(command.replacements)
        action = f"replace with {replaced}" if replaced else "delete"
        provisioned = _describe(command.provisioned)
        then = f"; provisioning then launches {provisioned}" if provisioned else ""
        reason = command.reason
        if command.drift_reason:
            reason = f"{reason} ({command.drift_reason})"
        click.echo(f"  {reason}: {action}: {nodes}{then} (saves {command.savings_per_hour:.6f}/h)")
        for score in command.scores:
            click.echo(f"    {score}")
    for node, why in sorted(disruption.blocked.items()):
        click.echo(f"  left {node}: {why}")
    total = sum(c.savings_per_hour for c in disruption.commands)
    click.echo(f"  total savings {total:.6f}/h")
