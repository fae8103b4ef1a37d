"""Disruption decisions, pure: which nodes to remove or replace now, and what that saves.

Methods run in upstream's order and the first that finds something wins: emptiness, drift,
multi-node consolidation, single-node consolidation. Expiration is separate and forceful: it
ignores budgets. Every decision is a simulation with the provisioning scheduler in its
"fewest new NodeClaims" mode.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from karpenter_core.apis import labels as wk
from karpenter_core.apis.duration import parse_nillable_duration
from karpenter_core.apis.v1.hashing import HASH_VERSION, nodepool_hash
from karpenter_core.disruption.budgets import DRIFTED, EMPTY, UNDERUTILIZED, allowed_disruptions
from karpenter_core.disruption.candidates import Candidate, candidates
from karpenter_core.scheduling.requirements import Requirements
from karpenter_core.scheduling.scheduler import Minimize, NewNodeClaim, Results, schedule
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot

__all__ = ["Command", "Options", "Plan", "next_command", "plan"]

MAX_MULTI_NODE = 100
"""Candidates multi-node consolidation considers at most (upstream's cap)."""
SPOT_TO_SPOT_OPTIONS = 15
"""Cheaper spot types a spot-to-spot replacement needs, and keeps (upstream's rule)."""


@dataclass(frozen=True, slots=True)
class Options:
    """Settings the decisions read."""

    spot_to_spot: bool = False
    """The SpotToSpotConsolidation feature gate."""
    drifted: Callable[[Candidate], str] | None = None
    """Extra drift reasons, such as the provider's is_drifted ("" when not drifted)."""


@dataclass(slots=True)
class Command:
    """Remove ``candidates``; launch ``replacements`` first."""

    reason: str  # "empty" | "underutilized" | "drifted" | "expired"
    candidates: list[Candidate]
    replacements: list[NewNodeClaim] = field(default_factory=list)

    @property
    def savings_per_hour(self) -> float:
        """What the cluster costs less per hour afterwards (unknown node prices count as 0)."""
        removed = sum(c.price or 0.0 for c in self.candidates)
        return removed - sum(r.price for r in self.replacements)


@dataclass(slots=True)
class Plan:
    """The commands, in the order the controller would issue them, and why nodes were left."""

    commands: list[Command] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)


def _unbound(pod: PodInfo) -> PodInfo:
    clone = copy.copy(pod)
    clone.node_name = None
    return clone


def _simulate(snapshot: Snapshot, removed: Sequence[Candidate], minimize: Minimize) -> Results:
    names = {c.name for c in removed}
    moved = [_unbound(p) for c in removed for p in c.pods]
    reduced = replace(
        snapshot,
        nodes=[n for n in snapshot.nodes if n.name not in names],
        pending=[*snapshot.pending, *moved],
    )
    return schedule(reduced, minimize)


def _consolidatable(candidate: Candidate, now: datetime) -> bool:
    disruption = candidate.nodepool.spec.disruption
    after = parse_nillable_duration(disruption.consolidate_after)
    if after is None:
        return False
    # consolidateAfter counts from the last pod event on the node, else from its creation.
    since = max(candidate.node.created, candidate.node.last_pod_event)
    return not since or now.timestamp() - since >= after.total_seconds()


def _budget(snapshot: Snapshot, reason: str, now: datetime) -> dict[str, int]:
    """Disruptions each NodePool allows now for ``reason``."""
    out = {}
    for nodepool in snapshot.nodepools:
        name = nodepool.metadata.name
        nodes = [n for n in snapshot.nodes if n.nodepool == name and n.initialized]
        budgets = [b.model_dump(exclude_none=True) for b in nodepool.spec.disruption.budgets]
        disrupting = sum(1 for n in nodes if n.deleting)
        out[name] = allowed_disruptions(budgets, reason, len(nodes), disrupting, now)
    return out


def _allowed(candidates_: Sequence[Candidate], allowed: dict[str, int]) -> list[Candidate]:
    """The candidates of NodePools whose budget allows at least one more disruption."""
    return [c for c in candidates_ if allowed.get(c.nodepool.metadata.name, 0) > 0]


def _within_budget(candidates_: Sequence[Candidate], allowed: dict[str, int]) -> list[Candidate]:
    left = dict(allowed)
    out = []
    for candidate in candidates_:
        name = candidate.nodepool.metadata.name
        if left.get(name, 0) > 0:
            left[name] -= 1
            out.append(candidate)
    return out


