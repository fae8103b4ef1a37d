"""Builders for the scheduling scenarios: a small explicit catalog, NodePools, and pods, nodes,
NodeClaims and volumes written as the Kubernetes JSON they are, decoded by the same
``from_manifest`` constructors the controller uses.

The catalog, in zones zone-a, zone-b and zone-c, every type offered spot and on-demand in each
(spot at 0.7 x on-demand, the same price in every zone, so ties go to zone-a), with 100m CPU
kube-reserved:

    type    arch   CPU  memory  on-demand  spot    usable CPU
    c-2     amd64  2    4Gi     0.10       0.07    1.9
    arm-2   arm64  2    4Gi     0.12       0.084   1.9
    c-4     amd64  4    8Gi     0.20       0.14    3.9
    arm-4   arm64  4    8Gi     0.24       0.168   3.9
    c-8     amd64  8    16Gi    0.40       0.28    7.9
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import InstanceType, Offering, Overhead
from karpenter_core.scheduling.scheduler import NewNodeClaim, Results, schedule
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ARCH = "kubernetes.io/arch"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
NODEPOOL = "karpenter.sh/nodepool"

ZONES = ("zone-a", "zone-b", "zone-c")
CAPACITY_TYPES = ("spot", "on-demand")
SPOT_FACTOR = 0.7
GI = 2**30 * 1000  # memory in milli-bytes, as the scheduler keeps it


def instance_type(
    name: str,
    cpu: int,
    memory_gi: int,
    price: float,
    *,
    arch: str = "amd64",
    zones: Sequence[str] = ZONES,
    capacity_types: Sequence[str] = CAPACITY_TYPES,
    pods: int = 110,
) -> InstanceType:
    """An instance type offered in every zone and capacity type given; spot at 0.7 x ``price``."""
    offerings = [
        Offering(
            Requirements.from_labels({ZONE: zone, CAPACITY_TYPE: capacity_type}),
            round(price * (SPOT_FACTOR if capacity_type == "spot" else 1.0), 6),
        )
        for zone in zones
        for capacity_type in capacity_types
    ]
    requirements = Requirements.from_labels(
        {INSTANCE_TYPE: name, ARCH: arch, "kubernetes.io/os": "linux"}
    )
    requirements.add(
        *Requirements.from_node_selector(
            [
                {"key": ZONE, "operator": "In", "values": list(zones)},
                {"key": CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)},
            ]
        ).values()
    )
    capacity = {"cpu": cpu * 1000, "memory": memory_gi * GI, "pods": pods * 1000}
    return InstanceType(
        name, requirements, offerings, capacity, Overhead(kube_reserved={"cpu": 100})
    )


CATALOG = [
    instance_type("c-2", 2, 4, 0.10),
    instance_type("arm-2", 2, 4, 0.12, arch="arm64"),
    instance_type("c-4", 4, 8, 0.20),
    instance_type("arm-4", 4, 8, 0.24, arch="arm64"),
    instance_type("c-8", 8, 16, 0.40),
]


def nodepool(
    name: str = "default",
    *,
    requirements: Sequence[Mapping[str, Any]] = (),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    weight: int | None = None,
    limits: Mapping[str, str] | None = None,
) -> NodePool:
    """A NodePool, from its manifest."""
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": dict(labels or {})},
            "spec": {
                "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
                "requirements": [dict(r) for r in requirements],
                "taints": [dict(t) for t in taints],
            },
        }
    }
    if weight is not None:
        spec["weight"] = weight
    if limits:
        spec["limits"] = dict(limits)
    return NodePool.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def zones_in(*zones: str) -> dict[str, Any]:
    """A NodePool (or pod) requirement: the zone is one of ``zones``."""
    return {"key": ZONE, "operator": "In", "values": list(zones)}


# --- pods -----------------------------------------------------------------------------------------


def selector(
    match_labels: Mapping[str, str] | None = None,
    match_expressions: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A metav1.LabelSelector."""
    out: dict[str, Any] = {}
    if match_labels is not None:
        out["matchLabels"] = dict(match_labels)
    if match_expressions is not None:
        out["matchExpressions"] = [dict(e) for e in match_expressions]
    return out


def spread(
    key: str,
    *,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    match_labels: Mapping[str, str] | None = None,
    label_selector: Mapping[str, Any] | None = None,
    min_domains: int | None = None,
    match_label_keys: Sequence[str] | None = None,
    node_affinity_policy: str | None = None,
    node_taints_policy: str | None = None,
) -> dict[str, Any]:
    """A topologySpreadConstraint (no labelSelector unless one is given)."""
    out: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    if label_selector is not None:
        out["labelSelector"] = dict(label_selector)
    elif match_labels is not None:
        out["labelSelector"] = selector(match_labels)
    if min_domains is not None:
        out["minDomains"] = min_domains
    if match_label_keys is not None:
        out["matchLabelKeys"] = list(match_label_keys)
    if node_affinity_policy is not None:
        out["nodeAffinityPolicy"] = node_affinity_policy
    if node_taints_policy is not None:
        out["nodeTaintsPolicy"] = node_taints_policy
    return out


