"""Upstream's candidate rules reach both readers of the cluster: the disruption controller (its
cluster state, one decision at the context's clock) and ``karpenter simulate --disrupt``
(manifests through ``build_snapshot``, then the planner). The same objects give the same first
command. The catalog and builders are ``test_cluster_facts``'s: a c-4 node costs 0.20/h on
demand, one pod of 1 CPU fits on the other node.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
import yaml

from karpenter_core.apis import labels as wk
from karpenter_core.controllers.disruption import DisruptionController
from karpenter_core.disruption.planner import plan
from karpenter_core.manifests import build_snapshot, parse_documents
from tests.unit.test_cluster_facts import Catalog, controller, node, nodeclaim, nodepool, pod

T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
STAMP = "%Y-%m-%dT%H:%M:%SZ"
CREATED = (T0 - timedelta(days=1)).strftime(STAMP)


class _Provider(Catalog):
    """``Catalog``, reporting no drift of its own."""

    def is_drifted(self, claim: Any) -> str:
        return ""


def controller_first(objects: list[dict[str, Any]], now: datetime) -> tuple[str, list[str]]:
    """The reason and nodes of the controller's first command on a cluster state holding
    ``objects`` (("", []) for none)."""
    provisioner, _, _ = controller(*objects)
    context = dataclasses.replace(provisioner.context, provider=_Provider(), clock=lambda: now)
    disruption = DisruptionController(context)
    try:
        command, _ = disruption._decide([], set(), report=False)
    finally:
        disruption.close()
    if command is None:
        return "", []
    return command.reason, sorted(c.name for c in command.candidates)


def simulate_first(objects: list[dict[str, Any]], now: datetime) -> tuple[str, list[str]]:
    """The same for ``simulate --disrupt`` on the same objects as manifests."""
    text = "\n---\n".join(yaml.safe_dump(obj) for obj in objects)
    built = build_snapshot(parse_documents(text, "input.yaml"), cast("Any", _Provider()))
    result = plan(built.snapshot, now, rounds=1)
    if not result.commands:
        return "", []
    return result.commands[0].reason, sorted(c.name for c in result.commands[0].candidates)


PATHS = {"controller": controller_first, "simulate": simulate_first}


def pool() -> dict[str, Any]:
    return nodepool(disruption={"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]})


def managed(name: str, *, claim: bool = True, **claim_extra: Any) -> list[dict[str, Any]]:
    """A c-4 on-demand Node of the default NodePool, initialized, with its NodeClaim (unless
    ``claim`` is False)."""
    labels = {
        wk.NODEPOOL: "default",
        wk.NODE_REGISTERED: "true",
        wk.NODE_INITIALIZED: "true",
        wk.INSTANCE_TYPE: "c-4",
        wk.TOPOLOGY_ZONE: "zone-a",
        wk.CAPACITY_TYPE: "on-demand",
        wk.ARCH: "amd64",
        "kubernetes.io/os": "linux",
    }
    obj = node(name, labels=labels, providerID=f"example://{name}")
    obj["metadata"]["creationTimestamp"] = CREATED
    if not claim:
        return [obj]
    return [obj, nodeclaim(name, nodeName=name, **claim_extra)]


def running(name: str, on: str, **meta: Any) -> dict[str, Any]:
    """A Running pod of 1 CPU on ``on``, started at T0; ``meta`` goes to its metadata."""
    obj = pod(name, "1", node=on, meta=meta)
    obj["status"] = {"phase": "Running", "startTime": T0.strftime(STAMP)}
    return obj


@pytest.mark.parametrize("path", PATHS)
def test_a_do_not_disrupt_duration_is_read_again_when_it_lapses(path: str) -> None:
    # Consolidation/Delete/"does not consolidate nodes with pods that have a duration-based
    # do-not-disrupt annotation that is still active" and "can consolidate nodes after
    # duration-based do-not-disrupt annotation expires": the controller decides at its clock on
    # every pass, so the pass after the two minutes takes the node.
    protected = running("web-0", "a", annotations={wk.DO_NOT_DISRUPT: "2m"})
    objects = [pool(), *managed("a"), *managed("b", claim=True), protected]
    objects.append(running("web-1", "b", annotations={wk.DO_NOT_DISRUPT: "true"}))
    first = PATHS[path]
    assert first(objects, T0 + timedelta(minutes=1)) == ("", [])
    assert first(objects, T0 + timedelta(minutes=3)) == ("underutilized", ["a"])


@pytest.mark.parametrize("path", PATHS)
def test_a_node_whose_nodeclaim_is_being_deleted_is_no_candidate(path: str) -> None:
    # Candidate Filtering/"should not consider candidates that are deleting": the NodeClaim's
    # deletionTimestamp, not the Node's.
    objects = [pool(), *managed("a", deletionTimestamp=CREATED), *managed("b")]
    objects.append(running("web-1", "b", annotations={wk.DO_NOT_DISRUPT: "true"}))
    assert PATHS[path](objects, T0) == ("", [])


@pytest.mark.parametrize("path", PATHS)
def test_a_labelled_node_without_a_nodeclaim_is_not_disrupted(path: str) -> None:
    # Candidate Filtering/"should not consider candidates that are not managed": an empty Node
    # labelled with the NodePool but without a NodeClaim is left alone; one with a NodeClaim
    # goes.
    objects = [pool(), *managed("orphan", claim=False), *managed("a")]
    assert PATHS[path](objects, T0) == ("empty", ["a"])


def test_simulate_takes_labelled_nodes_as_managed_when_the_input_has_no_nodeclaims() -> None:
    # Without any NodeClaim in the input (``kubectl get nodes`` alone), it cannot tell.
    objects = [pool(), *managed("orphan", claim=False)]
    assert simulate_first(objects, T0) == ("empty", ["orphan"])


@pytest.mark.parametrize("path", PATHS)
def test_a_node_whose_pods_are_all_terminating_is_empty(path: str) -> None:
    # Emptiness/Emptiness/"will consider a node with terminating Deployment pods as empty"
    going = running("web-0", "a", deletionTimestamp=T0.strftime(STAMP), finalizers=["x/y"])
    objects = [pool(), *managed("a"), going]
    assert PATHS[path](objects, T0) == ("empty", ["a"])


def test_simulate_notes_a_labelled_node_without_its_nodeclaim() -> None:
    objects = [pool(), *managed("orphan", claim=False), *managed("a")]
    text = "\n---\n".join(yaml.safe_dump(obj) for obj in objects)
    built = build_snapshot(parse_documents(text, "input.yaml"), cast("Any", _Provider()))
    assert (
        "Node orphan is labelled karpenter.sh/nodepool=default but no NodeClaim in the input is "
        "its own: not launched by Karpenter, so never disrupted"
    ) in built.notes
