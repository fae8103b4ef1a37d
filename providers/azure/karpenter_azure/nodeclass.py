"""The ``karpenter.azure.com/v1beta1`` AKSNodeClass: how Karpenter launches Azure VMs.

The spec shapes the VM (subnet, OS disk, node image family, FIPS, encryption at host, tags) and
the kubelet; the nodeclass controller resolves node images, the Kubernetes version and the subnet
into ``status``. Every rule is checked here (errors name the field) and carried in the generated
CRD as OpenAPI keywords or CEL, so the apiserver accepts the objects these models accept.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from karpenter_core.apis.v1.common import (
    CONDITION_READY,
    Conditions,
    KubeModel,
    KubeObject,
    ObjectMeta,
)
from karpenter_core.apis.v1.hashing import spec_hash
from karpenter_core.sdk.crds import KubeSchema, PrinterColumn, cel
from karpenter_core.sdk.fields import checked
from karpenter_core.sdk.kubelet import IMAGE_GC_THRESHOLDS_RULE
from karpenter_core.sdk.nodeclass import ReadyByConditions, validation_problems
from karpenter_core.sdk.nodeimages import NodeSelectorRequirement
from karpenter_core.sdk.record import NodeClassInfo

__all__ = [
    "CONDITION_IMAGES_READY",
    "CONDITION_KUBERNETES_VERSION_READY",
    "CONDITION_SUBNETS_READY",
    "CONDITION_TYPES",
    "CONDITION_VALIDATION_SUCCEEDED",
    "DEFAULT_IMAGE_FAMILY",
    "DEFAULT_OS_DISK_SIZE_GB",
    "GROUP",
    "HASH_ANNOTATION",
    "HASH_VERSION",
    "HASH_VERSION_ANNOTATION",
    "IMAGE_FAMILIES",
    "IMAGE_FAMILY_AZURE_LINUX",
    "IMAGE_FAMILY_UBUNTU",
    "IMAGE_FAMILY_UBUNTU2204",
    "IMAGE_FAMILY_UBUNTU2404",
    "KIND",
    "NODE_CLASS",
    "PLURAL",
    "PRINTER_COLUMNS",
    "SHORT_NAMES",
    "VERSION",
    "AKSNodeClass",
    "AKSNodeClassSpec",
    "AKSNodeClassStatus",
    "KubeletConfiguration",
    "NodeImage",
    "NodeSelectorRequirement",
    "Security",
    "nodeclass_hash",
    "validation_problems",
]

GROUP = "karpenter.azure.com"
VERSION = "v1beta1"
KIND = "AKSNodeClass"
PLURAL = "aksnodeclasses"

HASH_ANNOTATION = f"{GROUP}/aksnodeclass-hash"
"""Annotation on an AKSNodeClass and its NodeClaims: ``nodeclass_hash`` of the spec."""
HASH_VERSION_ANNOTATION = f"{GROUP}/aksnodeclass-hash-version"
"""Annotation next to the hash: the ``HASH_VERSION`` it was computed with."""
HASH_VERSION = "py-v1"
"""Bumped whenever a change to the hashed fields would change existing AKSNodeClasses' hashes."""

IMAGE_FAMILY_UBUNTU = "Ubuntu"
IMAGE_FAMILY_UBUNTU2204 = "Ubuntu2204"
IMAGE_FAMILY_UBUNTU2404 = "Ubuntu2404"
IMAGE_FAMILY_AZURE_LINUX = "AzureLinux"
IMAGE_FAMILIES = (
    IMAGE_FAMILY_UBUNTU,
    IMAGE_FAMILY_UBUNTU2204,
    IMAGE_FAMILY_UBUNTU2404,
    IMAGE_FAMILY_AZURE_LINUX,
)
ImageFamily = Literal["Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux"]
DEFAULT_IMAGE_FAMILY: ImageFamily = "Ubuntu"
DEFAULT_OS_DISK_SIZE_GB = 128

