"""Node image resolution: the definitions of each family, the latest published version, the
cache, and the image an instance type launches with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from karpenter_azure.fake_arm import FakeARM, Latency
from karpenter_azure.images import (
    AKS_AZURE_LINUX_GALLERY,
    AKS_UBUNTU_GALLERY,
    LABEL_HYPERV_GENERATION,
    FIPSImagesUnavailable,
    ImageResolver,
    ImageVersion,
    community_gallery_versions,
    image_base,
    select_image,
    supported_images,
)
from karpenter_azure.nodeclass import AKSNodeClassSpec
from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirement, Requirements

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def definitions(family: str, version: str) -> list[str]:
    return [d.definition for d in supported_images(family, version)]


@pytest.mark.parametrize(
    ("family", "version", "expected"),
    [
        ("Ubuntu", "1.33.2", ["2204gen2containerd", "2204containerd", "2204gen2arm64containerd"]),
        ("Ubuntu", "1.34.0", ["2404gen2containerd", "2404containerd", "2404gen2arm64containerd"]),
        ("Ubuntu", "v1.36.3", ["2404gen2containerd", "2404containerd", "2404gen2arm64containerd"]),
        (
            "Ubuntu2204",
            "1.36.3",
            ["2204gen2containerd", "2204containerd", "2204gen2arm64containerd"],
        ),
        (
            "Ubuntu2404",
            "1.30.0",
            ["2404gen2containerd", "2404containerd", "2404gen2arm64containerd"],
        ),
        ("AzureLinux", "1.31.9", ["V2gen2", "V2", "V2gen2arm64"]),
        ("AzureLinux", "1.32.0", ["V3gen2", "V3", "V3gen2arm64"]),
    ],
)
def test_family_and_kubernetes_version_pick_the_definitions(
    family: str, version: str, expected: list[str]
) -> None:
    assert definitions(family, version) == expected


def test_definitions_cover_each_architecture_and_generation() -> None:
    images = supported_images("AzureLinux", "1.33.0")
    assert {d.gallery for d in images} == {AKS_AZURE_LINUX_GALLERY}
    assert [(d.architecture, d.hyperv_generation) for d in images] == [
        ("amd64", "2"),
        ("amd64", "1"),
        ("arm64", "2"),
    ]
    assert {d.gallery for d in supported_images("Ubuntu", "1.33.0")} == {AKS_UBUNTU_GALLERY}


class Gallery:
    """Image versions per definition, recording each listing."""

    def __init__(self, versions: dict[str, list[ImageVersion]]) -> None:
        self.versions = versions
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, location: str, gallery: str, definition: str) -> list[ImageVersion]:
        self.calls.append((location, gallery, definition))
        return self.versions.get(definition, [])


def test_the_latest_published_version_is_chosen_and_missing_definitions_left_out() -> None:
    gallery = Gallery(
        {
            "2204gen2containerd": [
                ImageVersion("202503.01.0", T0),
                ImageVersion("202502.01.0", T0 - timedelta(days=30)),
                ImageVersion("202409.01.0", None),
            ],
            "2204gen2arm64containerd": [ImageVersion("202501.05.0", T0)],
        }
    )
    resolver = ImageResolver(gallery, "eastus", lambda: T0)
    images = resolver.resolve(AKSNodeClassSpec(), "1.31.2")
    assert [image.id for image in images] == [
        f"/CommunityGalleries/{AKS_UBUNTU_GALLERY}/images/2204gen2containerd/versions/202503.01.0",
        f"/CommunityGalleries/{AKS_UBUNTU_GALLERY}/images/2204gen2arm64containerd/versions/"
        "202501.05.0",
    ]
    assert [r.model_dump() for r in images[1].requirements] == [
        {"key": wk.ARCH, "operator": "In", "values": ["arm64"]},
        {"key": LABEL_HYPERV_GENERATION, "operator": "In", "values": ["2"]},
    ]
    assert {call[:2] for call in gallery.calls} == {("eastus", AKS_UBUNTU_GALLERY)}
    assert image_base(images[0].id) == (
        f"/CommunityGalleries/{AKS_UBUNTU_GALLERY}/images/2204gen2containerd"
    )


def test_resolutions_are_cached_per_kubernetes_version_until_the_ttl() -> None:
    gallery = Gallery({"2204gen2containerd": [ImageVersion("1", T0)]})
    now = [T0]
    resolver = ImageResolver(gallery, "eastus", lambda: now[0], ttl=timedelta(hours=1))
    spec = AKSNodeClassSpec()
    first = resolver.resolve(spec, "1.31.2")
    listed = len(gallery.calls)
    gallery.versions["2204gen2containerd"].append(ImageVersion("2", T0 + timedelta(minutes=1)))
    assert resolver.resolve(spec, "1.31.2") == first
    assert len(gallery.calls) == listed
    resolver.resolve(spec, "1.31.3")
    assert len(gallery.calls) == 2 * listed
    now[0] = T0 + timedelta(hours=1)
    assert resolver.resolve(spec, "1.31.2")[0].id.endswith("/versions/2")


def test_fips_resolves_no_image() -> None:
    resolver = ImageResolver(Gallery({}), "eastus", lambda: T0)
    with pytest.raises(FIPSImagesUnavailable, match="shared image gallery"):
        resolver.resolve(AKSNodeClassSpec(fips_mode="FIPS"), "1.31.2")


def sku(arch: str, *generations: str) -> Requirements:
    return Requirements(
        [
            Requirement.new(wk.ARCH, "In", [arch]),
            Requirement.new(LABEL_HYPERV_GENERATION, "In", list(generations)),
        ]
    )


def test_each_instance_type_gets_the_first_image_it_meets() -> None:
    gallery = Gallery({name: [ImageVersion("1", T0)] for name in definitions("Ubuntu", "1.31.0")})
    images = ImageResolver(gallery, "eastus", lambda: T0).resolve(AKSNodeClassSpec(), "1.31.0")
    gen2, gen1, arm = (image.id for image in images)
    assert select_image(images, sku("amd64", "1", "2")) == gen2
    assert select_image(images, sku("amd64", "1")) == gen1
    assert select_image(images, sku("arm64", "2")) == arm
    assert select_image(images, sku("arm64", "1")) is None


@pytest.mark.slow
def test_the_compute_client_adapter_lists_community_gallery_versions() -> None:
    with FakeARM(latency=Latency.none()) as fake:
        for version, published in [
            ("202508.03.0", "2025-08-03T00:00:00Z"),
            ("202507.10.0", "2025-07-10T00:00:00Z"),
            ("202501.01.0", "2025-01-01T00:00:00Z"),
        ]:
            fake.publish_image(AKS_AZURE_LINUX_GALLERY, "V3gen2", version, published)
        compute = fake.compute_client()
        resolver = ImageResolver(community_gallery_versions(compute), "eastus", lambda: T0)
        images = resolver.resolve(AKSNodeClassSpec(image_family="AzureLinux"), "1.33.0")
        listed = [r for r in fake.requests if r.is_arm]
    assert [image.id.split("/images/")[1] for image in images] == [
        "V3gen2/versions/202508.03.0",
        "V3/versions/202506.10.0",
        "V3gen2arm64/versions/202506.10.0",
    ]
    assert listed[0].path == (
        f"/subscriptions/{fake.subscription_id}/providers/Microsoft.Compute/locations/eastus/"
        f"communityGalleries/{AKS_AZURE_LINUX_GALLERY}/images/V3gen2/versions"
    )
    assert listed[0].api_version
