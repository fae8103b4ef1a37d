"""Drift of a GCE node from its GCENodeClass (hash, then image) and the repair policies."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_gcp.drift import drift_reason, image_drift, nodeclass_drift, repair_policies
from karpenter_gcp.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    GCENodeClass,
    nodeclass_hash,
)

IMAGE = "projects/gke-node-images/global/images/gke-1312-gke1000-cos-117-18613-0-79-c-pre"
URL = f"https://www.googleapis.com/compute/v1/{IMAGE}"


def node_class(ready: str = "True", observed: int = 2, **spec: Any) -> GCENodeClass:
    return GCENodeClass.from_manifest(
        {
            "metadata": {"name": "default", "generation": 2},
            "spec": {"imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}], **spec},
            "status": {
                "images": [{"sourceImage": IMAGE, "requirements": []}],
                "conditions": [
                    {
                        "type": "ImagesReady",
                        "status": ready,
                        "reason": "ImagesReady",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                        "observedGeneration": observed,
                    }
                ],
            },
        }
    )


def nodeclaim(hash_: str | None, version: str = HASH_VERSION, image: str | None = URL) -> NodeClaim:
    annotations = (
        {} if hash_ is None else {HASH_ANNOTATION: hash_, HASH_VERSION_ANNOTATION: version}
    )
    return NodeClaim.from_manifest(
        {
            "metadata": {"name": "n", "annotations": annotations},
            "spec": {
                "requirements": [],
                "nodeClassRef": {
                    "group": "karpenter.k8s.gcp",
                    "kind": "GCENodeClass",
                    "name": "default",
                },
            },
            "status": {"imageID": image} if image else {},
        }
    )


def test_a_node_of_the_current_spec_and_image_has_not_drifted() -> None:
    current = node_class()
    assert drift_reason(nodeclaim(nodeclass_hash(current.spec)), current) == ""


def test_a_changed_spec_is_nodeclass_drift_before_image_drift() -> None:
    old = node_class()
    changed = node_class(labels={"team": "b"})
    assert nodeclass_drift(nodeclaim(nodeclass_hash(old.spec)), changed) == "NodeClassDrift"
    assert (
        drift_reason(nodeclaim(nodeclass_hash(old.spec), image="other"), changed)
        == "NodeClassDrift"
    )


def test_no_hash_or_another_hash_version_is_no_verdict() -> None:
    current = node_class(labels={"team": "b"})
    assert nodeclass_drift(nodeclaim(None), current) == ""
    assert nodeclass_drift(nodeclaim("123", version="v0"), current) == ""


def test_an_image_no_longer_resolved_is_image_drift() -> None:
    current = node_class()
    stale = nodeclaim(nodeclass_hash(current.spec), image=URL.replace("0-79", "0-70"))
    assert drift_reason(stale, current) == "ImageDrift"


def test_image_drift_waits_for_current_images_and_an_image_id() -> None:
    for unsure in (node_class(ready="False"), node_class(observed=1)):
        assert drift_reason(nodeclaim(nodeclass_hash(unsure.spec), image="other"), unsure) == ""
    assert image_drift(None, node_class().status.images) == ""
    assert image_drift("other", []) == ""


def test_repair_policies_are_the_community_providers() -> None:
    policies = {(p.condition_type, p.condition_status): p.toleration for p in repair_policies()}
    assert policies == {
        ("Ready", "False"): timedelta(minutes=10),
        ("Ready", "Unknown"): timedelta(minutes=10),
        ("KernelDeadlock", "True"): timedelta(minutes=5),
        ("ReadonlyFilesystem", "True"): timedelta(minutes=5),
        ("FrequentKubeletRestart", "True"): timedelta(minutes=30),
        ("FrequentContainerdRestart", "True"): timedelta(minutes=30),
    }