CONDITION_IMAGES_READY = "ImagesReady"
CONDITION_KUBERNETES_VERSION_READY = "KubernetesVersionReady"
CONDITION_SUBNETS_READY = "SubnetsReady"
CONDITION_VALIDATION_SUCCEEDED = "ValidationSucceeded"
CONDITION_TYPES = (
    CONDITION_IMAGES_READY,
    CONDITION_KUBERNETES_VERSION_READY,
    CONDITION_SUBNETS_READY,
    CONDITION_VALIDATION_SUCCEEDED,
)
"""The conditions that together make an AKSNodeClass Ready (all True), in status order."""

PRINTER_COLUMNS = (
    PrinterColumn("Ready", "string", f'.status.conditions[?(@.type=="{CONDITION_READY}")].status'),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    PrinterColumn("ImageFamily", "string", ".spec.imageFamily", priority=1),
)
"""``kubectl get aksnodeclasses`` columns (``-o wide`` adds ImageFamily)."""
SHORT_NAMES = ("aksnc", "aksncs")
"""``kubectl get`` short names of AKSNodeClasses."""

_SUBNET_ID_PATTERN = (
    r"(?i)^\/subscriptions\/[^\/]+\/resourceGroups\/[a-zA-Z0-9_\-().]{0,89}[a-zA-Z0-9_\-()]"
    r"\/providers\/Microsoft\.Network\/virtualNetworks\/[^\/]+\/subnets\/[^\/]+$"
)
_LOG_SIZE_PATTERN = r"^\d+(E|P|T|G|M|K|Ei|Pi|Ti|Gi|Mi|Ki)$"
_GO_DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"

_TAG_KEY_MAX = 512
_TAG_VALUE_MAX = 256
_TAG_KEY_FORBIDDEN = "<>%&?"


def _matching(pattern: str, what: str) -> tuple[AfterValidator, KubeSchema]:
    """The validator and CRD pattern of a string that must match ``pattern``."""

    anchored = re.compile(pattern.removesuffix("$") + r"\Z")  # Go's $: the end, no newline

    def check(value: str) -> str | None:
        if anchored.search(value) is None:
            return f"{value!r} is not {what}"
        return None

    return checked(check), KubeSchema(keywords={"pattern": pattern})


# Kubelet, security


class KubeletConfiguration(KubeModel):
    """Kubelet settings of the nodes (a subset of the kubelet's KubeletConfiguration, as AKS's
    custom kubelet configuration offers it). Defaults apply once ``kubelet`` is set."""

    model_config = ConfigDict(json_schema_extra=KubeSchema(rules=(IMAGE_GC_THRESHOLDS_RULE,)))

    cpu_manager_policy: Literal["none", "static"] = "none"
    """The CPU manager policy: none or static."""
    cpu_cfs_quota: bool = Field(default=True, alias="cpuCFSQuota")
    """Whether CPU CFS quotas enforce containers' CPU limits."""
    cpu_cfs_quota_period: Annotated[
        str, *_matching(_GO_DURATION_PATTERN, "a duration such as '100ms'")
    ] = Field(default="100ms", alias="cpuCFSQuotaPeriod")
    """The CPU CFS quota period (cpu.cfs_period_us), a duration between 1ms and 1s."""
    image_gc_high_threshold_percent: int | None = Field(
        default=None, ge=0, le=100, alias="imageGCHighThresholdPercent"
    )
    """Disk usage percentage above which image garbage collection always runs; greater than
    imageGCLowThresholdPercent."""
    image_gc_low_threshold_percent: int | None = Field(
        default=None, ge=0, le=100, alias="imageGCLowThresholdPercent"
    )
    """Disk usage percentage image garbage collection frees down to."""
    topology_manager_policy: Literal["restricted", "best-effort", "none", "single-numa-node"] = (
        "none"
    )
    """The topology manager policy: restricted, best-effort, none or single-numa-node."""
    allowed_unsafe_sysctls: list[str] | None = None
    """Unsafe sysctls or sysctl patterns (ending in '*') pods may set, e.g. 'kernel.msg*'."""
    container_log_max_size: Annotated[
        str, *_matching(_LOG_SIZE_PATTERN, "a size such as '50Mi' (a whole number and a unit)")
    ] = "50Mi"
    """The size a container log file reaches before it is rotated, e.g. '50Mi'."""
    container_log_max_files: int = Field(default=5, ge=2)
    """The most log files kept per container (at least 2)."""
    pod_pids_limit: int | None = None
    """The most process ids a pod may use (-1: no limit)."""

    @model_validator(mode="after")
    def _high_above_low(self) -> Self:
        high = self.image_gc_high_threshold_percent
        low = self.image_gc_low_threshold_percent
        if high is not None and low is not None and high <= low:
            raise ValueError(
                f"imageGCHighThresholdPercent ({high}) must be greater than "
                f"imageGCLowThresholdPercent ({low})"
            )
        return self


