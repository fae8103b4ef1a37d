"""The nodeclass controller's status computation, through azure-mgmt-compute and
azure-mgmt-network against the fake ARM server (no cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from karpenter_azure.fake_arm import FakeARM, Latency, seed
from karpenter_azure.images import (
    AKS_UBUNTU_GALLERY,
    ImageResolver,
    ImageVersionLister,
    community_gallery_versions,
)
from karpenter_azure.nodeclass import AKSNodeClass
from karpenter_azure.nodeclass_controller import (
    SubnetGetter,
    parse_subnet_id,
    resolve_status,
    subnet_getter,
)

pytestmark = pytest.mark.slow

SUBSCRIPTION = seed.SUBSCRIPTION_ID
NODE_GROUP = seed.NODE_RESOURCE_GROUP
VNET = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{NODE_GROUP}/providers/Microsoft.Network"
CLUSTER_SUBNET = f"{VNET}/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"
LATEST = seed.IMAGE_VERSIONS[-1][0]
"""The newest version of every seeded node image definition."""
UPGRADE = "202507.09.0"
"""A newer version of the 24.04 Gen2 image only."""
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CONDITIONS = (
    "KubernetesVersionReady",
    "ImagesReady",
    "SubnetsReady",
    "ValidationSucceeded",
    "Ready",
)


@dataclass
class Env:
    fake: FakeARM
    list_versions: ImageVersionLister
    images: ImageResolver
    get_subnet: SubnetGetter


@pytest.fixture
def env() -> Iterator[Env]:
    with FakeARM(latency=Latency.none()) as fake:
        assert fake.subnet_id() == CLUSTER_SUBNET
        fake.publish_image(
            AKS_UBUNTU_GALLERY, "2404gen2containerd", UPGRADE, "2025-07-09T00:00:00Z"
        )
        list_versions = community_gallery_versions(fake.compute_client())
        yield Env(
            fake,
            list_versions,
            ImageResolver(list_versions, "eastus", lambda: NOW),
            subnet_getter(fake.network_client()),
        )


def node_class(status: dict[str, Any] | None = None, **spec: Any) -> AKSNodeClass:
    return AKSNodeClass.from_manifest(
        {
            "metadata": {"name": "default", "uid": "uid-1", "generation": 2},
            "spec": spec,
            "status": status or {},
        }
    )


def resolve(
    env: Env,
    cls: AKSNodeClass,
    version: str = "v1.31.2",
    now: datetime = NOW,
    cluster_subnet_id: str = CLUSTER_SUBNET,
) -> tuple[dict[str, Any], bool]:
    return resolve_status(
        cls,
        server_version=version,
        images=env.images,
        get_subnet=env.get_subnet,
        cluster_subnet_id=cluster_subnet_id,
        node_resource_group=NODE_GROUP,
        now=now,
    )


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_a_resolved_nodeclass_is_ready(env: Env) -> None:
    status, failed = resolve(env, node_class())

    assert not failed
    assert [c["type"] for c in status["conditions"]] == list(CONDITIONS)
    assert all(c["status"] == "True" for c in status["conditions"])
    assert all(c["observedGeneration"] == 2 for c in status["conditions"])
    assert status["kubernetesVersion"] == "1.31.2"
    assert [image["id"].split("/images/")[1] for image in status["images"]] == [
        f"2204gen2containerd/versions/{LATEST}",
        f"2204containerd/versions/{LATEST}",
        f"2204gen2arm64containerd/versions/{LATEST}",
    ]
    assert (
        AKSNodeClass.from_manifest(
            {"metadata": {"name": "default", "generation": 2}, "status": status}
        ).not_ready()
        is None
    )


def test_a_missing_subnet_is_reported(env: Env) -> None:
    missing = CLUSTER_SUBNET.replace("aks-subnet", "gone")
    status, failed = resolve(env, node_class(), cluster_subnet_id=missing)

    assert not failed
    found = conditions(status)
    assert found["SubnetsReady"] == ("False", "SubnetNotFound", f"resource not found: {missing}")
    assert found["Ready"][0] == "False"
    assert f"SubnetsReady=False: resource not found: {missing}" in found["Ready"][2]


def test_a_subnet_outside_the_cluster_vnet_is_invalid(env: Env) -> None:
    elsewhere = f"{VNET}/virtualNetworks/custom-vnet/subnets/nodes"
    status, _ = resolve(env, node_class(vnetSubnetID=elsewhere))

    assert conditions(status)["SubnetsReady"] == (
        "False",
        "SubnetIDInvalid",
        "vnetSubnetID does not match the cluster subscription, resource group, or virtual "
        f"network: {elsewhere}",
    )


def test_a_custom_subnet_in_an_aks_managed_vnet_is_invalid(env: Env) -> None:
    custom = env.fake.subnet_id("custom-subnet")
    status, _ = resolve(env, node_class(vnetSubnetID=custom))

    reason, message = conditions(status)["SubnetsReady"][1:]
    assert reason == "SubnetIDInvalid"
    assert message.startswith("custom subnet cannot be in the same VNet as cluster managed VNet")


def test_a_custom_subnet_in_a_vnet_the_user_brought_is_read(env: Env) -> None:
    cluster = env.fake.add_subnet(NODE_GROUP, "byo-vnet", "nodes", "10.1.0.0/24")
    custom = env.fake.add_subnet(NODE_GROUP, "byo-vnet", "more-nodes", "10.1.1.0/24")
    cls = node_class(vnetSubnetID=custom)
    status, _ = resolve_status(
        cls,
        server_version="v1.31.2",
        images=env.images,
        get_subnet=env.get_subnet,
        cluster_subnet_id=cluster,
        node_resource_group=NODE_GROUP,
        now=NOW,
    )

    assert conditions(status)["SubnetsReady"][0] == "True"


def test_no_subnet_anywhere_is_invalid(env: Env) -> None:
    status, _ = resolve_status(
        node_class(),
        server_version="v1.31.2",
        images=env.images,
        get_subnet=env.get_subnet,
        cluster_subnet_id="",
        node_resource_group=NODE_GROUP,
        now=NOW,
    )

    reason, message = conditions(status)["SubnetsReady"][1:]
    assert reason == "SubnetIDInvalid"
    assert "--vnet-subnet-id" in message


def test_an_azure_error_reading_the_subnet_retries_sooner(env: Env) -> None:
    env.fake.fail_requests(403, path="/subnets/aks-subnet$")
    status, failed = resolve(env, node_class())

    assert failed
    status_, reason, message = conditions(status)["SubnetsReady"]
    assert (status_, reason) == ("False", "SubnetUnknownError")
    assert "AuthorizationFailed" in message


def test_an_image_listing_error_keeps_the_images_and_their_condition(env: Env) -> None:
    ready, _ = resolve(env, node_class())
    env.fake.fail_requests(403, path="/images/2204containerd/versions$")
    later = NOW + timedelta(days=4)
    resolver = ImageResolver(env.list_versions, "eastus", lambda: later)
    status, failed = resolve_status(
        node_class(ready),
        server_version="v1.31.2",
        images=resolver,
        get_subnet=env.get_subnet,
        cluster_subnet_id=CLUSTER_SUBNET,
        node_resource_group=NODE_GROUP,
        now=later,
    )

    assert failed
    assert status["images"] == ready["images"]
    assert conditions(status)["ImagesReady"] == ("True", "ImagesReady", "")


def test_an_image_listing_error_without_earlier_images_is_unknown(env: Env) -> None:
    env.fake.fail_requests(403, path="/images/2204containerd/versions$")
    status, failed = resolve(env, node_class())

    assert failed
    assert status["images"] == []
    state, reason, message = conditions(status)["ImagesReady"]
    assert (state, reason) == ("Unknown", "ImagesResolutionFailed")
    assert "AuthorizationFailed" in message
    assert conditions(status)["Ready"][0] == "False"


def test_no_published_version_is_images_not_found(env: Env) -> None:
    for gallery, (_, _, definitions) in seed.GALLERIES.items():
        for definition in definitions:
            env.fake.withdraw_image(gallery, definition)
    status, failed = resolve(env, node_class())

    assert not failed
    assert conditions(status)["ImagesReady"][:2] == ("False", "ImagesNotFound")


def test_fips_has_no_images(env: Env) -> None:
    status, _ = resolve(env, node_class(fipsMode="FIPS"))

    state, reason, message = conditions(status)["ImagesReady"]
    assert (state, reason) == ("False", "SIGRequiredForFIPS")
    assert "shared image gallery" in message


def test_a_kubernetes_upgrade_moves_the_images_and_a_downgrade_is_ignored(env: Env) -> None:
    ready, _ = resolve(env, node_class(), version="v1.33.4")
    upgraded, _ = resolve(env, node_class(ready), version="v1.34.1")
    assert upgraded["kubernetesVersion"] == "1.34.1"
    assert [image["id"].split("/images/")[1] for image in upgraded["images"]] == [
        f"2404gen2containerd/versions/{UPGRADE}",
        f"2404containerd/versions/{LATEST}",
        f"2404gen2arm64containerd/versions/{LATEST}",
    ]

    downgraded, _ = resolve(env, node_class(upgraded), version="v1.33.4")
    assert downgraded["kubernetesVersion"] == "1.34.1"


def test_transition_times_change_only_with_the_status(env: Env) -> None:
    first, _ = resolve(env, node_class())
    later = NOW + timedelta(hours=1)
    same, _ = resolve(env, node_class(first), now=later)
    assert same == first

    missing = CLUSTER_SUBNET.replace("aks-subnet", "gone")
    changed, _ = resolve(env, node_class(first, vnetSubnetID=missing), now=later)
    times = {c["type"]: c["lastTransitionTime"] for c in changed["conditions"]}
    assert times["SubnetsReady"] == times["Ready"] == "2025-03-01T13:00:00Z"
    assert times["ImagesReady"] == "2025-03-01T12:00:00Z"


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (CLUSTER_SUBNET, (SUBSCRIPTION, NODE_GROUP, "aks-vnet-12345678", "aks-subnet")),
        (
            CLUSTER_SUBNET.lower(),
            (SUBSCRIPTION, NODE_GROUP.lower(), "aks-vnet-12345678", "aks-subnet"),
        ),
        (CLUSTER_SUBNET.replace("/subnets/", "/subnet/"), None),
        (CLUSTER_SUBNET + "/extra", None),
        ("aks-subnet", None),
    ],
)
def test_parse_subnet_id(text: str, parts: tuple[str, ...] | None) -> None:
    parsed = parse_subnet_id(text)
    assert (
        None
        if parsed is None
        else (parsed.subscription, parsed.resource_group, parsed.vnet, parsed.subnet)
    ) == parts
