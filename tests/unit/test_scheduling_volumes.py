"""Volume topology: PersistentVolume and StorageClass alternatives, generic ephemeral volumes, the
claims the scheduler refuses, and volumes alongside topology spread.

Cases carried over from upstream Karpenter's provisioning suite ("Volume Topology Requirements"),
its scheduling suite ("VolumeUsage") and topology suite ("Topology with Volume Requirements"),
with upstream's test-zone-1/2/3 as zone-a/b/c. Where upstream shows a StorageClass choice through
CSI volume limits (which the scheduler does not model), the class's allowedTopologies show it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner, Result

from karpenter_core.cli.main import cli
from karpenter_core.operator.kube import KubeClient
from karpenter_core.scheduling.scheduler import schedule
from karpenter_core.state.cluster import ClusterState
from tests.unit.scheduling_fixtures import (
    ARCH,
    CATALOG,
    HOSTNAME,
    ZONE,
    affinity,
    bound,
    make_pod,
    node,
    nodepool,
    pod_manifest,
    pvc,
    run,
    spread,
    storage_class,
    term,
    zonal_pv,
    zones_in,
)

Expressions = Sequence[Mapping[str, Any]]


def pv(name: str, *terms: Expressions, source: str = "csi") -> dict[str, Any]:
    """A PersistentVolume whose required node affinity is ``terms`` (ORed); ``source`` is csi,
    local or hostPath."""
    sources = {
        "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{name}"},
        "local": {"path": "/mnt/local-disks"},
        "hostPath": {"path": "/mnt/local-disks"},
    }
    spec: dict[str, Any] = {
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOnce"],
        source: sources[source],
    }
    if terms:
        spec["nodeAffinity"] = {
            "required": {"nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}
        }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
    }


def topologies(name: str, *terms: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """A WaitForFirstConsumer StorageClass whose allowedTopologies are ``terms`` (ORed), each a
    map of label to allowed values."""
    sc = storage_class(name)
    sc["allowedTopologies"] = [
        {"matchLabelExpressions": [{"key": k, "values": list(v)} for k, v in t.items()]}
        for t in terms
    ]
    return sc


def default_class(name: str, *zones: str, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    """A StorageClass annotated as the cluster's default."""
    sc = storage_class(name, zones=zones)
    sc["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    sc["metadata"]["creationTimestamp"] = created
    return sc


def hostname_in(*names: str) -> dict[str, Any]:
    return {"key": HOSTNAME, "operator": "In", "values": list(names)}


# --- StorageClass and PersistentVolume alternatives ----------------------------------------------


def test_every_node_selector_term_of_a_volume_is_an_alternative():
    # upstream: "VolumeUsage > should schedule pods using a PV with multiple zones": two pods,
    # each with a volume reachable from zone-a or zone-b, and zonal anti-affinity between them
    terms = ([zones_in("zone-a")], [zones_in("zone-b")])
    apart = affinity(required=[term(ZONE, {"app": "multi-zone-app"})])
    pods = [
        make_pod(
            f"pod-{i}",
            claims=[f"pvc-{i}"],
            labels={"app": "multi-zone-app"},
            pod_anti_affinity=apart,
        )
        for i in range(2)
    ]
    out = run(
        pods,
        pvs=[pv(f"pv-{i}", *terms) for i in range(2)],
        pvcs=[pvc(f"pvc-{i}", volume=f"pv-{i}") for i in range(2)],
    )
    zones = {out.domain("pod-0", ZONE), out.domain("pod-1", ZONE)}
    assert zones == {"zone-a", "zone-b"}


def test_every_allowed_topology_of_a_storage_class_is_an_alternative():
    # upstream: "VolumeUsage > should schedule pods using a StorageClass with multiple zones in
    # AllowedTopologies"
    apart = affinity(required=[term(ZONE, {"app": "multi-zone-sc-app"})])
    pods = [
        make_pod(
            f"sc-pod-{i}",
            claims=[f"pvc-{i}"],
            labels={"app": "multi-zone-sc-app"},
            pod_anti_affinity=apart,
        )
        for i in range(2)
    ]
    out = run(
        pods,
        pvcs=[pvc(f"pvc-{i}", storage_class="multi-zone-sc") for i in range(2)],
        storage_classes=[topologies("multi-zone-sc", {ZONE: ["zone-a"]}, {ZONE: ["zone-b"]})],
    )
    zones = {out.domain("sc-pod-0", ZONE), out.domain("sc-pod-1", ZONE)}
    assert zones == {"zone-a", "zone-b"}


def test_alternatives_of_several_volumes_combine_and_the_first_launchable_one_wins():
    # upstream: "VolumeUsage > should schedule pods when a valid multi-volume topology alternative
    # remains after pruning disjoint branches". Class a allows s390x (no instance type has it) or
    # arm64; class b allows zone-a with arm64 or zone-b with s390x. Two combinations intersect;
    # the first (zone-b, s390x) cannot launch, so the pod takes the second.
    classes = [
        topologies("pruned-overlap-a", {ARCH: ["s390x"]}, {ARCH: ["arm64"]}),
        topologies(
            "pruned-overlap-b",
            {ZONE: ["zone-a"], ARCH: ["arm64"]},
            {ZONE: ["zone-b"], ARCH: ["s390x"]},
        ),
    ]
    out = run(
        [make_pod("pruned-overlap-pod", claims=["pvc-a", "pvc-b"])],
        pvcs=[
            pvc("pvc-a", storage_class="pruned-overlap-a"),
            pvc("pvc-b", storage_class="pruned-overlap-b"),
        ],
        storage_classes=classes,
    )
    assert out.domain("pruned-overlap-pod", ZONE) == "zone-a"
    assert out.domain("pruned-overlap-pod", ARCH) == "arm64"


def test_volumes_with_no_common_topology_say_so():
    # two claims whose zones never meet: the pod cannot run anywhere, and the reason names them
    out = run(
        [make_pod("db", claims=["data", "logs"])],
        pvs=[zonal_pv("pv-1", "zone-a", claim="data"), zonal_pv("pv-2", "zone-b", claim="logs")],
        pvcs=[pvc("data", volume="pv-1"), pvc("logs", volume="pv-2")],
    )
    assert not out.claims
    assert "PersistentVolumeClaim default/logs" in out.unschedulable["default/db"]


def test_each_pod_whose_volume_conflicts_with_its_node_selector_names_its_own_claim():
    # two replicas alike but for their claims: each reason names the pod's own claim, not the
    # first replica's
    pods = [
        make_pod(f"db-{i}", claims=[f"data-{i}"], node_selector={ZONE: "zone-b"}) for i in (0, 1)
    ]
    out = run(
        pods,
        pvs=[zonal_pv(f"pv-{i}", "zone-a", claim=f"data-{i}") for i in (0, 1)],
        pvcs=[pvc(f"data-{i}", volume=f"pv-{i}") for i in (0, 1)],
    )
    assert not out.claims
    for i in (0, 1):
        reason = out.unschedulable[f"default/db-{i}"]
        assert reason.startswith(f"the topology of its PersistentVolumeClaims (data-{i}) conflicts")


def test_each_replica_whose_ephemeral_volume_conflicts_names_its_own_claim():
    # replicas of one workload share a template: each reason names its own claim <pod>-<volume>
    pods = [
        make_pod(f"web-{i}", ephemeral={"scratch": "zonal"}, node_selector={ZONE: "zone-b"})
        for i in (0, 1)
    ]
    out = run(pods, storage_classes=[storage_class(zones=["zone-a"])])
    assert not out.claims
    for i in (0, 1):
        reason = out.unschedulable[f"default/web-{i}"]
        assert reason.startswith(
            f"the topology of its PersistentVolumeClaims (web-{i}-scratch) conflicts"
        )


# --- hostname affinity of local and hostPath volumes ----------------------------------------------


@pytest.mark.parametrize("source", ["local", "hostPath"])
def test_hostname_affinity_of_local_volumes_is_ignored(source):
    # upstream: "Volume Topology Requirements > should ignore hostname affinity scheduling when
    # using local path volumes" (when using local volumes / when using hostpath volumes)
    out = run(
        [make_pod("db", claims=["data"])],
        pvs=[pv("pv-1", [hostname_in("gone-node")], source=source)],
        pvcs=[pvc("data", storage_class="local-path", volume="pv-1")],
        storage_classes=[storage_class("local-path")],
    )
    assert out.where("db") == "new-0"


@pytest.mark.parametrize("source", ["local", "hostPath"])
def test_hostname_affinity_of_local_ephemeral_volumes_is_ignored(source):
    # upstream: "Volume Topology Requirements > should ignore hostname affinity scheduling when
    # using local path volumes (ephemeral volume)"; here the term also names a zone, which stays
    out = run(
        [make_pod("db", ephemeral={"scratch": "local-path"})],
        pvs=[pv("pv-1", [hostname_in("gone-node"), zones_in("zone-c")], source=source)],
        pvcs=[pvc("db-scratch", storage_class="local-path", volume="pv-1")],
        storage_classes=[storage_class("local-path")],
    )
    assert out.domain("db", ZONE) == "zone-c"


def test_hostname_affinity_of_other_volumes_is_kept():
    # upstream: "Volume Topology Requirements > should not ignore hostname affinity when using
    # non-local path volumes" (the guard for the two cases above)
    out = run(
        [make_pod("db", claims=["data"])],
        pvs=[pv("pv-1", [hostname_in("gone-node")])],
        pvcs=[pvc("data", volume="pv-1")],
        storage_classes=[storage_class()],
    )
    assert not out.claims
    assert "default/db" in out.unschedulable


@pytest.mark.parametrize("source", ["local", "hostPath"])
def test_a_hostname_only_term_of_a_local_volume_leaves_the_pod_free(source):
    # upstream: "VolumeUsage > should preserve unconstrained PV alternatives after ignoring
    # hostname affinity": the hostname term allows anywhere, so the unreachable zone of the
    # second term does not matter
    volume = pv(
        "hostname-or-zone-pv",
        [hostname_in("existing-host")],
        [zones_in("invalid-zone")],
        source=source,
    )
    out = run(
        [make_pod("hostname-or-zone-pod", claims=["hostname-or-zone-pvc"])],
        pvs=[volume],
        pvcs=[pvc("hostname-or-zone-pvc", volume="hostname-or-zone-pv")],
    )
    assert out.where("hostname-or-zone-pod") == "new-0"


# --- generic ephemeral volumes --------------------------------------------------------------------


def test_ephemeral_volume_claim_follows_its_storage_class_zones():
    # upstream: "Volume Topology Requirements > should schedule to storage class zones if volume
    # does not exist (ephemeral volume)": the pod allows zone-a or zone-c, the class zone-b or
    # zone-c
    pod = make_pod(
        "db", ephemeral={"scratch": "zonal"}, node_terms=[[zones_in("zone-a", "zone-c")]]
    )
    out = run(
        [pod],
        pvcs=[pvc("db-scratch")],
        storage_classes=[storage_class(zones=["zone-b", "zone-c"])],
    )
    assert out.domain("db", ZONE) == "zone-c"


def test_ephemeral_volume_claim_in_zones_the_pod_excludes_is_unschedulable():
    # upstream: "Volume Topology Requirements > should not schedule if storage class zones are
    # incompatible (ephemeral volume)"
    pod = make_pod("db", ephemeral={"scratch": "zonal"}, node_terms=[[zones_in("zone-a")]])
    out = run(
        [pod],
        pvcs=[pvc("db-scratch")],
        storage_classes=[storage_class(zones=["zone-b", "zone-c"])],
    )
    assert not out.claims
    assert "db-scratch" in out.unschedulable["default/db"]


def test_bound_ephemeral_volume_claim_pins_the_volume_zone():
    # upstream: "Volume Topology Requirements > should schedule to volume zones if volume already
    # bound (ephemeral volume)"
    out = run(
        [make_pod("db", ephemeral={"scratch": "zonal"})],
        pvs=[zonal_pv("pv-1", "zone-c", claim="db-scratch")],
        pvcs=[pvc("db-scratch", volume="pv-1")],
        storage_classes=[storage_class(zones=["zone-b", "zone-c"])],
    )
    assert out.domain("db", ZONE) == "zone-c"


def test_bound_ephemeral_volume_in_a_zone_the_pod_excludes_is_unschedulable():
    # upstream: "Volume Topology Requirements > should not schedule if volume zones are
    # incompatible (ephemeral volume)"
    out = run(
        [make_pod("db", ephemeral={"scratch": "zonal"}, node_terms=[[zones_in("zone-a")]])],
        pvs=[zonal_pv("pv-1", "zone-c", claim="db-scratch")],
        pvcs=[pvc("db-scratch", volume="pv-1")],
        storage_classes=[storage_class(zones=["zone-b", "zone-c"])],
    )
    assert not out.claims
    assert "default/db" in out.unschedulable


def test_ephemeral_volume_not_created_yet_uses_the_default_storage_class():
    # upstream: "VolumeUsage > should launch nodes for pods with ephemeral volume using a default
    # storage class": the template names no class, so its claim gets the default one (zone-c);
    # the claim does not exist yet, so the template stands in for it
    out = run(
        [make_pod("db", ephemeral={"scratch": None})],
        storage_classes=[default_class("default-storage-class", "zone-c")],
    )
    assert out.domain("db", ZONE) == "zone-c"


def test_ephemeral_volume_not_created_yet_uses_the_storage_class_it_names():
    # upstream: "VolumeUsage > should launch nodes for pods with ephemeral volume using the
    # specified storage class name": a default class (zone-c) exists but the template names
    # my-storage-class (zone-b)
    out = run(
        [make_pod("db", ephemeral={"scratch": "my-storage-class"})],
        storage_classes=[
            storage_class("my-storage-class", zones=["zone-b"]),
            default_class("default-storage-class", "zone-c"),
        ],
    )
    assert out.domain("db", ZONE) == "zone-b"


def test_of_several_default_storage_classes_the_newest_is_used():
    # upstream: "VolumeUsage > should launch nodes for pods with ephemeral volume using the newest
    # storage class"; a plain claim without a class gets it too
    classes = [
        default_class("default-storage-class", "zone-a", created="2026-01-01T00:00:00Z"),
        default_class("newer-default-storage-class", "zone-c", created="2026-01-01T00:00:02Z"),
    ]
    unnamed = pvc("data")
    del unnamed["spec"]["storageClassName"]
    out = run(
        [make_pod("scratch", ephemeral={"tmp": None}), make_pod("db", claims=["data"])],
        pvcs=[unnamed],
        storage_classes=classes,
    )
    assert out.domain("scratch", ZONE) == "zone-c"
    assert out.domain("db", ZONE) == "zone-c"


@pytest.mark.parametrize("class_name", ["non-existent", ""])
def test_bound_ephemeral_volume_claim_needs_no_storage_class(class_name):
    # upstream: "VolumeUsage > should launch nodes for pods with ephemeral volume without a
    # storage class when the PVC is bound" (non-existent storage class / explicitly disabled):
    # the claim exists and is bound, so its volume (here in zone-b) decides
    out = run(
        [make_pod("db", ephemeral={"tmp-ephemeral": class_name})],
        pvs=[zonal_pv("test-pv", "zone-b", claim="db-tmp-ephemeral")],
        pvcs=[pvc("db-tmp-ephemeral", storage_class=class_name, volume="test-pv")],
    )
    assert out.domain("db", ZONE) == "zone-b"


@pytest.mark.parametrize(
    ("class_name", "reason"),
    [
        ("non-existent", "StorageClass non-existent not found"),
        ("", "its storageClassName is empty"),
    ],
)
def test_unbound_ephemeral_volume_needs_a_storage_class(class_name, reason):
    # upstream: "VolumeUsage > should not launch nodes for pods with ephemeral volume without a
    # storage class when the PVC is unbound" (non-existent storage class / explicitly disabled)
    out = run([make_pod("db", ephemeral={"tmp-ephemeral": class_name}), make_pod("web")])
    assert out.where("db") is None
    assert "PersistentVolumeClaim default/db-tmp-ephemeral" in out.unschedulable["default/db"]
    assert reason in out.unschedulable["default/db"]
    assert out.where("web") is not None


# --- claims the scheduler refuses -----------------------------------------------------------------


def _deleting(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection"]
    return obj


def _lost(claim: dict[str, Any]) -> dict[str, Any]:
    claim["status"] = {"phase": "Lost"}
    return claim


def _unannotated(claim: dict[str, Any]) -> dict[str, Any]:
    del claim["metadata"]["annotations"]
    return claim


def _unnamed_class(claim: dict[str, Any]) -> dict[str, Any]:
    claim["spec"]["storageClassName"] = ""
    return claim


REFUSED = [
    # upstream: "VolumeUsage > should not launch nodes for pod with deleting
    # persistentVolumeClaim"
    pytest.param(
        [_deleting(pvc("data"))],
        [],
        "PersistentVolumeClaim default/data is being deleted",
        id="deleting-claim",
    ),
    # upstream: "VolumeUsage > should not launch nodes for pod with Lost persistentVolumeClaim"
    pytest.param(
        [_lost(pvc("data"))],
        [],
        "PersistentVolumeClaim default/data is Lost: its PersistentVolume no longer exists",
        id="lost-claim",
    ),
    # upstream: "VolumeUsage > should not launch nodes for pod with bound persistentVolume that
    # is marked for deletion"
    pytest.param(
        [pvc("data", volume="pv-1")],
        [_deleting(zonal_pv("pv-1", "zone-a", claim="data"))],
        "PersistentVolumeClaim default/data: PersistentVolume pv-1 is being deleted",
        id="deleting-volume",
    ),
    # upstream: "VolumeUsage > should handle pods with PVCs with defined volumeName" (when
    # pv.kubernetes.io/bind-completed is missing; when present: test_bound_zonal_volume_pins_the_zone)
    pytest.param(
        [_unannotated(pvc("data", volume="pv-1"))],
        [zonal_pv("pv-1", "zone-a", claim="data")],
        "PersistentVolumeClaim default/data names PersistentVolume pv-1 but is not bound yet "
        "(no pv.kubernetes.io/bind-completed annotation)",
        id="not-bind-completed",
    ),
    # upstream: "Volume Topology Requirements > should schedule valid pods when a pod with an
    # invalid pvc is encountered (volume name)"
    pytest.param(
        [pvc("data", volume="invalid-volume-name")],
        [],
        "PersistentVolumeClaim default/data: PersistentVolume invalid-volume-name not found",
        id="missing-volume",
    ),
    # upstream: "Volume Topology Requirements > should not schedule with an empty storage class if
    # the pvc is not bound"
    pytest.param(
        [_unnamed_class(pvc("data"))],
        [],
        "PersistentVolumeClaim default/data is not bound and its storageClassName is empty",
        id="empty-class",
    ),
]


@pytest.mark.parametrize(("pvcs", "pvs", "reason"), REFUSED)
def test_claims_the_kube_scheduler_refuses_leave_the_pod_unscheduled(pvcs, pvs, reason):
    # the pod is not scheduled, the reason names the claim and the object at fault, and the other
    # pods still are
    pods = [make_pod("db", claims=["data"]), make_pod("web")]
    out = run(pods, pvcs=pvcs, pvs=pvs, storage_classes=[storage_class()])
    assert out.where("db") is None
    assert out.unschedulable["default/db"] == reason
    assert out.where("web") is not None


def test_an_unreadable_claim_names_the_claim_and_field():
    claim = pvc("data")
    claim["spec"]["storageClassName"] = ["zonal"]
    out = run([make_pod("db", claims=["data"])], pvcs=[claim], storage_classes=[storage_class()])
    assert out.unschedulable["default/db"] == (
        "PersistentVolumeClaim default/data: spec.storageClassName: expected a string, got list"
    )


def replaced(obj: Mapping[str, Any], path: Sequence[str | int], value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with the item at ``path`` (keys and list indexes) set to ``value``."""
    out = cast(dict[str, Any], copy.deepcopy(obj))
    target: Any = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return out


TERMS = ("spec", "nodeAffinity", "required", "nodeSelectorTerms")
AT_TERMS = ".".join(TERMS)
EXPRESSION = (*TERMS, 0, "matchExpressions", 0)
AT_EXPRESSION = f"{AT_TERMS}[0].matchExpressions[0]"


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (("spec",), [1], "spec: expected a mapping, got list"),
        (TERMS[:2], [], "spec.nodeAffinity: expected a mapping, got list"),
        (TERMS[:3], "x", "spec.nodeAffinity.required: expected a mapping, got str"),
        (TERMS, {}, f"{AT_TERMS}: expected a list, got dict"),
        ((*TERMS, 0), "x", f"{AT_TERMS}[0]: expected a mapping, got str"),
        (
            (*TERMS, 0, "matchExpressions"),
            "x",
            f"{AT_TERMS}[0].matchExpressions: expected a list, got str",
        ),
        (EXPRESSION, "x", f"{AT_EXPRESSION}: expected a mapping, got str"),
        ((*EXPRESSION, "operator"), None, f"{AT_EXPRESSION}.operator: missing"),
        ((*EXPRESSION, "operator"), "Within", f"{AT_EXPRESSION}: unknown operator 'Within'"),
        ((*EXPRESSION, "values"), "zone-a", f"{AT_EXPRESSION}.values: expected a list, got str"),
        ((*EXPRESSION, "values", 0), 1, f"{AT_EXPRESSION}.values[0]: expected a string, got int"),
    ],
)
def test_an_unreadable_volume_affinity_names_the_volume_and_field(path, value, reason):
    # the pod using the volume is refused with the field at fault; other pods are placed
    volume = replaced(zonal_pv("pv-1", "zone-a", claim="data"), path, value)
    out = run(
        [make_pod("db", claims=["data"]), make_pod("web")],
        pvs=[volume],
        pvcs=[pvc("data", volume="pv-1")],
    )
    assert out.unschedulable["default/db"].startswith(
        f"PersistentVolumeClaim default/data: PersistentVolume pv-1: {reason}"
    )
    assert out.where("web") is not None


TOPOLOGY = ("allowedTopologies", 0, "matchLabelExpressions", 0)
AT_TOPOLOGY = "allowedTopologies[0].matchLabelExpressions[0]"


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (TOPOLOGY[:1], {}, "allowedTopologies: expected a list, got dict"),
        (TOPOLOGY[:2], "x", "allowedTopologies[0]: expected a mapping, got str"),
        (TOPOLOGY[:3], "x", "allowedTopologies[0].matchLabelExpressions: expected a list, got str"),
        (TOPOLOGY, "x", f"{AT_TOPOLOGY}: expected a mapping, got str"),
        ((*TOPOLOGY, "key"), None, f"{AT_TOPOLOGY}.key: missing"),
        ((*TOPOLOGY, "key"), 1, f"{AT_TOPOLOGY}.key: expected a string, got int"),
        ((*TOPOLOGY, "values"), "zone-a", f"{AT_TOPOLOGY}.values: expected a list, got str"),
    ],
)
def test_unreadable_allowed_topologies_name_the_storage_class_and_field(path, value, reason):
    storage = replaced(storage_class(zones=["zone-a"]), path, value)
    out = run(
        [make_pod("db", claims=["data"]), make_pod("web")],
        pvcs=[pvc("data")],
        storage_classes=[storage],
    )
    assert out.unschedulable["default/db"] == (
        f"PersistentVolumeClaim default/data is not bound yet: StorageClass zonal: {reason}"
    )
    assert out.where("web") is not None


def test_an_unreadable_storage_class_annotation_names_the_class_where_the_default_is_needed():
    # which class is the default cannot be told, so a claim that needs the default is refused;
    # a claim naming its class, and a pod without volumes, are not affected
    broken = storage_class("broken")
    broken["metadata"]["annotations"] = ["storageclass.kubernetes.io/is-default-class"]
    pods = [
        make_pod("scratch", ephemeral={"tmp": None}),
        make_pod("named", ephemeral={"tmp": "zonal"}),
        make_pod("web"),
    ]
    out = run(pods, storage_classes=[broken, storage_class(zones=["zone-b"])])
    assert out.unschedulable["default/scratch"] == (
        "PersistentVolumeClaim default/scratch-tmp is not bound, names no StorageClass, and "
        "the default cannot be told: StorageClass broken: metadata.annotations: expected a "
        "mapping, got list"
    )
    assert out.domain("named", ZONE) == "zone-b"
    assert out.where("web") is not None


@pytest.mark.parametrize(
    ("annotations", "got"), [("pv.kubernetes.io/bind-completed", "str"), (5, "int")]
)
def test_unreadable_claim_annotations_name_the_claim_and_field(annotations, got):
    claim = pvc("data", volume="pv-1")
    claim["metadata"]["annotations"] = annotations
    out = run(
        [make_pod("db", claims=["data"])],
        pvs=[zonal_pv("pv-1", "zone-a", claim="data")],
        pvcs=[claim],
    )
    assert out.unschedulable["default/db"] == (
        f"PersistentVolumeClaim default/data: metadata.annotations: expected a mapping, got {got}"
    )


# --- relaxation and topology spread ---------------------------------------------------------------


def test_a_volume_zone_is_not_relaxed_away():
    # upstream: "Volume Topology Requirements > should not relax an added volume topology zone
    # node-selector away": the first required term cannot be met, the second (on-demand) can,
    # and the volume's zone holds whichever term is used (a guard: volume alternatives are joined
    # to the pod's requirements anew after each relaxation)
    pod = make_pod(
        "db",
        claims=["data"],
        node_terms=[
            [{"key": "example.com/label", "operator": "In", "values": ["unsupported"]}],
            [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        ],
    )
    out = run(
        [pod],
        pvs=[zonal_pv("pv-1", "zone-c", claim="data")],
        pvcs=[pvc("data", volume="pv-1")],
        storage_classes=[storage_class(zones=["zone-b", "zone-c"])],
    )
    assert out.domain("db", ZONE) == "zone-c"


def test_a_volume_zone_does_not_shrink_the_domains_min_domains_counts():
    # upstream: "Topology with Volume Requirements > should schedule pod with PVC and TSC
    # minDomains=3 when pods are spread across 3 zones": one matching pod runs in each zone; the
    # new pod's volume is in zone-a. Its spread still counts the three zones (the volume restricts
    # the node, not the pod's domains), so zone-a at 1 + 1 - 1 is within maxSkew 1.
    labels = {"app": "test"}
    tsc = spread(ZONE, match_labels=labels, min_domains=3)
    nodes = [
        node(f"node-{z}", zone=z, cpu="1", pods=[bound(f"web-{z}", f"node-{z}", labels=labels)])
        for z in ("zone-a", "zone-b", "zone-c")
    ]
    pod = make_pod("db", labels=labels, spread_constraints=[tsc], claims=["test-pvc"])
    out = run(
        [pod],
        nodes=nodes,
        pvs=[zonal_pv("test-pv", "zone-a", claim="test-pvc")],
        pvcs=[pvc("test-pvc", volume="test-pv")],
    )
    assert out.domain("db", ZONE) == "zone-a"
    assert out.skew(ZONE, labels) == [1, 1, 2]


def test_a_volume_zone_does_not_shrink_the_domains_a_spread_filters_by_node_affinity():
    # nodeAffinityPolicy Honor filters the spread's domains by the pod's own node affinity only:
    # the volume (zone-a) does not, so the empty zone-c is still the minimum and zone-a, already
    # holding one pod more than zone-c, is out of reach
    labels = {"app": "test"}
    tsc = spread(ZONE, match_labels=labels, node_affinity_policy="Honor")
    nodes = [
        node(f"node-{z}", zone=z, cpu="1", pods=[bound(f"web-{z}", f"node-{z}", labels=labels)])
        for z in ("zone-a", "zone-b")
    ]
    pod = make_pod("db", labels=labels, spread_constraints=[tsc], claims=["data"])
    out = run(
        [pod],
        nodes=nodes,
        pvs=[zonal_pv("pv-1", "zone-a", claim="data")],
        pvcs=[pvc("data", volume="pv-1")],
    )
    assert out.where("db") is None
    assert "topology spread" in out.unschedulable["default/db"]


# --- the controller's view ------------------------------------------------------------------------


def _versioned(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` as the API server returns it (with a resourceVersion)."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = "1"
    return obj


@pytest.mark.parametrize(("pvcs", "pvs", "reason"), REFUSED)
def test_the_controller_refuses_the_same_claims(pvcs, pvs, reason):
    # the cluster state keeps what the refusals read (deletion timestamps, phase, annotations)
    state = ClusterState(cast("KubeClient", None))
    state.nodepools_informer.inject(_versioned(nodepool().to_manifest()))
    for claim in pvcs:
        state.pvcs.inject(_versioned(claim))
    for volume in pvs:
        state.pvs.inject(_versioned(volume))
    state.storage_classes.inject(_versioned(storage_class()))
    unschedulable = {
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    }
    for name, claims in (("db", ["data"]), ("web", [])):
        state.pods.inject(_versioned(pod_manifest(name, claims=claims, status=unschedulable)))
    results = schedule(state.snapshot({"default": list(CATALOG)}))
    assert results.unschedulable == {"default/db": reason}
    assert [p.key for c in results.new_nodeclaims for p in c.pods] == ["default/web"]


def test_the_controller_reads_ephemeral_volumes():
    state = ClusterState(cast("KubeClient", None))
    state.nodepools_informer.inject(_versioned(nodepool().to_manifest()))
    state.storage_classes.inject(_versioned(default_class("default-storage-class", "zone-b")))
    unschedulable = {
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    }
    state.pods.inject(_versioned(pod_manifest("db", ephemeral={"tmp": None}, status=unschedulable)))
    [claim] = schedule(state.snapshot({"default": list(CATALOG)})).new_nodeclaims
    assert claim.offering.zone == "zone-b"


# --- simulate's view ------------------------------------------------------------------------------

SIMULATED = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: zonal}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [test-zone-c]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: app
        resources: {requests: {cpu: "1", memory: 1Gi}}
      volumes:
      - name: scratch
        ephemeral:
          volumeClaimTemplate:
            spec:
              storageClassName: %s
              accessModes: [ReadWriteOnce]
              resources: {requests: {storage: 1Gi}}
"""


def _simulate(tmp_path: Path, text: str) -> Result:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    return CliRunner().invoke(cli, ["simulate", "-f", str(path), "-o", "json"])


def test_simulate_places_a_workload_with_an_ephemeral_volume_where_its_class_allows(tmp_path):
    # the Deployment's pods have no claims yet: each claim template stands in for its claim
    result = _simulate(tmp_path, SIMULATED % "zonal")
    assert result.exit_code == 0, result.output
    [nodeclaim] = json.loads(result.stdout)["nodeclaims"]
    assert (nodeclaim["zone"], nodeclaim["pods"]) == ("test-zone-c", ["shop/web-0", "shop/web-1"])


def test_simulate_names_a_malformed_ephemeral_volume(tmp_path):
    result = _simulate(tmp_path, SIMULATED % "[zonal]")
    assert result.exit_code == 1
    assert result.stderr.endswith(
        "Deployment shop/web: spec.template.spec.volumes[0].ephemeral.volumeClaimTemplate.spec"
        ".storageClassName: expected a non-empty string, got a list\n"
    )


def test_simulate_names_a_storage_class_with_unreadable_annotations(tmp_path):
    # the claims name no class, and the default cannot be told: the pods are unschedulable with
    # a reason naming the StorageClass and field (no traceback)
    broken = (
        "---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\n"
        "metadata: {name: broken, annotations: [x]}\nprovisioner: ebs.csi.aws.com\n"
    )
    result = _simulate(tmp_path, SIMULATED % "null" + broken)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert not out["nodeclaims"]
    reason = (
        "PersistentVolumeClaim shop/web-{}-scratch is not bound, names no StorageClass, and "
        "the default cannot be told: StorageClass broken: metadata.annotations: expected a "
        "mapping, got list"
    )
    assert out["unschedulable"] == [
        {"pod": f"shop/web-{i}", "reason": reason.format(i)} for i in (0, 1)
    ]


def test_simulate_names_a_storage_class_with_unreadable_allowed_topologies(tmp_path):
    text = (SIMULATED % "zonal").replace("values: [test-zone-c]", "values: test-zone-c")
    result = _simulate(tmp_path, text)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert not out["nodeclaims"]
    reason = (
        "PersistentVolumeClaim shop/web-{}-scratch is not bound yet: StorageClass zonal: "
        "allowedTopologies[0].matchLabelExpressions[0].values: expected a list, got str"
    )
    assert out["unschedulable"] == [
        {"pod": f"shop/web-{i}", "reason": reason.format(i)} for i in (0, 1)
    ]
