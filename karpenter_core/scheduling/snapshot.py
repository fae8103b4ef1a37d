"""The scheduler's input: one explicit snapshot of the cluster, in slim slotted structures.

``simulate`` builds it from manifests and the controller from its watches; both decode the same
Kubernetes JSON through the ``from_manifest`` constructors here, keeping only what scheduling reads.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Self

from karpenter_core.apis import labels as wk
from karpenter_core.apis.duration import DurationError, parse_duration
from karpenter_core.apis.quantity import QuantityError, parse_quantity, to_milli
from karpenter_core.apis.requirements import Requirements
from karpenter_core.scheduling.taints import Taint, Toleration

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.types import InstanceType

__all__ = [
    "DecodeError",
    "NodeInfo",
    "PodInfo",
    "Snapshot",
    "describe_value",
    "pod_requests",
    "timestamp",
]

PODS = "pods"


class DecodeError(ValueError):
    """A Kubernetes object field could not be read; ``field`` is its JSON path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def describe_value(value: Any) -> str:
    """A short description of a parsed YAML or JSON value for messages: ``a mapping``,
    ``'text'``, ``3``."""
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _resources(
    obj: Mapping[str, Any] | None, path: str, *, allow_negative: bool = False
) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, raw in (obj or {}).items():
        try:
            amount = parse_quantity(raw)
        except QuantityError as err:
            raise DecodeError(f"{path}.{name}", str(err)) from None
        if amount < 0 and not allow_negative:
            raise DecodeError(f"{path}.{name}", f"{raw!r} is negative")
        out[name] = to_milli(amount)
    return out


