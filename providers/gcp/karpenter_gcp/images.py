"""Node images of a GCENodeClass: each image selector term resolved, per family, Kubernetes
version and architecture, as GKE publishes them.

- ContainerOptimizedOS (project gke-node-images): the newest usable amd64 image of the cluster's
  Kubernetes patch version (``gke-1312-gke...-cos-...-c-pre``), or that image rebuilt on a pinned
  COS version; its arm64 (``-cos-arm64-``) and GPU (``-c-nvda``) twins where they exist.
- Ubuntu2404 / Ubuntu2204 (project ubuntu-os-gke-cloud): the newest (or the pinned vYYYYMMDD)
  clean image of the cluster's minor version for amd64 and for arm64; both must exist.
- id: the image itself, for its architecture.

Only ``fetch_images`` and ``fetch_image`` call the Compute API; the choice is pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.api_core.exceptions import NotFound

from karpenter_core.apis.labels import ARCH, ARCH_AMD64, ARCH_ARM64
from karpenter_gcp.instancetype import GPU_COUNT
from karpenter_gcp.nodeclass import (
    COS,
    UBUNTU,
    UBUNTU2404,
    GCENodeClass,
    Image,
    ImageSelectorTerm,
    NodeSelectorRequirement,
)

COS_PROJECT = "gke-node-images"
UBUNTU_PROJECT = "ubuntu-os-gke-cloud"
_COS_IMAGES = f"projects/{COS_PROJECT}/global/images"
_UBUNTU_IMAGES = f"projects/{UBUNTU_PROJECT}/global/images"
_ARCHITECTURES = {
    "X86_64": ARCH_AMD64,
    "ARM64": ARCH_ARM64,
    "": ARCH_AMD64,  # unset on many custom images: x86
    "ARCHITECTURE_UNSPECIFIED": ARCH_AMD64,
}
_RETIRED = ("DEPRECATED", "OBSOLETE", "DELETED")
_COS_SKIP = ("arm64", "kmod", "nvda", "gvisor", "-test", "cgpv1")


class ImageResolutionError(Exception):
    """The terms name images that do not exist (a configuration problem, not a cloud error)."""


@dataclass(frozen=True, slots=True)
class ListedImage:
    """What the choice reads of a Compute API image."""

    name: str
    created: str
    retired: bool = False
    architecture: str = "X86_64"


def _listed(image: Any) -> ListedImage:
    state = image.deprecated.state if "deprecated" in image else ""
    return ListedImage(image.name, image.creation_timestamp, state in _RETIRED, image.architecture)


def fetch_images(images_client: Any, project: str, prefix: str) -> list[ListedImage]:
    """The images of ``project`` whose names start with ``prefix`` (Compute images.list)."""
    found = images_client.list(request={"project": project, "filter": f"name={prefix}*"})
    return [_listed(image) for image in found if image.name.startswith(prefix)]


def fetch_image(images_client: Any, source_image: str) -> ListedImage:
    """The image ``projects/<p>/global/images/<name>`` (Compute images.get); a missing one is
    an ``ImageResolutionError``."""
    match = re.fullmatch(r"projects/([^/]+)/global/images/([^/]+)", source_image)
    if match is None:
        raise ImageResolutionError(
            f"image id {source_image!r} is not projects/<p>/global/images/<name>"
        )
    try:
        return _listed(images_client.get(project=match[1], image=match[2]))
    except NotFound as error:
        raise ImageResolutionError(f"image {source_image} not found") from error


def _image(source: str, arch: str, gpu: str | None) -> Image:
    """``source`` for instance types of ``arch``, with (Exists) or without (DoesNotExist) GPUs
    when ``gpu`` says."""
    wanted = [NodeSelectorRequirement(key=ARCH, operator="In", values=[arch])]
    gpus = [NodeSelectorRequirement(key=GPU_COUNT, operator=gpu)] if gpu else []
    return Image(source_image=source, requirements=wanted + gpus)


def _version_key(kubernetes_version: str, parts: int, sep: str) -> str:
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", kubernetes_version)
    if match is None:
        raise ImageResolutionError(f"Kubernetes version {kubernetes_version!r} is not x.y.z")
    return sep.join(match.groups()[:parts])


def choose_cos(version: str, listed: Sequence[ListedImage]) -> list[Image]:
    """The COS images for ``version`` ('latest' or a pinned milestone.build.build.build) among
    ``listed`` (the images of the cluster's patch version)."""
    usable = [i for i in listed if not i.retired and not any(s in i.name for s in _COS_SKIP)]
    if not usable:
        raise ImageResolutionError(f"no usable ContainerOptimizedOS image in {COS_PROJECT}")
    base = max(usable, key=lambda image: image.created).name
    if version != "latest":
        base = re.sub(r"cos-\d+-[\d-]+-c-pre", f"cos-{version.replace('.', '-')}-c-pre", base)
    names = {image.name for image in listed}  # a pinned build may be deprecated, not gone
    arm64 = re.sub(r"-cos-(\d+-\d+-\d+-\d+-c-pre)$", r"-cos-arm64-\1", base)
    twins = [
        (base, ARCH_AMD64, "DoesNotExist"),
        (arm64, ARCH_ARM64, "DoesNotExist"),
        (base.replace("-pre", "-nvda"), ARCH_AMD64, "Exists"),
    ]
    found = [_image(f"{_COS_IMAGES}/{n}", arch, gpu) for n, arch, gpu in twins if n in names]
    if not found:
        raise ImageResolutionError(f"no ContainerOptimizedOS image {base} in {COS_PROJECT}")
    return found


def choose_ubuntu(release: str, version: str, listed: Sequence[ListedImage]) -> list[Image]:
    """The amd64 and arm64 Ubuntu ``release`` (2404, 2204) images for ``version`` ('latest' or
    vYYYYMMDD) among ``listed`` (the images of the cluster's minor version)."""
    chosen = []
    for arch in (ARCH_AMD64, ARCH_ARM64):
        token = "" if release == "2204" and arch == ARCH_AMD64 else f"-{arch}"
        clean = re.compile(rf"^ubuntu-gke-{release}-\d+-\d+{token}-v\d+[a-z]?$")
        fits = [
            i for i in listed
            if not i.retired and clean.match(i.name) and (version == "latest" or i.name.endswith(f"-{version}"))
        ]  # fmt: skip
        if not fits:
            raise ImageResolutionError(
                f"no ubuntu-gke-{release} {arch} image for version {version!r} in {UBUNTU_PROJECT}"
            )
        name = max(fits, key=lambda image: image.created).name
        gpu = "DoesNotExist" if arch == ARCH_ARM64 else None  # GPU types are all amd64
        chosen.append(_image(f"{_UBUNTU_IMAGES}/{name}", arch, gpu))
    return chosen


def _term_images(
    images_client: Any, term: ImageSelectorTerm, kubernetes_version: str
) -> list[Image]:
    if term.id:
        arch = _ARCHITECTURES.get(fetch_image(images_client, term.id).architecture)
        if arch is None:
            raise ImageResolutionError(f"image {term.id} has no supported architecture")
        return [_image(term.id, arch, None)]
    family, _, version = (term.alias or "").partition("@")
    family = UBUNTU2404 if family == UBUNTU else family or term.family or COS
    version = version or term.version or "latest"  # a channel follows the cluster's version
    if family == COS:
        prefix = f"gke-{_version_key(kubernetes_version, 3, '')}-"
        return choose_cos(version, fetch_images(images_client, COS_PROJECT, prefix))
    release = family.removeprefix("Ubuntu")
    prefix = f"ubuntu-gke-{release}-{_version_key(kubernetes_version, 2, '-')}-"
    return choose_ubuntu(release, version, fetch_images(images_client, UBUNTU_PROJECT, prefix))


def resolve_images(
    images_client: Any, node_class: GCENodeClass, kubernetes_version: str
) -> list[Image]:
    """The images of every selector term, in term order (Compute images.list/get calls);
    raises ``ImageResolutionError`` when a term's images do not exist, and google-api-core's
    errors when a call fails."""
    return [
        image
        for term in node_class.spec.image_selector_terms
        for image in _term_images(images_client, term, kubernetes_version)
    ]
