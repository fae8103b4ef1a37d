"""Invariants of a running controller, checked over what was observed while it ran.

Provider-agnostic and shared by the conformance suite's cluster level, the fault soak and the
scale-in benchmark. ``Snapshot`` is what one look at the cluster and at the provider's
``list()`` saw; the checks are pure functions over a time-ordered sequence of snapshots and
return ``Breach``es (empty when the invariant held):

- ``launched_twice``: no NodeClaim got a second instance;
- ``orphaned_instances``: no instance stayed without a NodeClaim longer than the GC window;
- ``pdb_violations``: no disruption took a PodDisruptionBudget below its healthy minimum;
- ``over_budget``: never more of a NodePool's nodes disrupted at once than its budget allows;
- ``pods_not_running``: every pod ended Running;
- ``stale_disruption_taints``: no node kept the ``karpenter.sh/disrupted`` taint without
  going away.

``observe`` takes a snapshot of a cluster and a provider; ``Recorder`` takes them in a thread.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.disruption.budgets import DRIFTED, EMPTY, UNDERUTILIZED, allowed_disruptions

if TYPE_CHECKING:
    from kubernetes import client as k8s

    from karpenter_core.apis.v1.nodeclaim import NodeClaim

__all__ = [
    "Breach",
    "ClaimView",
    "NodeView",
    "PDBView",
    "PodView",
    "Recorder",
    "Snapshot",
    "check_all",
    "launched_twice",
    "observe",
    "orphaned_instances",
    "over_budget",
    "pdb_violations",
    "pods_not_running",
    "stale_disruption_taints",
]

_REASONS = (EMPTY, DRIFTED, UNDERUTILIZED)


@dataclass(frozen=True, slots=True)
class Breach:
    """One violated invariant: which, and what was seen."""

    invariant: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.message}"


@dataclass(frozen=True, slots=True)
class ClaimView:
    """A NodeClaim: its instance (empty until launched), NodePool, and whether it is deleting."""

    provider_id: str = ""
    nodepool: str = ""
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class NodeView:
    """A Node: its NodePool, providerID, whether it carries the disrupted taint or is being
    deleted (or its NodeClaim is)."""

    nodepool: str = ""
    provider_id: str = ""
    disrupted_taint: bool = False
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod: namespace, labels, node, phase, and whether it is healthy (Running and Ready, not
    terminating)."""

    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    node: str = ""
    phase: str = "Pending"
    healthy: bool = False


