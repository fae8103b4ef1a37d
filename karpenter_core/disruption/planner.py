"""Disruption decisions, pure: which nodes to remove or replace now, and what that saves.

Methods run in upstream's order and the first that finds something wins: emptiness, drift,
multi-node consolidation, single-node consolidation. Expiration is separate and forceful: it
ignores budgets and launches nothing first (provisioning makes room for the pods afterwards).
Every decision is a simulation with the provisioning scheduler, under the operator's
preference and minValues policies. Pending pods take part in every simulation, once: capacity
they need is not removed, and a pending pod that fits nowhere does not stop a command.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirement, Requirements
from karpenter_core.disruption.balanced import Score, Scorer
from karpenter_core.disruption.budgets import DRIFTED, EMPTY, UNDERUTILIZED, allowed_by_nodepool
from karpenter_core.disruption.candidates import Candidate, candidates, drift_order, duration
from karpenter_core.disruption.drift import NodePoolShape, nodepool_drift
from karpenter_core.disruption.projection import settle_claims
from karpenter_core.disruption.simulation import Simulator, bound_to, remaining
from karpenter_core.scheduling.cluster import in_flight
from karpenter_core.scheduling.scheduler import Minimize, NewNodeClaim, Results
from karpenter_core.scheduling.snapshot import NodeInfo, Snapshot

if TYPE_CHECKING:
    from karpenter_core.cloudprovider.types import InstanceType, Offering

__all__ = ["Command", "Options", "Plan", "as_node", "next_command", "plan", "still_valid"]

MAX_MULTI_NODE = 100
"""Candidates multi-node consolidation considers at most, by default (upstream's cap)."""
WANTED = "pending pods would schedule to it"
"""Why an empty node is left alone while pods that are pending would land on it."""
SPOT_TO_SPOT_OPTIONS = 15
"""Cheaper spot types a spot-to-spot replacement needs, and keeps (upstream's rule)."""


@dataclass(frozen=True, slots=True)
class Options:
    """Settings the decisions read."""

    spot_to_spot: bool = False
    """The SpotToSpotConsolidation feature gate."""
    drifted: Callable[[Candidate], str] | None = None
    """Extra drift reasons, such as the provider's is_drifted ("" when not drifted)."""
    preference_policy: str = "Respect"
    """PREFERENCE_POLICY: ``Ignore`` drops pod preferences in every simulation."""
    min_values_policy: str = "Strict"
    """MIN_VALUES_POLICY: ``BestEffort`` lets a simulated NodeClaim relax minValues."""
    max_multi_node: int = MAX_MULTI_NODE
    """Nodes one multi-node consolidation command removes at most (within the budgets too)."""


@dataclass(slots=True)
class Command:
    """Remove ``candidates``; launch ``replacements`` first."""

    reason: str  # "empty" | "underutilized" | "drifted" | "expired"
    candidates: list[Candidate]
    replacements: list[NewNodeClaim] = field(default_factory=list)
    provisioned: list[NewNodeClaim] = field(default_factory=list)
    """New capacity provisioning launches afterwards for the candidates' pods that fit nowhere
    else (expiration launches no replacement first). Not part of the command."""
    scores: list[Score] = field(default_factory=list)
    """The move's score for each Balanced NodePool it takes nodes from (consolidation)."""
    drift_reason: str = ""
    """Why the node has drifted (drift): NodePoolDrifted, RequirementsDrifted or the
    provider's reason."""

    @property
    def savings_per_hour(self) -> float:
        """What the cluster costs less per hour afterwards, the new capacity its pods need
        included (unknown node prices count as 0)."""
        removed = sum(c.price or 0.0 for c in self.candidates)
        return removed - sum(r.price for r in [*self.replacements, *self.provisioned])


@dataclass(slots=True)
class Plan:
    """The commands, in the order the controller would issue them, and why nodes were left."""

    commands: list[Command] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)
    cluster: Snapshot | None = None
    """The cluster as the commands leave it: their nodes and NodeClaims gone, their pods where
    the simulations placed them, their replacements (and what provisioning launches after an
    expiration) as nodes."""


def _simulator(snapshot: Snapshot, options: Options) -> Simulator:
    """The simulations of one pass on ``snapshot``, under the operator's policies."""
    return Simulator(
        snapshot,
        ignore_preferences=options.preference_policy == "Ignore",
        min_values_strict=options.min_values_policy != "BestEffort",
        spot_to_spot=options.spot_to_spot,
    )


