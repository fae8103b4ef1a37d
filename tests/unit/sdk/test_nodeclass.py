"""The SDK's NodeClass readiness pieces: the Ready-by-conditions mixin, Ready's verdict from
its dependents, and a status controller's resolved status."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from karpenter_core.apis.v1.common import Conditions, KubeModel, KubeObject, ObjectMeta
from karpenter_core.sdk.nodeclass import (
    NotReady,
    ReadyByConditions,
    Verdict,
    ready_verdict,
    resolved_status,
)


class Status(KubeModel):
    conditions: Conditions = Field(default_factory=list)
    image_id: str | None = None


class AcmeNodeClass(KubeObject, ReadyByConditions):
    kind: Literal["AcmeNodeClass"] = "AcmeNodeClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    status: Status = Field(default_factory=Status)


def acme(*conditions: dict[str, Any], generation: int = 1) -> AcmeNodeClass:
    return AcmeNodeClass.model_validate(
        {
            "metadata": {"name": "default", "generation": generation},
            "status": {"conditions": list(conditions)},
        }
    )


def ready(status: str, observed: int = 1, message: str = "") -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": "Ready" if status == "True" else "SubnetsMissing",
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": observed,
    }


def test_a_node_class_is_ready_when_ready_is_true_for_its_spec() -> None:
    assert acme(ready("True")).not_ready() is None
    assert acme(ready("True")).not_ready_reason() is None


def test_the_kind_names_a_node_class_without_a_ready_condition() -> None:
    assert acme().not_ready() == NotReady("the AcmeNodeClass has no Ready condition yet", True)


def test_a_false_or_stale_ready_condition_says_why() -> None:
    assert acme(ready("False", message="no subnet")).not_ready_reason() == "no subnet"
    stale = acme(ready("True", observed=1), generation=2).not_ready_reason()
    assert stale is not None and "generation 2" in stale


def test_ready_is_true_when_every_dependent_is() -> None:
    verdicts = {"SubnetsReady": Verdict.true("SubnetsReady"), "Other": Verdict("False", "X")}
    assert ready_verdict(verdicts, ["SubnetsReady"]) == Verdict("True", "Ready")


def test_ready_names_each_unhealthy_dependent_with_its_status() -> None:
    verdicts = {
        "SubnetsReady": Verdict("False", "SubnetsNotFound", "no subnet"),
        "ImagesReady": Verdict("Unknown", "Resolving", "not yet"),
        "ValidationSucceeded": Verdict.true("ValidationSucceeded"),
    }
    verdict = ready_verdict(verdicts, verdicts)
    assert verdict == Verdict(
        "False",
        "UnhealthyDependents",
        "SubnetsReady=False: no subnet; ImagesReady=Unknown: not yet",
    )


def test_a_resolved_status_is_its_manifest_and_whether_the_cloud_failed() -> None:
    status = Status(image_id="img-1")
    calm = {"A": Verdict.true("A")}
    failed = {**calm, "B": Verdict("False", "Failed", "throttled", cloud_error=True)}
    assert resolved_status(status, calm) == ({"conditions": [], "imageId": "img-1"}, False)
    assert resolved_status(Status(), failed) == ({"conditions": []}, True)