@dataclass(frozen=True, slots=True)
class PDBView:
    """A PodDisruptionBudget: its selector's matchLabels, minAvailable or maxUnavailable (an
    int or a percentage), and the pods it expects (``status.expectedPods``)."""

    namespace: str
    name: str
    match_labels: Mapping[str, str]
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    expected: int = 0

    def selects(self, pod: PodView) -> bool:
        """Whether the PDB covers ``pod``."""
        return pod.namespace == self.namespace and all(
            pod.labels.get(k) == v for k, v in self.match_labels.items()
        )

    def desired_healthy(self, expected: int) -> int:
        """The fewest healthy pods the PDB allows, as the disruption controller computes it."""
        if self.min_available is not None:
            return _scaled(self.min_available, expected)
        if self.max_unavailable is not None:
            return max(expected - _scaled(self.max_unavailable, expected), 0)
        return 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one look saw, at ``at`` (seconds, monotonic): the provider's instances
    (providerID -> the NodeClaim it reports owning, "" if it does not say), NodeClaims and
    Nodes by name, pods by namespace/name, PDBs, and each NodePool's disruption budget limit
    (the most any reason may disrupt at once)."""

    at: float
    instances: Mapping[str, str] = field(default_factory=dict)
    nodeclaims: Mapping[str, ClaimView] = field(default_factory=dict)
    nodes: Mapping[str, NodeView] = field(default_factory=dict)
    pods: Mapping[str, PodView] = field(default_factory=dict)
    pdbs: Sequence[PDBView] = ()
    budgets: Mapping[str, int] = field(default_factory=dict)


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


# -- the invariants (pure) ---------------------------------------------------------------------


def launched_twice(snapshots: Sequence[Snapshot]) -> list[Breach]:
    """A NodeClaim whose providerID changed, or that two instances report as their owner."""
    breaches = []
    claimed: dict[str, str] = {}
    owned: dict[str, set[str]] = {}
    for snapshot in snapshots:
        for name, claim in snapshot.nodeclaims.items():
            before = claimed.get(name)
            if claim.provider_id and before and before != claim.provider_id:
                breaches.append(
                    Breach(
                        "launched-twice",
                        f"NodeClaim {name} had instance {before}, then {claim.provider_id}",
                    )
                )
            if claim.provider_id:
                claimed[name] = claim.provider_id
        for provider_id, owner in snapshot.instances.items():
            if owner:
                owned.setdefault(owner, set()).add(provider_id)
    for owner, instances in sorted(owned.items()):
        if len(instances) > 1:
            breaches.append(
                Breach(
                    "launched-twice",
                    f"NodeClaim {owner} owns {len(instances)} instances: {sorted(instances)}",
                )
            )
    return breaches


def orphaned_instances(snapshots: Sequence[Snapshot], gc_window: float) -> list[Breach]:
    """An instance no NodeClaim pointed at for longer than ``gc_window`` seconds."""
    unclaimed_since: dict[str, float] = {}
    reported: set[str] = set()
    breaches = []
    for snapshot in snapshots:
        claimed = {c.provider_id for c in snapshot.nodeclaims.values() if c.provider_id}
        for provider_id in list(unclaimed_since):
            if provider_id in claimed or provider_id not in snapshot.instances:
                del unclaimed_since[provider_id]
        for provider_id in snapshot.instances:
            if provider_id in claimed:
                continue
            since = unclaimed_since.setdefault(provider_id, snapshot.at)
            if snapshot.at - since > gc_window and provider_id not in reported:
                reported.add(provider_id)
                breaches.append(
                    Breach(
                        "orphaned-instance",
                        f"instance {provider_id} had no NodeClaim for "
                        f"{snapshot.at - since:.0f}s (GC window {gc_window:.0f}s)",
                    )
                )
    return breaches


def pdb_violations(snapshots: Sequence[Snapshot]) -> list[Breach]:
    """A PDB left with fewer healthy pods than it allows right after a pod it covers was
    disrupted: a healthy pod on a node being disrupted that is gone or unhealthy in the next
    snapshot."""
    breaches = []
    for before, after in itertools.pairwise(snapshots):
        disrupted = [
            key
            for key, pod in before.pods.items()
            if pod.healthy
            and _disrupting(before.nodes.get(pod.node), after.nodes.get(pod.node))
            and not (key in after.pods and after.pods[key].healthy)
        ]
        if not disrupted:
            continue
        for pdb in after.pdbs:
            lost = [key for key in disrupted if pdb.selects(before.pods[key])]
            if not lost:
                continue
            healthy = sum(1 for pod in after.pods.values() if pdb.selects(pod) and pod.healthy)
            expected = max([pdb.expected, *(p.expected for p in before.pdbs if p.name == pdb.name)])
            desired = pdb.desired_healthy(expected)
            if healthy < desired:
                breaches.append(
                    Breach(
                        "pdb-violated",
                        f"PDB {pdb.namespace}/{pdb.name} had {healthy} healthy pods (at least "
                        f"{desired} of {expected} required) after disrupting {sorted(lost)}",
                    )
                )
    return breaches


def _disrupting(before: NodeView | None, after: NodeView | None) -> bool:
    """Whether a node was being disrupted: tainted or deleting in either look, or gone."""
    if after is None:
        return before is not None
    return any(v is not None and (v.disrupted_taint or v.deleting) for v in (before, after))


def over_budget(snapshots: Sequence[Snapshot]) -> list[Breach]:
    """A NodePool with more nodes being disrupted (tainted or deleting) at once than its
    budget allows."""
    breaches = []
    worst: dict[str, int] = {}
    for snapshot in snapshots:
        counts: dict[str, int] = {}
        for node in snapshot.nodes.values():
            if node.nodepool and (node.disrupted_taint or node.deleting):
                counts[node.nodepool] = counts.get(node.nodepool, 0) + 1
        for pool, count in counts.items():
            limit = snapshot.budgets.get(pool)
            if limit is not None and count > limit and count > worst.get(pool, limit):
                worst[pool] = count
                breaches.append(
                    Breach(
                        "over-budget",
                        f"NodePool {pool} had {count} nodes disrupted at once; its budget "
                        f"allows {limit}",
                    )
                )
    return breaches


def pods_not_running(snapshot: Snapshot, namespaces: Iterable[str] | None = None) -> list[Breach]:
    """Pods (of ``namespaces``, if given) that are not Running in ``snapshot``."""
    wanted = None if namespaces is None else set(namespaces)
    return [
        Breach("pod-not-running", f"pod {key} is {pod.phase}")
        for key, pod in sorted(snapshot.pods.items())
        if (wanted is None or pod.namespace in wanted) and pod.phase != "Running"
    ]


def stale_disruption_taints(snapshots: Sequence[Snapshot], window: float) -> list[Breach]:
    """A node carrying the ``karpenter.sh/disrupted`` taint for longer than ``window`` seconds
    without being deleted."""
    since: dict[str, float] = {}
    reported: set[str] = set()
    breaches = []
    for snapshot in snapshots:
        for name in list(since):
            node = snapshot.nodes.get(name)
            if node is None or not node.disrupted_taint or node.deleting:
                del since[name]
        for name, node in snapshot.nodes.items():
            if not node.disrupted_taint or node.deleting:
                continue
            start = since.setdefault(name, snapshot.at)
            if snapshot.at - start > window and name not in reported:
                reported.add(name)
                breaches.append(
                    Breach(
                        "stale-disruption-taint",
                        f"node {name} kept the {wk.DISRUPTED_TAINT_KEY} taint for "
                        f"{snapshot.at - start:.0f}s without being deleted",
                    )
                )
    return breaches


def check_all(snapshots: Sequence[Snapshot], gc_window: float, taint_window: float) -> list[Breach]:
    """Every invariant over a run's snapshots (pods must be Running in the last one)."""
    if not snapshots:
        return []
    return [
        *launched_twice(snapshots),
        *orphaned_instances(snapshots, gc_window),
        *pdb_violations(snapshots),
        *over_budget(snapshots),
        *pods_not_running(snapshots[-1]),
        *stale_disruption_taints(snapshots, taint_window),
    ]


