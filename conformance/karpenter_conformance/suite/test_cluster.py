"""The cluster level: the real controller, as its least-privilege identity, on a local KWOK
cluster, against the profile's fake cloud. Runs with ``--cluster``; the shared invariants are
checked over what each check observed."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

import pytest

from karpenter_conformance import invariants
from karpenter_conformance.suite.cluster import GC_WINDOW, TAINT_WINDOW, ClusterHarness
from karpenter_conformance.suite.harness import Violation, expect
from karpenter_conformance.waiting import wait_until
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import launch_request
from karpenter_core.operator.crashpoints import CRASH_AFTER_LAUNCH

pytestmark = pytest.mark.integration

BURST = 6
RUNNING_WITHIN = 90.0


def cluster_check(*needs: str) -> pytest.MarkDecorator:
    """A cluster-level check needing the profile operations ``needs``."""
    return pytest.mark.check(cluster=True, needs=("start", "reset", "stop", "settings", *needs))


def _hold(snapshots: Sequence[invariants.Snapshot], namespace: str) -> None:
    """Raise when an invariant was broken during the check."""
    breaches = [
        *invariants.launched_twice(snapshots),
        *invariants.orphaned_instances(snapshots, GC_WINDOW),
        *invariants.pdb_violations(snapshots),
        *invariants.over_budget(snapshots),
        *invariants.stale_disruption_taints(snapshots, TAINT_WINDOW),
    ]
    if snapshots:
        breaches += invariants.pods_not_running(snapshots[-1], [namespace])
    expect(not breaches, f"broke invariants: {'; '.join(map(str, breaches[:3]))}", "none broken")


def _wait_running(cluster: ClusterHarness, namespace: str, count: int, what: str) -> None:
    controller = cluster.ensure_controller()
    try:
        wait_until(
            lambda: controller.alive() and len(cluster.running(namespace)) == count,
            what,
            timeout=RUNNING_WITHIN,
        )
    except TimeoutError:
        running = len(cluster.running(namespace))
        raise Violation(
            f"left {count - running} of {count} pods not Running after {RUNNING_WITHIN:.0f}s",
            f"{what}",
        ) from None


def _launched_offering(claim: dict[str, Any]) -> tuple[str, str, str]:
    labels = claim["metadata"].get("labels") or {}
    return (
        labels.get(wk.INSTANCE_TYPE, ""),
        labels.get(wk.TOPOLOGY_ZONE, ""),
        labels.get(wk.CAPACITY_TYPE, ""),
    )


# -- the checks ---------------------------------------------------------------------------------


@cluster_check()
def test_least_privilege_identity(cluster: ClusterHarness) -> None:
    """The controller runs as a ServiceAccount with the core's RBAC plus the provider's."""
    controller = cluster.ensure_controller()
    with cluster.nodepool() as pool:
        cluster.deploy(pool, "one", pool, 1, "100m")
        _wait_running(cluster, pool, 1, "one pod Running under the least-privilege identity")
    denied = controller.forbidden()
    expect(
        not denied,
        f"needed permissions its RBAC lacks: {denied[:2]}",
        "the core's and the provider's RBAC to suffice",
    )


@cluster_check()
def test_burst_on_cheapest_offering(cluster: ClusterHarness) -> None:
    """A burst of pods all run, each NodeClaim on the cheapest offering that fits it."""
    cluster.ensure_controller()
    with cluster.nodepool() as pool:
        recorder = cluster.record_invariants(pool)
        cluster.deploy(pool, "burst", pool, BURST, "1")
        _wait_running(cluster, pool, BURST, f"{BURST} pods Running")
        snapshots = recorder.stop()
        nodepool = NodePool.from_manifest(
            cluster._custom().get_cluster_custom_object(wk.GROUP, "v1", "nodepools", pool)
        )
        types = list(cluster.provider.get_instance_types(nodepool))
        for raw in cluster.nodeclaims(pool):
            claim = NodeClaim.from_manifest(raw)
            requirements, requests = launch_request(claim)
            prices = [
                offering.price
                for t in types
                if (offering := t.offering_for(requirements, requests)) is not None
            ]
            chosen = _launched_offering(raw)
            paid = next(
                (
                    o.price
                    for t in types
                    if t.name == chosen[0]
                    for o in t.offerings
                    if (o.zone, o.capacity_type) == chosen[1:]
                ),
                None,
            )
            expect(
                paid is not None and prices and paid <= min(prices),
                f"launched {chosen} at {paid} for NodeClaim {raw['metadata']['name']}",
                f"the cheapest fitting offering ({min(prices) if prices else 'none'})",
            )
        _hold(snapshots, pool)


@cluster_check()
def test_scale_to_zero(cluster: ClusterHarness) -> None:
    """Scaled to zero pods, the empty nodes are removed and list() is empty."""
    cluster.ensure_controller()
    with cluster.nodepool() as pool:
        cluster.deploy(pool, "web", pool, 2, "1")
        _wait_running(cluster, pool, 2, "2 pods Running")
        launched = {
            (c.get("status") or {}).get("providerID", "") for c in cluster.nodeclaims(pool)
        } - {""}
        recorder = cluster.record_invariants(pool)
        cluster.scale(pool, "web", 0)
        try:
            wait_until(
                lambda: not cluster.nodeclaims(pool) and not (launched & cluster.instances()),
                "the NodePool's instances gone",
                timeout=90,
            )
        except TimeoutError:
            left = sorted(launched & cluster.instances())
            raise Violation(
                f"still lists {left} 90s after every pod was gone", "list() empty"
            ) from None
        _hold(recorder.stop(), pool)


@cluster_check("drifted")
def test_drift_within_budget(cluster: ClusterHarness) -> None:
    """A NodeClass change replaces every drifted node, never more at once than the budget."""
    cluster.ensure_controller()
    with cluster.nodepool(budget="1", consolidate=False) as pool:
        cluster.deploy(pool, "web", pool, 3, "1")
        _wait_running(cluster, pool, 3, "3 pods Running")
        before = {
            (c.get("status") or {}).get("providerID", "") for c in cluster.nodeclaims(pool)
        } - {""}
        recorder = cluster.record_invariants(pool)
        cluster.put_node_class(cluster.profile.drifted(cluster.node_class()))
        try:
            wait_until(
                lambda: not (before & cluster.instances()) and len(cluster.running(pool)) == 3,
                "every drifted instance replaced",
                timeout=180,
            )
        except TimeoutError:
            left = sorted(before & cluster.instances())
            raise Violation(
                f"kept the drifted instances {left} for 180s", "them replaced"
            ) from None
        finally:
            cluster.put_node_class(cluster.profile.node_class(ready=True))
        _hold(recorder.stop(), pool)


@cluster_check("launch_unmanaged")
def test_unmanaged_instance_collected(cluster: ClusterHarness) -> None:
    """An instance launched behind the controller's back with the ownership tags is
    garbage-collected."""
    cluster.ensure_controller()
    with cluster.nodepool() as pool:
        provider_id = cluster.profile.launch_unmanaged({wk.NODEPOOL: pool})
        expect(
            wait_until(lambda: provider_id in cluster.instances(), "listed", 30),
            f"does not list the unmanaged instance {provider_id}",
            "list() to report it",
        )
        try:
            wait_until(lambda: provider_id not in cluster.instances(), "collected", GC_WINDOW + 20)
        except TimeoutError:
            raise Violation(
                f"still lists the unmanaged instance {provider_id} after {GC_WINDOW + 20:.0f}s",
                "garbage collection to delete it",
            ) from None


@cluster_check()
def test_deleted_nodeclaim_deletes_instance(cluster: ClusterHarness) -> None:
    """Deleting a NodeClaim terminates its instance."""
    cluster.ensure_controller()
    with cluster.nodepool() as pool:
        cluster.deploy(pool, "one", pool, 1, "100m")
        _wait_running(cluster, pool, 1, "one pod Running")
        [claim] = cluster.nodeclaims(pool)
        provider_id = claim["status"]["providerID"]
        cluster.scale(pool, "one", 0)
        cluster.delete_nodeclaim(claim["metadata"]["name"])
        try:
            wait_until(lambda: provider_id not in cluster.instances(), "deleted", 60)
        except TimeoutError:
            raise Violation(
                f"still lists {provider_id} 60s after its NodeClaim was deleted", "it deleted"
            ) from None


@cluster_check()
def test_crash_between_launch_and_status(cluster: ClusterHarness) -> None:
    """A controller SIGKILLed between a launch and its status write leaves no extra instance
    once garbage collection has run."""
    with cluster.nodepool() as pool:
        crashing = cluster.start_controller({"KARPENTER_TEST_CRASH_POINT": CRASH_AFTER_LAUNCH})
        recorder = cluster.record_invariants(pool)
        cluster.deploy(pool, "one", pool, 1, "100m")
        try:
            wait_until(lambda: crashing.process.poll() is not None, "the crash", 60)
        except TimeoutError:
            raise Violation(
                "did not launch within 60s (the controller never reached its crash point)",
                "a launch",
            ) from None
        if crashing.process.returncode != -signal.SIGKILL:
            raise RuntimeError(
                f"the controller exited with {crashing.process.returncode}, not at the crash "
                f"point {CRASH_AFTER_LAUNCH}:\n{crashing.log_tail()}"
            )
        unrecorded = [
            c for c in cluster.nodeclaims(pool) if not (c.get("status") or {}).get("providerID")
        ]
        if not unrecorded:
            raise RuntimeError("the crash left no NodeClaim without its providerID")
        cluster.start_controller().wait_ready()
        _wait_running(cluster, pool, 1, "the pod Running after the restart")

        def unclaimed() -> set[str]:
            claimed = {(c.get("status") or {}).get("providerID") for c in cluster.nodeclaims(pool)}
            return {p for p in cluster.instances(pool) if p not in claimed}

        try:
            wait_until(lambda: not unclaimed(), "garbage collection", GC_WINDOW)
        except TimeoutError:
            raise Violation(
                f"left the instances {sorted(unclaimed())} without a NodeClaim "
                f"{GC_WINDOW:.0f}s after the restart",
                "one instance per NodeClaim once garbage collection has run",
            ) from None
        snapshots = recorder.stop()
        _hold(snapshots, pool)
