"""Builders for the disruption scenarios: NodePools with a disruption block, managed Nodes (with
the labels Karpenter puts on them) and the pods bound to them, on the small explicit catalog of
``scheduling_fixtures`` (prices exact, spot at 0.7 x on-demand):

    type    CPU  memory  on-demand  spot
    c-2     2    4Gi     0.10       0.07
    arm-2   2    4Gi     0.12       0.084
    c-4     4    8Gi     0.20       0.14
    arm-4   4    8Gi     0.24       0.168
    c-8     8    16Gi    0.40       0.28

Every node's allocatable is its instance type's allocatable (100m CPU kube-reserved), as the
simulation of a replacement would see it. Times are UTC; ``NOW`` is a Monday noon.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_core.apis.quantity import format_quantity
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import InstanceType
from karpenter_core.disruption.planner import Options, Plan, plan
from karpenter_core.scheduling.snapshot import NodeInfo, PodInfo, Snapshot
from tests.unit.scheduling_fixtures import CATALOG, make_pod

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
DAY_OLD = NOW - timedelta(days=1)

NODEPOOL = "karpenter.sh/nodepool"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
INITIALIZED = "karpenter.sh/initialized"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
MIRROR = "kubernetes.io/config.mirror"


def pool(
    name: str = "default",
    *,
    policy: str = "WhenEmptyOrUnderutilized",
    consolidate_after: str = "0s",
    budgets: Sequence[Mapping[str, Any]] | None = None,
    expire_after: str | None = None,
    requirements: Sequence[Mapping[str, Any]] = (),
    labels: Mapping[str, str] | None = None,
) -> NodePool:
    """A NodePool from its manifest; ``budgets`` None keeps the default (10%)."""
    disruption: dict[str, Any] = {
        "consolidationPolicy": policy,
        "consolidateAfter": consolidate_after,
    }
    if budgets is not None:
        disruption["budgets"] = [dict(b) for b in budgets]
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "example.com", "kind": "ExampleNodeClass", "name": "x"},
        "requirements": [dict(r) for r in requirements],
    }
    if expire_after is not None:
        template_spec["expireAfter"] = expire_after
    return NodePool.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {
                "template": {"metadata": {"labels": dict(labels or {})}, "spec": template_spec},
                "disruption": disruption,
            },
        }
    )


def _type(name: str, catalog: Sequence[InstanceType]) -> InstanceType:
    return next(it for it in catalog if it.name == name)


def _quantities(resources: Mapping[str, int]) -> dict[str, str]:
    out = {}
    for name, milli in resources.items():
        if name == "cpu":
            out[name] = f"{milli}m"
        else:
            out[name] = format_quantity(milli // 1000, binary=name != "pods")
    return out


def node(
    name: str,
    instance_type: str = "c-4",
    *,
    zone: str = "zone-a",
    capacity_type: str = "on-demand",
    nodepool: str | None = "default",
    pods: Sequence[PodInfo] = (),
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    created: datetime = DAY_OLD,
    initialized: bool = True,
    deleting: bool = False,
    catalog: Sequence[InstanceType] = CATALOG,
) -> NodeInfo:
    """A Node Karpenter launched for ``nodepool`` (None: an unmanaged node), from its manifest,
    with ``pods`` bound to it."""
    it = _type(instance_type, catalog)
    node_labels = {
        "kubernetes.io/hostname": name,
        INSTANCE_TYPE: instance_type,
        ZONE: zone,
        CAPACITY_TYPE: capacity_type,
        INITIALIZED: "true" if initialized else "false",
        **it.requirements.labels(),
        **(labels or {}),
    }
    if nodepool is not None:
        node_labels[NODEPOOL] = nodepool
    else:
        node_labels.pop(CAPACITY_TYPE)
    meta: dict[str, Any] = {
        "name": name,
        "labels": node_labels,
        "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    if deleting:
        meta["deletionTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["finalizers"] = ["karpenter.sh/termination"]
    info = NodeInfo.from_manifest(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": meta,
            "spec": {"providerID": f"example://{name}"},
            "status": {
                "capacity": _quantities(it.capacity),
                "allocatable": _quantities(it.allocatable),
            },
        }
    )
    for pod in pods:
        assert pod.node_name == name, f"{pod.key} is bound to {pod.node_name}, not {name}"
    info.pods.extend(pods)
    return info


def pod(name: str, on: str, cpu: str = "500m", memory: str = "512Mi", **kwargs: Any) -> PodInfo:
    """A pod of a ReplicaSet, running on node ``on``."""
    kwargs.setdefault("owner", ("ReplicaSet", f"{name.rsplit('-', 1)[0]}-rs"))
    return make_pod(name, node_name=on, cpu=cpu, memory=memory, **kwargs)


def pods(prefix: str, on: str, count: int, **kwargs: Any) -> list[PodInfo]:
    return [pod(f"{prefix}-{i}", on, **kwargs) for i in range(count)]


def daemon_pod(name: str, on: str) -> PodInfo:
    """A DaemonSet's pod running on ``on``."""
    return make_pod(
        name,
        namespace="kube-system",
        node_name=on,
        cpu="100m",
        memory="64Mi",
        owner=("DaemonSet", name.rsplit("-", 1)[0]),
    )


def mirror_pod(name: str, on: str) -> PodInfo:
    """A static pod's mirror (owned by the Node, annotated kubernetes.io/config.mirror)."""
    return make_pod(
        name,
        namespace="kube-system",
        node_name=on,
        cpu="100m",
        memory="64Mi",
        owner=("Node", on),
        annotations={MIRROR: "checksum"},
    )


def pdb(
    name: str,
    match_labels: Mapping[str, str],
    *,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    disruptions_allowed: int | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget; ``disruptions_allowed`` fills its status."""
    spec: dict[str, Any] = {"selector": {"matchLabels": dict(match_labels)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    out: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    if disruptions_allowed is not None:
        out["status"] = {"disruptionsAllowed": disruptions_allowed}
    return out


def snapshot(
    nodes: Sequence[NodeInfo],
    pools: Sequence[NodePool] | None = None,
    *,
    catalog: Sequence[InstanceType] = CATALOG,
    pdbs: Sequence[Mapping[str, Any]] = (),
) -> Snapshot:
    pools = list(pools) if pools is not None else [pool()]
    return Snapshot(
        nodepools=pools,
        instance_types={p.metadata.name: list(catalog) for p in pools},
        nodes=list(nodes),
        pdbs=list(pdbs),
    )


def decide(
    nodes: Sequence[NodeInfo],
    pools: Sequence[NodePool] | None = None,
    *,
    now: datetime = NOW,
    options: Options | None = None,
    rounds: int = 1,
    **kwargs: Any,
) -> Plan:
    """One disruption pass (``rounds`` commands at most, expiration included)."""
    return plan(snapshot(nodes, pools, **kwargs), now, options, rounds=rounds)


def summary(result: Plan) -> list[tuple[str, list[str], list[tuple[str, str]]]]:
    """Each command as (reason, nodes, [(replacement type, capacity type)])."""
    return [
        (
            c.reason,
            sorted(x.name for x in c.candidates),
            [(r.instance_type.name, r.offering.capacity_type) for r in c.replacements],
        )
        for c in result.commands
    ]