def _stranded(results: Results, removed: Sequence[Candidate]) -> bool:
    """Whether a pod of ``removed`` found no place (pending pods that fit nowhere do not count)."""
    return any(p.key in results.unschedulable for c in removed for p in c.pods)


def _needed(results: Results, removed: Sequence[Candidate]) -> list[NewNodeClaim]:
    """The new NodeClaims that hold pods of ``removed`` (pending pods may share them)."""
    keys = {p.key for c in removed for p in c.pods}
    return [c for c in results.new_nodeclaims if any(p.key in keys for p in c.pods)]


def _wanted(simulator: Simulator, empty: Sequence[Candidate]) -> set[str]:
    """The nodes of ``empty`` the pending pods need: if without all of ``empty`` they would need
    more new capacity or find no place, those they land on when nothing is removed (capacity
    just launched for them, or room the kube-scheduler is about to fill, is not taken away)."""
    if not empty or not simulator.snapshot.pending:
        return set()
    before = simulator.run([], Minimize.NODECLAIMS)
    landed = {c.name for c in empty if before.existing.get(c.name)}
    if not landed:
        return set()
    after = simulator.run(empty, Minimize.NODECLAIMS)
    if len(after.new_nodeclaims) <= len(before.new_nodeclaims) and len(after.unschedulable) <= len(
        before.unschedulable
    ):
        return set()  # the pending pods fit as well elsewhere
    return landed


