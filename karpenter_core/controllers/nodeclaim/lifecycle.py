"""NodeClaim lifecycle: finalizer, launch, registration, initialization, liveness.

``next_step`` decides (purely) what a NodeClaim needs next; the controller runs that step in a
keyed worker pool, one step per NodeClaim at a time, and its writes feed the cluster state so the
next pass moves on. Ready is True once Launched, Registered and Initialized all are.
"""

from __future__ import annotations

import logging
from datetime import datetime
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.common import CONDITION_READY
from karpenter_core.apis.v1.nodeclaim import (
    CONDITION_INITIALIZED,
    CONDITION_LAUNCHED,
    CONDITION_REGISTERED,
    NodeClaim,
)
from karpenter_core.controllers.nodeclaim.initialization import initialization_blocker
from karpenter_core.controllers.nodeclaim.launch import launch_failure, launched
from karpenter_core.controllers.nodeclaim.liveness import liveness_verdict
from karpenter_core.controllers.nodeclaim.registration import registered_node
from karpenter_core.controllers.objects import (
    node_path,
    nodeclaim_path,
    set_condition,
    status_condition,
    status_true,
)
from karpenter_core.controllers.runtime import KeyedWorkers, LoopController
from karpenter_core.controllers.writes import patch_status, update_metadata
from karpenter_core.operator import metrics
from karpenter_core.operator.crashpoints import CRASH_AFTER_LAUNCH, crash_point
from karpenter_core.operator.events import Reason
from karpenter_core.operator.kube import Conflict, NotFound

if TYPE_CHECKING:
    from karpenter_core.controllers.context import Context
    from karpenter_core.state.cluster import ClusterNode

__all__ = ["LifecycleController", "Step", "next_step", "ready_condition"]

log = logging.getLogger("karpenter.nodeclaim.lifecycle")

_ROOT = (CONDITION_LAUNCHED, CONDITION_REGISTERED, CONDITION_INITIALIZED)


class Step(Enum):
    """What a NodeClaim needs next."""

    NONE = "none"
    FINALIZER = "finalizer"
    LAUNCH = "launch"
    REGISTER = "register"
    INITIALIZE = "initialize"


def next_step(nodeclaim: NodeClaim, node: ClusterNode | None) -> Step:
    """The next lifecycle step for a NodeClaim (not being deleted) and its Node, if any."""
    if wk.TERMINATION_FINALIZER not in nodeclaim.metadata.finalizers:
        return Step.FINALIZER
    if not status_true(nodeclaim, CONDITION_LAUNCHED):
        return Step.LAUNCH
    if node is None:
        return Step.NONE
    if not status_true(nodeclaim, CONDITION_REGISTERED):
        return Step.REGISTER
    if (
        not status_true(nodeclaim, CONDITION_INITIALIZED)
        or node.labels.get(wk.NODE_INITIALIZED) != "true"
    ):
        return Step.INITIALIZE
    return Step.NONE


def ready_condition(status: dict[str, Any], now: datetime) -> None:
    """Roll Launched, Registered and Initialized up into Ready (in place, on a status dict)."""
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    missing = [t for t in _ROOT if (conditions.get(t) or {}).get("status") != "True"]
    if not missing:
        set_condition(status, CONDITION_READY, "True", "Ready", "", now)
        return
    first = conditions.get(missing[0]) or {}
    failed = first.get("status") == "False"
    set_condition(
        status,
        CONDITION_READY,
        "False" if failed else "Unknown",
        "NotReady" if failed else "AwaitingReconciliation",
        f"{missing[0]} is not True",
        now,
    )


def _nodepool(nodeclaim: NodeClaim) -> str:
    return nodeclaim.metadata.labels.get(wk.NODEPOOL, "")


