"""The choice of node images per family, Kubernetes version and architecture (pure), and the
term-by-term resolution over a stand-in images client that records its calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from google.cloud import compute_v1

from karpenter_gcp.images import (
    ImageResolutionError,
    ListedImage,
    choose_cos,
    choose_ubuntu,
    resolve_images,
)
from karpenter_gcp.nodeclass import GCENodeClass

COS = "projects/gke-node-images/global/images/"
UBUNTU = "projects/ubuntu-os-gke-cloud/global/images/"
COS_IMAGES = [
    ListedImage("gke-1312-gke1000-cos-117-18613-0-79-c-pre", "2026-01-01T00:00:00Z"),
    ListedImage(
        "gke-1312-gke1000-cos-arm64-117-18613-0-79-c-pre",
        "2026-01-01T00:00:00Z",
        architecture="ARM64",
    ),
    ListedImage("gke-1312-gke1000-cos-117-18613-0-79-c-nvda", "2026-01-01T00:00:00Z"),
    ListedImage("gke-1312-gke2000-cos-117-18613-0-90-c-pre", "2026-02-01T00:00:00Z"),
    ListedImage("gke-1312-gke2000-cos-117-18613-0-90-c-nvda", "2026-02-01T00:00:00Z"),
    ListedImage("gke-1312-gke3000-cos-117-18613-0-99-c-pre", "2026-03-01T00:00:00Z", retired=True),
    ListedImage("gke-1312-gke2500-cos-gvisor-117-18613-0-95-c-pre", "2026-02-15T00:00:00Z"),
]
UBUNTU_IMAGES = [
    ListedImage("ubuntu-gke-2404-1-31-amd64-v20260101", "2026-01-01T00:00:00Z"),
    ListedImage("ubuntu-gke-2404-1-31-amd64-v20260201", "2026-02-01T00:00:00Z"),
    ListedImage("ubuntu-gke-2404-1-31-amd64-v20260301-tpu", "2026-03-01T00:00:00Z"),
    ListedImage(
        "ubuntu-gke-2404-1-31-arm64-v20260101", "2026-01-01T00:00:00Z", architecture="ARM64"
    ),
    ListedImage("ubuntu-gke-2404-1-31-arm64-v20260201", "2026-02-01T00:00:00Z", retired=True),
    ListedImage("ubuntu-gke-2204-1-31-v20260101", "2026-01-01T00:00:00Z"),
    ListedImage("ubuntu-gke-2204-1-31-arm64-v20260101", "2026-01-01T00:00:00Z"),
]


def summary(images: list[Any]) -> list[tuple[str, list[tuple[str, str, list[str]]]]]:
    return [
        (i.source_image, [(r.key.rpartition("/")[2], r.operator, r.values) for r in i.requirements])
        for i in images
    ]


def test_cos_latest_is_the_newest_usable_build_with_its_twins_that_exist() -> None:
    assert summary(choose_cos("latest", COS_IMAGES)) == [
        (
            COS + "gke-1312-gke2000-cos-117-18613-0-90-c-pre",
            [("arch", "In", ["amd64"]), ("instance-gpu-count", "DoesNotExist", [])],
        ),
        (
            COS + "gke-1312-gke2000-cos-117-18613-0-90-c-nvda",
            [("arch", "In", ["amd64"]), ("instance-gpu-count", "Exists", [])],
        ),
    ]


def test_cos_pinned_rebuilds_the_newest_name_on_that_version() -> None:
    pinned = [
        *COS_IMAGES,
        ListedImage("gke-1312-gke2000-cos-arm64-117-18613-0-79-c-pre", "2026-01-01T00:00:00Z"),
    ]
    chosen = [i.source_image for i in choose_cos("117.18613.0.79", pinned)]
    assert chosen == [COS + "gke-1312-gke2000-cos-arm64-117-18613-0-79-c-pre"]


def test_cos_with_no_image_of_the_version_is_a_resolution_error() -> None:
    with pytest.raises(ImageResolutionError, match="no usable ContainerOptimizedOS image"):
        choose_cos("latest", [COS_IMAGES[5]])
    with pytest.raises(ImageResolutionError, match="no ContainerOptimizedOS image"):
        choose_cos("1.2.3.4", COS_IMAGES)


def test_ubuntu_latest_is_the_newest_clean_image_per_architecture() -> None:
    assert summary(choose_ubuntu("2404", "latest", UBUNTU_IMAGES)) == [
        (UBUNTU + "ubuntu-gke-2404-1-31-amd64-v20260201", [("arch", "In", ["amd64"])]),
        (
            UBUNTU + "ubuntu-gke-2404-1-31-arm64-v20260101",
            [("arch", "In", ["arm64"]), ("instance-gpu-count", "DoesNotExist", [])],
        ),
    ]


def test_ubuntu_2204_names_amd64_without_an_architecture() -> None:
    chosen = [i.source_image for i in choose_ubuntu("2204", "v20260101", UBUNTU_IMAGES)]
    assert chosen == [
        UBUNTU + "ubuntu-gke-2204-1-31-v20260101",
        UBUNTU + "ubuntu-gke-2204-1-31-arm64-v20260101",
    ]


def test_ubuntu_needs_both_architectures() -> None:
    with pytest.raises(
        ImageResolutionError, match="no ubuntu-gke-2404 arm64 image for version 'v20260201'"
    ):
        choose_ubuntu("2404", "v20260201", UBUNTU_IMAGES)


def proto(image: ListedImage) -> compute_v1.Image:
    state = compute_v1.DeprecationStatus(state="DEPRECATED") if image.retired else None
    return compute_v1.Image(
        name=image.name,
        creation_timestamp=image.created,
        architecture=image.architecture,
        deprecated=state,
    )


@dataclass
class Images:
    """Stands in for compute_v1.ImagesClient: list (with a name prefix filter) and get."""

    listed: list[ListedImage]
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def list(self, *, request: dict[str, str]) -> list[Any]:
        self.calls.append(("list", request["project"], request["filter"]))
        return [proto(i) for i in self.listed]

    def get(self, *, project: str, image: str) -> Any:
        self.calls.append(("get", project, image))
        return proto(ListedImage(image, "2026-01-01T00:00:00Z", architecture="ARM64"))


def node_class(*terms: dict[str, str]) -> GCENodeClass:
    return GCENodeClass.from_manifest(
        {"metadata": {"name": "n"}, "spec": {"imageSelectorTerms": list(terms)}}
    )


def test_terms_resolve_in_order_with_one_listing_each() -> None:
    images = Images(COS_IMAGES + UBUNTU_IMAGES)
    resolved = resolve_images(
        images,
        node_class(
            {"id": "projects/mine/global/images/custom"},
            {"alias": "Ubuntu@latest"},
            {"family": "ContainerOptimizedOS", "channel": "stable"},
        ),
        "v1.31.2-gke.1000",
    )

    assert [i.source_image for i in resolved] == [
        "projects/mine/global/images/custom",
        UBUNTU + "ubuntu-gke-2404-1-31-amd64-v20260201",
        UBUNTU + "ubuntu-gke-2404-1-31-arm64-v20260101",
        COS + "gke-1312-gke2000-cos-117-18613-0-90-c-pre",
        COS + "gke-1312-gke2000-cos-117-18613-0-90-c-nvda",
    ]
    assert resolved[0].requirements[0].values == ["arm64"]
    assert images.calls == [
        ("get", "mine", "custom"),
        ("list", "ubuntu-os-gke-cloud", "name=ubuntu-gke-2404-1-31-*"),
        ("list", "gke-node-images", "name=gke-1312-*"),
    ]


def test_an_id_that_is_no_image_path_is_a_resolution_error() -> None:
    with pytest.raises(ImageResolutionError, match="is not projects/<p>/global/images/<name>"):
        resolve_images(Images([]), node_class({"id": "custom"}), "v1.31.2")
