"""Disruption: carry out the commands the pure planner decides on, several at once.

Every ``DISRUPTION_POLL_PERIOD`` the controller snapshots the cluster state as provisioning does
(the NodePools that may launch, ``cluster.not_launchable``; instance types from the provider),
looks at it as it will be once the commands in flight are done
(``disruption.projection.as_it_will_be``: their candidates' pods placed first, on their
replacements or elsewhere; PodDisruptionBudgets less the evictions to come), and asks
``karpenter_core.disruption.planner.next_command`` for a command (nodes nominated for pending
pods, or already being disrupted, are left out), again and again until the planner has nothing
more within the budgets:

1. drift and expiration go at once (expiration, as upstream's, launches no replacement: its pods
   go pending and provisioning launches what they need); consolidation commands (empty,
   underutilized) are decided one after another, each on the cluster as the commands decided
   before it and still waiting will leave it (``disruption.projection.as_started``: their
   candidates being deleted, their replacements in flight), and each waits
   ``DISRUPTION_VALIDATION_DELAY`` from its own decision. Meanwhile the controller goes on
   deciding (every ``DISRUPTION_POLL_PERIOD`` at most, and whenever a command is due), so a
   command that PDBs or budgets held back is decided as soon as a pass finds it possible, and
   waits one delay from then.
   A due command is checked again on the cluster as it is, as upstream validates
   (``planner.still_valid``: the same candidates still candidates within the budgets, their
   pods still needing what the command launches); if it holds it goes ahead;
2. the candidate Nodes are tainted ``karpenter.sh/disrupted:NoSchedule`` and marked for deletion
   in the cluster state (so they count against their NodePool's budget);
3. replacement NodeClaims are created exactly as provisioning creates them
   (``nodeclaim_manifest``), and the command joins the queue of commands in flight
   (``disruption_queue.CommandQueue``), whose thread waits for them to be Initialized, at most
   ``replacement_timeout`` (on timeout, or a replacement lost: untaint, unmark, delete the
   replacements);
4. the candidate NodeClaims are deleted; termination drains them.

Commands live only in the controller's memory. Each pass therefore starts by taking the
disrupted taint off every node no command in flight holds and that is not going away
(``stale_disruption_taints``), as upstream does: a controller killed mid-command leaves no node
unschedulable for good, and its next decisions are computed again from the cluster.

Events (DisruptionLaunching, DisruptionWaitingReadiness, DisruptionTerminating,
DisruptionBlocked, Unconsolidatable) and metrics
(``karpenter_voluntary_disruption_*``) use upstream's names.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.validation import instance_types_of
from karpenter_core.controllers.disruption_queue import CommandQueue, InFlight
from karpenter_core.controllers.nodeclaim.drifted import provider_drift
from karpenter_core.controllers.nodeclaims import nodeclaim_manifest
from karpenter_core.controllers.objects import (
    NODECLAIMS,
    name_of,
    node_path,
    nodeclaim_path,
    status_true,
)
from karpenter_core.controllers.runtime import LoopController
from karpenter_core.disruption.candidates import candidates
from karpenter_core.disruption.planner import Command, Options, next_command, still_valid
from karpenter_core.disruption.projection import as_it_will_be, as_started, waiting_for_replacements
from karpenter_core.operator import metrics
from karpenter_core.operator.events import Reason
from karpenter_core.operator.kube import NotFound, retry_on_conflict
from karpenter_core.scheduling.cluster import not_launchable, with_expected_allocatable

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.controllers.context import Context
    from karpenter_core.disruption.candidates import Candidate
    from karpenter_core.scheduling.snapshot import Snapshot
    from karpenter_core.state.cluster import ClusterNode

__all__ = [
    "DisruptionController",
    "consolidation_type",
    "replacement_timeout",
    "stale_disruption_taints",
]

log = logging.getLogger("karpenter.disruption")

UNCONSOLIDATABLE = "no cheaper placement for its pods"
"""The planner's reason for a candidate consolidation could not move (an Unconsolidatable event)."""
MIN_REPLACEMENT_TIMEOUT = 600.0
MAX_REPLACEMENT_TIMEOUT = 3600.0
PER_COMMAND_TIMEOUT = 0.08
WAIT_POLL = 0.2
WRITE_WORKERS = 16
"""Nodes tainted, untainted or deleted at once (a command of a hundred nodes is written in
seconds, not one request after another)."""
VALIDATED = ("empty", "underutilized")
"""The reasons whose commands wait ``DISRUPTION_VALIDATION_DELAY`` and are computed again."""


