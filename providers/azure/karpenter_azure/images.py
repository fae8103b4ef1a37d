"""AKS node images: which image definitions an AKSNodeClass uses, and their latest versions.

An image family (Ubuntu, Ubuntu2204, Ubuntu2404, AzureLinux), the FIPS mode and the cluster's
Kubernetes version pick the AKS node image definitions, one per CPU architecture and Hyper-V
generation: Ubuntu means Ubuntu 24.04 from Kubernetes 1.34 and Ubuntu 22.04 before; AzureLinux
means Azure Linux 3 from 1.32 and 2 before. The definitions live in AKS's community galleries;
each resolves to its most recently published version. Listing versions is injected (a function
``(location, public gallery name, image definition) -> versions``), so tests and the fake ARM
server serve them; ``community_gallery_versions`` adapts azure-mgmt-compute's client.

GPU sizes use the same images: the node's bootstrap installs the GPU driver. FIPS node images are
published only in AKS's internal shared image gallery, which self-hosted Karpenter cannot read,
so a FIPS AKSNodeClass resolves no image (as upstream does without its SIG option).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from karpenter_azure.nodeclass import (
    IMAGE_FAMILY_AZURE_LINUX,
    IMAGE_FAMILY_UBUNTU2204,
    IMAGE_FAMILY_UBUNTU2404,
    AKSNodeClassSpec,
    NodeImage,
    NodeSelectorRequirement,
)
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.types import CloudProviderError, Requirements

__all__ = [
    "AKS_AZURE_LINUX_GALLERY",
    "AKS_UBUNTU_GALLERY",
    "IMAGE_CACHE_TTL",
    "LABEL_HYPERV_GENERATION",
    "FIPSImagesUnavailable",
    "ImageDefinition",
    "ImageResolver",
    "ImageVersion",
    "ImageVersionLister",
    "community_gallery_versions",
    "community_image_id",
    "image_base",
    "resolved_os",
    "select_image",
    "supported_images",
]

AKS_UBUNTU_GALLERY = "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2"
"""Public name of the community gallery of AKS's Ubuntu node images."""
AKS_AZURE_LINUX_GALLERY = "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b"
"""Public name of the community gallery of AKS's Azure Linux node images."""
LABEL_HYPERV_GENERATION = "karpenter.azure.com/sku-hyperv-generation"
"""The instance-type label of the Hyper-V generations a VM size supports ("1", "2")."""
IMAGE_CACHE_TTL = timedelta(days=3)
"""How long a resolved set of image versions is reused (upstream's image expiration)."""

_GEN1 = "1"
_GEN2 = "2"

_COMMUNITY_ID = "/CommunityGalleries/{gallery}/images/{definition}/versions/{version}"


@dataclass(frozen=True, slots=True)
class ImageDefinition:
    """One AKS node image definition and the VMs it is for."""

    gallery: str
    """Public name of the community gallery."""
    definition: str
    """The image definition, e.g. 2204gen2containerd."""
    architecture: str
    """amd64 or arm64."""
    hyperv_generation: str
    """"1" or "2"."""

    def requirements(self) -> list[NodeSelectorRequirement]:
        """What an instance type must meet to launch with this image, shortest key first."""
        return [
            NodeSelectorRequirement(key=wk.ARCH, operator="In", values=[self.architecture]),
            NodeSelectorRequirement(
                key=LABEL_HYPERV_GENERATION, operator="In", values=[self.hyperv_generation]
            ),
        ]


def _definitions(gallery: str, gen2: str, gen1: str, arm64: str) -> tuple[ImageDefinition, ...]:
    return (
        ImageDefinition(gallery, gen2, wk.ARCH_AMD64, _GEN2),
        ImageDefinition(gallery, gen1, wk.ARCH_AMD64, _GEN1),
        ImageDefinition(gallery, arm64, wk.ARCH_ARM64, _GEN2),
    )


def _minor_at_least(kubernetes_version: str, minor: int) -> bool:
    """Whether ``kubernetes_version`` (1.x[.y], a leading v allowed) is 1.``minor`` or later;
    False when it cannot be read."""
    match = re.match(r"^v?(\d+)\.(\d+)", kubernetes_version.strip())
    if match is None:
        return False
    return (int(match[1]), int(match[2])) >= (1, minor)


def resolved_os(image_family: str, kubernetes_version: str) -> str:
    """The OS an image family means for a Kubernetes version: Ubuntu2204, Ubuntu2404,
    AzureLinux2 or AzureLinux3."""
    if image_family == IMAGE_FAMILY_UBUNTU2204:
        return "Ubuntu2204"
    if image_family == IMAGE_FAMILY_UBUNTU2404:
        return "Ubuntu2404"
    if image_family == IMAGE_FAMILY_AZURE_LINUX:
        return "AzureLinux3" if _minor_at_least(kubernetes_version, 32) else "AzureLinux2"
    return "Ubuntu2404" if _minor_at_least(kubernetes_version, 34) else "Ubuntu2204"


