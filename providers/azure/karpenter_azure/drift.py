"""Drift of an Azure node from its AKSNodeClass, and the node repair policies (pure functions).

The checks run in upstream's order and the first that finds drift names it:

- NodeClassDrift: the NodeClaim's ``aksnodeclass-hash`` annotation differs from the hash of the
  AKSNodeClass's spec (computed with the same hash version; another version is no verdict);
- K8sVersionDrift: the node's kubelet version differs from ``status.kubernetesVersion`` (a
  kubelet version that is no Kubernetes version, empty or KWOK's ``kwok-v0.8.0``, is no verdict);
- KubeletIdentityDrift: the node's ``kubernetes.azure.com/kubelet-identity-client-id`` label
  differs from the configured kubelet identity (no label, no verdict);
- ImageDrift: the NodeClaim's ``status.imageID`` is none of the images in ``status.images``.

A check whose AKSNodeClass condition (KubernetesVersionReady, ImagesReady) is not True for the
current generation gives no verdict, as upstream skips it. Upstream fails the drift check of a
NodeClaim without an image id; here that is no verdict either, so the other checks still count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from karpenter_azure.nodeclass import (
    CONDITION_IMAGES_READY,
    CONDITION_KUBERNETES_VERSION_READY,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    AKSNodeClass,
    NodeImage,
    nodeclass_hash,
)
from karpenter_core.sdk.types import RepairPolicy

__all__ = [
    "DRIFT_IMAGE",
    "DRIFT_K8S_VERSION",
    "DRIFT_KUBELET_IDENTITY",
    "DRIFT_NODECLASS",
    "LABEL_KUBELET_IDENTITY_CLIENT_ID",
    "NodeFacts",
    "drift_reason",
    "image_drift",
    "kubelet_identity_drift",
    "kubernetes_version_drift",
    "nodeclass_drift",
    "repair_policies",
]

DRIFT_NODECLASS = "NodeClassDrift"
DRIFT_K8S_VERSION = "K8sVersionDrift"
DRIFT_KUBELET_IDENTITY = "KubeletIdentityDrift"
DRIFT_IMAGE = "ImageDrift"

_KUBERNETES_VERSION = re.compile(r"^\d+\.\d+\.\d+")

LABEL_KUBELET_IDENTITY_CLIENT_ID = "kubernetes.azure.com/kubelet-identity-client-id"
"""Node label with the client id of the kubelet identity the node was launched with."""


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What drift reads from the NodeClaim's Node (leave it out while there is none, or the node
    is being deleted)."""

    kubelet_version: str
    """``status.nodeInfo.kubeletVersion``, e.g. v1.31.2."""
    labels: Mapping[str, str]
    """The node's labels."""


def _condition_current(node_class: AKSNodeClass, condition_type: str) -> bool:
    """Whether ``condition_type`` is True for the AKSNodeClass's current generation."""
    generation = node_class.metadata.generation
    for condition in node_class.status.conditions:
        if condition.type == condition_type:
            return condition.status == "True" and (
                generation is None or condition.observed_generation in (None, generation)
            )
    return False


def nodeclass_drift(node_class: AKSNodeClass, nodeclaim_annotations: Mapping[str, str]) -> str:
    """NodeClassDrift when the NodeClaim's hash (of this hash version) is not the spec's."""
    claimed = nodeclaim_annotations.get(HASH_ANNOTATION)
    if claimed is None or nodeclaim_annotations.get(HASH_VERSION_ANNOTATION) != HASH_VERSION:
        return ""
    return DRIFT_NODECLASS if claimed != nodeclass_hash(node_class.spec) else ""


def kubernetes_version_drift(node_class: AKSNodeClass, node: NodeFacts | None) -> str:
    """K8sVersionDrift when the node's kubelet runs another version than the AKSNodeClass's."""
    version = node_class.status.kubernetes_version
    if (
        node is None
        or not version
        or not _condition_current(node_class, CONDITION_KUBERNETES_VERSION_READY)
    ):
        return ""
    kubelet = node.kubelet_version.removeprefix("v")
    if _KUBERNETES_VERSION.match(kubelet) is None:
        return ""  # no kubelet version yet, or not a kubelet's (KWOK's nodes say kwok-v0.8.0)
    return DRIFT_K8S_VERSION if kubelet != version else ""


def kubelet_identity_drift(node: NodeFacts | None, kubelet_identity_client_id: str) -> str:
    """KubeletIdentityDrift when the node's kubelet identity label names another client id."""
    if node is None:
        return ""
    labelled = node.labels.get(LABEL_KUBELET_IDENTITY_CLIENT_ID, "")
    if not labelled:
        return ""
    return DRIFT_KUBELET_IDENTITY if labelled != kubelet_identity_client_id else ""


def image_drift(node_class: AKSNodeClass, nodeclaim_image_id: str | None) -> str:
    """ImageDrift when the NodeClaim's image is none of the AKSNodeClass's current images."""
    images: Sequence[NodeImage] = node_class.status.images
    if not nodeclaim_image_id or not images:
        return ""
    if not _condition_current(node_class, CONDITION_IMAGES_READY):
        return ""
    return "" if any(image.id == nodeclaim_image_id for image in images) else DRIFT_IMAGE


def drift_reason(
    node_class: AKSNodeClass,
    *,
    nodeclaim_annotations: Mapping[str, str],
    nodeclaim_image_id: str | None,
    node: NodeFacts | None,
    kubelet_identity_client_id: str,
) -> str:
    """The first drift found, in upstream's order; "" when the node still matches."""
    return (
        nodeclass_drift(node_class, nodeclaim_annotations)
        or kubernetes_version_drift(node_class, node)
        or kubelet_identity_drift(node, kubelet_identity_client_id)
        or image_drift(node_class, nodeclaim_image_id)
    )


def repair_policies() -> list[RepairPolicy]:
    """Upstream's: the kubelet's Ready False or Unknown for 10 minutes, AKS's node health
    condition False, and a spot VM's scheduled preemption, the last two at once."""
    ten_minutes = timedelta(minutes=10)
    return [
        RepairPolicy("Ready", "False", ten_minutes),
        RepairPolicy("Ready", "Unknown", ten_minutes),
        RepairPolicy("kubernetes.azure.com/NodeHealthy", "False", timedelta(0)),
        RepairPolicy("PreemptionScheduled", "True", timedelta(0)),
    ]