def term(
    key: str,
    match_labels: Mapping[str, str],
    *,
    namespaces: Sequence[str] | None = None,
    namespace_selector: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A PodAffinityTerm."""
    out: dict[str, Any] = {"labelSelector": selector(match_labels), "topologyKey": key}
    if namespaces is not None:
        out["namespaces"] = list(namespaces)
    if namespace_selector is not None:
        out["namespaceSelector"] = dict(namespace_selector)
    return out


def affinity(
    required: Sequence[Mapping[str, Any]] = (),
    preferred: Sequence[tuple[int, Mapping[str, Any]]] = (),
) -> dict[str, Any]:
    """A podAffinity or podAntiAffinity block."""
    out: dict[str, Any] = {}
    if required:
        out["requiredDuringSchedulingIgnoredDuringExecution"] = [dict(t) for t in required]
    if preferred:
        out["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": weight, "podAffinityTerm": dict(t)} for weight, t in preferred
        ]
    return out


def pod_manifest(
    name: str,
    *,
    namespace: str = "default",
    cpu: str = "100m",
    memory: str = "128Mi",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_terms: Sequence[Sequence[Mapping[str, Any]]] = (),
    node_preferences: Sequence[tuple[int, Sequence[Mapping[str, Any]]]] = (),
    spread_constraints: Sequence[Mapping[str, Any]] = (),
    pod_affinity: Mapping[str, Any] | None = None,
    pod_anti_affinity: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    host_ports: Sequence[int | tuple[int, str]] = (),
    claims: Sequence[str] = (),
    ephemeral: Mapping[str, str | None] | None = None,
    node_name: str | None = None,
    owner: tuple[str, str] | None = None,
    status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A v1 Pod with one container, every field where Kubernetes puts it. ``ephemeral`` maps
    generic ephemeral volumes to their claim template's storageClassName (None: not given)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.9",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    if host_ports:
        container["ports"] = [
            {
                "containerPort": port if isinstance(port, int) else port[0],
                "hostPort": port if isinstance(port, int) else port[0],
                "protocol": "TCP" if isinstance(port, int) else port[1],
            }
            for port in host_ports
        ]
    spec: dict[str, Any] = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    node_affinity: dict[str, Any] = {}
    if node_terms:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": [dict(e) for e in t]} for t in node_terms]
        }
    if node_preferences:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": weight, "preference": {"matchExpressions": [dict(e) for e in exprs]}}
            for weight, exprs in node_preferences
        ]
    block: dict[str, Any] = {}
    if node_affinity:
        block["nodeAffinity"] = node_affinity
    if pod_affinity is not None:
        block["podAffinity"] = dict(pod_affinity)
    if pod_anti_affinity is not None:
        block["podAntiAffinity"] = dict(pod_anti_affinity)
    if block:
        spec["affinity"] = block
    if spread_constraints:
        spec["topologySpreadConstraints"] = [dict(c) for c in spread_constraints]
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if claims:
        spec["volumes"] = [
            {"name": f"vol-{i}", "persistentVolumeClaim": {"claimName": claim}}
            for i, claim in enumerate(claims)
        ]
        container["volumeMounts"] = [
            {"name": f"vol-{i}", "mountPath": f"/data/{i}"} for i in range(len(claims))
        ]
    for volume, class_name in (ephemeral or {}).items():
        claim_spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        }
        if class_name is not None:
            claim_spec["storageClassName"] = class_name
        template = {"volumeClaimTemplate": {"spec": claim_spec}}
        spec.setdefault("volumes", []).append({"name": volume, "ephemeral": template})
        container.setdefault("volumeMounts", []).append(
            {"name": volume, "mountPath": f"/scratch/{volume}"}
        )
    if node_name:
        spec["nodeName"] = node_name
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner:
        kind, owner_name = owner
        api = {"DaemonSet": "apps/v1", "ReplicaSet": "apps/v1", "Node": "v1"}.get(kind, "v1")
        meta["ownerReferences"] = [
            {
                "apiVersion": api,
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{owner_name}",
                "controller": True,
            }
        ]
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    pod["status"] = dict(status) if status else {"phase": "Running" if node_name else "Pending"}
    return pod


def make_pod(name: str, **kwargs: Any) -> PodInfo:
    """A pod decoded from its manifest (see ``pod_manifest``)."""
    return PodInfo.from_manifest(pod_manifest(name, **kwargs))


def make_pods(prefix: str, count: int, **kwargs: Any) -> list[PodInfo]:
    """``count`` identical pods named ``prefix-0`` ... (as a Deployment's replicas)."""
    return [make_pod(f"{prefix}-{i}", **kwargs) for i in range(count)]


def daemonset(name: str, cpu: str = "500m", memory: str = "128Mi", **kwargs: Any) -> PodInfo:
    """A DaemonSet's pod template, as the snapshot carries it (owned by the DaemonSet)."""
    return make_pod(
        name, namespace="kube-system", cpu=cpu, memory=memory, owner=("DaemonSet", name), **kwargs
    )


# --- nodes, NodeClaims, volumes -------------------------------------------------------------------


def node(
    name: str,
    *,
    zone: str | None = None,
    labels: Mapping[str, str] | None = None,
    cpu: str = "4",
    memory: str = "16Gi",
    taints: Sequence[Mapping[str, str]] = (),
    pods: Sequence[PodInfo] = (),
    initialized: bool = True,
    deleting: bool = False,
) -> NodeInfo:
    """An existing Node (from its manifest) with ``pods`` bound to it; allocatable = capacity."""
    node_labels = {HOSTNAME: name, **(labels or {})}
    if zone:
        node_labels[ZONE] = zone
    if not initialized:
        node_labels["karpenter.sh/initialized"] = "false"
    meta: dict[str, Any] = {"name": name, "labels": node_labels}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        meta["finalizers"] = ["karpenter.sh/termination"]
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    info = NodeInfo.from_manifest(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": meta,
            "spec": {"taints": [dict(t) for t in taints]},
            "status": {"capacity": resources, "allocatable": resources},
        }
    )
    info.pods.extend(pods)
    return info


def bound(name: str, node_name: str, **kwargs: Any) -> PodInfo:
    """A pod already running on ``node_name``."""
    return make_pod(name, node_name=node_name, **kwargs)


def in_flight(
    name: str,
    *,
    requirements: Sequence[Mapping[str, Any]] = (),
    cpu: str = "4",
    memory: str = "8Gi",
    nodepool_name: str = "default",
    deleting: bool = False,
) -> NodeClaim:
    """A launched NodeClaim with no Node yet, its allocatable known."""
    meta: dict[str, Any] = {"name": name, "labels": {NODEPOOL: nodepool_name}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        meta["finalizers"] = ["karpenter.sh/termination"]
    return NodeClaim.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": meta,
            "spec": {
                "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
                "requirements": [
                    {"key": NODEPOOL, "operator": "In", "values": [nodepool_name]},
                    *[dict(r) for r in requirements],
                ],
            },
            "status": {
                "providerID": f"example://{name}",
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            },
        }
    )