def _drift_reason(candidate: Candidate, options: Options) -> str:
    node = candidate.node
    manifest = candidate.nodepool.to_manifest()
    annotations = node.annotations
    if (
        annotations.get(wk.NODEPOOL_HASH_VERSION) == HASH_VERSION
        and wk.NODEPOOL_HASH in annotations
        and annotations[wk.NODEPOOL_HASH] != nodepool_hash(manifest)
    ):
        return "NodePoolDrifted"
    template = manifest["spec"]["template"]["spec"]
    requirements = Requirements.from_node_selector(template.get("requirements") or ())
    for key, requirement in requirements.items():
        value = node.labels.get(key)
        if value is not None and not requirement.has(value):
            return "RequirementsDrifted"
    return options.drifted(candidate) if options.drifted else ""


def _replacement(
    candidates_: Sequence[Candidate], claim: NewNodeClaim, options: Options
) -> NewNodeClaim | None:
    """The cheapest launch strictly cheaper than the candidates, following the capacity rules.

    Spot is never replaced by on-demand; spot by spot only with the SpotToSpotConsolidation
    gate and, for a single node, at least 15 cheaper types (the replacement keeps the 15 cheapest).
    """
    prices = [c.price for c in candidates_]
    if any(p is None for p in prices):
        return None
    total = sum(p for p in prices if p is not None)
    all_spot = all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in candidates_)
    if all_spot and not options.spot_to_spot:
        return None
    choices = []
    for it in claim.instance_types:
        for offering in it.offerings:
            if not offering.available or offering.price >= total:
                continue
            if all_spot and offering.capacity_type != wk.CAPACITY_TYPE_SPOT:
                continue
            if claim.requirements.intersects(offering.requirements) is not None:
                continue
            choices.append((offering.price, offering.zone, it.name, it, offering))
    if not choices:
        return None
    if len(candidates_) > 1:
        # Merging nodes into one of their own instance types only pays if the replacement is
        # cheaper than the cheapest candidate of a type it could launch as (upstream's rule).
        option_names = {it.name for it in claim.instance_types}
        same = [
            c.price
            for c in candidates_
            if c.instance_type is not None and c.instance_type.name in option_names and c.price
        ]
        if same:
            ceiling = min(same)
            choices = [c for c in choices if c[0] < ceiling]
    if not choices:
        return None
    choices.sort(key=lambda c: c[:3])
    kept_types = list(dict.fromkeys(c[3] for c in choices))
    if all_spot and len(candidates_) == 1:
        if len(kept_types) < SPOT_TO_SPOT_OPTIONS:
            return None
        kept_types = kept_types[:SPOT_TO_SPOT_OPTIONS]
    _, _, _, instance_type, offering = choices[0]
    return replace(claim, instance_types=kept_types, instance_type=instance_type, offering=offering)


def _consolidate(
    snapshot: Snapshot, candidates_: Sequence[Candidate], reason: str, options: Options
) -> Command | None:
    results = _simulate(snapshot, candidates_, Minimize.NODECLAIMS)
    if results.unschedulable:
        return None
    if not results.new_nodeclaims:
        return Command(reason, list(candidates_))
    if len(results.new_nodeclaims) > 1:
        return None
    replacement = _replacement(candidates_, results.new_nodeclaims[0], options)
    if replacement is None:
        return None
    return Command(reason, list(candidates_), [replacement])


def _next_command(
    snapshot: Snapshot,
    now: datetime,
    options: Options,
    blocked: dict[str, str],
    exclude: Collection[str] = (),
) -> Command | None:
    found, why = candidates(snapshot, now)
    blocked.update(why)
    found = [c for c in found if c.name not in exclude]
    consolidatable = [c for c in found if _consolidatable(c, now)]

    empty = [c for c in consolidatable if not c.pods]
    empty = _within_budget(empty, _budget(snapshot, EMPTY, now))
    if empty:
        return Command("empty", empty)

    drifted = [c for c in found if _drift_reason(c, options)]
    drifted.sort(key=lambda c: (bool(c.pods), c.node.created, c.name))
    for candidate in _allowed(drifted, _budget(snapshot, DRIFTED, now)):
        results = _simulate(snapshot, [candidate], Minimize.PRICE)
        if not results.unschedulable:
            return Command("drifted", [candidate], results.new_nodeclaims)

    underused = [
        c
        for c in consolidatable
        if c.nodepool.spec.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
        and c.price is not None
        and c.pods
    ]
    allowed = _budget(snapshot, UNDERUTILIZED, now)
    multi = _within_budget(underused, allowed)[:MAX_MULTI_NODE]
    best = None
    low, high = 2, len(multi)
    while low <= high:
        middle = (low + high) // 2
        command = _consolidate(snapshot, multi[:middle], "underutilized", options)
        if command is not None:
            best, low = command, middle + 1
        else:
            high = middle - 1
    if best is not None:
        return best
    for candidate in _allowed(underused, allowed):
        command = _consolidate(snapshot, [candidate], "underutilized", options)
        if command is not None:
            return command
        blocked.setdefault(candidate.name, "no cheaper placement for its pods")
    return None