class LifecycleController(LoopController):
    """Moves every NodeClaim through launch, registration and initialization."""

    name = "nodeclaim.lifecycle"

    def __init__(self, context: Context, period: float = 1.0, workers: int = 32) -> None:
        super().__init__(context.state)
        self.context = context
        self.period = period
        self.workers = KeyedWorkers("nodeclaim-lifecycle", workers)
        self._settled: dict[str, tuple[NodeClaim, ClusterNode]] = {}
        """NodeClaims found with nothing left to do, with their Node, as the cluster state held
        them (its objects are replaced on change): not looked at again until either changes."""

    def close(self) -> None:
        """Stop the workers."""
        self.workers.shutdown()

    def reconcile(self) -> None:
        """Start the next step of every NodeClaim that has one; enforce liveness. Nothing is done
        before every informer has listed its collection once: a NodeClaim seen before its Node
        or its NodeClass would look unregistered or unlaunchable, and be deleted."""
        context = self.context
        state = context.state
        if not state.wait_for_sync(0.5):
            return
        now = context.now()
        settings = context.settings
        names: set[Any] = set()
        for nodeclaim in state.nodeclaims():
            if nodeclaim.metadata.deletion_timestamp is not None:
                continue
            name = nodeclaim.metadata.name or ""
            names.add(name)
            node = state.node_for_nodeclaim(nodeclaim)
            settled = self._settled.get(name)
            if settled is not None and settled[0] is nodeclaim and settled[1] is node:
                continue
            step = next_step(nodeclaim, node)
            if step is Step.NONE and node is not None:
                self._settled[name] = (nodeclaim, node)
                continue
            self._settled.pop(name, None)
            if step in (Step.LAUNCH, Step.NONE) and node is None:
                reason = liveness_verdict(
                    nodeclaim, now, settings.launch_timeout, settings.registration_timeout
                )
                if reason is not None:
                    self.workers.submit(name, partial(self._expire, name, reason))
                    continue
            if step is not Step.NONE:
                self.workers.submit(name, partial(self._step, name, step))
        self.workers.forget(names)
        for gone in self._settled.keys() - names:
            del self._settled[gone]

    def _step(self, name: str, step: Step) -> float | None:
        state = self.context.state
        nodeclaim = state.nodeclaim(name)  # the latest we know, not the one the pass saw
        if nodeclaim is None or nodeclaim.metadata.deletion_timestamp is not None:
            return None
        node = state.node_for_nodeclaim(nodeclaim)
        if next_step(nodeclaim, node) is not step:
            return None
        try:
            if step is Step.FINALIZER:
                return self._add_finalizer(nodeclaim)
            if step is Step.LAUNCH:
                return self._launch(nodeclaim)
            assert node is not None
            if step is Step.REGISTER:
                return self._register(nodeclaim, node)
            return self._initialize(nodeclaim, node)
        except NotFound:
            return None
        except Conflict:
            return 0.5

    def _add_finalizer(self, nodeclaim: NodeClaim) -> float | None:
        def add(meta: dict[str, Any]) -> None:
            finalizers = list(meta.get("finalizers") or ())
            if wk.TERMINATION_FINALIZER not in finalizers:
                meta["finalizers"] = [*finalizers, wk.TERMINATION_FINALIZER]

        path = nodeclaim_path(nodeclaim.metadata.name or "")
        update_metadata(self.context, path, nodeclaim.to_manifest(), add)
        return None

    def _launch(self, nodeclaim: NodeClaim) -> float | None:
        context = self.context
        name = nodeclaim.metadata.name or ""
        path = nodeclaim_path(name)
        manifest = nodeclaim.to_manifest()
        try:
            created = context.provider.create(nodeclaim)
        except Exception as error:  # every provider failure is mapped; none stops the loop
            failure = launch_failure(error)
            if failure.delete:
                log.info(
                    "launch failed, deleting nodeclaim",
                    extra={"nodeclaim": name, "reason": failure.reason, "error": failure.message},
                )
                context.events.publish(manifest, "Warning", failure.reason, failure.message)
                metrics.nodeclaim_disrupted(failure.metric_reason, nodeclaim.metadata.labels)
                context.client.delete(path)
                context.trigger_provisioning()
                return None
            log.warning(
                "launch failed, retrying",
                extra={"nodeclaim": name, "reason": failure.reason, "error": failure.message},
            )

            def unknown(status: dict[str, Any]) -> None:
                now = context.now()
                set_condition(
                    status, CONDITION_LAUNCHED, "Unknown", failure.reason, failure.message, now
                )
                ready_condition(status, now)

            patch_status(context, path, manifest, unknown)
            return context.settings.nodeclaim_requeue
        crash_point(CRASH_AFTER_LAUNCH, context.settings.test_crash_point)
        labels, annotations, fields = launched(nodeclaim, created)
        if labels != nodeclaim.metadata.labels or annotations != nodeclaim.metadata.annotations:

            def add(meta: dict[str, Any]) -> None:
                meta["labels"] = labels
                meta["annotations"] = annotations

            manifest = update_metadata(context, path, manifest, add) or manifest

        def mark(status: dict[str, Any]) -> None:
            now = context.now()
            status.update(fields)
            set_condition(status, CONDITION_LAUNCHED, "True", "Launched", "", now)
            ready_condition(status, now)

        patch_status(context, path, manifest, mark)
        context.events.publish(
            manifest, "Normal", Reason.LAUNCHED, f"Launched {fields.get('providerID')}"
        )
        log.info(
            "launched nodeclaim",
            extra={
                "nodeclaim": name,
                "nodepool": _nodepool(nodeclaim),
                "provider_id": fields.get("providerID"),
                "instance_type": labels.get(wk.INSTANCE_TYPE),
                "zone": labels.get(wk.TOPOLOGY_ZONE),
                "capacity_type": labels.get(wk.CAPACITY_TYPE),
            },
        )
        return None

    def _register(self, nodeclaim: NodeClaim, node: ClusterNode) -> float | None:
        context = self.context
        raw_node = context.client.get(node_path(node.name))
        manifest = nodeclaim.to_manifest()
        updated = context.client.patch(node_path(node.name), registered_node(manifest, raw_node))
        context.state.update_node(updated)

        def mark(status: dict[str, Any]) -> None:
            now = context.now()
            status["nodeName"] = node.name
            set_condition(status, CONDITION_REGISTERED, "True", "Registered", "", now)
            ready_condition(status, now)

        patch_status(context, nodeclaim_path(nodeclaim.metadata.name or ""), manifest, mark)
        metrics.node_created(nodeclaim.metadata.labels)
        context.events.publish(
            manifest, "Normal", Reason.REGISTERED, f"Registered node {node.name}"
        )
        log.info("registered node", extra={"nodeclaim": nodeclaim.metadata.name, "node": node.name})
        return None

    def _initialize(self, nodeclaim: NodeClaim, node: ClusterNode) -> float | None:
        context = self.context
        path = nodeclaim_path(nodeclaim.metadata.name or "")
        blocker = initialization_blocker(nodeclaim, node)
        if blocker is not None:
            current = status_condition(nodeclaim, CONDITION_INITIALIZED)
            if current is None or current.message != blocker:

                def waiting(status: dict[str, Any]) -> None:
                    now = context.now()
                    set_condition(
                        status, CONDITION_INITIALIZED, "Unknown", "NotInitialized", blocker, now
                    )
                    ready_condition(status, now)

                patch_status(context, path, nodeclaim.to_manifest(), waiting)
            return 1.0
        if node.labels.get(wk.NODE_INITIALIZED) != "true":
            updated = context.client.patch(
                node_path(node.name), {"metadata": {"labels": {wk.NODE_INITIALIZED: "true"}}}
            )
            context.state.update_node(updated)
        if not status_true(nodeclaim, CONDITION_INITIALIZED):

            def mark(status: dict[str, Any]) -> None:
                now = context.now()
                set_condition(status, CONDITION_INITIALIZED, "True", "Initialized", "", now)
                ready_condition(status, now)

            patch_status(context, path, nodeclaim.to_manifest(), mark)
            log.info(
                "initialized node",
                extra={"nodeclaim": nodeclaim.metadata.name, "node": node.name},
            )
        return None

    def _expire(self, name: str, reason: str) -> float | None:
        context = self.context
        nodeclaim = context.state.nodeclaim(name)
        if nodeclaim is None or nodeclaim.metadata.deletion_timestamp is not None:
            return None
        log.info("deleting nodeclaim: %s", reason, extra={"nodeclaim": name})
        context.events.publish(
            nodeclaim.to_manifest(), "Warning", Reason.LIVENESS, f"Deleting NodeClaim: {reason}"
        )
        launched = status_true(nodeclaim, CONDITION_LAUNCHED)
        timeout = "registration_timeout" if launched else "launch_timeout"
        metrics.nodeclaim_disrupted(timeout, nodeclaim.metadata.labels)
        try:
            context.client.delete(nodeclaim_path(name))
        except NotFound:
            return None
        context.trigger_provisioning()
        return None
