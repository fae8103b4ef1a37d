"""One in-memory view of the cluster, shared by every controller.

``ClusterState`` runs an informer per resource the core reads and decodes only what it needs:
pods and nodes into the scheduler's slotted ``PodInfo``/``NodeInfo`` (subclassed here with the
few fields controllers read besides scheduling), NodeClaims and NodePools into the API models,
everything else into trimmed dicts. Controllers feed their own writes back with
``update_nodeclaim`` / ``update_node`` so they see them before the watch does. ``snapshot``
builds the scheduler's input.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.scheduling.cluster import (
    check_budget,
    daemonset_pods,
    going,
    in_flight,
    limit_usage,
    not_launchable,
    paired,
    with_nodeclaim,
)
from karpenter_core.scheduling.snapshot import DecodeError, NodeInfo, PodInfo, Snapshot
from karpenter_core.state.informer import DELETED, Informer

log = logging.getLogger("karpenter.state")

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.cloudprovider.plugin import NodeClassInfo
    from karpenter_core.cloudprovider.types import InstanceType
    from karpenter_core.operator.kube import KubeClient

__all__ = ["ClusterNode", "ClusterPod", "ClusterState", "Paths"]

DEFAULT_SCHEDULER = "default-scheduler"
"""The kube-scheduler's name: its pods that wait for a decision may be provisioned early."""
_TRIMMED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


class Paths:
    """API collection paths of the watched resources."""

    PODS = "/api/v1/pods"
    NODES = "/api/v1/nodes"
    NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
    NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
    DAEMONSETS = "/apis/apps/v1/daemonsets"
    PDBS = "/apis/policy/v1/poddisruptionbudgets"
    PVS = "/api/v1/persistentvolumes"
    PVCS = "/api/v1/persistentvolumeclaims"
    STORAGE_CLASSES = "/apis/storage.k8s.io/v1/storageclasses"

    @staticmethod
    def nodeclass(info: NodeClassInfo) -> str:
        """The collection of a provider's NodeClass kind."""
        return f"/apis/{info.group}/{info.version}/{info.plural}"


