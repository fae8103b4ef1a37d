"""The SDK's NodeClass binding and the machine-to-NodeClaim view."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Literal

import pytest
from pydantic import Field

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.common import Conditions, KubeModel, KubeObject, ObjectMeta
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.sdk.machines import Machine, MachineView
from karpenter_core.sdk.nodeclass import NodeClassBinding, ReadyByConditions
from karpenter_core.sdk.record import NodeClassInfo, ProviderContext
from karpenter_core.sdk.types import (
    CloudProviderError,
    InstanceType,
    InsufficientCapacity,
    NodeClassNotReady,
)

GROUP = "karpenter.example.com"
KIND = "ExampleNodeClass"
NOW = datetime(2025, 1, 1, tzinfo=UTC)


class Status(KubeModel):
    conditions: Conditions = Field(default_factory=list)


class ExampleNodeClass(KubeObject, ReadyByConditions):
    api_version: Literal["karpenter.example.com/v1"] = "karpenter.example.com/v1"
    kind: Literal["ExampleNodeClass"] = "ExampleNodeClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    status: Status = Field(default_factory=Status)


INFO = NodeClassInfo(ExampleNodeClass, GROUP, "v1", KIND, "examplenodeclasses")


def node_class(name: str, *, ready: bool = True, deleting: bool = False) -> ExampleNodeClass:
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "Ready" if ready else "SubnetsMissing",
        "message": "" if ready else "no subnet",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    metadata: dict[str, Any] = {"name": name}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        metadata["finalizers"] = ["example"]
    return ExampleNodeClass.model_validate(
        {"metadata": metadata, "status": {"conditions": [condition]}}
    )


def binding(*classes: Any, view: bool = True) -> NodeClassBinding[ExampleNodeClass]:
    found = {(KIND, c.metadata.name): c for c in classes}
    lookup = (lambda kind, name: found.get((kind, name))) if view else None
    context = ProviderContext(node_classes=lookup, clock=lambda: NOW)
    return NodeClassBinding[ExampleNodeClass]("example", INFO, context)


def nodepool(kind: str = KIND, name: str = "default") -> NodePool:
    return NodePool.model_validate(
        {
            "metadata": {"name": "pool"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [],
                        "nodeClassRef": {"group": GROUP, "kind": kind, "name": name},
                    }
                }
            },
        }
    )


def nodeclaim(name: str = "claim", node_class: str = "default", **spec: Any) -> NodeClaim:
    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "labels": {wk.NODEPOOL: "pool"}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": GROUP, "kind": KIND, "name": node_class},
                **spec,
            },
        }
    )


# -- the binding ------------------------------------------------------------------------------


def test_get_skips_missing_deleting_and_foreign_objects() -> None:
    ready = node_class("default")
    bound = binding(ready, node_class("going", deleting=True))
    assert bound.get("default") is ready
    assert bound.get("going") is None
    assert bound.get("missing") is None
    assert bound.get("") is None
    assert binding(ready, view=False).get("default") is None
    other = NodeClassBinding[ExampleNodeClass](
        "example",
        INFO,
        ProviderContext(node_classes=lambda kind, name: {"not": "a model"}),
    )
    assert other.get("default") is None


def test_of_nodepool_and_readiness() -> None:
    bound = binding(node_class("default"), node_class("broken", ready=False))
    assert bound.of_nodepool(nodepool()) is not None
    assert bound.of_nodepool(nodepool(kind="OtherNodeClass")) is None
    assert bound.readiness(nodepool()).ready
    broken = bound.readiness(nodepool(name="broken"))
    assert not broken.ready and broken.reason == "no subnet"
    foreign = bound.readiness(nodepool(kind="OtherNodeClass"))
    assert not foreign.ready and "reads ExampleNodeClass" in foreign.reason
    assert bound.readiness(nodepool(kind="OtherNodeClass"), live=False).ready
    blind = binding(view=False).readiness(nodepool())
    assert not blind.ready and "no view of ExampleNodeClass" in blind.reason


def test_of_nodeclaim_reads_only_this_kind() -> None:
    bound = binding(node_class("default"))
    assert bound.of_nodeclaim(nodeclaim()) is not None
    assert bound.of_nodeclaim(nodeclaim(node_class="missing")) is None
    foreign = nodeclaim()
    foreign.spec.node_class_ref.kind = "OtherNodeClass"
    assert bound.of_nodeclaim(foreign) is None


def test_launchable_raises_what_upstream_raises() -> None:
    bound = binding(node_class("default"), node_class("broken", ready=False))
    assert bound.launchable(nodeclaim()).metadata.name == "default"
    with pytest.raises(InsufficientCapacity, match="'missing' not found"):
        bound.launchable(nodeclaim(node_class="missing"))
    with pytest.raises(NodeClassNotReady, match="no subnet"):
        bound.launchable(nodeclaim(node_class="broken"))
    with pytest.raises(CloudProviderError, match="no view of ExampleNodeClass"):
        binding(view=False).launchable(nodeclaim())


def test_supported_and_reference() -> None:
    bound = binding()
    assert bound.supported() == [ExampleNodeClass]
    assert bound.reference("") == {"group": GROUP, "kind": KIND, "name": "unknown"}


# -- the view -------------------------------------------------------------------------------


def instance_type() -> InstanceType:
    return InstanceType(
        "big",
        Requirements.from_labels({wk.INSTANCE_TYPE: "big", wk.ARCH: "amd64"}),
        [],
        {"cpu": 4000, "memory": 8 << 30, "example.com/efa": 1000, "example.com/gpu": 0},
    )


MACHINE = Machine(
    id="vm-1",
    provider_id="example:///vm-1",
    instance_type="big",
    capacity_type="spot",
    zone="zone-a",
    created=NOW,
    nodeclaim="claim",
    nodepool="pool",
    node_class="default",
    image_id="image-1",
)


def test_a_machine_becomes_a_nodeclaim_with_labels_and_resources() -> None:
    reads: list[Any] = []

    def types(nc: ExampleNodeClass | None) -> list[InstanceType]:
        reads.append(nc)
        return [instance_type()]

    view = MachineView(binding(node_class("default")), types, requested_only={"example.com/efa"})
    claims = view.nodeclaims([MACHINE, MACHINE])
    assert len(reads) == 1  # each NodeClass read once per list
    claim = claims[0]
    assert claim.metadata.name == "claim"
    assert claim.metadata.creation_timestamp == NOW
    assert claim.metadata.deletion_timestamp is None
    assert claim.metadata.labels == {
        wk.INSTANCE_TYPE: "big",
        wk.ARCH: "amd64",
        wk.TOPOLOGY_ZONE: "zone-a",
        wk.CAPACITY_TYPE: "spot",
        wk.NODEPOOL: "pool",
    }
    assert claim.spec.node_class_ref.name == "default"
    assert claim.status.provider_id == "example:///vm-1"
    assert claim.status.image_id == "image-1"
    assert claim.status.capacity == {"cpu": Fraction(4), "memory": Fraction(8 << 30, 1000)}


def test_an_untagged_terminating_machine() -> None:
    view = MachineView(binding(), lambda nc: [])
    machine = Machine("vm-2", "example:///vm-2", "gone", "on-demand", "zone-b", deleting=True)
    claim = view.nodeclaim(machine)
    assert claim.metadata.name == "vm-2"
    assert claim.metadata.deletion_timestamp == NOW
    assert claim.spec.node_class_ref.name == "unknown"
    assert claim.status.capacity == {}


def test_created_keeps_the_claims_labels_and_shows_requested_resources() -> None:
    def extra(machine: Machine, nc: ExampleNodeClass | None) -> dict[str, str | None]:
        return {"example.com/nodeclass": nc.metadata.name if nc else None, wk.ARCH: None}

    ready = node_class("default")
    view = MachineView(
        binding(ready),
        lambda nc: [instance_type()],
        extra_labels=extra,
        requested_only={"example.com/efa"},
    )
    claim = nodeclaim(resources={"requests": {"example.com/efa": "1"}})
    claim.metadata.labels[wk.CAPACITY_TYPE] = "on-demand"
    created = view.created(claim, ready, MACHINE, {"example.com/hash": "h"})
    assert created is not claim
    assert created.metadata.labels[wk.CAPACITY_TYPE] == "on-demand"  # the claim's own wins
    assert created.metadata.labels["example.com/nodeclass"] == "default"
    assert wk.ARCH not in created.metadata.labels  # None removes
    assert created.metadata.annotations == {"example.com/hash": "h"}
    assert created.status.capacity["example.com/efa"] == Fraction(1)