def replacement_timeout(
    commands: int,
    minimum: float = MIN_REPLACEMENT_TIMEOUT,
    maximum: float = MAX_REPLACEMENT_TIMEOUT,
) -> float:
    """Seconds to wait for replacements to initialize: 80 ms per command in flight, clamped to
    [10 minutes, 1 hour]."""
    return min(max(PER_COMMAND_TIMEOUT * commands, minimum), maximum)


def consolidation_type(command: Command) -> str:
    """The ``consolidation_type`` metric label: empty, single or multi ("" for drift and
    expiration)."""
    if command.reason == "empty":
        return "empty"
    if command.reason == "underutilized":
        return "multi" if len(command.candidates) > 1 else "single"
    return ""


def _decision(command: Command) -> str:
    return "replace" if command.replacements else "delete"


def _names(command: Command) -> list[str]:
    return sorted(c.name for c in command.candidates)


def stale_disruption_taints(
    nodes: Iterable[ClusterNode], held: Collection[str], going: Callable[[ClusterNode], bool]
) -> list[str]:
    """The nodes whose ``karpenter.sh/disrupted`` taint no command holds: tainted, not in
    ``held`` (the nodes of commands in flight) and not going away (``going``: being deleted, or
    marked for deletion, with their NodeClaim)."""
    return sorted(
        node.name
        for node in nodes
        if node.name not in held
        and any(t.key == wk.DISRUPTED_TAINT_KEY for t in node.taints)
        and not going(node)
    )


def _replacements(commands: Iterable[Command], nodepools: dict[str, NodePool]) -> list[NodeClaim]:
    """The replacement NodeClaims ``commands`` will create, named after their NodePools."""
    out = []
    for i, replacement in enumerate(r for command in commands for r in command.replacements):
        nodepool = nodepools.get(replacement.nodepool)
        if nodepool is None:
            continue
        manifest = nodeclaim_manifest(
            replacement, nodepool.to_manifest(), replacement.instance_types
        )
        manifest["metadata"]["name"] = f"{replacement.nodepool}-decided-{i}"
        out.append(NodeClaim.from_manifest(manifest))
    return out


@dataclass(slots=True)
class _Waiting:
    """A consolidation command decided on, not started yet."""

    command: Command
    decided: float
    """``time.monotonic()`` when it was decided."""