def zonal_pv(name: str, *zones: str, claim: str | None = None) -> dict[str, Any]:
    """A PersistentVolume whose node affinity pins it to ``zones``."""
    pv: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "zonal",
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": ZONE, "operator": "In", "values": list(zones)}
                            ]
                        }
                    ]
                }
            },
        },
        "status": {"phase": "Bound" if claim else "Available"},
    }
    if claim:
        pv["spec"]["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "namespace": "default",
            "name": claim,
        }
    return pv


def pvc(name: str, *, storage_class: str = "zonal", volume: str | None = None) -> dict[str, Any]:
    """A PersistentVolumeClaim, bound to ``volume`` when given (with the bind-completed annotation)."""
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Gi"}},
            "storageClassName": storage_class,
        },
        "status": {"phase": "Pending"},
    }
    if volume:
        claim["spec"]["volumeName"] = volume
        claim["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
        claim["status"] = {"phase": "Bound"}
    return claim


def storage_class(
    name: str = "zonal",
    *,
    zones: Sequence[str] = (),
    binding_mode: str = "WaitForFirstConsumer",
) -> dict[str, Any]:
    """A StorageClass; ``zones`` become its allowedTopologies."""
    sc: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": binding_mode,
    }
    if zones:
        sc["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": ZONE, "values": list(zones)}]}
        ]
    return sc


# --- running and reading the outcome --------------------------------------------------------------


def claim_domains(claim: NewNodeClaim, key: str) -> set[str]:
    """Every value ``key`` may take on the node this NodeClaim launches, over its instance types
    and their available offerings ("<any>" when unbounded, "<undefined>" when no side defines it)."""
    values: set[str] = set()
    for it in claim.instance_types:
        if claim.requirements.intersects(it.requirements) is not None:
            continue
        merged = claim.requirements.copy()
        merged.add(*it.requirements.values())
        for offering in it.offerings:
            if not offering.available or merged.intersects(offering.requirements) is not None:
                continue
            final = merged.copy()
            final.add(*offering.requirements.values())
            requirement = final.get(key)
            if requirement is None:
                values.add(claim.labels.get(key, "<undefined>"))
            elif requirement.complement:
                values.add("<any>")
            else:
                values |= requirement.values
    return values