# -- collecting ----------------------------------------------------------------------------------


def observe(
    api: k8s.ApiClient,
    provider: Any,
    namespaces: Iterable[str] = (),
    nodepool: str | None = None,
    now: Callable[[], float] = time.monotonic,
) -> Snapshot:
    """A snapshot of the cluster (NodeClaims, Nodes, NodePools, and the pods and PDBs of
    ``namespaces``) and of ``provider.list()``; with ``nodepool``, only that NodePool's
    instances, NodeClaims and Nodes (as the provider and the objects label them)."""
    instances = [
        i
        for i in provider.list()
        if nodepool is None or i.metadata.labels.get(wk.NODEPOOL) == nodepool
    ]
    claims = {
        c["metadata"]["name"]: ClaimView(
            provider_id=(c.get("status") or {}).get("providerID", ""),
            nodepool=(c["metadata"].get("labels") or {}).get(wk.NODEPOOL, ""),
            deleting=bool(c["metadata"].get("deletionTimestamp")),
        )
        for c in _items(api, f"/apis/{wk.GROUP}/v1/nodeclaims")
    }
    if nodepool is not None:
        claims = {name: c for name, c in claims.items() if c.nodepool == nodepool}
    deleting = {c.provider_id for c in claims.values() if c.deleting and c.provider_id}
    nodes = {}
    for node in _items(api, "/api/v1/nodes"):
        metadata, spec = node["metadata"], node.get("spec") or {}
        provider_id = spec.get("providerID", "")
        nodes[metadata["name"]] = NodeView(
            nodepool=(metadata.get("labels") or {}).get(wk.NODEPOOL, ""),
            provider_id=provider_id,
            disrupted_taint=any(
                t.get("key") == wk.DISRUPTED_TAINT_KEY for t in spec.get("taints") or ()
            ),
            deleting=bool(metadata.get("deletionTimestamp")) or provider_id in deleting,
        )
    if nodepool is not None:
        nodes = {name: n for name, n in nodes.items() if n.nodepool == nodepool}
    pods: dict[str, PodView] = {}
    pdbs: list[PDBView] = []
    for namespace in namespaces:
        for pod in _items(api, f"/api/v1/namespaces/{namespace}/pods"):
            pods[f"{namespace}/{pod['metadata']['name']}"] = _pod_view(pod)
        pdbs += [
            _pdb_view(p)
            for p in _items(api, f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets")
        ]
    counts: dict[str, int] = {}
    for view in nodes.values():
        if view.nodepool:
            counts[view.nodepool] = counts.get(view.nodepool, 0) + 1
    budgets = {}
    moment = datetime.now(UTC)
    for pool in _items(api, f"/apis/{wk.GROUP}/v1/nodepools"):
        name = pool["metadata"]["name"]
        if nodepool is not None and name != nodepool:
            continue
        listed = ((pool.get("spec") or {}).get("disruption") or {}).get("budgets")
        budget = listed if listed is not None else [{"nodes": "10%"}]
        total = counts.get(name, 0)
        budgets[name] = max(
            allowed_disruptions(budget, reason, total, 0, moment) for reason in _REASONS
        )
    return Snapshot(
        at=now(),
        instances={
            i.status.provider_id: _owner(i, claims) for i in instances if i.status.provider_id
        },
        nodeclaims=claims,
        nodes=nodes,
        pods=pods,
        pdbs=pdbs,
        budgets=budgets,
    )


def _owner(instance: NodeClaim, claims: Mapping[str, ClaimView]) -> str:
    """The NodeClaim an instance reports, when its name or ``karpenter.sh/nodeclaim`` label
    names one."""
    name = instance.metadata.labels.get(f"{wk.GROUP}/nodeclaim") or instance.metadata.name or ""
    return name if name in claims else ""


def _pod_view(pod: Mapping[str, Any]) -> PodView:
    metadata, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    phase = status.get("phase", "Pending")
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return PodView(
        namespace=metadata.get("namespace", ""),
        labels=dict(metadata.get("labels") or {}),
        node=spec.get("nodeName", ""),
        phase=phase,
        healthy=phase == "Running" and ready and not metadata.get("deletionTimestamp"),
    )


def _pdb_view(pdb: Mapping[str, Any]) -> PDBView:
    metadata, spec = pdb["metadata"], pdb.get("spec") or {}
    return PDBView(
        namespace=metadata["namespace"],
        name=metadata["name"],
        match_labels=dict((spec.get("selector") or {}).get("matchLabels") or {}),
        min_available=spec.get("minAvailable"),
        max_unavailable=spec.get("maxUnavailable"),
        expected=int((pdb.get("status") or {}).get("expectedPods") or 0),
    )


def _items(api: k8s.ApiClient, path: str) -> list[dict[str, Any]]:
    method, url, headers, _, _ = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers)
    data = response.read()
    if response.status >= 300:
        raise RuntimeError(f"GET {path}: {response.status} {data[:200]!r}")
    return list(json.loads(data)["items"])


class Recorder:
    """Takes a snapshot every ``interval`` seconds in a thread until stopped; a look that fails
    (the apiserver or the cloud blinking) is skipped, counted in ``failures`` and kept as
    ``last_error`` (so a look that can never succeed is told apart from a clean record)."""

    def __init__(
        self,
        look: Callable[[], Snapshot],
        interval: float = 0.25,
    ) -> None:
        self.look = look
        self.interval = interval
        self.snapshots: list[Snapshot] = []
        self.failures = 0
        self.last_error = ""
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="invariants", daemon=True)

    def start(self) -> Recorder:
        """Start recording."""
        self._thread.start()
        return self

    def stop(self) -> list[Snapshot]:
        """Stop, take one last snapshot, and return them all."""
        self._halt.set()
        self._thread.join(30)
        self._take()
        return self.snapshots

    def _run(self) -> None:
        while not self._halt.is_set():
            self._take()
            self._halt.wait(self.interval)

    def _take(self) -> None:
        try:
            self.snapshots.append(self.look())
        except Exception as error:  # a failed look is a gap in the record, not a verdict
            self.failures += 1
            self.last_error = f"{type(error).__name__}: {error}"
