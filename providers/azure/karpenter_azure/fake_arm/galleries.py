"""AKS node image versions of the fake ARM server: community gallery image versions and the
same versions through their shared image galleries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpenter_azure.fake_arm import seed
from karpenter_azure.fake_arm.common import COMPUTE, Answer, ArmError, location_name
from karpenter_azure.fake_arm.state import ArmStore, ImageVersion


def _versions(state: ArmStore, gallery: str | None, image: str) -> list[ImageVersion]:
    versions = state.images.get(((gallery or "").lower(), image.lower()))
    if versions is None:
        raise ArmError(
            404,
            "GalleryImageNotFound",
            f"The gallery image '{image}' of gallery '{gallery}' is not found.",
        )
    return versions


def _community_version(state: ArmStore, args: Mapping[str, str], version: ImageVersion) -> dict:
    gallery, image = args["gallery"], args["image"]
    return {
        "name": version.name,
        "location": location_name(args["location"]),
        "type": "Microsoft.Compute/locations/communityGalleries/images/versions",
        "identifier": {
            "uniqueId": f"/CommunityGalleries/{gallery}/Images/{image}/Versions/{version.name}"
        },
        "properties": {
            "publishedDate": version.published,
            "excludeFromLatest": version.exclude_from_latest,
            "storageProfile": {"osDiskImage": {"diskSizeGB": 30, "hostCaching": "ReadOnly"}},
        },
    }


def list_community_versions(
    state: ArmStore, args: Mapping[str, str], params: Mapping[str, str], _: Any
) -> Answer:
    """The versions of a community gallery image, paged."""
    versions = _versions(state, args["gallery"], args["image"])
    values = [_community_version(state, args, v) for v in versions]
    path = (
        f"/subscriptions/{args['sub']}/providers/{COMPUTE}/locations/{args['location']}/"
        f"communityGalleries/{args['gallery']}/images/{args['image']}/versions"
    )
    return 200, state.page(values, path, params), {}


def get_community_version(
    state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], __: Any
) -> Answer:
    """One version of a community gallery image."""
    versions = _versions(state, args["gallery"], args["image"])
    version = next((v for v in versions if v.name == args["version"]), None)
    if version is None:
        raise ArmError(
            404,
            "GalleryImageVersionNotFound",
            f"The gallery image version '{args['version']}' is not found.",
        )
    return 200, _community_version(state, args, version), {}


def _gallery_version(state: ArmStore, args: Mapping[str, str], version: ImageVersion) -> dict:
    version_id = (
        f"/subscriptions/{args['sub']}/resourceGroups/{args['rg']}/providers/{COMPUTE}/"
        f"galleries/{args['gallery']}/images/{args['image']}/versions/{version.name}"
    )
    return {
        "id": version_id,
        "name": version.name,
        "type": "Microsoft.Compute/galleries/images/versions",
        "location": seed.LOCATION,
        "properties": {
            "provisioningState": "Succeeded",
            "publishingProfile": {
                "publishedDate": version.published,
                "excludeFromLatest": version.exclude_from_latest,
                "targetRegions": [{"name": region} for region in seed.REGIONS],
            },
            "storageProfile": {"osDiskImage": {"sizeInGB": 30, "hostCaching": "ReadOnly"}},
        },
    }


def list_gallery_versions(
    state: ArmStore, args: Mapping[str, str], params: Mapping[str, str], _: Any
) -> Answer:
    """The versions of a shared image gallery image, paged."""
    gallery = community_name(args["rg"], args["gallery"])
    values = [_gallery_version(state, args, v) for v in _versions(state, gallery, args["image"])]
    path = (
        f"/subscriptions/{args['sub']}/resourceGroups/{args['rg']}/providers/{COMPUTE}/"
        f"galleries/{args['gallery']}/images/{args['image']}/versions"
    )
    return 200, state.page(values, path, params), {}


def get_gallery_version(
    state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], __: Any
) -> Answer:
    """One version of a shared image gallery image."""
    gallery = community_name(args["rg"], args["gallery"])
    versions = _versions(state, gallery, args["image"])
    version = next((v for v in versions if v.name == args["version"]), None)
    if version is None:
        raise ArmError(
            404,
            "GalleryImageVersionNotFound",
            f"The gallery image version '{args['version']}' is not found.",
        )
    return 200, _gallery_version(state, args, version), {}


def image_for(state: ArmStore, image_id: str) -> ImageVersion | None:
    """The image version an image reference names (community or shared image gallery)."""
    parts = image_id.strip("/").split("/")
    lowered = [p.lower() for p in parts]
    gallery = None
    if len(parts) == 6 and lowered[0] == "communitygalleries":
        gallery = parts[1]
    elif len(parts) >= 12 and lowered[6] == "galleries":
        gallery = community_name(parts[3], parts[7])
    if gallery is None or lowered[-2] != "versions" or lowered[-4] != "images":
        return None
    versions = state.images.get((gallery.lower(), parts[-3].lower())) or []
    return next((v for v in versions if v.name == parts[-1]), None)


def community_name(resource_group: str, gallery: str) -> str | None:
    """The community gallery a shared image gallery (resource group, name) publishes, if any."""
    for community, (group, name, _) in seed.GALLERIES.items():
        if group.lower() == resource_group.lower() and name.lower() == gallery.lower():
            return community
    return None
