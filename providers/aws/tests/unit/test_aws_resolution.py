"""Resolution of EC2NodeClass selector terms against EC2, SSM and IAM (moto server over HTTP)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from karpenter_aws.amis import AMIResolutionError, AMIResolver, map_to_instance_types
from karpenter_aws.instanceprofile import InstanceProfileError, InstanceProfiles
from karpenter_aws.labels import LABEL_INSTANCE_ACCELERATOR_COUNT, LABEL_INSTANCE_GPU_COUNT
from karpenter_aws.moto_account import DISCOVERY_TAG, AWSEnv
from karpenter_aws.nodeclass import (
    EC2NodeClass,
    SecurityGroupSelectorTerm,
    SubnetSelectorTerm,
)
from karpenter_aws.securitygroups import resolve_security_groups
from karpenter_aws.subnets import ZonalSubnets, resolve_subnets
from karpenter_core.apis.requirements import Requirements
from karpenter_core.cloudprovider.types import InstanceType

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ARCH = "kubernetes.io/arch"
STANDARD = (
    (LABEL_INSTANCE_ACCELERATOR_COUNT, "DoesNotExist", ()),
    (LABEL_INSTANCE_GPU_COUNT, "DoesNotExist", ()),
)
NVIDIA = ((LABEL_INSTANCE_GPU_COUNT, "Exists", ()),)
NEURON = ((LABEL_INSTANCE_ACCELERATOR_COUNT, "Exists", ()),)


class Clock:
    """A clock tests move by hand."""

    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def node_class(uid: str = "uid-1", name: str = "default", **spec: Any) -> EC2NodeClass:
    fields: dict[str, Any] = {
        "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: "test-cluster"}}],
        "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: "test-cluster"}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole",
    }
    fields.update(spec)
    return EC2NodeClass.from_manifest(
        {"metadata": {"name": name, "uid": uid, "generation": 1}, "spec": fields}
    )


def subnet_terms(*terms: dict[str, Any]) -> list[SubnetSelectorTerm]:
    return [SubnetSelectorTerm.model_validate(term) for term in terms]


def group_terms(*terms: dict[str, Any]) -> list[SecurityGroupSelectorTerm]:
    return [SecurityGroupSelectorTerm.model_validate(term) for term in terms]


def ec2_backend(aws: AWSEnv) -> Any:
    from moto.backends import get_backend

    return get_backend("ec2")[aws.account_id][aws.region]


def add_subnet(aws: AWSEnv, cidr: str, zone: str, tags: dict[str, str] | None = None) -> str:
    pairs = [{"Key": k, "Value": v} for k, v in (tags or {}).items()]
    spec = [{"ResourceType": "subnet", "Tags": pairs}]
    return aws.client("ec2").create_subnet(
        VpcId=aws.vpc_id,
        CidrBlock=cidr,
        AvailabilityZone=zone,
        **({"TagSpecifications": spec} if tags else {}),
    )["Subnet"]["SubnetId"]


def as_sets(
    amis: list[Any],
) -> dict[tuple[str, tuple[tuple[str, str, tuple[str, ...]], ...]], bool]:
    """(image id, requirement set) -> deprecated."""
    return {
        (
            ami.id,
            tuple(sorted((r.key, r.operator, tuple(r.values)) for r in ami.requirements)),
        ): ami.deprecated
        for ami in amis
    }


def reqs(arch: str, *variant: tuple[str, str, tuple[str, ...]]) -> tuple:
    return tuple(sorted(((ARCH, "In", (arch,)), *variant)))


# Subnets


def test_subnets_by_tag_sorted_by_free_addresses_then_id(aws: AWSEnv) -> None:
    small = add_subnet(aws, "10.0.96.0/24", "us-east-1a", {DISCOVERY_TAG: "test-cluster"})
    subnets = resolve_subnets(
        aws.client("ec2"), subnet_terms({"tags": {DISCOVERY_TAG: "test-cluster"}})
    )
    assert [s.id for s in subnets] == [*sorted(aws.subnet_ids.values()), small]
    assert {s.id: s.zone for s in subnets} == {
        **{subnet: zone for zone, subnet in aws.subnet_ids.items()},
        small: "us-east-1a",
    }
    assert all(s.zone_id and s.zone_id.startswith("use1-az") for s in subnets)


def test_subnet_tag_wildcard_matches_any_value(aws: AWSEnv) -> None:
    other = add_subnet(aws, "10.0.96.0/24", "us-east-1b", {DISCOVERY_TAG: "another-cluster"})
    ec2 = aws.client("ec2")
    wildcard = resolve_subnets(ec2, subnet_terms({"tags": {DISCOVERY_TAG: "*"}}))
    assert {s.id for s in wildcard} == {*aws.subnet_ids.values(), other}
    exact = resolve_subnets(ec2, subnet_terms({"tags": {DISCOVERY_TAG: "another-cluster"}}))
    assert [s.id for s in exact] == [other]


def test_subnet_terms_are_ored_and_deduplicated(aws: AWSEnv) -> None:
    untagged = add_subnet(aws, "10.0.96.0/24", "us-east-1c")
    first = aws.subnet_ids["us-east-1a"]
    terms = subnet_terms(
        {"tags": {DISCOVERY_TAG: "test-cluster", "Name": "test-cluster-us-east-1a"}},
        {"id": first},
        {"id": untagged},
    )
    assert {s.id for s in resolve_subnets(aws.client("ec2"), terms)} == {first, untagged}


def test_subnet_tags_in_one_term_are_anded(aws: AWSEnv) -> None:
    terms = subnet_terms({"tags": {DISCOVERY_TAG: "test-cluster", "Name": "nothing-has-this"}})
    assert resolve_subnets(aws.client("ec2"), terms) == []


def test_unknown_subnet_id_matches_nothing(aws: AWSEnv) -> None:
    terms = subnet_terms({"id": "subnet-0123456789abcdef0"})
    assert resolve_subnets(aws.client("ec2"), terms) == []


def test_zonal_subnets_pick_most_free_addresses_per_zone(aws: AWSEnv) -> None:
    small = add_subnet(aws, "10.0.96.0/24", "us-east-1a")
    ids = [*aws.subnet_ids.values(), small]
    chosen = ZonalSubnets(aws.client("ec2")).get(ids)
    assert {zone: s.id for zone, s in chosen.items()} == aws.subnet_ids
    assert chosen["us-east-1a"].available_ips > 250
    assert chosen["us-east-1b"].zone_id.startswith("use1-az")
    only_small = ZonalSubnets(aws.client("ec2")).get([small])
    assert list(only_small) == ["us-east-1a"]
    assert only_small["us-east-1a"].id == small
    assert ZonalSubnets(aws.client("ec2")).get([]) == {}


def test_zonal_subnet_cache_and_exhausted_subnets(aws: AWSEnv) -> None:
    small = add_subnet(aws, "10.0.96.0/24", "us-east-1a")
    big = aws.subnet_ids["us-east-1a"]
    clock = Clock()
    cache = ZonalSubnets(aws.client("ec2"), clock, ttl=timedelta(seconds=30))
    assert cache.get([big, small])["us-east-1a"].id == big
    cache.mark_exhausted(big)
    assert cache.get([big, small])["us-east-1a"].id == small
    ec2_backend(aws).delete_subnet(small)  # within the TTL the answer is reused
    assert cache.get([big, small])["us-east-1a"].id == small
    clock.now += timedelta(seconds=31)  # a fresh describe forgets the exhaustion
    assert cache.get([big, small])["us-east-1a"].id == big


def test_zonal_subnet_cache_drops_expired_answers(aws: AWSEnv) -> None:
    small = add_subnet(aws, "10.0.97.0/24", "us-east-1b")
    big = aws.subnet_ids["us-east-1a"]
    clock = Clock()
    cache = ZonalSubnets(aws.client("ec2"), clock, ttl=timedelta(seconds=30))
    cache.get([big])
    cache.get([small])
    assert set(cache._cache) == {frozenset([big]), frozenset([small])}
    clock.now += timedelta(seconds=31)
    cache.get([big, small])
    assert set(cache._cache) == {frozenset([big, small])}


# Security groups


def test_security_groups_by_tags_id_and_name(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    other = ec2.create_security_group(GroupName="extra", Description="extra", VpcId=aws.vpc_id)[
        "GroupId"
    ]
    by_tag = resolve_security_groups(ec2, group_terms({"tags": {DISCOVERY_TAG: "test-cluster"}}))
    assert [(g.id, g.name) for g in by_tag] == [(aws.security_group_id, aws.security_group_name)]
    assert [g.id for g in resolve_security_groups(ec2, group_terms({"id": other}))] == [other]
    by_name = resolve_security_groups(ec2, group_terms({"name": "extra"}))
    assert [(g.id, g.name) for g in by_name] == [(other, "extra")]
    both = resolve_security_groups(
        ec2, group_terms({"name": "extra"}, {"tags": {DISCOVERY_TAG: "*"}}, {"id": other})
    )
    assert [g.id for g in both] == sorted([other, aws.security_group_id])
    assert resolve_security_groups(ec2, group_terms({"name": "missing"})) == []


# AMIs


def resolver(aws: AWSEnv, clock: Callable[[], datetime] | None = None) -> AMIResolver:
    return AMIResolver(aws.client("ec2"), aws.client("ssm"), clock or Clock())


def test_al2023_alias_resolves_every_variant_with_its_requirements(aws: AWSEnv) -> None:
    amis = resolver(aws).resolve(node_class(), "1.36")
    images = aws.images
    assert as_sets(amis) == {
        (images["al2023/x86_64/standard"], reqs("amd64", *STANDARD)): False,
        (images["al2023/arm64/standard"], reqs("arm64", *STANDARD)): False,
        (images["al2023/x86_64/nvidia"], reqs("amd64", *NVIDIA)): False,
        (images["al2023/arm64/nvidia"], reqs("arm64", *NVIDIA)): False,
        (images["al2023/x86_64/neuron"], reqs("amd64", *NEURON)): False,
    }
    standard = next(a for a in amis if a.id == images["al2023/x86_64/standard"])
    assert standard.name and standard.name.startswith("amazon-eks-node-al2023-x86_64-standard")
    assert [r.key for r in standard.requirements] == [
        ARCH,
        LABEL_INSTANCE_GPU_COUNT,
        LABEL_INSTANCE_ACCELERATOR_COUNT,
    ]


def test_bottlerocket_alias_standard_image_also_serves_neuron(aws: AWSEnv) -> None:
    amis = resolver(aws).resolve(
        node_class(amiSelectorTerms=[{"alias": "bottlerocket@latest"}]), "1.36"
    )
    images = aws.images
    assert as_sets(amis) == {
        (images["bottlerocket/x86_64/standard"], reqs("amd64", *STANDARD)): False,
        (images["bottlerocket/x86_64/standard"], reqs("amd64", *NEURON)): False,
        (images["bottlerocket/arm64/standard"], reqs("arm64", *STANDARD)): False,
        (images["bottlerocket/x86_64/nvidia"], reqs("amd64", *NVIDIA)): False,
        (images["bottlerocket/arm64/nvidia"], reqs("arm64", *NVIDIA)): False,
    }


def test_pinned_alias_versions_read_their_own_parameters(aws: AWSEnv) -> None:
    image = aws.register_image("amazon-eks-node-al2023-x86_64-standard-1.36-v20240807")
    aws.put_service_parameter(
        "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/standard/"
        "amazon-eks-node-al2023-x86_64-standard-1.36-v20240807/image_id",
        image,
    )
    pinned = node_class(amiSelectorTerms=[{"alias": "al2023@v20240807"}])
    assert as_sets(resolver(aws).resolve(pinned, "1.36")) == {
        (image, reqs("amd64", *STANDARD)): False
    }
    rocket = aws.register_image("bottlerocket-aws-k8s-1.36-x86_64-v1.2.3", "x86_64")
    aws.put_service_parameter(
        "/aws/service/bottlerocket/aws-k8s-1.36/x86_64/1.2.3/image_id", rocket
    )
    pinned = node_class(amiSelectorTerms=[{"alias": "bottlerocket@v1.2.3"}])
    assert {a.id for a in resolver(aws).resolve(pinned, "1.36")} == {rocket}


def test_al2_alias_is_refused_from_kubernetes_1_33(aws: AWSEnv) -> None:
    al2 = node_class(amiSelectorTerms=[{"alias": "al2@latest"}])
    with pytest.raises(AMIResolutionError, match=r"al2@latest: AL2 AMIs are not published"):
        resolver(aws).resolve(al2, "1.36")
    gpu = aws.register_image("amazon-eks-gpu-node-1.32-v1", "x86_64")
    aws.put_service_parameter(
        "/aws/service/eks/optimized-ami/1.32/amazon-linux-2-gpu/recommended/image_id", gpu
    )
    assert as_sets(resolver(aws).resolve(al2, "1.32")) == {
        (gpu, reqs("amd64", *NVIDIA)): False,
        (gpu, reqs("amd64", *NEURON)): False,
    }


def test_alias_without_parameters_names_what_is_missing(aws: AWSEnv) -> None:
    with pytest.raises(
        AMIResolutionError, match=r"al2023@latest: no AMI found for Kubernetes 1.20"
    ):
        resolver(aws).resolve(node_class(), "1.20")


def test_windows_alias_requires_windows_and_its_build(aws: AWSEnv) -> None:
    image = aws.register_image("Windows_Server-2022-English-Core-EKS_Optimized-1.36")
    aws.put_service_parameter(
        "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.36/image_id",
        image,
    )
    windows = node_class(amiSelectorTerms=[{"alias": "windows2022@latest"}])
    build = "node.kubernetes.io/windows-build"
    assert as_sets(resolver(aws).resolve(windows, "1.36")) == {
        (
            image,
            reqs("amd64", ("kubernetes.io/os", "In", ("windows",)), (build, "In", ("10.0.20348",))),
        ): False
    }
    with pytest.raises(AMIResolutionError, match=r"Windows Server 2025 AMIs need Kubernetes 1\.35"):
        resolver(aws).resolve(
            node_class(amiSelectorTerms=[{"alias": "windows2025@latest"}]), "1.34"
        )


def custom(*terms: dict[str, Any]) -> EC2NodeClass:
    return node_class(amiSelectorTerms=list(terms), amiFamily="AL2023")


def test_name_term_keeps_the_newest_image_per_architecture(aws: AWSEnv) -> None:
    own = aws.account_id
    old = aws.register_image("team-ami-1", owner_id=own, creation_date=NOW - timedelta(days=9))
    new = aws.register_image("team-ami-2", owner_id=own, creation_date=NOW - timedelta(days=1))
    arm = aws.register_image("team-ami-arm", "arm64", owner_id=own, creation_date=NOW)
    assert old
    amis = resolver(aws).resolve(custom({"name": "team-ami-*"}), "1.36")
    assert [(a.id, a.name) for a in amis] == [(arm, "team-ami-arm"), (new, "team-ami-2")]
    assert as_sets(amis) == {(new, reqs("amd64")): False, (arm, reqs("arm64")): False}


def test_name_term_without_owner_ignores_other_accounts(aws: AWSEnv) -> None:
    foreign = aws.register_image("shared-ami", owner_id="999999999999")
    assert resolver(aws).resolve(custom({"name": "shared-ami"}), "1.36") == []
    owned = resolver(aws).resolve(custom({"name": "shared-ami", "owner": "999999999999"}), "1.36")
    assert [a.id for a in owned] == [foreign]


def test_deprecated_images_are_used_only_without_an_alternative(aws: AWSEnv) -> None:
    own = aws.account_id
    older = aws.register_image("base-1", owner_id=own, creation_date=NOW - timedelta(days=9))
    newer = aws.register_image("base-2", owner_id=own, creation_date=NOW - timedelta(days=1))
    images = ec2_backend(aws).amis
    images[newer].deprecation_time = (NOW - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    [chosen] = resolver(aws).resolve(custom({"name": "base-*"}), "1.36")
    assert (chosen.id, chosen.deprecated) == (older, False)
    images[older].deprecation_time = (NOW - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    [chosen] = resolver(aws).resolve(custom({"name": "base-*"}), "1.36")
    assert (chosen.id, chosen.deprecated) == (newer, True)
    future = (NOW + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    images[newer].deprecation_time = future  # deprecation announced, not yet in effect
    [chosen] = resolver(aws).resolve(custom({"name": "base-*"}), "1.36")
    assert (chosen.id, chosen.deprecated) == (newer, False)


def test_tag_id_and_ssm_parameter_terms(aws: AWSEnv) -> None:
    own = aws.account_id
    tagged = aws.register_image("tagged", owner_id=own, tags={"team": "a"}, creation_date=NOW)
    by_id = aws.register_image(
        "by-id", "arm64", owner_id=own, creation_date=NOW - timedelta(days=1)
    )
    by_param = aws.register_image(
        "by-param", "arm64", owner_id=own, creation_date=NOW - timedelta(days=2)
    )
    ssm = aws.client("ssm")
    ssm.put_parameter(Name="/team/ami", Value=by_param, Type="String")
    ssm.put_parameter(Name="/team/not-an-ami", Value="hello", Type="String")
    assert [a.id for a in resolver(aws).resolve(custom({"tags": {"team": "*"}}), "1.36")] == [
        tagged
    ]
    amis = resolver(aws).resolve(
        custom(
            {"id": by_id},
            {"ssmParameter": "/team/ami"},
            {"ssmParameter": "/team/not-an-ami"},
            {"ssmParameter": "/team/missing"},
        ),
        "1.36",
    )
    assert [a.id for a in amis] == [by_id]  # one arm64 requirement set: the newer image wins
    assert [a.id for a in resolver(aws).resolve(custom({"ssmParameter": "/team/ami"}), "1.36")] == [
        by_param
    ]


def test_ssm_answers_are_cached_for_a_day_and_images_for_a_minute(aws: AWSEnv) -> None:
    clock = Clock()
    amis = resolver(aws, clock)
    path = (
        "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/standard/recommended/image_id"
    )
    first = {a.id for a in amis.resolve(node_class(), "1.36")}
    newer = aws.register_image("amazon-eks-node-al2023-x86_64-standard-1.36-v2", creation_date=NOW)
    aws.put_service_parameter(path, newer)
    clock.now += timedelta(hours=23)
    assert {a.id for a in amis.resolve(node_class(), "1.36")} == first
    clock.now += timedelta(hours=2)
    second = {a.id for a in amis.resolve(node_class(), "1.36")}
    assert newer in second
    assert aws.images["al2023/x86_64/standard"] not in second

    own = aws.account_id
    term = custom({"name": "cached-*"})
    base = aws.register_image("cached-1", owner_id=own, creation_date=NOW - timedelta(days=1))
    assert [a.id for a in amis.resolve(term, "1.36")] == [base]
    latest = aws.register_image("cached-2", owner_id=own, creation_date=clock.now)
    clock.now += timedelta(seconds=30)
    assert [a.id for a in amis.resolve(term, "1.36")] == [base]
    clock.now += timedelta(seconds=31)
    assert [a.id for a in amis.resolve(term, "1.36")] == [latest]


def instance_type(name: str, labels: dict[str, str]) -> InstanceType:
    return InstanceType(name, Requirements.from_labels(labels), (), {"cpu": 2000})


def test_instance_types_map_to_the_first_compatible_ami(aws: AWSEnv) -> None:
    amis = resolver(aws).resolve(node_class(), "1.36")
    cpu = instance_type("m5.large", {ARCH: "amd64"})
    graviton = instance_type("m7g.large", {ARCH: "arm64"})
    gpu = instance_type("g5.xlarge", {ARCH: "amd64", LABEL_INSTANCE_GPU_COUNT: "1"})
    inferentia = instance_type(
        "inf2.xlarge", {ARCH: "amd64", LABEL_INSTANCE_ACCELERATOR_COUNT: "1"}
    )
    mapping = map_to_instance_types([cpu, graviton, gpu, inferentia], amis)
    images = aws.images
    assert {ami: [t.name for t in types] for ami, types in mapping.items()} == {
        images["al2023/x86_64/standard"]: ["m5.large"],
        images["al2023/arm64/standard"]: ["m7g.large"],
        images["al2023/x86_64/nvidia"]: ["g5.xlarge"],
        images["al2023/x86_64/neuron"]: ["inf2.xlarge"],
    }


# Instance profiles


def profiles(aws: AWSEnv, clock: Callable[[], datetime] | None = None) -> InstanceProfiles:
    return InstanceProfiles(aws.client("iam"), aws.cluster_name, aws.region, clock or Clock())


def create_role(aws: AWSEnv, name: str) -> None:
    aws.client("iam").create_role(RoleName=name, AssumeRolePolicyDocument="{}")


def test_role_gets_a_tagged_profile_under_the_nodeclass_path(aws: AWSEnv) -> None:
    create_role(aws, "KarpenterNodeRole")
    nodeclass = node_class(tags={"team": "a"})
    manager = profiles(aws)
    name = manager.ensure(nodeclass)
    assert name.startswith("test-cluster_") and len(name) <= 128
    assert name == profiles(aws).profile_name(nodeclass)
    assert name != manager.profile_name(node_class(uid="uid-2"))
    profile = aws.client("iam").get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    assert profile["Path"] == "/karpenter/us-east-1/test-cluster/uid-1/"
    assert [r["RoleName"] for r in profile["Roles"]] == ["KarpenterNodeRole"]
    assert {t["Key"]: t["Value"] for t in profile["Tags"]} == {
        "team": "a",
        "kubernetes.io/cluster/test-cluster": "owned",
        "eks:eks-cluster-name": "test-cluster",
        "karpenter.k8s.aws/ec2nodeclass": "default",
        "topology.kubernetes.io/region": "us-east-1",
    }
    assert profiles(aws).ensure(nodeclass) == name  # found, not created again
    listed = aws.client("iam").list_instance_profiles()["InstanceProfiles"]
    assert [p["InstanceProfileName"] for p in listed] == [name]


def test_changed_role_replaces_the_profile_role(aws: AWSEnv) -> None:
    create_role(aws, "first")
    create_role(aws, "second")
    manager = profiles(aws)
    name = manager.ensure(node_class(role="first"))
    assert manager.ensure(node_class(role="path/to/second")) == name
    profile = aws.client("iam").get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["second"]


def test_role_switched_back_within_the_cache_ttl_is_restored(aws: AWSEnv) -> None:
    create_role(aws, "first")
    create_role(aws, "second")
    clock = Clock()
    manager = profiles(aws, clock)
    name = manager.ensure(node_class(role="first"))
    clock.now += timedelta(minutes=1)
    manager.ensure(node_class(role="second"))
    clock.now += timedelta(minutes=1)
    assert manager.ensure(node_class(role="first")) == name
    profile = aws.client("iam").get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["first"]


def test_missing_role_is_an_error_naming_it(aws: AWSEnv) -> None:
    with pytest.raises(InstanceProfileError, match=r"role 'ghost' \(spec.role\) not found"):
        profiles(aws).ensure(node_class(role="ghost"))


def test_given_instance_profile_must_exist(aws: AWSEnv) -> None:
    aws.client("iam").create_instance_profile(InstanceProfileName="existing")
    given = {"role": None, "instanceProfile": "existing"}
    assert profiles(aws).ensure(node_class(**given)) == "existing"
    missing = {"role": None, "instanceProfile": "nope"}
    with pytest.raises(InstanceProfileError, match=r"instance profile 'nope' .* not found"):
        profiles(aws).ensure(node_class(**missing))


def test_delete_removes_only_the_nodeclass_profiles(aws: AWSEnv) -> None:
    create_role(aws, "KarpenterNodeRole")
    iam = aws.client("iam")
    manager = profiles(aws)
    mine = manager.ensure(node_class())
    theirs = manager.ensure(node_class(uid="uid-2", name="other"))
    iam.create_instance_profile(InstanceProfileName="unmanaged")
    assert manager.delete(node_class()) == [mine]
    names = {p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]}
    assert names == {theirs, "unmanaged"}
    assert manager.delete(node_class()) == []
    assert manager.ensure(node_class()) == mine  # the cache forgot it: created again
    assert iam.get_instance_profile(InstanceProfileName=mine)["InstanceProfile"]["Roles"]