class Security(KubeModel):
    """Security settings of the VMs."""

    encryption_at_host: bool | None = None
    """Whether the VMs' disks and caches are encrypted on the host (needs the subscription's
    EncryptionAtHost feature)."""


# Spec


def _tags_error(tags: dict[str, str]) -> str | None:
    for key, value in tags.items():
        if len(key) > _TAG_KEY_MAX:
            return f"tags keys must be less than {_TAG_KEY_MAX} characters (key {key[:40]!r}...)"
        if any(char in key for char in _TAG_KEY_FORBIDDEN):
            return f"tags keys must not contain '<', '>', '%', '&', or '?' (key {key!r})"
        if "\\" in key:
            return f"tags keys must not contain '\\' (key {key!r})"
        if len(value) > _TAG_VALUE_MAX:
            return f"tags values must be less than {_TAG_VALUE_MAX} characters (key {key!r})"
    return None


_TAG_RULES = (
    cel(f"self.all(k, size(k) <= {_TAG_KEY_MAX})", "tags keys must be less than 512 characters"),
    cel(
        "self.all(k, !k.matches('[<>%&?]'))",
        "tags keys must not contain '<', '>', '%', '&', or '?'",
    ),
    cel("self.all(k, !k.contains('\\\\'))", "tags keys must not contain '\\'"),
    cel(
        f"self.all(k, size(self[k]) <= {_TAG_VALUE_MAX})",
        "tags values must be less than 256 characters",
    ),
)

_FIPS_UNSUPPORTED = (IMAGE_FAMILY_UBUNTU2204, IMAGE_FAMILY_UBUNTU2404)
_FIPS_MESSAGE = "FIPS is not yet supported for Ubuntu2204 or Ubuntu2404"
_SPEC_RULES = (
    cel(
        "has(self.fipsMode) && self.fipsMode == 'FIPS' ? (has(self.imageFamily) && "
        "self.imageFamily != 'Ubuntu2204' && self.imageFamily != 'Ubuntu2404') : true",
        _FIPS_MESSAGE,
    ),
)


