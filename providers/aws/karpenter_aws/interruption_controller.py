"""The interruption controller: reacts to EC2 interruption events read from an SQS queue.

It long-polls the queue named by ``--interruption-queue``, parses each message
(``karpenter_aws.interruption``), finds the NodeClaims of the instances it names and acts as
upstream does: a spot interruption warning, a scheduled maintenance, an instance stopping or
terminating, or a capacity reservation reclaim deletes the NodeClaim (the core's termination
controller cordons, drains and replaces it); a rebalance recommendation only publishes an Event.
A spot interruption also marks that spot offering unavailable. Handled and unparseable
messages are deleted; a message whose handling failed stays in the queue and comes back after
the visibility timeout. Events go through the core's event recorder (``ProviderContext.events``),
which de-duplicates them and sends them off the caller's thread.

``decide`` is the pure part: message and NodeClaims in, actions out.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Histogram

from karpenter_aws.interruption import (
    CAPACITY_RESERVATION_INTERRUPTED,
    CORDON_AND_DRAIN,
    INSTANCE_STOPPED,
    INSTANCE_TERMINATED,
    NO_OP,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    InterruptionMessage,
    parse_message,
)
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.nodeclaims import NODECLAIM_VERSION, ClusterNodeClaims
from karpenter_core.sdk.observe import logs, metrics
from karpenter_core.sdk.record import ProviderContext
from karpenter_core.sdk.types import CloudProviderError

__all__ = [
    "Action",
    "DeleteNodeClaim",
    "InterruptionController",
    "MarkUnavailable",
    "PublishEvent",
    "decide",
]

MAX_MESSAGES = 10
VISIBILITY_TIMEOUT = 20
WAIT_SECONDS = 20
STOP_CHECK = 0.1
"""Seconds between checks of the stop signal while a long poll is in flight."""
MAX_BACKOFF = 60.0
WORKERS = 10

RECEIVED_MESSAGES = Counter(
    "karpenter_interruption_received_messages_total",
    "Count of messages received from the SQS queue. Broken down by message type.",
    ("message_type",),
    registry=metrics.REGISTRY,
)
DELETED_MESSAGES = Counter(
    "karpenter_interruption_deleted_messages_total",
    "Count of messages deleted from the SQS queue.",
    registry=metrics.REGISTRY,
)
ACTIONS_PERFORMED = Counter(
    "karpenter_interruption_actions_performed_total",
    "Count of actions taken on interruption messages. Broken down by action type.",
    ("action_type",),
    registry=metrics.REGISTRY,
)
MESSAGE_QUEUE_DURATION = Histogram(
    "karpenter_interruption_message_queue_duration_seconds",
    "Time an interruption message spent between its event and its handling by Karpenter.",
    registry=metrics.REGISTRY,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)

_WARNING, _NORMAL = "Warning", "Normal"
# Event type, reason and message upstream publishes for each message kind.
_KIND_EVENTS: Mapping[str, tuple[str, str, str]] = {
    SPOT_INTERRUPTED: (_WARNING, "SpotInterrupted", "Spot interruption warning was triggered"),
    REBALANCE_RECOMMENDATION: (
        _NORMAL,
        "SpotRebalanceRecommendation",
        "Spot rebalance recommendation was triggered",
    ),
    SCHEDULED_CHANGE: (
        _WARNING,
        "InstanceUnhealthy",
        "An unhealthy warning was triggered for the instance",
    ),
    INSTANCE_STOPPED: (_WARNING, "InstanceStopping", "Instance is stopping"),
    INSTANCE_TERMINATED: (_WARNING, "InstanceTerminating", "Instance is terminating"),
    CAPACITY_RESERVATION_INTERRUPTED: (
        _WARNING,
        "CapacityReservationInstanceInterrupted",
        "Capacity Reservation interruption warning was triggered",
    ),
}
_TERMINATING = "TerminatingOnInterruption"


@dataclass(frozen=True, slots=True)
class PublishEvent:
    """Publish a core/v1 Event about a NodeClaim or a Node (``kind``), by name and uid."""

    kind: str
    name: str
    uid: str
    event_type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class MarkUnavailable:
    """Mark a spot offering unavailable (it was just reclaimed)."""

    instance_type: str
    zone: str
    reason: str


@dataclass(frozen=True, slots=True)
class DeleteNodeClaim:
    """Delete a NodeClaim: the core cordons and drains its node and replaces it."""

    name: str
    nodepool: str
    reason: str


Action = PublishEvent | MarkUnavailable | DeleteNodeClaim


def decide(message: InterruptionMessage, nodeclaims: Iterable[Mapping[str, Any]]) -> list[Action]:
    """The actions ``message`` calls for on the NodeClaims (manifests) owning its instances,
    in the order they are to be taken."""
    if message.kind == NO_OP or not message.instance_ids:
        return []
    suffixes = tuple(f"/{instance_id}" for instance_id in message.instance_ids)
    actions: list[Action] = []
    for nodeclaim in nodeclaims:
        status = nodeclaim.get("status") or {}
        provider_id = status.get("providerID") or ""
        if not provider_id.endswith(suffixes):
            continue
        actions += _actions_for(message, nodeclaim, status.get("nodeName") or "")
    return actions


def _actions_for(
    message: InterruptionMessage, nodeclaim: Mapping[str, Any], node_name: str
) -> list[Action]:
    meta = nodeclaim.get("metadata") or {}
    labels = meta.get("labels") or {}
    name, uid = meta.get("name", ""), meta.get("uid", "")
    targets = [("NodeClaim", name, uid)]
    if node_name:
        targets.append(("Node", node_name, ""))
    actions: list[Action] = []
    event = _KIND_EVENTS.get(message.kind)
    if event is not None:
        actions += [PublishEvent(kind, n, u, *event) for kind, n, u in targets]
    instance_type, zone = labels.get(wk.INSTANCE_TYPE, ""), labels.get(wk.TOPOLOGY_ZONE, "")
    if message.kind == SPOT_INTERRUPTED and instance_type and zone:
        actions.append(MarkUnavailable(instance_type, zone, message.kind))
    if message.action == CORDON_AND_DRAIN and not meta.get("deletionTimestamp"):
        actions.append(DeleteNodeClaim(name, labels.get(wk.NODEPOOL, ""), message.kind))
        actions += [
            PublishEvent(
                kind,
                n,
                u,
                _WARNING,
                _TERMINATING,
                f"Interruption triggered termination for the {kind}",
            )
            for kind, n, u in targets
        ]
    return actions


class InterruptionController:
    """Polls the interruption queue and acts on the NodeClaims of interrupted instances.

    ``wait_seconds`` is the long-poll wait (20, the SQS maximum, in production); a poll in
    flight does not delay shutdown. ``context`` needs ``kube_client`` and ``events``;
    ``provider`` needs ``settings``, ``clients`` (``sqs``) and ``unavailable``.
    """

    name = "interruption"

    def __init__(
        self, context: ProviderContext, provider: Any, *, wait_seconds: int = WAIT_SECONDS
    ) -> None:
        self._context = context
        self._provider = provider
        self._log = context.logger
        self._wait = wait_seconds
        self._queue: str = provider.settings.interruption_queue
        self._queue_url: str | None = None
        if context.kube_client is None:
            raise CloudProviderError(
                "the interruption controller needs a Kubernetes cluster to act on NodeClaims"
            )
        if context.events is None:
            raise CloudProviderError("the interruption controller needs an event recorder")
        self._cluster = ClusterNodeClaims(context.kube_client)
        self._events = context.events

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set; errors are logged and retried with backoff.

        Returns within ``STOP_CHECK`` seconds of ``stop`` being set, plus the time to finish
        handling a batch already received. A long poll in flight then is abandoned: messages it
        receives are neither handled nor deleted, and the queue hands them out again once their
        visibility timeout ends.
        """
        if not self._queue:
            self._log.info("interruption: no queue configured (--interruption-queue)")
            return
        failures = 0
        with (
            logs.bind(controller=self.name),
            ThreadPoolExecutor(WORKERS, thread_name_prefix="interruption") as pool,
        ):
            while not stop.is_set():
                try:
                    self.poll(pool, stop)
                    failures = 0
                except Exception as error:
                    failures += 1
                    delay = min(MAX_BACKOFF, 2.0 ** (failures - 1))
                    self._log.error(
                        "interruption: polling %s failed, retrying in %.0fs: %s",
                        self._queue,
                        delay,
                        error,
                        extra={"queue": self._queue, "error": str(error)},
                    )
                    stop.wait(delay)

    def poll(self, pool: ThreadPoolExecutor, stop: threading.Event) -> int:
        """Receive one batch of messages and handle it; returns how many were received (0 when
        ``stop`` was set before the long poll answered)."""
        queue_url = self._resolve_queue()
        response = self._receive(queue_url, stop)
        if response is None:
            return 0
        raw = response.get("Messages") or []
        if not raw:
            return 0
        parsed = [parse_message(message.get("Body")) for message in raw]
        nodeclaims: list[dict[str, Any]] = []
        if any(m is not None and m.kind != NO_OP and m.instance_ids for m in parsed):
            nodeclaims = self._cluster.nodeclaims()
        # Workers see this thread's log context (the bound controller name).
        contexts = [contextvars.copy_context() for _ in raw]
        list(
            pool.map(
                lambda ctx, message, body: ctx.run(
                    self._handle, queue_url, body, message, nodeclaims
                ),
                contexts,
                parsed,
                raw,
            )
        )
        return len(raw)

    def _receive(self, queue_url: str, stop: threading.Event) -> Mapping[str, Any] | None:
        """One ReceiveMessage long poll, made in a daemon thread; its answer, or None once
        ``stop`` is set (the thread is left to finish on its own and never holds up exit)."""
        if stop.is_set():
            return None
        answer: Future[Mapping[str, Any]] = Future()

        def receive() -> None:
            try:
                answer.set_result(
                    self._provider.clients.sqs.receive_message(
                        QueueUrl=queue_url,
                        MaxNumberOfMessages=MAX_MESSAGES,
                        VisibilityTimeout=VISIBILITY_TIMEOUT,
                        WaitTimeSeconds=self._wait,
                    )
                )
            except BaseException as error:
                answer.set_exception(error)

        threading.Thread(target=receive, name="interruption-receive", daemon=True).start()
        while not wait((answer,), timeout=STOP_CHECK).done:
            if stop.is_set():
                return None
        return answer.result()

    def _resolve_queue(self) -> str:
        if self._queue_url is None:
            if "://" in self._queue:
                self._queue_url = self._queue
            else:
                sqs = self._provider.clients.sqs
                self._queue_url = sqs.get_queue_url(QueueName=self._queue)["QueueUrl"]
            self._log.info(
                "interruption: watching queue %s", self._queue_url, extra={"queue": self._queue}
            )
        return self._queue_url

    def _handle(
        self,
        queue_url: str,
        raw: Mapping[str, Any],
        message: InterruptionMessage | None,
        nodeclaims: Sequence[Mapping[str, Any]],
    ) -> None:
        if message is None:
            self._log.warning(
                "interruption: deleting a message that is not an EventBridge event",
                extra={"messageId": raw.get("MessageId", "")},
            )
            self._delete(queue_url, raw)
            return
        RECEIVED_MESSAGES.labels(message.kind).inc()
        node_uids: dict[str, str | None] = {}
        try:
            for action in decide(message, nodeclaims):
                self._apply(action, node_uids)
        except Exception as error:
            self._log.error(
                "interruption: handling %s message %s failed, it stays queued: %s",
                message.kind,
                message.id,
                error,
                extra={"messageKind": message.kind, "error": str(error)},
            )
            return
        if message.start_time is not None:
            waited = (self._context.clock() - message.start_time).total_seconds()
            MESSAGE_QUEUE_DURATION.observe(max(waited, 0.0))
        self._delete(queue_url, raw)

    def _apply(self, action: Action, node_uids: dict[str, str | None]) -> None:
        if isinstance(action, DeleteNodeClaim):
            if self._cluster.delete_nodeclaim(action.name):
                ACTIONS_PERFORMED.labels("CordonAndDrain").inc()
                metrics.nodeclaim_disrupted(action.reason, {wk.NODEPOOL: action.nodepool})
                self._log.info(
                    "interruption: deleting NodeClaim %s (%s)",
                    action.name,
                    action.reason,
                    extra={"nodeclaim": action.name, "messageKind": action.reason},
                )
        elif isinstance(action, MarkUnavailable):
            self._provider.unavailable.mark(
                wk.CAPACITY_TYPE_SPOT, action.instance_type, action.zone, action.reason
            )
            ACTIONS_PERFORMED.labels("MarkUnavailable").inc()
        else:
            self._publish(action, node_uids)

    def _publish(self, event: PublishEvent, node_uids: dict[str, str | None]) -> None:
        """Hand the event to the core's recorder (which drops recent duplicates); a failure is
        logged, never retried. Events about a Node carry its uid (looked up once per message);
        none is published when the Node is gone."""
        try:
            uid = event.uid
            if event.kind == "Node":
                if event.name not in node_uids:
                    node_uids[event.name] = self._cluster.node_uid(event.name)
                found = node_uids[event.name]
                if found is None:
                    return
                uid = found
            api_version = "v1" if event.kind == "Node" else f"{wk.GROUP}/{NODECLAIM_VERSION}"
            involved = {
                "apiVersion": api_version,
                "kind": event.kind,
                "metadata": {"name": event.name, "uid": uid},
            }
            if self._events.publish(involved, event.event_type, event.reason, event.message):
                ACTIONS_PERFORMED.labels("PublishEvent").inc()
        except Exception as error:
            self._log.warning(
                "interruption: cannot publish event %s about %s %s: %s",
                event.reason,
                event.kind,
                event.name,
                error,
                extra={"reason": event.reason},
            )

    def _delete(self, queue_url: str, raw: Mapping[str, Any]) -> None:
        self._provider.clients.sqs.delete_message(
            QueueUrl=queue_url, ReceiptHandle=raw["ReceiptHandle"]
        )
        DELETED_MESSAGES.inc()