def supported_images(image_family: str, kubernetes_version: str) -> tuple[ImageDefinition, ...]:
    """The image definitions of a family, in preference order: amd64 gen2, amd64 gen1, arm64
    gen2."""
    resolved = resolved_os(image_family, kubernetes_version)
    if resolved.startswith("Ubuntu"):
        release = resolved.removeprefix("Ubuntu")
        return _definitions(
            AKS_UBUNTU_GALLERY,
            f"{release}gen2containerd",
            f"{release}containerd",
            f"{release}gen2arm64containerd",
        )
    major = resolved.removeprefix("AzureLinux")
    return _definitions(AKS_AZURE_LINUX_GALLERY, f"V{major}gen2", f"V{major}", f"V{major}gen2arm64")


def community_image_id(gallery: str, definition: str, version: str) -> str:
    """The ARM id of a community gallery image version."""
    return _COMMUNITY_ID.format(gallery=gallery, definition=definition, version=version)


def image_base(image_id: str) -> str:
    """An image version id without its ``/versions/<version>`` suffix."""
    return image_id.rsplit("/", 2)[0]


def select_image(
    images: Sequence[NodeImage],
    instance_type_requirements: Requirements,
    allow_undefined: frozenset[str] = wk.WELL_KNOWN_LABELS | {LABEL_HYPERV_GENERATION},
) -> str | None:
    """The id of the first image (status order) whose requirements the instance type meets."""
    for image in images:
        wanted = Requirements.from_node_selector(
            requirement.model_dump() for requirement in image.requirements
        )
        if instance_type_requirements.compatible(wanted, allow_undefined) is None:
            return image.id
    return None


# Versions


@dataclass(frozen=True, slots=True)
class ImageVersion:
    """A version of an image definition."""

    name: str
    """The version, e.g. 202501.02.0."""
    published: datetime | None
    """When it was published (None: unknown, never preferred)."""


ImageVersionLister = Callable[[str, str, str], Iterable[ImageVersion]]
"""``(location, public gallery name, image definition) -> versions`` of a community image."""


def community_gallery_versions(compute: Any) -> ImageVersionLister:
    """An ``ImageVersionLister`` over azure-mgmt-compute's ``community_gallery_image_versions``."""

    def list_versions(location: str, gallery: str, definition: str) -> Iterable[ImageVersion]:
        for version in compute.community_gallery_image_versions.list(location, gallery, definition):
            properties = getattr(version, "properties", None)
            published = getattr(properties, "published_date", None)
            yield ImageVersion(str(version.name), published)

    return list_versions


class FIPSImagesUnavailable(CloudProviderError):
    """FIPS node images are only in AKS's internal shared image gallery."""


_EPOCH = datetime.min.replace(tzinfo=UTC)


def _latest(versions: Iterable[ImageVersion]) -> str | None:
    """The most recently published version's name (the first of equals), None if none."""
    best: ImageVersion | None = None
    for version in versions:
        published = _aware(version.published)
        if best is None or published > _aware(best.published):
            best = version
    return None if best is None else best.name


def _aware(moment: datetime | None) -> datetime:
    if moment is None:
        return _EPOCH
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class ImageResolver:
    """Resolves an AKSNodeClass's images to the latest published versions, cached for ``ttl``
    per (definitions, Kubernetes version). Safe to share between threads."""

    def __init__(
        self,
        list_versions: ImageVersionLister,
        location: str,
        clock: Callable[[], datetime],
        ttl: timedelta = IMAGE_CACHE_TTL,
    ) -> None:
        self._list_versions = list_versions
        self._location = location
        self._clock = clock
        self._ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[tuple[tuple[ImageDefinition, ...], str], tuple[datetime, list[NodeImage]]]
        self._cache = {}

    def resolve(self, spec: AKSNodeClassSpec, kubernetes_version: str) -> list[NodeImage]:
        """The images ``spec`` launches with, in preference order; definitions with no version
        are left out. Raises ``FIPSImagesUnavailable`` for FIPS, and lets the lister's errors
        (azure-core's ``HttpResponseError``) through."""
        if spec.fips():
            raise FIPSImagesUnavailable(
                "FIPS node images are published only in AKS's shared image gallery, which "
                "self-hosted Karpenter cannot use; set fipsMode Disabled or leave it unset"
            )
        definitions = supported_images(spec.image_family, kubernetes_version)
        key = (definitions, kubernetes_version)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now < cached[0]:
                return list(cached[1])
        images = []
        for definition in definitions:
            version = _latest(
                self._list_versions(self._location, definition.gallery, definition.definition)
            )
            if version is not None:
                images.append(
                    NodeImage(
                        id=community_image_id(definition.gallery, definition.definition, version),
                        requirements=definition.requirements(),
                    )
                )
        with self._lock:
            self._cache[key] = (now + self._ttl, images)
        return list(images)