def _span(seconds: float) -> str:
    """Seconds as a Go duration: 45s, 2m5s, 3h0m12s."""
    hours, rest = divmod(max(int(seconds), 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _unconsolidatable(candidate: Candidate, now: datetime) -> str:
    """Why consolidation, emptiness included, may not act on the node now ("" when it may)."""
    disruption = candidate.nodepool.spec.disruption
    after = duration(disruption.consolidate_after)
    if after is None:
        return f"NodePool {candidate.nodepool.metadata.name} has consolidateAfter Never"
    # consolidateAfter counts from the last pod event on the node, else from its creation.
    node = candidate.node
    since = max(node.created, node.last_pod_event)
    elapsed = now.timestamp() - since
    if since and elapsed < after.total_seconds():
        event = "the last pod event" if node.last_pod_event > node.created else "its creation"
        return (
            f"consolidateAfter ({disruption.consolidate_after}) has not elapsed since {event} "
            f"({_span(elapsed)} ago)"
        )
    return ""


def _unconsolidatable_busy(candidate: Candidate) -> str:
    """Why consolidation may not move the pods of a node that has some ("" when it may)."""
    nodepool = candidate.nodepool
    if nodepool.spec.disruption.consolidation_policy == "WhenEmpty":
        return (
            f"NodePool {nodepool.metadata.name} has consolidationPolicy "
            f"{nodepool.spec.disruption.consolidation_policy} and the node has "
            f"{len(candidate.pods)} pod(s) to move"
        )
    if candidate.price is None:
        return "its price is unknown (its instance type or offering is not in the catalog)"
    return ""


def _budget(snapshot: Snapshot, reason: str, now: datetime) -> dict[str, int]:
    """Disruptions each NodePool allows now for ``reason``."""
    return allowed_by_nodepool(snapshot.nodepools, snapshot.nodes, reason, now)


def _allowed(candidates_: Sequence[Candidate], allowed: dict[str, int]) -> list[Candidate]:
    """The candidates of NodePools whose budget allows at least one more disruption."""
    return [c for c in candidates_ if allowed.get(c.nodepool.metadata.name or "", 0) > 0]


def _within_budget(candidates_: Sequence[Candidate], allowed: dict[str, int]) -> list[Candidate]:
    left = dict(allowed)
    out = []
    for candidate in candidates_:
        name = candidate.nodepool.metadata.name or ""
        if left.get(name, 0) > 0:
            left[name] -= 1
            out.append(candidate)
    return out


def _drift_reason(
    candidate: Candidate, options: Options, nodepools: dict[str, NodePoolShape]
) -> str:
    """Why the node has drifted ("" when it has not): from its NodePool first, then the
    ``drifted`` option; ``nodepools`` keeps each NodePool's shape for the pass."""
    name = candidate.nodepool.metadata.name or ""
    if name not in nodepools:
        nodepools[name] = NodePoolShape.of(candidate.nodepool)
    node = candidate.node
    reason = nodepool_drift(nodepools[name], node.labels, node.annotations)
    if reason:
        return reason
    return options.drifted(candidate) if options.drifted else ""


_LAUNCH_ORDER = (wk.CAPACITY_TYPE_RESERVED, wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND)
"""The capacity type a launch takes when a NodeClaim allows several, first that is offered."""


def _launch(it: InstanceType, requirements: Requirements) -> tuple[float, Offering] | None:
    """What launching ``it`` under ``requirements`` may cost at worst, over the zones it may land
    in, with the cheapest offering it would launch as: of the capacity type a launch takes
    (reserved, else spot, else on-demand), as upstream's WorstLaunchPrice. None when no
    available offering is allowed."""
    allowed = [
        o for o in it.offerings if o.available and requirements.intersects(o.requirements) is None
    ]
    for capacity_type in _LAUNCH_ORDER:
        same = [o for o in allowed if o.capacity_type == capacity_type]
        if same:
            return max(o.price for o in same), min(same, key=lambda o: (o.price, o.zone))
    return None


def _cheaper(
    candidates_: Sequence[Candidate], claim: NewNodeClaim, requirements: Requirements
) -> dict[str, tuple[float, Offering]]:
    """The launches (by type) of the claim's types under ``requirements`` that cost less at
    worst than the candidates together and, when several nodes merge into one of their own
    types, than the cheapest candidate of such a type (upstream's rule: else deleting the others
    does as well)."""
    limit = sum(c.price or 0.0 for c in candidates_)
    launches = {}
    for it in claim.instance_types:
        launch = _launch(it, requirements)
        if launch is not None and launch[0] < limit:
            launches[it.name] = launch
    if len(candidates_) > 1:
        same = [
            c.price
            for c in candidates_
            if c.instance_type is not None and c.instance_type.name in launches and c.price
        ]
        if same:
            limit = min(same)
            launches = {name: launch for name, launch in launches.items() if launch[0] < limit}
    return launches


def _min_values_needed(
    kept: Sequence[InstanceType], claim: NewNodeClaim, options: Options
) -> int | None:
    """How many of ``kept`` (cheapest first) meet the NodePool's minValues, or None when all of
    them do not: under BestEffort, minValues as the simulation relaxed them (to the values all
    the claim's types span), as upstream checks the trimmed replacement."""
    needed = 0
    for key, requirement in claim.requirements.items():
        if not requirement.min_values:
            continue
        minimum = requirement.min_values
        if options.min_values_policy == "BestEffort":
            minimum = min(minimum, len(_values(claim.instance_types, key, requirement)))
        for count in range(1, len(kept) + 1):
            if len(_values(kept[:count], key, requirement)) >= minimum:
                needed = max(needed, count)
                break
        else:
            return None
    return needed


def _values(types: Sequence[InstanceType], key: str, allowed: Requirement) -> set[str]:
    """The values of ``key`` that ``types`` span, within ``allowed``."""
    out: set[str] = set()
    for it in types:
        requirement = it.requirements.get(key)
        if requirement is not None and not requirement.complement:
            out.update(v for v in requirement.values if allowed.has(v))
    return out


def _replacement(
    candidates_: Sequence[Candidate], claim: NewNodeClaim, options: Options
) -> NewNodeClaim | None:
    """The launch that replaces the candidates: the claim's types that cost less at worst (in
    every zone they may launch in) than the candidates, following the capacity rules, as long
    as they still meet the NodePool's minValues.

    Spot is never replaced by on-demand; spot by spot only with the SpotToSpotConsolidation
    gate and, for a single node, at least 15 cheaper types (the replacement keeps the 15
    cheapest, or as many as minValues need). A replacement that may launch as spot or
    on-demand is priced, and launched, as spot, so a launch short of spot capacity cannot
    fall back to a dearer on-demand node (as upstream); on-demand only when no type may launch
    as spot for less.
    """
    if any(c.price is None for c in candidates_):
        return None
    all_spot = all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in candidates_)
    if all_spot and not options.spot_to_spot:
        return None
    requirements = claim.requirements
    launches: dict[str, tuple[float, Offering]] = {}
    allowed = requirements.get_or_exists(wk.CAPACITY_TYPE)
    if all_spot or (allowed.has(wk.CAPACITY_TYPE_SPOT) and allowed.has(wk.CAPACITY_TYPE_ON_DEMAND)):
        spot = requirements.copy()
        spot.add(Requirement.new(wk.CAPACITY_TYPE, "In", [wk.CAPACITY_TYPE_SPOT]))
        launches = _cheaper(candidates_, claim, spot)
        if launches or all_spot:
            requirements = spot
    if not launches and not all_spot:
        launches = _cheaper(candidates_, claim, requirements)
    # The claim's types come cheapest first.
    kept = [it for it in claim.instance_types if it.name in launches]
    needed = _min_values_needed(kept, claim, options) if kept else None
    if needed is None:
        return None
    if all_spot and len(candidates_) == 1:
        if len(kept) < SPOT_TO_SPOT_OPTIONS:
            return None
        kept = kept[: max(SPOT_TO_SPOT_OPTIONS, needed)]
    instance_type = min(
        kept, key=lambda it: (launches[it.name][1].price, launches[it.name][1].zone, it.name)
    )
    return replace(
        claim,
        requirements=requirements,
        instance_types=kept,
        instance_type=instance_type,
        offering=launches[instance_type.name][1],
    )


def _consolidate(
    simulator: Simulator,
    candidates_: Sequence[Candidate],
    reason: str,
    options: Options,
    scorer: Scorer,
) -> Command | None:
    if scorer.hopeless(candidates_):
        return None  # a Balanced NodePool would refuse even deleting them outright
    if simulator.cannot_consolidate(candidates_):
        return None
    results = simulator.run(candidates_, Minimize.NODECLAIMS)
    if _stranded(results, candidates_):
        return None
    needed = _needed(results, candidates_)
    if len(needed) > 1:
        return None
    command = Command(reason, list(candidates_))
    if needed:
        replacement = _replacement(candidates_, needed[0], options)
        if replacement is None:
            return None
        command.replacements = [replacement]
    if scorer.refusal(candidates_, command.savings_per_hour):
        return None
    command.scores = scorer.scores(candidates_, command.savings_per_hour)
    return command


def _next_command(
    snapshot: Snapshot,
    now: datetime,
    options: Options,
    blocked: dict[str, str],
    exclude: Collection[str] = (),
    simulator: Simulator | None = None,
    tried: set[str] | None = None,
) -> Command | None:
    eventual: list[Candidate] = []
    found, why = candidates(snapshot, now, eventual=eventual)
    blocked.update(why)
    found = [c for c in found if c.name not in exclude]
    consolidatable = [c for c in found if not _unconsolidatable(c, now)]

    simulator = simulator or _simulator(snapshot, options)
    empty = [c for c in consolidatable if not c.pods]
    wanted = _wanted(simulator, empty)
    for candidate in empty:
        if candidate.name in wanted:
            blocked.setdefault(candidate.name, WANTED)
    empty = [c for c in empty if c.name not in wanted]
    empty = _within_budget(empty, _budget(snapshot, EMPTY, now))
    if empty:
        # One command per NodePool: each NodePool's empty nodes go together, and the command
        # queue runs the NodePools' commands side by side.
        pool = empty[0].nodepool.metadata.name
        return Command("empty", [c for c in empty if c.nodepool.metadata.name == pool])

    compiled: dict[str, NodePoolShape] = {}
    drifting = [*found, *(c for c in eventual if c.name not in exclude)]
    drift = {c.name: r for c in drifting if (r := _drift_reason(c, options, compiled))}
    drifted = [c for c in drifting if c.name in drift]
    drifted.sort(key=lambda c: drift_order(c, now))
    for candidate in _allowed(drifted, _budget(snapshot, DRIFTED, now)):
        results = simulator.run([candidate], Minimize.PRICE)
        if not _stranded(results, [candidate]):
            needed = _needed(results, [candidate])
            return Command("drifted", [candidate], needed, drift_reason=drift[candidate.name])

    underused = [c for c in consolidatable if c.pods and not _unconsolidatable_busy(c)]
    allowed = _budget(snapshot, UNDERUTILIZED, now)
    scorer = Scorer(snapshot)
    multi = _within_budget(underused, allowed)[: options.max_multi_node]
    best = None
    low, high = 2, len(multi)
    while low <= high:
        middle = (low + high) // 2
        command = _consolidate(simulator, multi[:middle], "underutilized", options, scorer)
        if command is not None:
            best, low = command, middle + 1
        else:
            high = middle - 1
    if best is not None:
        return best
    for candidate in _allowed(underused, allowed):
        if tried is not None and candidate.name in tried:
            continue
        command = _consolidate(simulator, [candidate], "underutilized", options, scorer)
        if command is not None:
            return command
        if tried is not None:
            tried.add(candidate.name)
        refusal = scorer.refused.get(candidate.name, "no cheaper placement for its pods")
        blocked.setdefault(candidate.name, refusal)
    return None


def _expired(snapshot: Snapshot, now: datetime, exclude: Collection[str] = ()) -> list[Candidate]:
    """Nodes older than their NodePool's expireAfter; blocks do not protect them."""
    found, _ = candidates(snapshot, now, include_blocked=True)
    out = []
    for candidate in found:
        expire = duration(candidate.nodepool.spec.template.spec.expire_after)
        if candidate.name in exclude or expire is None or not candidate.node.created:
            continue
        if now.timestamp() - candidate.node.created >= expire.total_seconds():
            out.append(candidate)
    return out


def _expire(snapshot: Snapshot, candidate: Candidate, options: Options) -> Command:
    """Delete the expired node; its pods go to other nodes or to what provisioning launches."""
    results = _simulator(snapshot, options).run([candidate], Minimize.PRICE)
    return Command("expired", [candidate], provisioned=_needed(results, [candidate]))


def as_node(claim: NewNodeClaim, name: str, created: float, initialized: bool = True) -> NodeInfo:
    """The Node a NodeClaim the scheduler decided on would become, with its pods bound to it."""
    labels = {
        **claim.instance_type.requirements.labels(),
        **claim.offering.requirements.labels(),
        **claim.labels,
        wk.INSTANCE_TYPE: claim.instance_type.name,
        wk.TOPOLOGY_ZONE: claim.offering.zone,
        wk.CAPACITY_TYPE: claim.offering.capacity_type,
    }
    return NodeInfo(
        name,
        labels,
        claim.instance_type.allocatable,
        pods=[bound_to(p, name) for p in claim.pods],
        taints=claim.taints,
        created=created,
        initialized=initialized,
    )


def _apply(
    snapshot: Snapshot,
    command: Command,
    now: datetime,
    options: Options,
    simulator: Simulator | None = None,
) -> Snapshot:
    """The cluster after ``command``: candidates gone with their NodeClaims, their pods and the
    pending pods that found a place on the nodes they moved to (a NodeClaim in flight that gets
    some becomes the node it will be), the replacements as nodes, the pods left over pending.
    ``simulator`` is the one of the pass that decided on ``command`` (on ``snapshot``), if any."""
    names = {c.name for c in command.candidates}
    minimize = Minimize.PRICE if command.reason in ("drifted", "expired") else Minimize.NODECLAIMS
    results = (simulator or _simulator(snapshot, options)).run(command.candidates, minimize)
    nodes = []
    for node in snapshot.nodes:
        if node.name in names:
            continue
        moved = results.existing.get(node.name)
        if moved:
            node = copy.copy(node)
            node.pods = [*node.pods, *(bound_to(p, node.name) for p in moved)]
        nodes.append(node)
    kept = remaining(snapshot.nodeclaims, command.candidates)
    flying = {id(claim) for claim in in_flight(kept, nodes)}
    claims, launching = settle_claims([c for c in kept if id(c) in flying], results.existing)
    claims += [c for c in kept if id(c) not in flying]  # paired with a node that stays
    nodes.extend(launching)
    taken = {n.name for n in nodes} | names
    for launched in [*command.replacements, *command.provisioned]:
        name = next(
            f"{launched.nodepool}-{command.reason}-{i}"
            for i in range(len(taken) + 1)
            if f"{launched.nodepool}-{command.reason}-{i}" not in taken
        )
        taken.add(name)
        nodes.append(as_node(launched, name, now.timestamp()))
    placed = {p.key for n in nodes for p in n.pods}
    left = [p for p in snapshot.pending if p.key not in placed]
    left += [bound_to(p, None) for c in command.candidates for p in c.pods if p.key not in placed]
    return replace(snapshot, nodes=nodes, nodeclaims=claims, pending=left)


def still_valid(
    snapshot: Snapshot,
    now: datetime,
    command: Command,
    options: Options | None = None,
    exclude: Collection[str] = (),
) -> Command | None:
    """``command`` (emptiness or consolidation) checked again on ``snapshot`` after the
    validation delay, as upstream validates: every candidate is still one (not in ``exclude``,
    not blocked, consolidatable, within its NodePool's budget for the reason), an empty command's
    nodes are still empty and the pending pods do not need them, and moving the same nodes' pods
    again needs what the command launches: no new node if it launches none, else one whose
    instance types include all of the replacement's, the move still accepted by Balanced
    NodePools. The command with the candidates as they are now, or None when it is no longer
    valid."""
    options = options or Options()
    found, _ = candidates(snapshot, now)
    current = {c.name: c for c in found if c.name not in exclude and not _unconsolidatable(c, now)}
    if any(c.name not in current for c in command.candidates):
        return None
    fresh = [current[c.name] for c in command.candidates]
    reason = EMPTY if command.reason == "empty" else UNDERUTILIZED
    if len(_within_budget(fresh, _budget(snapshot, reason, now))) < len(fresh):
        return None
    if command.reason == "empty":
        if any(c.pods for c in fresh) or _wanted(_simulator(snapshot, options), fresh):
            return None
        return replace(command, candidates=fresh)
    if any(_unconsolidatable_busy(c) for c in fresh if c.pods):
        return None
    results = _simulator(snapshot, options).run(fresh, Minimize.NODECLAIMS)
    if _stranded(results, fresh):
        return None
    needed = _needed(results, fresh)
    if len(needed) != len(command.replacements) or len(needed) > 1:
        return None
    if needed:
        options_now = {it.name for it in needed[0].instance_types}
        if any(it.name not in options_now for it in command.replacements[0].instance_types):
            return None
    if Scorer(snapshot).refusal(fresh, command.savings_per_hour):
        return None
    return replace(command, candidates=fresh)


def next_command(
    snapshot: Snapshot,
    now: datetime,
    options: Options | None = None,
    blocked: dict[str, str] | None = None,
    exclude: Collection[str] = (),
    tried: set[str] | None = None,
) -> Command | None:
    """The one command the controller should carry out now: an expired node first (forceful,
    outside the budgets, nothing launched first), else the first command of emptiness, drift,
    multi-node and single-node consolidation. Nodes named in ``exclude`` (nominated, already
    being disrupted) are never candidates; ``blocked`` collects why other nodes were left
    alone. ``tried``: nodes whose single-node consolidation already failed on this cluster less
    some nodes (earlier in a pass of decisions), not simulated alone again; the nodes that fail
    now are added to it."""
    options = options or Options()
    expired = _expired(snapshot, now, exclude)
    if expired:
        return _expire(snapshot, expired[0], options)
    blocked = {} if blocked is None else blocked
    return _next_command(snapshot, now, options, blocked, exclude, tried=tried)


def _left_alone(snapshot: Snapshot, now: datetime, names: Collection[str]) -> dict[str, str]:
    """Why consolidation leaves each of ``names`` that is a candidate: not consolidatable yet,
    pods a WhenEmpty NodePool does not move, no price, or no budget left."""
    found, _ = candidates(snapshot, now)
    budgets = {reason: _budget(snapshot, reason, now) for reason in (EMPTY, UNDERUTILIZED)}
    out = {}
    for candidate in found:
        if candidate.name not in names:
            continue
        why = _unconsolidatable(candidate, now) or (
            _unconsolidatable_busy(candidate) if candidate.pods else ""
        )
        reason = UNDERUTILIZED if candidate.pods else EMPTY
        pool = candidate.nodepool.metadata.name
        if not why and budgets[reason].get(pool or "", 0) <= 0:
            why = f"the disruption budget of NodePool {pool} allows no more {reason} disruptions"
        if why:
            out[candidate.name] = why
    return out


def plan(
    snapshot: Snapshot, now: datetime, options: Options | None = None, rounds: int = 50
) -> Plan:
    """Expired nodes, then the commands the controller would issue one after another (each
    computed on the cluster the previous one leaves), until nothing more can be done."""
    options = options or Options()
    result = Plan()
    current = snapshot
    command: Command | None
    for _ in range(len(snapshot.nodes)):
        expired = _expired(current, now)
        if not expired:
            break
        command = _expire(current, expired[0], options)
        result.commands.append(command)
        current = _apply(current, command, now, options)
    for _ in range(rounds):
        simulator = _simulator(current, options)
        command = _next_command(current, now, options, result.blocked, simulator=simulator)
        if command is None:
            break
        result.commands.append(command)
        current = _apply(current, command, now, options, simulator)
    result.cluster = current
    disrupted = {c.name for command in result.commands for c in command.candidates}
    kept = {n.name for n in snapshot.nodes} - disrupted
    result.blocked = {name: why for name, why in result.blocked.items() if name in kept}
    for name, why in _left_alone(current, now, kept).items():
        result.blocked.setdefault(name, why)
    return result
