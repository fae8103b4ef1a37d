"""Drift of a node from its AKSNodeClass, check by check and in upstream's order, and the
repair policies."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from karpenter_azure.drift import (
    DRIFT_IMAGE,
    DRIFT_K8S_VERSION,
    DRIFT_KUBELET_IDENTITY,
    DRIFT_NODECLASS,
    LABEL_KUBELET_IDENTITY_CLIENT_ID,
    NodeFacts,
    drift_reason,
    repair_policies,
)
from karpenter_azure.nodeclass import (
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    AKSNodeClass,
    nodeclass_hash,
)
from karpenter_core.cloudprovider.types import RepairPolicy

IMAGE = "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/"
OLD, NEW = (
    f"{IMAGE}2204gen2containerd/versions/202501.01.0",
    (f"{IMAGE}2204gen2containerd/versions/202503.01.0"),
)
CLIENT_ID = "11111111-1111-1111-1111-111111111111"


def condition(kind: str, status: str = "True", generation: int = 1) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": kind,
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "observedGeneration": generation,
    }


def node_class(
    spec: dict[str, Any] | None = None,
    *,
    images: tuple[str, ...] = (NEW,),
    version: str = "1.31.2",
    generation: int = 1,
    ready_generation: int = 1,
    images_ready: str = "True",
) -> AKSNodeClass:
    return AKSNodeClass.from_manifest(
        {
            "metadata": {"name": "default", "generation": generation},
            "spec": spec or {},
            "status": {
                "images": [{"id": image, "requirements": []} for image in images],
                "kubernetesVersion": version,
                "conditions": [
                    condition("ImagesReady", images_ready, ready_generation),
                    condition("KubernetesVersionReady", "True", ready_generation),
                ],
            },
        }
    )


def claimed(cls: AKSNodeClass, version: str = HASH_VERSION) -> dict[str, str]:
    return {HASH_ANNOTATION: nodeclass_hash(cls.spec), HASH_VERSION_ANNOTATION: version}


def node(kubelet: str = "v1.31.2", client_id: str | None = CLIENT_ID) -> NodeFacts:
    labels = {} if client_id is None else {LABEL_KUBELET_IDENTITY_CLIENT_ID: client_id}
    return NodeFacts(kubelet_version=kubelet, labels=labels)


def reason(
    cls: AKSNodeClass,
    annotations: dict[str, str],
    image: str | None = NEW,
    facts: NodeFacts | None = None,
) -> str:
    return drift_reason(
        cls,
        nodeclaim_annotations=annotations,
        nodeclaim_image_id=image,
        node=facts if facts is not None else node(),
        kubelet_identity_client_id=CLIENT_ID,
    )


def test_a_matching_node_has_not_drifted() -> None:
    cls = node_class()
    assert reason(cls, claimed(cls)) == ""


def test_a_changed_spec_is_nodeclass_drift() -> None:
    launched = node_class()
    changed = node_class({"osDiskSizeGB": 64})
    assert reason(changed, claimed(launched)) == DRIFT_NODECLASS


def test_a_tag_change_is_not_drift() -> None:
    launched = node_class()
    assert reason(node_class({"tags": {"team": "b"}}), claimed(launched)) == ""


def test_another_hash_version_or_no_hash_gives_no_nodeclass_verdict() -> None:
    changed = node_class({"osDiskSizeGB": 64})
    assert reason(changed, claimed(node_class(), version="v3")) == ""
    assert reason(changed, {}) == ""


def test_an_older_kubelet_is_k8s_version_drift() -> None:
    cls = node_class(version="1.32.0")
    assert reason(cls, claimed(cls), facts=node("v1.31.2")) == DRIFT_K8S_VERSION


def test_a_kubelet_version_that_is_no_kubernetes_version_gives_no_verdict() -> None:
    cls = node_class(version="1.32.0")
    assert reason(cls, claimed(cls), facts=node("kwok-v0.8.0")) == ""
    assert reason(cls, claimed(cls), facts=node("")) == ""


def test_no_version_verdict_until_the_version_is_resolved_for_this_generation() -> None:
    cls = node_class(version="1.32.0", generation=2, ready_generation=1)
    assert reason(cls, claimed(cls), image=NEW, facts=node("v1.31.2")) == ""


def test_another_kubelet_identity_is_drift_and_no_label_is_none() -> None:
    cls = node_class()
    other = node(client_id="22222222-2222-2222-2222-222222222222")
    assert reason(cls, claimed(cls), facts=other) == DRIFT_KUBELET_IDENTITY
    assert reason(cls, claimed(cls), facts=node(client_id=None)) == ""


def test_an_image_no_longer_in_status_is_image_drift() -> None:
    cls = node_class()
    assert reason(cls, claimed(cls), image=OLD) == DRIFT_IMAGE
    assert reason(node_class(images=(OLD, NEW)), claimed(cls), image=OLD) == ""


def test_no_image_verdict_while_images_are_not_ready_or_the_claim_has_no_image() -> None:
    cls = node_class(images_ready="False")
    assert reason(cls, claimed(cls), image=OLD) == ""
    assert reason(node_class(), claimed(cls), image=None) == ""


def test_checks_run_in_upstreams_order() -> None:
    launched = node_class()
    everything = node_class({"maxPods": 30}, version="1.32.0")
    facts = node("v1.31.2", client_id="other")
    assert reason(everything, claimed(launched), image=OLD, facts=facts) == DRIFT_NODECLASS
    assert reason(everything, claimed(everything), image=OLD, facts=facts) == DRIFT_K8S_VERSION
    same_version = node("v1.32.0", client_id="other")
    assert (
        reason(everything, claimed(everything), image=OLD, facts=same_version)
        == DRIFT_KUBELET_IDENTITY
    )


def test_without_a_node_only_the_nodeclaim_checks_count() -> None:
    cls = node_class(version="1.32.0")
    assert (
        drift_reason(
            cls,
            nodeclaim_annotations=claimed(cls),
            nodeclaim_image_id=OLD,
            node=None,
            kubelet_identity_client_id=CLIENT_ID,
        )
        == DRIFT_IMAGE
    )


def test_repair_policies_are_upstreams() -> None:
    assert repair_policies() == [
        RepairPolicy("Ready", "False", timedelta(minutes=10)),
        RepairPolicy("Ready", "Unknown", timedelta(minutes=10)),
        RepairPolicy("kubernetes.azure.com/NodeHealthy", "False", timedelta(0)),
        RepairPolicy("PreemptionScheduled", "True", timedelta(0)),
    ]