class DisruptionController(LoopController):
    """Finds disruption commands and starts them; a queue finishes them when their replacements
    are up."""

    name = "disruption"

    def __init__(self, context: Context, timeout: float | None = None) -> None:
        super().__init__(None)
        self.context = context
        self.period = context.settings.disruption_poll_period
        self.timeout = timeout
        self.queue = CommandQueue()
        self._waiting: list[_Waiting] = []
        """Consolidation commands decided on, waiting out the validation delay, oldest first."""
        self._stop = threading.Event()
        self._writes = ThreadPoolExecutor(WRITE_WORKERS, thread_name_prefix="disruption-write")

    def close(self) -> None:
        """Stop the writers."""
        self._writes.shutdown(wait=True)

    def _each(self, action: Callable[[str], None], names: Iterable[str]) -> None:
        """``action`` on each of ``names``, several at once (the first error, in the order of
        ``names``, is raised)."""
        futures = [self._writes.submit(action, name) for name in names]
        for future in futures:
            future.result()

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set (waits inside a pass end early too), with the queue of
        commands in flight advanced by its own thread."""
        self._stop = stop
        worker = threading.Thread(
            target=self._run_queue, args=(stop,), name="disruption-queue", daemon=True
        )
        worker.start()
        try:
            super().run(stop)
        finally:
            worker.join()

    def _run_queue(self, stop: threading.Event) -> None:
        while not stop.wait(WAIT_POLL):
            try:
                self.advance()
            except Exception:
                log.exception("disruption: advancing the commands in flight failed")

    # -- deciding ---------------------------------------------------------------------------

    def _snapshot(self, decided: Sequence[Command] = ()) -> tuple[Snapshot, dict[str, NodePool]]:
        """The cluster as it will be once the commands in flight, and those ``decided`` on but
        not started yet, are done."""
        context = self.context
        nodepools = sorted(
            (np for np in context.state.nodepools() if not_launchable(np) is None),
            key=lambda np: (-(np.spec.weight or 0), np.metadata.name or ""),
        )
        instance_types = {
            np.metadata.name or "": instance_types_of(context.provider, np) for np in nodepools
        }
        catalog = {it.name: it for types in instance_types.values() for it in types}
        snapshot = context.state.snapshot(instance_types)
        by_name = {np.metadata.name or "": np for np in nodepools}
        starting = {c.name for command in decided for c in command.candidates}
        if decided:
            snapshot = as_started(snapshot, starting, _replacements(decided, by_name))
        snapshot.nodeclaims = with_expected_allocatable(snapshot.nodeclaims, catalog)
        settings = context.settings
        future = as_it_will_be(
            snapshot,
            ignore_preferences=settings.preference_policy == "Ignore",
            min_values_strict=settings.min_values_policy != "BestEffort",
            waiting=waiting_for_replacements(decided) | self.queue.held(),
        )
        return future, by_name

    def _excluded(self, snapshot: Snapshot) -> set[str]:
        """Nodes a pending pod is nominated to (by node or NodeClaim name)."""
        state = self.context.state
        out = set()
        for node in snapshot.nodes:
            claim = state.nodeclaim_for_node(node) if node.provider_id else None
            if state.nominated(node.name) or (
                claim is not None and state.nominated(claim.metadata.name or "")
            ):
                out.add(node.name)
        return out

    def _options(self) -> Options:
        provider = self.context.provider
        state = self.context.state

        def drifted(candidate: Candidate) -> str:
            claim = state.nodeclaim_for_node(candidate.node) if candidate.node.provider_id else None
            if claim is None:
                return ""
            return provider_drift(provider, claim) or ""

        settings = self.context.settings
        return Options(
            spot_to_spot=settings.feature("SpotToSpotConsolidation"),
            drifted=drifted,
            preference_policy=settings.preference_policy,
            min_values_policy=settings.min_values_policy,
            max_multi_node=settings.multi_node_consolidation_max,
        )

    def _decide(
        self, decided: Sequence[Command], tried: set[str], report: bool
    ) -> tuple[Command | None, dict[str, NodePool]]:
        """The planner's next command on the cluster as it will be (``decided``: commands to
        count as started; ``tried``: the pass's failed single-node consolidations) and the
        NodePools; ``report``: publish why nodes were left alone and the eligible-node gauges."""
        snapshot, nodepools = self._snapshot(decided)
        now = self.context.now()
        excluded = self._excluded(snapshot)
        blocked: dict[str, str] = {}
        started = time.perf_counter()
        command = next_command(snapshot, now, self._options(), blocked, excluded, tried)
        metrics.DISRUPTION_EVALUATION_DURATION.labels(
            command.reason if command else "none", consolidation_type(command) if command else ""
        ).observe(time.perf_counter() - started)
        if report:
            for name in excluded:
                blocked.setdefault(name, "a pending pod is nominated to it")
            self._publish_blocked(snapshot, blocked)
            self._eligible(snapshot, now, excluded)
        return command, nodepools

    def _eligible(self, snapshot: Snapshot, now: Any, excluded: set[str]) -> None:
        found, _ = candidates(snapshot, now)
        found = [c for c in found if c.name not in excluded]
        metrics.DISRUPTION_ELIGIBLE_NODES.labels("empty").set(sum(1 for c in found if not c.pods))
        metrics.DISRUPTION_ELIGIBLE_NODES.labels("underutilized").set(
            sum(
                1
                for c in found
                if c.pods and c.nodepool.spec.disruption.consolidation_policy != "WhenEmpty"
            )
        )

    def _publish_blocked(self, snapshot: Snapshot, blocked: dict[str, str]) -> None:
        nodes = {n.name: n for n in snapshot.nodes}
        events = self.context.events
        for name, why in blocked.items():
            node = nodes.get(name)
            if node is None:
                continue
            if why == UNCONSOLIDATABLE:
                events.publish(
                    node,
                    "Normal",
                    Reason.UNCONSOLIDATABLE,
                    f"Can't replace with a cheaper node: {why}",
                )
            else:
                events.publish(
                    node, "Normal", Reason.DISRUPTION_BLOCKED, f"Cannot disrupt Node: {why}"
                )

    def reconcile(self) -> None:
        """One pass: release stale taints, then until no command waits and the planner has
        nothing more: decide more (starting the commands whose validation delay is over and
        that still hold), and sleep until the next one is due (at most
        ``DISRUPTION_POLL_PERIOD``, after which more are decided on the cluster as it is then)."""
        if not self.context.state.wait_for_sync(0.5):
            return
        self.release_stale_taints(self.queue.held())
        settings = self.context.settings
        while not self._stop.is_set():
            self._decide_more()
            if not self._waiting:
                return
            due = self._waiting[0].decided + settings.disruption_validation_delay
            self._stop.wait(min(max(due - time.monotonic(), 0.0), settings.disruption_poll_period))
        self._waiting.clear()

    def _decide_more(self) -> None:
        """Decide commands one after another, each on the cluster as the commands in flight and
        those waiting (decided earlier) will leave it, until the planner has no more (a node
        that could not be consolidated alone is not simulated alone again in this pass). Drift
        and expiration start at once; consolidation commands wait
        ``DISRUPTION_VALIDATION_DELAY`` from their decision; those due are started between
        decisions (``_start_due``), so a long pass does not hold them back."""
        tried: set[str] = set()
        report = True
        while not self._stop.is_set():
            self._start_due()
            decided = [item.command for item in self._waiting]
            command, nodepools = self._decide(decided, tried, report)
            report = False
            if command is None:
                return
            if command.reason in VALIDATED:
                self._waiting.append(_Waiting(command, time.monotonic()))
            elif not self.start(command, nodepools):
                return

    def _start_due(self) -> None:
        """Check again, oldest first, each waiting command whose validation delay is over, on
        the cluster as it is (the commands started before it included; ``still_valid``), and
        start it if it holds."""
        delay = self.context.settings.disruption_validation_delay
        while (
            self._waiting
            and not self._stop.is_set()
            and time.monotonic() >= self._waiting[0].decided + delay
        ):
            item = self._waiting.pop(0)
            command = item.command
            snapshot, nodepools = self._snapshot()
            valid = still_valid(
                snapshot, self.context.now(), command, self._options(), self._excluded(snapshot)
            )
            if valid is None:
                log.info(
                    "disruption command no longer valid",
                    extra={"reason": command.reason, "nodes": _names(command)},
                )
                metrics.DISRUPTION_FAILED_VALIDATIONS.labels(consolidation_type(command)).inc()
                continue
            self.start(valid, nodepools, waited=time.monotonic() - item.decided)

    # -- orchestrating ----------------------------------------------------------------------

    def start(self, command: Command, nodepools: dict[str, NodePool], waited: float = 0.0) -> bool:
        """Taint the candidates, launch the replacements, then mark the candidates; the queue
        finishes the command once the replacements are Initialized (at once without
        replacements). False if it was rolled back. ``waited``: seconds since it was decided
        (logged)."""
        context = self.context
        state = context.state
        nodes = [c.node for c in command.candidates]
        claim_names = [
            claim.metadata.name or ""
            for c in command.candidates
            if c.node.provider_id and (claim := state.nodeclaim_for_node(c.node)) is not None
        ]
        log.info(
            "disrupting",
            extra={
                "reason": command.reason,
                "drift_reason": command.drift_reason,
                "decision": _decision(command),
                "nodes": _names(command),
                "nodeclaims": claim_names,
                "replacements": len(command.replacements),
                "savings_per_hour": round(command.savings_per_hour, 4),
                "in_flight": len(self.queue),
                "waited_s": round(waited, 1),
            },
        )
        self._set_taints([node.name for node in nodes], present=True)
        timeout = self.timeout
        if timeout is None:
            timeout = replacement_timeout(len(self.queue) + 1)
        item = InFlight(command, claim_names, [], time.monotonic() + timeout)
        try:
            for replacement in command.replacements:
                nodepool = nodepools.get(replacement.nodepool) or state.nodepool(
                    replacement.nodepool
                )
                if nodepool is None:
                    raise RuntimeError(f"NodePool {replacement.nodepool} is gone")
                manifest = nodeclaim_manifest(
                    replacement, nodepool.to_manifest(), replacement.instance_types
                )
                obj = context.client.create(NODECLAIMS, manifest)
                state.update_nodeclaim(obj)
                item.created.append(name_of(obj))
                metrics.nodeclaim_created(command.reason, replacement.nodepool)
        except Exception:
            log.exception("launching replacements failed; rolling back")
            self._rollback(item)
            return False
        # Marked once the replacements are in the state: provisioning places the pods of marked
        # nodes, and must see the capacity launched for them when it does.
        state.mark_for_deletion([*(n.name for n in nodes), *claim_names])
        if not item.created:
            self._finish(item)
            return True
        for node in nodes:
            context.events.publish(
                node,
                "Normal",
                Reason.DISRUPTION_LAUNCHING,
                f"Launching NodeClaim: {', '.join(item.created)} ({command.reason})",
            )
        self.queue.add(item)
        return True

    def advance(self) -> None:
        """Look at every command in flight: finish those whose replacements are all
        Initialized, roll back those that lost one or ran out of time."""
        state = self.context.state
        for item in self.queue.items():
            claims = [state.nodeclaim(name) for name in item.created]
            if any(c is None or c.metadata.deletion_timestamp is not None for c in claims):
                log.info(
                    "a replacement went away; rolling back", extra={"nodeclaims": item.created}
                )
            elif all(c is not None and status_true(c, "Initialized") for c in claims):
                self.queue.remove(item)
                self._finish(item)
                continue
            elif time.monotonic() < item.deadline:
                self._announce(item)
                continue
            else:
                log.info(
                    "replacements not initialized in time; rolling back",
                    extra={"nodeclaims": item.created},
                )
            self.queue.remove(item)
            self._rollback(item)

    def _announce(self, item: InFlight) -> None:
        if item.announced:
            return
        for candidate in item.command.candidates:
            self.context.events.publish(
                candidate.node,
                "Normal",
                Reason.DISRUPTION_WAITING_READINESS,
                f"Waiting on readiness to continue disruption: {', '.join(item.created)}",
            )
        item.announced = True

    def _finish(self, item: InFlight) -> None:
        """Delete the candidates' NodeClaims (Nodes without one directly)."""
        context = self.context
        command = item.command
        paths = []
        for candidate in command.candidates:
            claim = (
                context.state.nodeclaim_for_node(candidate.node)
                if candidate.node.provider_id
                else None
            )
            path = (
                nodeclaim_path(claim.metadata.name or "")
                if claim is not None
                else node_path(candidate.name)
            )
            context.events.publish(
                candidate.node,
                "Normal",
                Reason.DISRUPTION_TERMINATING,
                f"Disrupting Node: {command.reason.capitalize()}",
            )
            paths.append(path)
            metrics.nodeclaim_disrupted(command.reason, candidate.node.labels)
        self._each(self._delete, paths)
        metrics.DISRUPTION_DECISIONS.labels(
            _decision(command), command.reason, consolidation_type(command)
        ).inc()

    def _rollback(self, item: InFlight) -> None:
        context = self.context
        self._each(self._delete, [nodeclaim_path(name) for name in item.created])
        self._set_taints([c.name for c in item.command.candidates], present=False)
        context.state.unmark_for_deletion(
            [*(c.name for c in item.command.candidates), *item.claim_names]
        )

    def release_stale_taints(self, held: Collection[str] = ()) -> None:
        """Untaint the nodes no command holds (``held``: the nodes of commands in flight)."""
        state = self.context.state

        def going(node: ClusterNode) -> bool:
            claim = state.nodeclaim_for_node(node) if node.provider_id else None
            return (
                node.deletion_time is not None
                or state.marked_for_deletion(node.name)
                or (
                    claim is not None
                    and (
                        claim.metadata.deletion_timestamp is not None
                        or state.marked_for_deletion(claim.metadata.name or "")
                    )
                )
            )

        stale = stale_disruption_taints(state.nodes(), held, going)
        for name in stale:
            log.info("removing a disrupted taint no command holds", extra={"node": name})
        self._set_taints(stale, present=False)

    def _set_taints(self, names: Sequence[str], present: bool) -> None:
        """``_set_taint`` on each of ``names``, several at once."""
        self._each(lambda name: self._set_taint(name, present), names)

    def _delete(self, path: str) -> None:
        with contextlib.suppress(NotFound):
            self.context.client.delete(path)

    def _set_taint(self, name: str, present: bool) -> None:
        """Add or remove the karpenter.sh/disrupted:NoSchedule taint, conditionally."""
        context = self.context

        def attempt() -> None:
            raw = context.client.get(node_path(name))
            taints = list((raw.get("spec") or {}).get("taints") or ())
            has = any(t.get("key") == wk.DISRUPTED_TAINT_KEY for t in taints)
            if has == present:
                return
            if present:
                taints.append({"key": wk.DISRUPTED_TAINT_KEY, "effect": wk.DISRUPTED_TAINT_EFFECT})
            else:
                taints = [t for t in taints if t.get("key") != wk.DISRUPTED_TAINT_KEY]
            body = {
                "metadata": {"resourceVersion": raw["metadata"]["resourceVersion"]},
                "spec": {"taints": taints},
            }
            context.state.update_node(context.client.patch(node_path(name), body))

        with contextlib.suppress(NotFound):
            retry_on_conflict(attempt)