def _time(value: Any) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch; None if absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class ClusterPod(PodInfo):
    """A pod: what the scheduler reads, plus its lifecycle as controllers read it."""

    __slots__ = (
        "awaiting_scheduler",
        "grace_period",
        "phase",
        "priority_class",
        "ready_time",
        "scheduled_time",
        "unschedulable",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.phase = "Pending"
        self.grace_period = 30
        """spec.terminationGracePeriodSeconds."""
        self.unschedulable = False
        """PodScheduled is False with reason Unschedulable (the kube-scheduler gave up)."""
        self.awaiting_scheduler = False
        """The kube-scheduler (``default-scheduler``) has not decided yet: no PodScheduled
        condition and no scheduling gate."""
        self.priority_class = ""
        self.ready_time: float | None = None
        """When the Ready condition last became True."""
        self.scheduled_time: float | None = None
        """When the PodScheduled condition became True (the pod was bound to its node)."""

    @classmethod
    def decode(cls, obj: Mapping[str, Any]) -> ClusterPod:
        """Decode a Pod object."""
        pod = cls.from_manifest(obj)
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        pod.phase = str(status.get("phase") or "Pending")
        grace = spec.get("terminationGracePeriodSeconds")
        pod.grace_period = int(grace) if grace is not None else 30
        pod.nominated_node = str(status.get("nominatedNodeName") or "")
        pod.priority_class = str(spec.get("priorityClassName") or "")
        conditions = status.get("conditions") or ()
        pod.awaiting_scheduler = (
            (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
            and not spec.get("schedulingGates")
            and not any(c.get("type") == "PodScheduled" for c in conditions)
        )
        for condition in conditions:
            kind = condition.get("type")
            if kind == "PodScheduled":
                pod.unschedulable = (
                    condition.get("status") == "False"
                    and condition.get("reason") == "Unschedulable"
                )
                if condition.get("status") == "True":
                    pod.scheduled_time = _time(condition.get("lastTransitionTime"))
            elif kind == "Ready" and condition.get("status") == "True":
                pod.ready_time = _time(condition.get("lastTransitionTime"))
        return pod

    def is_terminal(self) -> bool:
        """Succeeded or Failed."""
        return self.phase in ("Succeeded", "Failed")

    def is_pending(self) -> bool:
        """Provisionable, by upstream's rule: the kube-scheduler marked it Unschedulable, and it
        is not bound, terminating, preempting, DaemonSet-owned, a mirror pod or finished."""
        return self.unschedulable and self._unplaced()

    def is_provisionable(self) -> bool:
        """Pending, or unplaced and still waiting for the kube-scheduler's first decision (the
        provisioner places such pods on existing capacity first and launches only for those
        that fit nowhere, without waiting for the Unschedulable verdict)."""
        return (self.unschedulable or self.awaiting_scheduler) and self._unplaced()

    def _unplaced(self) -> bool:
        """Not bound, terminating, preempting, DaemonSet-owned, a mirror pod or finished."""
        return (
            not self.node_name
            and not self.terminating
            and not self.nominated_node
            and not self.is_daemon()
            and not self.is_mirror()
            and not self.is_terminal()
        )


class ClusterNode(NodeInfo):
    """A node: what the scheduler reads, plus what the lifecycle controllers read."""

    __slots__ = (
        "conditions",
        "deletion_time",
        "finalizers",
        "unschedulable",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conditions: dict[str, tuple[str, float | None]] = {}
        """Condition type -> (status, lastTransitionTime)."""
        self.deletion_time: float | None = None
        self.finalizers: tuple[str, ...] = ()
        self.unschedulable = False

    @classmethod
    def decode(cls, obj: Mapping[str, Any]) -> ClusterNode:
        """Decode a Node object."""
        node = cls.from_manifest(obj)
        meta = obj.get("metadata") or {}
        node.annotations = dict(meta.get("annotations") or {})
        for name in _TRIMMED_ANNOTATIONS:
            node.annotations.pop(name, None)
        node.created = _time(meta.get("creationTimestamp")) or 0.0
        node.deletion_time = _time(meta.get("deletionTimestamp"))
        node.finalizers = tuple(meta.get("finalizers") or ())
        node.unschedulable = bool((obj.get("spec") or {}).get("unschedulable"))
        node.conditions = {
            str(c.get("type")): (str(c.get("status")), _time(c.get("lastTransitionTime")))
            for c in (obj.get("status") or {}).get("conditions") or ()
        }
        return node

    def ready(self) -> bool:
        """The Ready condition is True."""
        return self.conditions.get("Ready", ("Unknown", None))[0] == "True"


def _trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without managedFields and kubectl's last-applied copy (memory)."""
    meta = obj.get("metadata")
    if meta:
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if annotations:
            for name in _TRIMMED_ANNOTATIONS:
                annotations.pop(name, None)
    return obj


def _daemonset(obj: Mapping[str, Any]) -> PodInfo:
    """A DaemonSet as the pod it runs on every node."""
    meta = obj.get("metadata") or {}
    template = (obj.get("spec") or {}).get("template") or {}
    pod_meta = dict(template.get("metadata") or {})
    pod_meta["ownerReferences"] = [
        {"kind": "DaemonSet", "name": meta.get("name", ""), "controller": True}
    ]
    return PodInfo.from_spec(
        str(meta.get("namespace") or "default"),
        str(meta.get("name") or ""),
        template.get("spec") or {},
        pod_meta,
    )


def _pdb(obj: dict[str, Any]) -> dict[str, Any]:
    """A PodDisruptionBudget, trimmed; one provisioning cannot read (``cluster.check_budget``)
    is kept, covering no pod as the Eviction API treats an invalid selector, with a warning."""
    try:
        check_budget(obj)
    except DecodeError as err:
        meta = obj.get("metadata") or {}
        log.warning(
            "PodDisruptionBudget %s/%s: %s: %s; it covers no pod",
            meta.get("namespace"),
            meta.get("name"),
            err.field,
            err.message,
        )
    return _trimmed(obj)


def _model_decoder(model: type[BaseModel]) -> Callable[[dict[str, Any]], Any]:
    return getattr(model, "from_manifest", model.model_validate)


class ClusterState:
    """The shared cluster view; thread-safe (one lock guards every cache)."""

    def __init__(
        self,
        client: KubeClient,
        node_classes: Sequence[NodeClassInfo] = (),
        *,
        watch_timeout: int = 300,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self._changed = threading.Condition(self.lock)
        self._generation = 0
        self._pending_callbacks: list[Callable[[ClusterPod], None]] = []
        self._running_callbacks: list[Callable[[ClusterPod], None]] = []
        self._pods_by_node: dict[str, set[str]] = {}
        self._node_by_provider_id: dict[str, str] = {}
        self._claim_by_provider_id: dict[str, str] = {}
        self._nominations: dict[str, tuple[str, float]] = {}
        self._nominated_until: dict[str, float] = {}
        """Node or NodeClaim name -> when its latest nomination ends (kept when the pod binds)."""
        self._nominated_kept = 0
        """Entries of ``_nominated_until`` after its last pruning (the expired ones are dropped
        whenever it has grown to twice that, plus 64)."""
        self._marked: set[str] = set()
        self._last_pod_event: dict[str, float] = {}
        """Node name -> when a pod was last bound to, or removed from, it: the newest of what the
        pod watch saw and the NodeClaim's persisted ``status.lastPodEventTime``; consolidateAfter
        counts from it."""

        def informer(path: str, decode: Callable[[dict[str, Any]], Any], **kw: Any) -> Informer:
            return Informer(client, path, decode, watch_timeout=watch_timeout, lock=self.lock, **kw)

        self.pods: Informer[ClusterPod] = informer(
            Paths.PODS,
            ClusterPod.decode,
            params={"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
        )
        self.nodes_informer: Informer[ClusterNode] = informer(Paths.NODES, ClusterNode.decode)
        self.nodeclaims_informer: Informer[NodeClaim] = informer(
            Paths.NODECLAIMS, NodeClaim.from_manifest
        )
        self.nodepools_informer: Informer[NodePool] = informer(
            Paths.NODEPOOLS, NodePool.from_manifest
        )
        self.daemonsets: Informer[PodInfo] = informer(Paths.DAEMONSETS, _daemonset)
        self.pdbs: Informer[dict[str, Any]] = informer(Paths.PDBS, _pdb)
        self.pvs: Informer[dict[str, Any]] = informer(Paths.PVS, _trimmed)
        self.pvcs: Informer[dict[str, Any]] = informer(Paths.PVCS, _trimmed)
        self.storage_classes: Informer[dict[str, Any]] = informer(Paths.STORAGE_CLASSES, _trimmed)
        self.nodeclasses: dict[str, Informer[Any]] = {
            info.kind: informer(Paths.nodeclass(info), _model_decoder(info.model))
            for info in node_classes
        }
        self.pods.add_handler(self._on_pod)
        self.nodes_informer.add_handler(self._on_node)
        self.nodeclaims_informer.add_handler(self._on_nodeclaim)
        for other in self.informers():
            other.add_handler(self._on_any)

    # -- lifecycle ------------------------------------------------------------------------

    def informers(self) -> list[Informer[Any]]:
        """Every informer the state runs."""
        return [
            self.pods,
            self.nodes_informer,
            self.nodeclaims_informer,
            self.nodepools_informer,
            self.daemonsets,
            self.pdbs,
            self.pvs,
            self.pvcs,
            self.storage_classes,
            *self.nodeclasses.values(),
        ]

    def start(self) -> ClusterState:
        """Start every informer."""
        for informer in self.informers():
            informer.start()
        return self

    def stop(self) -> None:
        """Stop every informer."""
        for informer in self.informers():
            informer.stop()

    def synced(self) -> bool:
        """Every informer has listed its collection once."""
        return all(informer.synced.is_set() for informer in self.informers())

    def running(self) -> bool:
        """Every informer's watch thread is alive."""
        return all(informer.running() for informer in self.informers())

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until synced; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for informer in self.informers():
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not informer.wait_for_sync(remaining):
                return False
        return True

    # -- change notification --------------------------------------------------------------

    def generation(self) -> int:
        """A counter bumped by every change (watched or written)."""
        return self._generation

    def wait_for_change(self, timeout: float, since: int | None = None) -> bool:
        """Block until the state changes after generation ``since`` (default: now);
        False on timeout."""
        with self._changed:
            start = self._generation if since is None else since
            return self._changed.wait_for(lambda: self._generation != start, timeout)

    def on_pod_running(self, callback: Callable[[ClusterPod], None]) -> None:
        """Call ``callback`` with each pod seen going from not running to Running."""
        self._running_callbacks.append(callback)

    def on_pending_pod(self, callback: Callable[[ClusterPod], None]) -> None:
        """Call ``callback(pod)`` whenever a pod is added or changed and is provisionable (see
        ``ClusterPod.is_provisionable``; the provisioner's batcher trigger). It runs on an
        informer thread: keep it short."""
        self._pending_callbacks.append(callback)

    def _on_any(self, kind: str, key: str, old: Any, new: Any) -> None:
        self._generation += 1
        self._changed.notify_all()

    # -- indexes --------------------------------------------------------------------------

    def _pod_event(self, node_name: str, when: float | None) -> None:
        """Record a pod event on a node (keeping the newest)."""
        if when is not None and when > self._last_pod_event.get(node_name, 0.0):
            self._last_pod_event[node_name] = when

    def _bound_pod_event(self, old: ClusterPod | None, new: ClusterPod, live: bool) -> float | None:
        """When the change to ``new`` (a bound pod) was a pod event on its node, if it was one."""
        if old is None or old.node_name != new.node_name:
            return new.scheduled_time or (self.clock() if live else None)
        if not old.terminating and new.terminating:
            return self.clock()
        return None

    def _on_pod(self, kind: str, key: str, old: ClusterPod | None, new: ClusterPod | None) -> None:
        # The first list replays every bound pod: only its recorded bind time is an event then.
        # Later, a bind counts from its PodScheduled time (else now); a removal or the start of
        # a pod's termination, from now. DaemonSet pods, and pods of nodes already gone, make
        # no events (as upstream).
        live = self.pods.synced.is_set()
        nodes = self.nodes_informer.cache
        if old is not None and old.node_name and (new is None or new.node_name != old.node_name):
            if old.node_name in nodes and not old.is_daemon():
                self._pod_event(old.node_name, self.clock())
            keys = self._pods_by_node.get(old.node_name)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._pods_by_node[old.node_name]
        if new is not None and new.node_name:
            if not new.is_daemon():
                self._pod_event(new.node_name, self._bound_pod_event(old, new, live))
            self._pods_by_node.setdefault(new.node_name, set()).add(key)
            self._nominations.pop(key, None)
        if new is None:
            self._nominations.pop(key, None)
        elif new.is_provisionable():
            for callback in self._pending_callbacks:
                callback(new)
        elif old is not None and old.phase != "Running" and new.phase == "Running":
            for callback in self._running_callbacks:
                callback(new)

    def _on_node(
        self, kind: str, key: str, old: ClusterNode | None, new: ClusterNode | None
    ) -> None:
        if old is not None and old.provider_id:
            self._node_by_provider_id.pop(old.provider_id, None)
        if new is not None and new.provider_id:
            self._node_by_provider_id[new.provider_id] = key
        if kind == DELETED:
            self._marked.discard(key)
            self._last_pod_event.pop(key, None)

    def _on_nodeclaim(
        self, kind: str, key: str, old: NodeClaim | None, new: NodeClaim | None
    ) -> None:
        if old is not None and old.status.provider_id:
            self._claim_by_provider_id.pop(old.status.provider_id, None)
        if new is not None and new.status.provider_id:
            self._claim_by_provider_id[new.status.provider_id] = key
        if new is not None and new.status.node_name and new.status.last_pod_event_time:
            self._pod_event(new.status.node_name, new.status.last_pod_event_time.timestamp())
        if kind == DELETED:
            self._marked.discard(key)
            if old is not None and old.status.node_name:
                self._last_pod_event.pop(old.status.node_name, None)

    # -- our own writes -------------------------------------------------------------------

    def update_nodeclaim(self, obj: Mapping[str, Any] | NodeClaim) -> NodeClaim | None:
        """Record a NodeClaim the apiserver returned from our create or patch."""
        manifest = obj.to_manifest() if isinstance(obj, NodeClaim) else dict(obj)
        return self.nodeclaims_informer.inject(manifest)

    def delete_nodeclaim(self, name: str) -> None:
        """Forget a NodeClaim we saw disappear (NotFound), before the watch says so."""
        self.nodeclaims_informer.forget(name)

    def update_node(self, obj: Mapping[str, Any]) -> ClusterNode | None:
        """Record a Node the apiserver returned from our create or patch."""
        return self.nodes_informer.inject(dict(obj))

    # -- reads ----------------------------------------------------------------------------

    def pending_pods(self, *, awaiting: bool = False) -> list[ClusterPod]:
        """Pods waiting for capacity (see ``ClusterPod.is_pending``); with ``awaiting``, also
        those still waiting for the kube-scheduler (``ClusterPod.is_provisionable``)."""
        with self.lock:
            return _pending(self.pods.cache.values(), awaiting)

    def pod(self, key: str) -> ClusterPod | None:
        """The pod ``namespace/name``."""
        return self.pods.cache.get(key)

    def pods_on(self, node_name: str) -> list[ClusterPod]:
        """The pods bound to a node."""
        with self.lock:
            cache = self.pods.cache
            return [cache[k] for k in self._pods_by_node.get(node_name, ()) if k in cache]

    def nodes(self) -> list[ClusterNode]:
        """Every node."""
        return self.nodes_informer.values()

    def node(self, name: str) -> ClusterNode | None:
        """The node named ``name``."""
        return self.nodes_informer.cache.get(name)

    def nodeclaims(self) -> list[NodeClaim]:
        """Every NodeClaim."""
        return self.nodeclaims_informer.values()

    def nodeclaim(self, name: str) -> NodeClaim | None:
        """The NodeClaim named ``name``."""
        return self.nodeclaims_informer.cache.get(name)

    def nodepools(self) -> list[NodePool]:
        """Every NodePool."""
        return self.nodepools_informer.values()

    def nodepool(self, name: str) -> NodePool | None:
        """The NodePool named ``name``."""
        return self.nodepools_informer.cache.get(name)

    def nodeclass(self, kind: str, name: str) -> Any:
        """A provider NodeClass object by kind and name."""
        informer = self.nodeclasses.get(kind)
        return informer.cache.get(name) if informer is not None else None

    def last_pod_event(self, node_name: str) -> float | None:
        """When a pod was last bound to or removed from the node (epoch seconds), if known."""
        with self.lock:
            return self._last_pod_event.get(node_name)

    def nodeclaim_for_node(self, node: NodeInfo | str) -> NodeClaim | None:
        """The NodeClaim whose providerID is the node's (a node or a providerID)."""
        provider_id = node if isinstance(node, str) else node.provider_id
        with self.lock:
            name = self._claim_by_provider_id.get(provider_id)
            return self.nodeclaims_informer.cache.get(name) if name else None

    def node_for_nodeclaim(self, claim: NodeClaim) -> ClusterNode | None:
        """The Node registered for a NodeClaim (by providerID)."""
        provider_id = claim.status.provider_id
        if not provider_id:
            return None
        with self.lock:
            name = self._node_by_provider_id.get(provider_id)
            return self.nodes_informer.cache.get(name) if name else None

    # -- decisions controllers share --------------------------------------------------------

    def nominate(self, pod_key: str, target: str, until: float | datetime) -> bool:
        """Record that a pod is expected to land on ``target`` (a node or NodeClaim name)
        until ``until`` (epoch seconds or an aware datetime); disruption leaves such targets
        alone. True if the pod was not already nominated to ``target`` (worth an event)."""
        expires = until.timestamp() if isinstance(until, datetime) else float(until)
        now = self.clock()
        with self.lock:
            previous = self._nominations.get(pod_key)
            self._nominations[pod_key] = (target, expires)
            ends = self._nominated_until
            if len(ends) > 2 * self._nominated_kept + 64:
                self._nominated_until = ends = {t: e for t, e in ends.items() if e > now}
                self._nominated_kept = len(ends)
            ends[target] = max(ends.get(target, 0.0), expires)
        return previous is None or previous[0] != target or previous[1] <= now

    def nominated(self, name: str) -> bool:
        """A pod was nominated to this node or NodeClaim and that nomination has not expired,
        even if the pod has bound since (elsewhere, perhaps: the kube-scheduler may still bind
        other pending pods to it), as upstream's nomination window."""
        now = self.clock()
        with self.lock:
            return self._nominated_until.get(name, 0.0) > now

    def nomination(self, pod_key: str) -> str | None:
        """Where a pod is nominated to, if the nomination is current."""
        with self.lock:
            target, until = self._nominations.get(pod_key, ("", 0.0))
        return target if target and until > self.clock() else None

    def mark_for_deletion(self, names: Iterable[str]) -> None:
        """Mark nodes or NodeClaims (by name) as going away; snapshots treat them as deleting."""
        with self.lock:
            self._marked.update(names)
            self._on_any("MARKED", "", None, None)

    def marked_for_deletion(self, name: str) -> bool:
        """Whether a node or NodeClaim (by name) is marked as going away."""
        with self.lock:
            return name in self._marked

    def unmark_for_deletion(self, names: Iterable[str]) -> None:
        """Undo ``mark_for_deletion`` (a disruption rolled back)."""
        with self.lock:
            self._marked.difference_update(names)
            self._on_any("UNMARKED", "", None, None)

    def being_deleted(self) -> list[str]:
        """The nodes being deleted or marked for deletion, by name, as snapshots mark them: the
        Node or its NodeClaim (``cluster.paired``) being deleted or marked."""
        with self.lock:
            nodes = list(self.nodes_informer.cache.values())
            claims = list(self.nodeclaims_informer.cache.values())
            marked = set(self._marked)
        pairs = paired(nodes, claims)
        return [node.name for node in nodes if going(node, pairs.get(node.name), marked)]

    def limit_usage(self, catalog: Mapping[str, InstanceType]) -> dict[str, dict[str, int]]:
        """What counts against each NodePool's limits now (``cluster.limit_usage``: the rule
        the scheduler plans with), ``catalog`` sizing NodeClaims not launched yet."""
        with self.lock:
            nodes = list(self.nodes_informer.cache.values())
            claims = list(self.nodeclaims_informer.cache.values())
            marked = set(self._marked)
        return limit_usage(nodes, claims, catalog, marked)

    # -- the scheduler's input --------------------------------------------------------------

    def snapshot(
        self,
        instance_types: Mapping[str, list[InstanceType]],
        pending: Sequence[PodInfo] | None = None,
        *,
        awaiting: bool = False,
    ) -> Snapshot:
        """The scheduler's input: the NodePools named in ``instance_types`` (in its order) that
        may launch (``cluster.not_launchable``), nodes with their bound pods (copies, seen with
        their NodeClaims: ``cluster.paired``, ``cluster.with_nodeclaim``; nodes or NodeClaims
        marked, or being deleted, are ``marked_for_deletion``), in-flight NodeClaims
        (``cluster.in_flight``: no Node yet, not deleting, not marked), DaemonSets as their newest pods
        (``cluster.daemonset_pods``), and the pending pods (``pending`` if given, else
        ``pending_pods(awaiting=awaiting)``), all as of one moment.

        Only references are taken under the lock (cached objects are replaced on change, never
        modified), so informers wait microseconds, not the whole build, for a large cluster."""
        with self.lock:
            nodes = list(self.nodes_informer.cache.values())
            pods = list(self.pods.cache.values())
            claims = list(self.nodeclaims_informer.cache.values())
            last_pod_event = dict(self._last_pod_event)
            marked = set(self._marked)
            nodepools = [
                pool
                for name in instance_types
                if (pool := self.nodepools_informer.cache.get(name)) is not None
                and not_launchable(pool) is None
            ]
            nodeclasses = [
                obj for informer in self.nodeclasses.values() for obj in informer.cache.values()
            ]
            daemonsets = list(self.daemonsets.cache.values())
            pdbs: list[Mapping[str, Any]] = list(self.pdbs.cache.values())
            pvs: list[Mapping[str, Any]] = list(self.pvs.cache.values())
            pvcs: list[Mapping[str, Any]] = list(self.pvcs.cache.values())
            storage_classes: list[Mapping[str, Any]] = list(self.storage_classes.cache.values())
        bound: dict[str, list[PodInfo]] = {}
        daemon_pods: list[PodInfo] = []
        for pod in pods:
            if pod.node_name:
                bound.setdefault(pod.node_name, []).append(pod)
            if pod.owner_kind == "DaemonSet":
                daemon_pods.append(pod)
        pairs = paired(nodes, claims)
        views: list[NodeInfo] = []
        for node in nodes:
            node.requirement_labels()  # on the cached node, so every snapshot's copy shares it
            view = copy.copy(node)
            view.pods = bound.get(node.name, [])
            view.last_pod_event = last_pod_event.get(node.name, 0.0)
            claim = pairs.get(node.name)
            with_nodeclaim(view, claim)
            if going(node, claim, marked):
                view.marked_for_deletion = view.deleting = True
            views.append(view)
        return Snapshot(
            nodepools=nodepools,
            instance_types=dict(instance_types),
            nodes=views,
            nodeclaims=in_flight(claims, nodes, marked),
            nodeclasses=nodeclasses,
            pending=list(pending if pending is not None else _pending(pods, awaiting)),
            daemonsets=daemonset_pods(daemonsets, daemon_pods),
            pdbs=pdbs,
            persistent_volumes=pvs,
            persistent_volume_claims=pvcs,
            storage_classes=storage_classes,
        )


def _pending(pods: Iterable[ClusterPod], awaiting: bool) -> list[ClusterPod]:
    """The pods ``ClusterState.pending_pods`` would return among ``pods``."""
    if awaiting:
        return [pod for pod in pods if pod.is_provisionable()]
    return [pod for pod in pods if pod.is_pending()]
