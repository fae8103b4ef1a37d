"""Drift of a GCE node from its GCENodeClass, and the node repair policies (pure functions).

The checks run in the community provider's order and the first that finds drift names it:

- NodeClassDrift: the NodeClaim's ``gcenodeclass-hash`` annotation differs from the hash of the
  GCENodeClass's spec (computed with the same hash version; another version is no verdict);
- ImageDrift: the NodeClaim's ``status.imageID`` (the boot disk's source image, as a path or a
  URL) ends in none of the images in ``status.images``.

ImageDrift gives no verdict while ImagesReady is not True for the current generation (the images
in status are then stale or empty), nor for a NodeClaim without an image id yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.types import RepairPolicy
from karpenter_gcp.nodeclass import (
    CONDITION_IMAGES_READY,
    HASH_ANNOTATION,
    HASH_VERSION,
    HASH_VERSION_ANNOTATION,
    GCENodeClass,
    Image,
    nodeclass_hash,
)

DRIFT_NODECLASS = "NodeClassDrift"
DRIFT_IMAGE = "ImageDrift"


def nodeclass_drift(nodeclaim: NodeClaim, node_class: GCENodeClass) -> str:
    """NodeClassDrift when the NodeClaim's hash (of this hash version) is not the spec's."""
    annotations = nodeclaim.metadata.annotations
    claimed = annotations.get(HASH_ANNOTATION)
    if claimed is None or annotations.get(HASH_VERSION_ANNOTATION) != HASH_VERSION:
        return ""
    return DRIFT_NODECLASS if claimed != nodeclass_hash(node_class.spec) else ""


def image_drift(instance_image: str | None, images: Sequence[Image]) -> str:
    """ImageDrift when ``instance_image`` ends in none of ``images`` (no image or no images
    known: no verdict)."""
    if not instance_image or not images:
        return ""
    matches = any(instance_image.endswith(image.source_image) for image in images)
    return "" if matches else DRIFT_IMAGE


def _images_current(node_class: GCENodeClass) -> bool:
    generation = node_class.metadata.generation
    return any(
        c.type == CONDITION_IMAGES_READY
        and c.status == "True"
        and (generation is None or c.observed_generation in (None, generation))
        for c in node_class.status.conditions
    )


def drift_reason(nodeclaim: NodeClaim, node_class: GCENodeClass) -> str:
    """The first drift found; "" when the node still matches its GCENodeClass."""
    images = node_class.status.images if _images_current(node_class) else []
    return nodeclass_drift(nodeclaim, node_class) or image_drift(nodeclaim.status.image_id, images)


def repair_policies() -> list[RepairPolicy]:
    """The community provider's: the kubelet's Ready False or Unknown for 10 minutes; GKE's node
    problem detector's KernelDeadlock or ReadonlyFilesystem for 5 minutes, and
    FrequentKubeletRestart or FrequentContainerdRestart for 30 minutes."""
    return [
        RepairPolicy("Ready", "False", timedelta(minutes=10)),
        RepairPolicy("Ready", "Unknown", timedelta(minutes=10)),
        RepairPolicy("KernelDeadlock", "True", timedelta(minutes=5)),
        RepairPolicy("ReadonlyFilesystem", "True", timedelta(minutes=5)),
        RepairPolicy("FrequentKubeletRestart", "True", timedelta(minutes=30)),
        RepairPolicy("FrequentContainerdRestart", "True", timedelta(minutes=30)),
    ]