class AKSNodeClassSpec(KubeModel):
    """How VMs are launched: subnet, OS disk, node image, kubelet and security settings."""

    model_config = ConfigDict(json_schema_extra=KubeSchema(rules=_SPEC_RULES))

    vnet_subnet_id: (
        Annotated[
            str,
            *_matching(
                _SUBNET_ID_PATTERN,
                "a subnet resource id (/subscriptions/<id>/resourceGroups/<group>/providers/"
                "Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>)",
            ),
        ]
        | None
    ) = Field(default=None, alias="vnetSubnetID")
    """The subnet of the VMs' network interfaces, as an ARM resource id; unset: the subnet in
    Karpenter's settings."""
    os_disk_size_gb: int = Field(
        default=DEFAULT_OS_DISK_SIZE_GB, ge=30, le=2048, alias="osDiskSizeGB"
    )
    """The OS disk size in GB (30 to 2048, default 128); it is the node's ephemeral storage."""
    image_family: ImageFamily = DEFAULT_IMAGE_FAMILY
    """The AKS node image family: Ubuntu (the default Ubuntu release of the cluster's
    Kubernetes version), Ubuntu2204, Ubuntu2404 or AzureLinux."""
    fips_mode: Literal["FIPS", "Disabled"] | None = Field(default=None, alias="fipsMode")
    """FIPS for the nodes: FIPS (FIPS-enabled node images; not with Ubuntu2204 or Ubuntu2404)
    or Disabled."""
    tags: Annotated[dict[str, str], checked(_tags_error), KubeSchema(rules=_TAG_RULES)] = Field(
        default_factory=dict
    )
    """Tags of the VMs and network interfaces Karpenter creates (keys up to 512 characters
    without < > % & ? or \\, values up to 256); not part of the drift hash."""
    kubelet: KubeletConfiguration | None = None
    """Kubelet settings of the nodes."""
    max_pods: int | None = Field(default=None, ge=10, le=250)
    """The most pods a node may run (10 to 250); unset: 250 with Azure CNI overlay or no
    network plugin, 30 with Azure CNI node subnet, 110 otherwise."""
    security: Security | None = None
    """Security settings of the VMs."""

    @model_validator(mode="after")
    def _fips_family(self) -> Self:
        if self.fips_mode == "FIPS" and self.image_family in _FIPS_UNSUPPORTED:
            raise ValueError(f"{_FIPS_MESSAGE} (imageFamily is {self.image_family})")
        return self

    def encryption_at_host(self) -> bool:
        """Whether ``security.encryptionAtHost`` is set and true."""
        return self.security is not None and bool(self.security.encryption_at_host)

    def fips(self) -> bool:
        """Whether ``fipsMode`` is FIPS."""
        return self.fips_mode == "FIPS"


# Status


class NodeImage(KubeModel):
    """A node image the image family resolved to, and the instance types it is for."""

    id: str
    """The image version's id, e.g. /CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-
    09b6d4220bd2/images/2204gen2containerd/versions/202501.02.0."""
    requirements: list[NodeSelectorRequirement]
    """Requirements an instance type must meet to launch with this image (architecture,
    Hyper-V generation, GPU)."""


class AKSNodeClassStatus(KubeModel):
    """What the spec resolved to, and whether the AKSNodeClass is ready."""

    images: list[NodeImage] = Field(default_factory=list)
    """The node images VMs may launch with, most specific requirements first."""
    kubernetes_version: str | None = None
    """The cluster's Kubernetes version (e.g. 1.31.2) the nodes join with."""
    conditions: Conditions = Field(default_factory=list)
    """ImagesReady, KubernetesVersionReady, SubnetsReady, ValidationSucceeded, and Ready once
    all are True."""


class AKSNodeClass(KubeObject, ReadyByConditions):
    """How Karpenter launches Azure VMs, referenced by NodePools in
    spec.template.spec.nodeClassRef."""

    api_version: Literal["karpenter.azure.com/v1beta1"] = "karpenter.azure.com/v1beta1"
    kind: Literal["AKSNodeClass"] = "AKSNodeClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AKSNodeClassSpec = Field(default_factory=AKSNodeClassSpec)
    status: AKSNodeClassStatus = Field(default_factory=AKSNodeClassStatus)


# Drift hash

_UNHASHED = ("tags",)
"""Spec fields left out of the drift hash: tags change on the VMs in place, not by replacement."""


def nodeclass_hash(spec: AKSNodeClassSpec) -> str:
    """The drift hash of ``spec``: every field but ``tags``, defaults filled in.

    Lists count as sets and None, "", [] and {} as unset, so reordering allowedUnsafeSysctls or
    writing out a default (osDiskSizeGB 128, imageFamily Ubuntu) keeps the hash; ``false`` and
    ``0`` are values.
    """
    fields = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    hashed = {key: value for key, value in fields.items() if key not in _UNHASHED}
    return spec_hash(hashed)


NODE_CLASS = NodeClassInfo(
    AKSNodeClass, GROUP, VERSION, KIND, PLURAL, [c.to_dict() for c in PRINTER_COLUMNS], SHORT_NAMES
)
"""The AKSNodeClass kind as the provider's record lists it (its CRD: ``python -m
karpenter_core.sdk.crds azure``)."""