def _container_requests(container: Mapping[str, Any], path: str) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = _resources(resources.get("requests"), f"{path}.resources.requests")
    limits = _resources(resources.get("limits"), f"{path}.resources.limits")
    for name, amount in limits.items():
        requests.setdefault(name, amount)
    return requests


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def pod_requests(spec: Mapping[str, Any], path: str = "spec") -> dict[str, int]:
    """Effective requests of a pod spec, as the kube-scheduler computes them.

    Containers and restartable (sidecar) init containers add up; each ordinary init container
    needs its own request plus the sidecars started before it; the larger wins. Pod overhead is
    added, and every pod takes one ``pods`` slot.
    """
    total: dict[str, int] = {}
    for i, container in enumerate(spec.get("containers") or ()):
        _add(total, _container_requests(container, f"{path}.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(spec.get("initContainers") or ()):
        requests = _container_requests(container, f"{path}.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            continue
        for name, amount in requests.items():
            init_peak[name] = max(init_peak.get(name, 0), amount + sidecars.get(name, 0))
    _add(total, sidecars)
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    _add(total, _resources(spec.get("overhead"), f"{path}.overhead"))
    total[PODS] = total.get(PODS, 0) + 1000
    return total


def timestamp(value: Any) -> float:
    """Seconds since the epoch of a Kubernetes timestamp (0 when absent or unreadable)."""
    if not value:
        return 0.0
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@lru_cache(maxsize=256)
def _protection(value: str) -> float | None:
    """Seconds a ``karpenter.sh/do-not-disrupt`` duration protects a pod; None when the value
    is not a positive Go duration (upstream then ignores the annotation)."""
    try:
        seconds = parse_duration(value).total_seconds()
    except DurationError:
        return None
    return seconds if seconds > 0 else None


class PodInfo:
    """A pod as the scheduler sees it."""

    __slots__ = (
        "annotations",
        "created",
        "ephemeral_claims",
        "host_ports",
        "key",
        "labels",
        "name",
        "namespace",
        "node_affinity_preferred",
        "node_affinity_required",
        "node_name",
        "node_selector",
        "nominated_node",
        "not_ready",
        "owner_kind",
        "owner_name",
        "pod_affinity",
        "pod_anti_affinity",
        "priority",
        "requests",
        "start_time",
        "terminating",
        "tolerations",
        "topology_spread",
        "uid",
        "volume_claims",
    )

    def __init__(
        self,
        namespace: str,
        name: str,
        requests: Mapping[str, int],
        *,
        uid: str = "",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
        node_affinity_required: Sequence[Sequence[Mapping[str, Any]]] = (),
        node_affinity_preferred: Sequence[tuple[int, Sequence[Mapping[str, Any]]]] = (),
        tolerations: Sequence[Toleration] = (),
        node_name: str | None = None,
        owner_kind: str = "",
        owner_name: str = "",
        priority: int = 0,
        created: float = 0.0,
        host_ports: Sequence[tuple[str, int, str]] = (),
        volume_claims: Sequence[str] = (),
        ephemeral_claims: Sequence[tuple[str, Mapping[str, Any]]] = (),
        topology_spread: Sequence[Mapping[str, Any]] = (),
        pod_affinity: Mapping[str, Any] | None = None,
        pod_anti_affinity: Mapping[str, Any] | None = None,
        nominated_node: str | None = None,
        terminating: bool = False,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.key = f"{namespace}/{name}"
        self.uid = uid or self.key
        self.requests: dict[str, int] = dict(requests)
        self.labels = dict(labels or {})
        self.annotations = dict(annotations or {})
        self.node_selector = dict(node_selector or {})
        self.node_affinity_required = tuple(tuple(term) for term in node_affinity_required)
        self.node_affinity_preferred = tuple(
            (weight, tuple(term)) for weight, term in node_affinity_preferred
        )
        self.tolerations = tuple(tolerations)
        self.node_name = node_name
        self.owner_kind = owner_kind
        self.owner_name = owner_name
        self.priority = priority
        self.created = created
        self.host_ports = tuple(host_ports)
        self.volume_claims = tuple(volume_claims)
        self.ephemeral_claims = tuple(ephemeral_claims)
        """Generic ephemeral volumes: (volume name, claim template spec). Each is the claim
        ``<pod>-<volume>``, made from the template when it does not exist yet."""
        self.topology_spread = tuple(topology_spread)
        self.pod_affinity = pod_affinity
        self.pod_anti_affinity = pod_anti_affinity
        self.nominated_node = nominated_node
        self.terminating = terminating
        """Asked to terminate (``metadata.deletionTimestamp`` set)."""
        self.start_time: float | None = None
        """When the kubelet started the pod (``status.startTime``; None: not known)."""
        self.not_ready = False
        """The pod's Ready condition is False (an unhealthy pod to a PodDisruptionBudget)."""

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any]) -> Self:
        """Decode a Pod object; raise ``DecodeError`` naming the field on bad input."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        pod = cls.from_spec(
            str(meta.get("namespace") or "default"),
            str(meta.get("name") or ""),
            spec,
            meta,
        )
        status = obj.get("status") or {}
        pod.nominated_node = status.get("nominatedNodeName") or None
        pod.start_time = timestamp(status.get("startTime")) or None
        pod.not_ready = any(
            c.get("type") == "Ready" and c.get("status") == "False"
            for c in status.get("conditions") or ()
        )
        return pod

    @classmethod
    def from_spec(
        cls, namespace: str, name: str, spec: Mapping[str, Any], meta: Mapping[str, Any]
    ) -> Self:
        """Decode a pod from its spec and metadata (for pod templates too)."""
        affinity = spec.get("affinity") or {}
        node_affinity = affinity.get("nodeAffinity") or {}
        required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
            "nodeSelectorTerms"
        ) or ()
        preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        owners = meta.get("ownerReferences") or ()
        owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
        host_ports = tuple(
            (
                str(port.get("hostIP") or "0.0.0.0"),
                int(port["hostPort"]),
                str(port.get("protocol") or "TCP"),
            )
            for container in spec.get("containers") or ()
            for port in container.get("ports") or ()
            if port.get("hostPort")
        )
        claims = tuple(
            str(volume["persistentVolumeClaim"]["claimName"])
            for volume in spec.get("volumes") or ()
            if volume.get("persistentVolumeClaim")
        )
        ephemeral = tuple(
            (
                str(volume.get("name") or ""),
                (volume["ephemeral"].get("volumeClaimTemplate") or {}).get("spec") or {},
            )
            for volume in spec.get("volumes") or ()
            if volume.get("ephemeral")
        )
        return cls(
            namespace,
            name,
            pod_requests(spec),
            uid=str(meta.get("uid") or ""),
            labels=meta.get("labels") or {},
            annotations=meta.get("annotations") or {},
            node_selector=spec.get("nodeSelector") or {},
            node_affinity_required=[term.get("matchExpressions") or () for term in required],
            node_affinity_preferred=[
                (int(p.get("weight", 1)), (p.get("preference") or {}).get("matchExpressions") or ())
                for p in preferred
            ],
            tolerations=[Toleration.from_manifest(t) for t in spec.get("tolerations") or ()],
            node_name=spec.get("nodeName") or None,
            owner_kind=str(owner.get("kind") or ""),
            owner_name=str(owner.get("name") or ""),
            priority=int(spec.get("priority") or 0),
            created=timestamp(meta.get("creationTimestamp")),
            host_ports=host_ports,
            volume_claims=claims,
            ephemeral_claims=ephemeral,
            topology_spread=spec.get("topologySpreadConstraints") or (),
            pod_affinity=affinity.get("podAffinity"),
            pod_anti_affinity=affinity.get("podAntiAffinity"),
            terminating=bool(meta.get("deletionTimestamp")),
        )

    def renamed(self, name: str) -> PodInfo:
        """A copy named ``name`` (uid from the new key), as a controller stamps out replicas.

        Decoding a template once and renaming it is much faster than decoding every replica.
        """
        clone = copy.copy(self)
        clone.name = name
        clone.key = f"{self.namespace}/{name}"
        clone.uid = clone.key
        clone.requests = dict(self.requests)
        clone.labels = dict(self.labels)
        clone.annotations = dict(self.annotations)
        clone.node_selector = dict(self.node_selector)
        return clone

    def is_daemon(self) -> bool:
        """Owned by a DaemonSet (its capacity is counted as node overhead instead)."""
        return self.owner_kind == "DaemonSet"

    def is_mirror(self) -> bool:
        """A static pod's mirror (the kubelet runs it)."""
        return wk.MIRROR_POD in self.annotations

    def do_not_disrupt_active(self, now: float) -> bool:
        """The ``karpenter.sh/do-not-disrupt`` annotation protects the pod at ``now`` (seconds
        since the epoch), as upstream reads it: "true" always; a positive duration ("2m", "4h")
        from the pod's start for that long (always while the start is not known); any other
        value not at all."""
        value = self.annotations.get(wk.DO_NOT_DISRUPT)
        if value is None:
            return False
        if value == "true":
            return True
        protected = _protection(value)
        if protected is None:
            return False
        return self.start_time is None or now - self.start_time < protected

    def do_not_disrupt_until(self) -> float | None:
        """When a duration-valued ``karpenter.sh/do-not-disrupt`` stops protecting the pod
        (seconds since the epoch); None for no annotation, "true", an unreadable value or a
        pod whose start is not known."""
        value = self.annotations.get(wk.DO_NOT_DISRUPT)
        if value is None or value == "true" or self.start_time is None:
            return None
        protected = _protection(value)
        return None if protected is None else self.start_time + protected

    def __repr__(self) -> str:
        return f"PodInfo({self.key})"


class NodeInfo:
    """An existing node with the pods bound to it."""

    __slots__ = (
        "_cached_usage",
        "_label_requirements",
        "_requirement_labels",
        "allocatable",
        "annotations",
        "capacity",
        "created",
        "deleting",
        "initialized",
        "labels",
        "last_pod_event",
        "marked_for_deletion",
        "name",
        "nodeclaim",
        "nodepool",
        "not_ready",
        "pods",
        "provider_id",
        "taints",
        "unclaimed",
    )

    def __init__(
        self,
        name: str,
        labels: Mapping[str, str],
        allocatable: Mapping[str, int],
        *,
        capacity: Mapping[str, int] | None = None,
        taints: Sequence[Taint] = (),
        pods: Sequence[PodInfo] = (),
        provider_id: str = "",
        initialized: bool = True,
        deleting: bool = False,
        marked_for_deletion: bool = False,
        annotations: Mapping[str, str] | None = None,
        created: float = 0.0,
    ) -> None:
        self.name = name
        self.labels = dict(labels)
        self.labels.setdefault(wk.HOSTNAME, name)
        self.allocatable: dict[str, int] = dict(allocatable)
        self.capacity: dict[str, int] = dict(capacity or allocatable)
        self.taints = tuple(taints)
        self.pods = list(pods)
        self.provider_id = provider_id
        self.nodepool = self.labels.get(wk.NODEPOOL)
        self.initialized = initialized
        self.marked_for_deletion = marked_for_deletion
        """Being deleted (the Node, or its NodeClaim), or marked for deletion by disruption:
        its pods are provisioned for again (``cluster.rescheduled_pods``)."""
        self.deleting = deleting or marked_for_deletion
        """Takes no new pods: marked for deletion, or cordoned (``spec.unschedulable``)."""
        self.not_ready = False
        """The node reports a Ready condition that is not True (disruption budgets count it as
        disrupting)."""
        self.annotations = dict(annotations or {})
        self.created = created
        self.last_pod_event = 0.0
        """When a pod was last bound to or removed from the node (0: unknown)."""
        self.nodeclaim: NodeClaim | None = None
        """The node's NodeClaim, when the snapshot pairs one with it (``cluster.with_nodeclaim``)."""
        self.unclaimed = False
        """Labelled with a NodePool but known to have no NodeClaim: Karpenter did not launch
        it (or its NodeClaim is gone), so it is no disruption candidate, as upstream."""
        self._label_requirements: Requirements | None = None
        self._requirement_labels: dict[str, str] | None = None
        self._cached_usage: (
            tuple[list[PodInfo], int, dict[str, int], frozenset[tuple[str, int, str]]] | None
        ) = None

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any]) -> Self:
        """Decode a Node object (allocatable falls back to capacity)."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        labels = meta.get("labels") or {}
        capacity = status.get("capacity") or status.get("allocatable") or {}
        allocatable = status.get("allocatable") or capacity
        taints = tuple(Taint.from_manifest(t) for t in spec.get("taints") or ())
        node = cls(
            str(meta.get("name") or ""),
            meta.get("labels") or {},
            _resources(allocatable, "status.allocatable"),
            capacity=_resources(capacity, "status.capacity"),
            taints=taints,
            provider_id=str(spec.get("providerID") or ""),
            # Karpenter labels its nodes once initialized; a node it does not manage is ready.
            initialized=labels.get(
                wk.NODE_INITIALIZED, "false" if wk.NODEPOOL in labels else "true"
            )
            == "true",
            annotations=meta.get("annotations") or {},
            created=timestamp(meta.get("creationTimestamp")),
            deleting=bool(spec.get("unschedulable")),
            marked_for_deletion=bool(meta.get("deletionTimestamp")),
        )
        node.not_ready = any(
            c.get("type") == "Ready" and c.get("status") != "True"
            for c in status.get("conditions") or ()
        )
        return node

    def relabel(self, labels: Mapping[str, str]) -> None:
        """Replace the node's labels, and what is derived from them."""
        self.labels = dict(labels)
        self.labels.setdefault(wk.HOSTNAME, self.name)
        self.nodepool = self.labels.get(wk.NODEPOOL)
        self._label_requirements = None
        self._requirement_labels = None

    def label_requirements(self) -> Requirements:
        """The node's labels as requirements (computed once: labels change only through
        ``relabel``; copies share the result)."""
        if self._label_requirements is None:
            self._label_requirements = Requirements.from_labels(self.labels)
        return self._label_requirements

    def requirement_labels(self) -> dict[str, str]:
        """``label_requirements().labels()`` (well-known keys normalized), computed once too (do
        not modify)."""
        if self._requirement_labels is None:
            self._requirement_labels = self.label_requirements().labels()
        return self._requirement_labels

    def requested(self) -> dict[str, int]:
        """The sum of the bound pods' requests (do not modify the result)."""
        return self._usage()[0]

    def host_ports(self) -> frozenset[tuple[str, int, str]]:
        """Host ports the bound pods use."""
        return self._usage()[1]

    def _usage(self) -> tuple[dict[str, int], frozenset[tuple[str, int, str]]]:
        # Cached while the pod list is the same list of the same length: simulations build many
        # schedulers over the same nodes.
        cached = self._cached_usage
        if cached is not None and cached[0] is self.pods and cached[1] == len(self.pods):
            return cached[2], cached[3]
        total: dict[str, int] = {}
        for pod in self.pods:
            _add(total, pod.requests)
        ports = frozenset(port for pod in self.pods for port in pod.host_ports)
        self._cached_usage = (self.pods, len(self.pods), total, ports)
        return total, ports

    def __repr__(self) -> str:
        return f"NodeInfo({self.name})"


@dataclass(slots=True)
class Snapshot:
    """Everything one scheduling decision reads."""

    nodepools: list[NodePool] = field(default_factory=list)
    instance_types: dict[str, list[InstanceType]] = field(default_factory=dict)
    nodes: list[NodeInfo] = field(default_factory=list)
    nodeclaims: list[NodeClaim] = field(default_factory=list)
    """In-flight NodeClaims (launched, not yet a Node)."""
    nodeclasses: list[BaseModel] = field(default_factory=list)
    """The provider's NodeClass objects."""
    pending: list[PodInfo] = field(default_factory=list)
    daemonsets: list[PodInfo] = field(default_factory=list)
    pdbs: list[Mapping[str, Any]] = field(default_factory=list)
    persistent_volumes: list[Mapping[str, Any]] = field(default_factory=list)
    persistent_volume_claims: list[Mapping[str, Any]] = field(default_factory=list)
    storage_classes: list[Mapping[str, Any]] = field(default_factory=list)