@dataclass
class Outcome:
    """A snapshot and the scheduler's results for it, with questions tests ask."""

    snapshot: Snapshot
    results: Results

    @property
    def claims(self) -> list[NewNodeClaim]:
        return self.results.new_nodeclaims

    @property
    def unschedulable(self) -> dict[str, str]:
        return self.results.unschedulable

    def placed(self) -> dict[str, str]:
        """Pod key -> where it goes: an existing node's (or in-flight NodeClaim's) name, or
        ``new-<i>`` for the i-th new NodeClaim."""
        out: dict[str, str] = {}
        for name, pods in self.results.existing.items():
            for pod in pods:
                out[pod.key] = name
        for i, claim in enumerate(self.claims):
            for pod in claim.pods:
                out[pod.key] = f"new-{i}"
        return out

    def claim_of(self, name: str, namespace: str = "default") -> NewNodeClaim | None:
        key = f"{namespace}/{name}"
        for claim in self.claims:
            if any(p.key == key for p in claim.pods):
                return claim
        return None

    def where(self, name: str, namespace: str = "default") -> str | None:
        return self.placed().get(f"{namespace}/{name}")

    def domain(self, name: str, key: str, namespace: str = "default") -> str:
        """The ``key`` label of the node the pod goes to; a new NodeClaim must be pinned to one."""
        target = self.where(name, namespace)
        assert target is not None, f"{namespace}/{name} was not placed: {self.unschedulable}"
        return self._target_domain(target, key)

    def _target_domain(self, target: str, key: str) -> str:
        if target.startswith("new-"):
            claim = self.claims[int(target[4:])]
            if key == HOSTNAME:
                return target
            values = claim_domains(claim, key)
            assert len(values) == 1, f"NodeClaim {target} is not pinned to one {key}: {values}"
            return next(iter(values))
        for existing in self.snapshot.nodes:
            if existing.name == target:
                return existing.labels.get(key, "<undefined>")
        for nodeclaim in self.snapshot.nodeclaims:
            manifest = nodeclaim.to_manifest()
            if manifest["metadata"]["name"] == target:
                if key == HOSTNAME:
                    return target
                requirements = Requirements.from_node_selector(manifest["spec"]["requirements"])
                return requirements.labels().get(key, "<undefined>")
        raise AssertionError(f"unknown target {target}")

    def skew(
        self, key: str, match_labels: Mapping[str, str], namespace: str = "default"
    ) -> list[int]:
        """Matching pods per ``key`` domain (running ones included), as a sorted list of the
        non-zero counts, like upstream's ExpectSkew."""
        counts: Counter[str] = Counter()

        def matches(pod: PodInfo) -> bool:
            return pod.namespace == namespace and all(
                pod.labels.get(k) == v for k, v in match_labels.items()
            )

        for existing in self.snapshot.nodes:
            value = existing.labels.get(key)
            if value is None:
                continue
            # Only pods bound before scheduling; placements are counted from the results below.
            counts[value] += sum(1 for p in existing.pods if p.node_name and matches(p))
        for target, pods in self.results.existing.items():
            value = self._target_domain(target, key)
            if value == "<undefined>":
                continue
            counts[value] += sum(1 for p in pods if matches(p))
        for i, claim in enumerate(self.claims):
            mine = [p for p in claim.pods if matches(p)]
            if mine:
                counts[self._target_domain(f"new-{i}", key)] += len(mine)
        return sorted(c for c in counts.values() if c)


def run(
    pods: Iterable[PodInfo],
    *,
    pools: Sequence[NodePool] | None = None,
    nodes: Sequence[NodeInfo] = (),
    daemonsets: Sequence[PodInfo] = (),
    nodeclaims: Sequence[NodeClaim] = (),
    pvs: Sequence[Mapping[str, Any]] = (),
    pvcs: Sequence[Mapping[str, Any]] = (),
    storage_classes: Sequence[Mapping[str, Any]] = (),
    catalog: Sequence[InstanceType] = CATALOG,
    **options: Any,
) -> Outcome:
    """Schedule ``pods`` against one snapshot; ``options`` go to ``schedule`` as keywords."""
    pools = list(pools) if pools is not None else [nodepool()]
    snapshot = Snapshot(
        nodepools=pools,
        instance_types={p.metadata.name: list(catalog) for p in pools},
        nodes=list(nodes),
        nodeclaims=list(nodeclaims),
        pending=list(pods),
        daemonsets=list(daemonsets),
        persistent_volumes=list(pvs),
        persistent_volume_claims=list(pvcs),
        storage_classes=list(storage_classes),
    )
    return Outcome(snapshot, schedule(snapshot, **options))