def _expired(snapshot: Snapshot, now: datetime, exclude: Collection[str] = ()) -> list[Command]:
    found, _ = candidates(snapshot, now, include_blocked=True)
    commands = []
    for candidate in found:
        if candidate.name in exclude:
            continue
        expire = parse_nillable_duration(candidate.nodepool.spec.template.spec.expire_after)
        if expire is None or not candidate.node.created:
            continue
        if now.timestamp() - candidate.node.created >= expire.total_seconds():
            results = _simulate(snapshot, [candidate], Minimize.PRICE)
            commands.append(Command("expired", [candidate], results.new_nodeclaims))
    return commands


def _apply(snapshot: Snapshot, command: Command, now: datetime) -> Snapshot:
    """The cluster after ``command``: candidates gone, their pods on the nodes they moved to."""
    names = {c.name for c in command.candidates}
    minimize = Minimize.PRICE if command.reason in ("drifted", "expired") else Minimize.NODECLAIMS
    results = _simulate(snapshot, command.candidates, minimize)
    nodes = []
    for node in snapshot.nodes:
        if node.name in names:
            continue
        moved = results.existing.get(node.name)
        if moved:
            node = copy.copy(node)
            node.pods = [*node.pods, *moved]
        nodes.append(node)
    for i, claim in enumerate(command.replacements):
        labels = {
            **claim.instance_type.requirements.labels(),
            **claim.offering.requirements.labels(),
            **claim.labels,
            wk.INSTANCE_TYPE: claim.instance_type.name,
            wk.TOPOLOGY_ZONE: claim.offering.zone,
            wk.CAPACITY_TYPE: claim.offering.capacity_type,
        }
        name = f"{claim.nodepool}-replacement-{len(snapshot.nodes)}-{i}"
        moved = [p for c in results.new_nodeclaims for p in c.pods]
        nodes.append(
            NodeInfo(
                name,
                labels,
                claim.instance_type.allocatable,
                pods=moved,
                taints=claim.taints,
                created=now.timestamp(),
            )
        )
    return replace(snapshot, nodes=nodes)


def next_command(
    snapshot: Snapshot,
    now: datetime,
    options: Options | None = None,
    blocked: dict[str, str] | None = None,
    exclude: Collection[str] = (),
) -> Command | None:
    """The one command the controller should carry out now: an expired node first (forceful,
    outside the budgets), else the first command of emptiness, drift, multi-node and
    single-node consolidation. Nodes named in ``exclude`` (nominated, already being disrupted)
    are never candidates; ``blocked`` collects why other nodes were left alone."""
    options = options or Options()
    expired = _expired(snapshot, now, exclude)
    if expired:
        return expired[0]
    return _next_command(snapshot, now, options, {} if blocked is None else blocked, exclude)


def plan(
    snapshot: Snapshot, now: datetime, options: Options | None = None, rounds: int = 50
) -> Plan:
    """Expired nodes, then the commands the controller would issue one after another (each
    computed on the cluster the previous one leaves), until nothing more can be done."""
    options = options or Options()
    result = Plan()
    result.commands.extend(_expired(snapshot, now))
    expired = {c.name for command in result.commands for c in command.candidates}
    current = replace(snapshot, nodes=[n for n in snapshot.nodes if n.name not in expired])
    for _ in range(rounds):
        command = _next_command(current, now, options, result.blocked)
        if command is None:
            break
        result.commands.append(command)
        current = _apply(current, command, now)
    original = {n.name for n in snapshot.nodes}
    disrupted = {c.name for command in result.commands for c in command.candidates}
    result.blocked = {
        name: why
        for name, why in result.blocked.items()
        if name in original and name not in disrupted
    }
    return result
