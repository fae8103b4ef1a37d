"""The shared NodeClass pieces: readiness from the Ready condition, and the status controller
skeleton against the fake API."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from kubernetes import client
from pydantic import Field, ValidationError

from karpenter_conformance.fakekube import FakeKube
from karpenter_core.apis.v1.common import (
    Condition,
    Conditions,
    KubeModel,
    KubeObject,
    NodeClassReference,
    ObjectMeta,
)
from karpenter_core.apis.v1.hashing import spec_hash
from karpenter_core.cloudprovider.nodeclass import (
    NotReady,
    Verdict,
    launchable_node_class,
    node_class_ref_readiness,
    not_ready,
    stamp_conditions,
    validation_problems,
)
from karpenter_core.cloudprovider.plugin import NodeClassInfo, ProviderContext
from karpenter_core.cloudprovider.types import (
    CloudProviderError,
    CreateError,
    InsufficientCapacity,
    NodeClassNotReady,
    NodeClassReadiness,
)
from karpenter_core.controllers.nodeclass_status import NodeClassStatusController

GROUP = "karpenter.test.example.com"
KIND = "TestNodeClass"
COLLECTION = f"/apis/{GROUP}/v1/testnodeclasses"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _ready(status: str, generation: int | None = None, message: str = "") -> Condition:
    return Condition(
        type="Ready",
        status=status,
        reason="Ready" if status == "True" else "Waiting",
        message=message,
        last_transition_time=NOW,
        observed_generation=generation,
    )


# -- readiness ---------------------------------------------------------------------------------


def test_a_missing_ready_condition_is_not_resolved_yet() -> None:
    assert not_ready(KIND, [], 1) == NotReady(f"the {KIND} has no Ready condition yet", True)


def test_ready_false_is_not_ready_with_its_message() -> None:
    assert not_ready(KIND, [_ready("False", 1, "no subnet")], 1) == NotReady("no subnet", False)


def test_ready_unknown_is_not_resolved_yet_and_falls_back_to_the_reason() -> None:
    assert not_ready(KIND, [_ready("Unknown", 1)], 1) == NotReady("Waiting", True)


def test_ready_for_an_older_generation_is_not_ready() -> None:
    problem = not_ready(KIND, [_ready("True", 1)], 2)
    assert problem is not None and not problem.unknown
    assert "generation 2, Ready observed generation 1" in problem.reason


@pytest.mark.parametrize("observed", [None, 3])
def test_ready_for_the_current_spec_is_ready(observed: int | None) -> None:
    assert not_ready(KIND, [_ready("True", observed)], 3) is None


class _Judged:
    def __init__(self, reason: str | None) -> None:
        self.reason = reason

    def not_ready_reason(self) -> str | None:
        return self.reason


def _ref(kind: str = KIND, name: str = "default") -> NodeClassReference:
    return NodeClassReference(group=GROUP, kind=kind, name=name)


def test_readiness_of_a_nodepools_node_class() -> None:
    found = {"default": _Judged(None), "broken": _Judged("no image")}
    assert node_class_ref_readiness("test", GROUP, KIND, _ref(), found.get) == NodeClassReadiness(
        True
    )
    assert node_class_ref_readiness(
        "test", GROUP, KIND, _ref(name="broken"), found.get
    ) == NodeClassReadiness(False, "no image")
    assert node_class_ref_readiness(
        "test", GROUP, KIND, _ref(name="gone"), found.get
    ) == NodeClassReadiness(False, f"{KIND} 'gone' not found")
    assert node_class_ref_readiness(
        "test", GROUP, KIND, _ref(kind="OtherNodeClass"), found.get
    ) == NodeClassReadiness(
        False, f"the test provider reads {KIND} ({GROUP}), not OtherNodeClass ({GROUP})"
    )


class _Launchable:
    def __init__(self, problem: NotReady | None) -> None:
        self.problem = problem

    def not_ready(self) -> NotReady | None:
        return self.problem


def test_launchable_node_class_raises_what_the_core_expects() -> None:
    ready = _Launchable(None)
    found = {
        "default": ready,
        "pending": _Launchable(NotReady("resolving", unknown=True)),
        "broken": _Launchable(NotReady("no image", unknown=False)),
    }

    def launch(ref: NodeClassReference, view: bool = True) -> _Launchable:
        return launchable_node_class("test", GROUP, KIND, "c1", ref, found.get if view else None)

    assert launch(_ref()) is ready
    with pytest.raises(NodeClassNotReady, match="references OtherNodeClass"):
        launch(_ref(kind="OtherNodeClass"))
    with pytest.raises(CloudProviderError, match="no view of TestNodeClass objects"):
        launch(_ref(), view=False)
    with pytest.raises(InsufficientCapacity, match="'gone' not found"):
        launch(_ref(name="gone"))
    with pytest.raises(CreateError, match="not resolved yet: resolving"):
        launch(_ref(name="pending"))
    with pytest.raises(NodeClassNotReady, match="'broken' is not ready: no image"):
        launch(_ref(name="broken"))


def test_stamped_conditions_keep_their_transition_time_while_the_status_holds() -> None:
    earlier = NOW - timedelta(hours=1)
    previous = [
        Condition(type="A", status="True", reason="A", last_transition_time=earlier),
        Condition(type="B", status="True", reason="B", last_transition_time=earlier),
    ]
    later = NOW.replace(microsecond=123)
    a, b, c = stamp_conditions(
        {
            "A": Verdict.true("A"),
            "B": Verdict("False", "Gone", "b is gone"),
            "C": Verdict.true("C"),
        },
        previous,
        later,
        7,
    )
    assert (a.last_transition_time, b.last_transition_time, c.last_transition_time) == (
        earlier,
        NOW,
        NOW,
    )
    assert (b.status, b.reason, b.message) == ("False", "Gone", "b is gone")
    assert {a.observed_generation, b.observed_generation, c.observed_generation} == {7}


def test_spec_hash_counts_lists_as_sets_and_false_and_zero_as_values() -> None:
    base = {"tags": {"a": "1"}, "sysctls": ["x", "y"], "quota": True}
    assert spec_hash(base) == spec_hash({**base, "sysctls": ["y", "x"], "unset": [], "no": None})
    assert spec_hash(base) != spec_hash({**base, "quota": False})
    assert spec_hash(base) != spec_hash({**base, "pods": 0})


class _Spec(KubeModel):
    size: int = 1


class _Status(KubeModel):
    size: int | None = None
    conditions: Conditions = Field(default_factory=list)


class _NodeClass(KubeObject):
    api_version: Literal["karpenter.test.example.com/v1"] = "karpenter.test.example.com/v1"
    kind: Literal["TestNodeClass"] = "TestNodeClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: _Spec = Field(default_factory=_Spec)
    status: _Status = Field(default_factory=_Status)


def test_validation_problems_name_each_field() -> None:
    with pytest.raises(ValidationError) as raised:
        _NodeClass.from_manifest({"spec": {"size": "many"}, "status": {"size": []}})
    assert validation_problems(raised.value) == (
        "spec.size: Input should be a valid integer, unable to parse string as an integer; "
        "status.size: Input should be a valid integer"
    )


# -- the controller skeleton -------------------------------------------------------------------


class _Controller(NodeClassStatusController[_NodeClass]):
    model = _NodeClass
    group = GROUP
    version = "v1"
    kind = KIND
    plural = "testnodeclasses"
    finalizer = f"{GROUP}/termination"
    hash_annotation = f"{GROUP}/hash"
    hash_version_annotation = f"{GROUP}/hash-version"
    hash_version = "v2"
    restamp_nodeclaims = True

    def __init__(self, context: ProviderContext) -> None:
        super().__init__(context, timedelta(minutes=5))
        self.resolved: list[tuple[str, str]] = []
        self.released: list[str] = []
        self.hold = False

    def spec_hash(self, node_class: _NodeClass) -> str:
        return f"size-{node_class.spec.size}"

    def kubernetes_version(self, version_info: Mapping[str, Any]) -> str:
        return f"{version_info['major']}.{version_info['minor']}"

    def resolve(
        self, node_class: _NodeClass, kubernetes_version: str, now: datetime
    ) -> tuple[dict[str, Any], bool]:
        self.resolved.append((node_class.metadata.name or "", kubernetes_version))
        status = _Status(
            size=node_class.spec.size,
            conditions=[_ready("True", node_class.metadata.generation)],
        )
        return status.model_dump(mode="json", by_alias=True, exclude_none=True), False

    def release(self, node_class: _NodeClass) -> bool:
        self.released.append(node_class.metadata.name or "")
        return not self.hold


def test_a_subclass_names_its_kind_in_the_class_statement() -> None:
    info = NodeClassInfo(_NodeClass, GROUP, "v1", KIND, "testnodeclasses")

    class Named(_Controller, info=info, hash_version="v3"):
        pass

    assert (Named.model, Named.group, Named.version, Named.kind, Named.plural) == (
        _NodeClass,
        GROUP,
        "v1",
        KIND,
        "testnodeclasses",
    )
    assert Named.finalizer == f"{GROUP}/termination"
    assert Named.hash_annotation == f"{GROUP}/testnodeclass-hash"
    assert Named.hash_version_annotation == f"{GROUP}/testnodeclass-hash-version"
    assert (Named.hash_version, _Controller.hash_version) == ("v3", "v2")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = FakeKube()
    yield fake
    fake.stop()


@pytest.fixture
def controller(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> _Controller:
    made = _Controller(
        ProviderContext(kube_client=kube.api_client(), clock=lambda: NOW),
    )
    # The fake API serves no /version.
    monkeypatch.setattr(made._cluster, "version_info", lambda: {"major": "1", "minor": "31"})
    return made


def _nodeclaim(name: str, annotations: Mapping[str, str], drifted: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Drifted", "status": "True"}] if drifted else []
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "annotations": dict(annotations)},
        "spec": {"nodeClassRef": {"group": GROUP, "kind": KIND, "name": "default"}},
        "status": {"conditions": conditions},
    }


def test_sync_stamps_resolves_and_restamps_nodeclaims(
    kube: FakeKube, controller: _Controller
) -> None:
    kube.put(COLLECTION, {"metadata": {"name": "default"}, "spec": {"size": 3}})
    old = {f"{GROUP}/hash": "old", f"{GROUP}/hash-version": "v1"}
    kube.put(NODECLAIMS, _nodeclaim("fresh", old))
    kube.put(NODECLAIMS, _nodeclaim("drifted", old, drifted=True))

    controller.sync()
    controller.sync()  # not due again within the resync period

    stored = kube.object(f"{COLLECTION}/default")
    assert stored is not None
    assert stored["metadata"]["annotations"] == {
        f"{GROUP}/hash": "size-3",
        f"{GROUP}/hash-version": "v2",
    }
    assert stored["metadata"]["finalizers"] == [f"{GROUP}/termination"]
    assert stored["status"]["size"] == 3
    assert controller.resolved == [("default", "1.31")]
    fresh = kube.object(f"{NODECLAIMS}/fresh")
    drifted = kube.object(f"{NODECLAIMS}/drifted")
    assert fresh is not None and drifted is not None
    assert fresh["metadata"]["annotations"] == {
        f"{GROUP}/hash": "size-3",
        f"{GROUP}/hash-version": "v2",
    }
    assert drifted["metadata"]["annotations"] == {
        f"{GROUP}/hash": "old",
        f"{GROUP}/hash-version": "v2",
    }


def test_an_invalid_node_class_is_reported_once_per_generation(
    kube: FakeKube, controller: _Controller, caplog: pytest.LogCaptureFixture
) -> None:
    kube.put(COLLECTION, {"metadata": {"name": "bad"}, "spec": {"size": "many"}})
    with caplog.at_level(logging.ERROR):
        controller.sync()
        controller.sync()
    reports = [r.getMessage() for r in caplog.records if "is not valid" in r.getMessage()]
    assert reports == [
        f"nodeclass: {KIND} bad is not valid, skipping it: spec.size: Input should be a valid "
        "integer, unable to parse string as an integer"
    ]
    assert controller.resolved == []


def test_a_deleted_node_class_keeps_its_finalizer_while_used_and_until_released(
    kube: FakeKube, controller: _Controller
) -> None:
    kube.put(COLLECTION, {"metadata": {"name": "default"}, "spec": {"size": 1}})
    kube.put(NODECLAIMS, _nodeclaim("user", {}))
    controller.sync()
    controller.hold = True
    custom = client.CustomObjectsApi(kube.api_client())
    custom.delete_cluster_custom_object(GROUP, "v1", "testnodeclasses", "default")

    controller.sync()
    assert controller.released == []  # a NodeClaim still uses it
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "user")
    controller.sync()
    assert controller.released == ["default"]
    assert kube.object(f"{COLLECTION}/default") is not None  # release asked to wait

    controller.hold = False
    controller.sync()
    assert controller.released == ["default", "default"]
    assert kube.object(f"{COLLECTION}/default") is None
