"""AMIs of an EC2NodeClass: an alias resolved through the public SSM parameters of the EKS
optimized AMIs, or selector terms resolved with DescribeImages.

Each AMI comes with the requirements an instance type must meet to use it (architecture, and
for the alias variants whether the type has GPUs or Neuron accelerators). For every distinct set
of requirements the newest non-deprecated image wins; a deprecated image is used only when no
other image has its requirements.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from karpenter_aws.labels import LABEL_INSTANCE_ACCELERATOR_COUNT, LABEL_INSTANCE_GPU_COUNT
from karpenter_aws.nodeclass import (
    AMI_FAMILY_AL2,
    AMI_FAMILY_AL2023,
    AMI_FAMILY_BOTTLEROCKET,
    AMI_FAMILY_WINDOWS2019,
    AMI_FAMILY_WINDOWS2022,
    AMI_FAMILY_WINDOWS2025,
    AMIStatus,
    EC2NodeClass,
)
from karpenter_aws.subnets import tag_filters
from karpenter_core.apis.labels import ARCH, OS, WINDOWS_BUILD
from karpenter_core.sdk.types import CloudProviderError, Requirements

if TYPE_CHECKING:
    from karpenter_core.sdk.types import InstanceType

__all__ = [
    "AMI_CACHE_TTL",
    "ARCHITECTURES",
    "SSM_CACHE_TTL",
    "WINDOWS_BUILDS",
    "AMIResolutionError",
    "AMIResolver",
    "map_to_instance_types",
]

AMI_CACHE_TTL = timedelta(minutes=1)
"""How long a DescribeImages answer is reused."""
SSM_CACHE_TTL = timedelta(hours=24)
"""How long the SSM parameter of an alias is reused."""
CUSTOM_SSM_CACHE_TTL = timedelta(minutes=5)
"""How long the SSM parameter of an ``ssmParameter`` term is reused."""

ARCHITECTURES: Mapping[str, str] = {"x86_64": "amd64", "arm64": "arm64"}
"""EC2 image architecture -> ``kubernetes.io/arch`` value; images of other architectures are
ignored."""

WINDOWS_BUILDS: Mapping[str, str] = {
    AMI_FAMILY_WINDOWS2019: "10.0.17763",
    AMI_FAMILY_WINDOWS2022: "10.0.20348",
    AMI_FAMILY_WINDOWS2025: "10.0.26100",
}
"""Windows AMI family (``Windows<year>``) -> ``node.kubernetes.io/windows-build`` value."""

# A requirement as (key, operator, values); a requirement set is a sorted tuple of them.
_Requirement = tuple[str, str, tuple[str, ...]]
_RequirementSet = tuple[_Requirement, ...]

_VARIANTS: Mapping[str, _RequirementSet] = {
    "standard": (
        (LABEL_INSTANCE_ACCELERATOR_COUNT, "DoesNotExist", ()),
        (LABEL_INSTANCE_GPU_COUNT, "DoesNotExist", ()),
    ),
    "nvidia": ((LABEL_INSTANCE_GPU_COUNT, "Exists", ()),),
    "neuron": ((LABEL_INSTANCE_ACCELERATOR_COUNT, "Exists", ()),),
}
"""Requirements of the EKS optimized AMI variants: no accelerators, NVIDIA GPUs, Neuron."""

_EPOCH = datetime.min.replace(tzinfo=UTC)


class AMIResolutionError(CloudProviderError):
    """The AMI selector terms cannot be resolved (unsupported alias, no parameter found)."""


@dataclass(frozen=True, slots=True)
class _Query:
    """One DescribeImages call, and the requirement sets SSM told us for some image ids."""

    filters: tuple[tuple[str, tuple[str, ...]], ...]
    owners: tuple[str, ...] = ()
    known: Mapping[str, tuple[_RequirementSet, ...]] = field(default_factory=dict)

    def cache_key(self) -> str:
        return json.dumps([self.filters, self.owners])

    def requirement_sets(self, image_id: str, arch: str) -> list[_RequirementSet]:
        arch_requirement: _Requirement = (ARCH, "In", (arch,))
        known = self.known.get(image_id)
        if not known:
            return [(arch_requirement,)]
        return [tuple(sorted((*reqs, arch_requirement))) for reqs in known]


def _filters(filters: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((f["Name"], tuple(f["Values"])) for f in filters)


def _time(text: str | None, default: datetime) -> datetime:
    if not text:
        return default
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return default
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _minor(kubernetes_version: str) -> int | None:
    parts = kubernetes_version.split(".")
    digits = "".join(ch for ch in parts[1] if ch.isdigit()) if len(parts) > 1 else ""
    return int(digits) if digits else None


@dataclass(frozen=True, slots=True)
class _Candidate:
    image_id: str
    name: str
    created: datetime
    deprecated: bool
    requirements: _RequirementSet

    def rank(self) -> tuple[bool, datetime, str]:
        """Greater is better: not deprecated, then newer, then the greater name."""
        return (not self.deprecated, self.created, self.name)


class AMIResolver:
    """Resolves an EC2NodeClass's AMI selector terms; SSM and DescribeImages answers are cached.

    ``clock`` is injectable so tests can age the caches and deprecation times.
    """

    def __init__(
        self,
        ec2: Any,
        ssm: Any,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        logger: logging.Logger | None = None,
    ) -> None:
        self._ec2 = ec2
        self._ssm = ssm
        self._clock = clock
        self._log = logger or logging.getLogger(__name__)
        self._lock = threading.Lock()
        self._parameters: dict[str, tuple[datetime, str | None, timedelta]] = {}
        """SSM parameter -> (when read, value or None when missing, how long it is kept)."""
        self._images: dict[str, tuple[datetime, list[dict[str, Any]]]] = {}

    def resolve(self, node_class: EC2NodeClass, kubernetes_version: str) -> list[AMIStatus]:
        """The AMIs for ``node_class`` on a cluster of ``kubernetes_version`` ("1.36"), newest
        first (ties by id); empty when nothing matches.

        Raises ``AMIResolutionError`` for an alias that cannot be used, botocore's
        ``ClientError`` when EC2 or SSM refuse a call.
        """
        now = self._clock()
        best: dict[_RequirementSet, _Candidate] = {}
        for query in self._queries(node_class, kubernetes_version):
            for image in self._describe(query, now):
                arch = ARCHITECTURES.get(image.get("Architecture") or "")
                image_id = image.get("ImageId")
                if arch is None or not image_id:
                    continue
                deprecation = _time(image.get("DeprecationTime"), datetime.max.replace(tzinfo=UTC))
                for requirements in query.requirement_sets(image_id, arch):
                    candidate = _Candidate(
                        image_id=image_id,
                        name=image.get("Name") or "",
                        created=_time(image.get("CreationDate"), _EPOCH),
                        deprecated=deprecation <= now,
                        requirements=requirements,
                    )
                    current = best.get(requirements)
                    if current is None or candidate.rank() > current.rank():
                        best[requirements] = candidate
        ordered = sorted(best.values(), key=lambda c: (-c.created.timestamp(), c.image_id))
        return [
            AMIStatus(
                id=c.image_id,
                name=c.name or None,
                deprecated=c.deprecated,
                requirements=[
                    {"key": key, "operator": operator, "values": list(values)}
                    for key, operator, values in sorted(
                        c.requirements, key=lambda r: (len(r[0]), r[0])
                    )
                ],
            )
            for c in ordered
        ]

    # -- queries ----------------------------------------------------------------------------

    def _queries(self, node_class: EC2NodeClass, kubernetes_version: str) -> list[_Query]:
        alias = node_class.alias()
        if alias is not None:
            return [self._alias_query(alias[0], alias[1], kubernetes_version)]
        queries: list[_Query] = []
        ids: list[str] = []
        for term in node_class.spec.ami_selector_terms:
            if term.id:
                ids.append(term.id)
            elif term.ssm_parameter:
                image_id = self._parameter(term.ssm_parameter, CUSTOM_SSM_CACHE_TTL)
                if image_id is None:
                    self._log.info(
                        "ssm parameter %s of amiSelectorTerms not found", term.ssm_parameter
                    )
                elif not image_id.startswith("ami-"):
                    self._log.info(
                        "ssm parameter %s of amiSelectorTerms holds %r, not an AMI id",
                        term.ssm_parameter,
                        image_id,
                    )
                else:
                    ids.append(image_id)
            else:
                filters = tag_filters(term.tags)
                owners: tuple[str, ...] = (term.owner,) if term.owner else ()
                if term.name:
                    filters.insert(0, {"Name": "name", "Values": [term.name]})
                    owners = owners or ("self", "amazon")
                queries.append(_Query(filters=_filters(filters), owners=owners))
        if ids:
            queries.append(_Query(filters=(("image-id", tuple(ids)),)))
        return queries

    def _alias_query(self, family: str, version: str, kubernetes_version: str) -> _Query:
        minor = _minor(kubernetes_version)
        alias = f"{family.lower()}@{version}"
        if family == AMI_FAMILY_AL2 and minor is not None and minor >= 33:
            raise AMIResolutionError(
                f"alias {alias}: AL2 AMIs are not published for Kubernetes 1.33 and later "
                f"(the cluster runs {kubernetes_version}); use al2023 or bottlerocket"
            )
        if family == AMI_FAMILY_WINDOWS2025 and minor is not None and minor < 35:
            raise AMIResolutionError(
                f"alias {alias}: Windows Server 2025 AMIs need Kubernetes 1.35 or later (the "
                f"cluster runs {kubernetes_version})"
            )
        known: dict[str, list[_RequirementSet]] = {}
        paths = _alias_parameters(family, version, kubernetes_version)
        for path, requirement_sets in paths.items():
            image_id = self._parameter(path, SSM_CACHE_TTL)
            if image_id is None:
                continue
            entry = known.setdefault(image_id, [])
            entry.extend(r for r in requirement_sets if r not in entry)
        if not known:
            raise AMIResolutionError(
                f"alias {alias}: no AMI found for Kubernetes {kubernetes_version} (SSM "
                f"parameters {', '.join(sorted(paths))} do not exist)"
            )
        return _Query(
            filters=(("image-id", tuple(sorted(known))),),
            known={image_id: tuple(sets) for image_id, sets in known.items()},
        )

    # -- AWS calls, cached ------------------------------------------------------------------

    def _parameter(self, name: str, ttl: timedelta) -> str | None:
        """The value of SSM parameter ``name``, None when it does not exist."""
        now = self._clock()
        with self._lock:
            cached = self._parameters.get(name)
        if cached is not None and now - cached[0] < (
            ttl if cached[1] is not None else AMI_CACHE_TTL
        ):
            return cached[1]
        try:
            value: str | None = self._ssm.get_parameter(Name=name)["Parameter"]["Value"]
        except self._ssm.exceptions.ParameterNotFound:
            value = None
        else:
            if cached is None or cached[1] != value:
                self._log.info("ssm parameter %s is %s", name, value)
        kept = ttl if value is not None else AMI_CACHE_TTL
        with self._lock:
            self._parameters = {k: v for k, v in self._parameters.items() if now - v[0] < v[2]}
            self._parameters[name] = (now, value, kept)
        return value

    def _describe(self, query: _Query, now: datetime) -> list[dict[str, Any]]:
        key = query.cache_key()
        with self._lock:
            cached = self._images.get(key)
        if cached is not None and now - cached[0] < AMI_CACHE_TTL:
            return cached[1]
        request: dict[str, Any] = {
            "Filters": [
                *({"Name": name, "Values": list(values)} for name, values in query.filters),
                {"Name": "state", "Values": ["available"]},
            ],
            "IncludeDeprecated": True,
        }
        if query.owners:
            request["Owners"] = list(query.owners)
        images: list[dict[str, Any]] = []
        for page in self._ec2.get_paginator("describe_images").paginate(**request):
            images.extend(page.get("Images") or ())
        with self._lock:
            self._images = {k: v for k, v in self._images.items() if now - v[0] < AMI_CACHE_TTL}
            self._images[key] = (now, images)
        return images


def _alias_parameters(
    family: str, version: str, kubernetes_version: str
) -> dict[str, list[_RequirementSet]]:
    """SSM parameter path -> requirement sets of the image it names, for an alias."""
    k8s = kubernetes_version
    latest = version == "latest"
    standard, nvidia, neuron = _VARIANTS["standard"], _VARIANTS["nvidia"], _VARIANTS["neuron"]
    if family == AMI_FAMILY_AL2023:
        variants = {"x86_64": ("standard", "nvidia", "neuron"), "arm64": ("standard", "nvidia")}
        paths: dict[str, list[_RequirementSet]] = {}
        for arch, names in variants.items():
            for variant in names:
                leaf = (
                    "recommended"
                    if latest
                    else f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{version}"
                )
                path = f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}/{leaf}/image_id"
                paths[path] = [_VARIANTS[variant]]
        return paths
    if family == AMI_FAMILY_AL2:

        def al2(directory: str, release: str) -> str:
            leaf = "recommended" if latest else f"{release}-{k8s}-{version}"
            return f"/aws/service/eks/optimized-ami/{k8s}/{directory}/{leaf}/image_id"

        return {
            al2("amazon-linux-2", "amazon-eks-node"): [standard],
            al2("amazon-linux-2-arm64", "amazon-eks-arm64-node"): [standard],
            al2("amazon-linux-2-gpu", "amazon-eks-gpu-node"): [neuron, nvidia],
        }
    if family == AMI_FAMILY_BOTTLEROCKET:
        release = version.lstrip("v")
        base = f"/aws/service/bottlerocket/aws-k8s-{k8s}"
        return {
            f"{base}/x86_64/{release}/image_id": [standard, neuron],
            f"{base}/arm64/{release}/image_id": [standard],
            f"{base}-nvidia/x86_64/{release}/image_id": [nvidia],
            f"{base}-nvidia/arm64/{release}/image_id": [nvidia],
        }
    if family in WINDOWS_BUILDS:
        build = WINDOWS_BUILDS[family]
        year = family.removeprefix("Windows")
        path = (
            f"/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-"
            f"{k8s}/image_id"
        )
        return {path: [((OS, "In", ("windows",)), (WINDOWS_BUILD, "In", (build,)))]}
    raise AMIResolutionError(f"AMI family {family!r} has no alias")


def map_to_instance_types(
    instance_types: Iterable[InstanceType], amis: Sequence[AMIStatus]
) -> dict[str, list[InstanceType]]:
    """AMI id -> the instance types that launch with it: for each type the first AMI in ``amis``
    (newest first, as ``resolve`` orders them) whose requirements the type meets."""
    compiled = [
        (ami.id, Requirements.from_node_selector(r.model_dump() for r in ami.requirements))
        for ami in amis
    ]
    mapping: dict[str, list[InstanceType]] = {}
    for instance_type in instance_types:
        for ami_id, requirements in compiled:
            if instance_type.requirements.compatible(requirements) is None:
                mapping.setdefault(ami_id, []).append(instance_type)
                break
    return mapping
