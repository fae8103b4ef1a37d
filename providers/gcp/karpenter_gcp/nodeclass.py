"""The ``karpenter.k8s.gcp/v1alpha1`` GCENodeClass: how Karpenter launches GCE instances.

The spec picks the node image (selector terms, family), the service account, the network, the
disks, labels, metadata, network tags and kubelet settings; the nodeclass controller resolves the
images and the subnetwork into ``status``. Every rule is checked here (errors name the field) and
carried in the generated CRD as OpenAPI keywords or CEL, as the community provider's CRD has it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field

from karpenter_core.apis.v1.common import (
    CONDITION_READY,
    Conditions,
    KubeModel,
    KubeObject,
    ObjectMeta,
)
from karpenter_core.apis.v1.hashing import spec_hash
from karpenter_core.sdk.crds import KubeSchema, PrinterColumn
from karpenter_core.sdk.fields import checked
from karpenter_core.sdk.kubeletconfig import KubeletConfiguration, listed, matching
from karpenter_core.sdk.nodeclass import ReadyByConditions
from karpenter_core.sdk.nodeimages import NodeSelectorRequirement
from karpenter_core.sdk.record import NodeClassInfo
from karpenter_core.sdk.rules import Rule, ruled

GROUP = "karpenter.k8s.gcp"
VERSION = "v1alpha1"
KIND = "GCENodeClass"
PLURAL = "gcenodeclasses"
HASH_ANNOTATION = f"{GROUP}/gcenodeclass-hash"
"""Annotation on a GCENodeClass and its NodeClaims: ``nodeclass_hash`` of the spec."""
HASH_VERSION_ANNOTATION = f"{GROUP}/gcenodeclass-hash-version"
"""Annotation next to the hash: the ``HASH_VERSION`` it was computed with."""
HASH_VERSION = "py-v1"
"""Bumped whenever a change to the hashed fields would change existing GCENodeClasses' hashes."""

COS = "ContainerOptimizedOS"
UBUNTU = "Ubuntu"
UBUNTU2404 = "Ubuntu2404"
UBUNTU2204 = "Ubuntu2204"
CUSTOM = "Custom"
DEFAULT_BOOT_DISK_GIB = 100
"""The boot disk size when spec.disks names none (GiB)."""
CONDITION_IMAGES_READY = "ImagesReady"
CONDITION_SUBNETWORK_READY = "SubnetworkReady"
CONDITION_TYPES = (CONDITION_IMAGES_READY, CONDITION_SUBNETWORK_READY)
"""The conditions that together make a GCENodeClass Ready (all True), in status order."""

_SERVICE_ACCOUNT = r"^[^@]+@(developer\.gserviceaccount\.com|[^@]+\.iam\.gserviceaccount\.com)$"
_NETWORK_TAG = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
_LABEL_VALUE = "^[a-z0-9_-]{0,63}$"
_COS_VERSION = "[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+"
_UBUNTU_VERSION = "v[0-9]{8}"
_COS_FORM = "'milestone.build.build.build' (e.g. '125.19216.104.126')"
_UBUNTU_FORM = "'vYYYYMMDD' (e.g. 'v20260416')"
RESERVED_METADATA = (
    *("cluster-location", "cluster-name", "cluster-uid", "configure-sh", "containerd-configure-sh"),
    *("disable-address-manager", "enable-os-login", "gci-ensure-gke-docker", "gci-metrics-enabled"),
    *("gci-update-strategy", "instance-template", "install-ssh-psm1", "k8s-node-setup-psm1"),
    *("kube-env", "kube-labels", "startup-script", "user-data", "user-profile-psm1"),
    *("windows-startup-script-ps1", "common-psm1", "kubeconfig", "kubelet-config"),
)
"""Instance metadata keys the GKE bootstrap owns; spec.metadata may not set them."""
_RESTRICTED_LABELS = ("gce:gce-cluster-name", "karpenter.sh/nodepool", "karpenter.sh/nodeclaim")


def _pattern(pattern: str, what: str) -> tuple[Any, KubeSchema]:
    return checked(matching(pattern, what)), KubeSchema(keywords={"pattern": pattern})


# fmt: off
def _version_rule(family: str, pattern: str, form: str) -> Rule:
    return Rule(f"!has(self.version) || !has(self.family) || self.family != '{family}' || "
                f"self.version == 'latest' || self.version.matches('^{pattern}$')",
                f"{family} version must be 'latest' or {form}",
                lambda t: t.family != family or t.version in (None, "latest")
                or re.fullmatch(pattern, t.version) is not None)


def _alias_version_rule(family: str, pattern: str, form: str) -> Rule:
    return Rule(f"!self.startsWith('{family}@') || self.matches('^{family}@(latest|{pattern})$')",
                f"{family} version must be 'latest' or {form}",
                lambda a: not a.startswith(f"{family}@")
                or re.fullmatch(f"{family}@(latest|{pattern})", a) is not None)


def _key_refused(key: str) -> Rule:
    return Rule(f"self.all(k, k != '{key}')", f"tag contains a restricted tag matching {key}",
                lambda labels: key not in labels)


_ALIAS_RULES = ruled(
    Rule("self.matches('^[a-zA-Z0-9]+@.+$')",
         "'alias' is improperly formatted, must match the format 'family@version'",
         lambda a: re.fullmatch(r"[a-zA-Z0-9]+@.+", a, re.S) is not None),
    Rule(f"self.find('^[^@]+') in [{listed((COS, UBUNTU))}]",
         "family is not supported, must be one of the following: 'ContainerOptimizedOS,Ubuntu'",
         lambda a: a.partition("@")[0] in (COS, UBUNTU)),
    _alias_version_rule(COS, _COS_VERSION, _COS_FORM),
    _alias_version_rule(UBUNTU, _UBUNTU_VERSION, _UBUNTU_FORM),
)
_TERM_RULES = ruled(
    Rule("!has(self.family) || has(self.channel) || has(self.version)",
         "family requires either channel or version to be set",
         lambda t: t.family is None or t.channel is not None or t.version is not None),
    Rule("!(has(self.channel) || has(self.version)) || has(self.family)",
         "channel and version require family to be set",
         lambda t: (t.channel is None and t.version is None) or t.family is not None),
    Rule("!(has(self.channel) && has(self.version))", "channel and version cannot both be set",
         lambda t: t.channel is None or t.version is None),
    Rule(f"!has(self.channel) || self.family == '{COS}'",
         "channel is only supported for family ContainerOptimizedOS",
         lambda t: t.channel is None or t.family == COS),
    Rule("(has(self.alias) ? 1 : 0) + (has(self.id) ? 1 : 0) + (has(self.family) ? 1 : 0) == 1",
         "exactly one of alias, id, or family must be set",
         lambda t: [t.alias, t.id, t.family].count(None) == 2),
    _version_rule(COS, _COS_VERSION, _COS_FORM),
    _version_rule(UBUNTU2404, _UBUNTU_VERSION, _UBUNTU_FORM),
    _version_rule(UBUNTU2204, _UBUNTU_VERSION, _UBUNTU_FORM),
)
_TERMS_RULES = ruled(
    Rule("self.all(x, has(x.alias) || has(x.id) || has(x.family))",
         "each term must set exactly one of: alias, id, or family (with channel or version)",
         lambda terms: all(t.alias or t.id or t.family for t in terms)),
    Rule("!(self.exists(t, has(t.channel)) && self.exists(t, has(t.family) && "
         f"t.family == '{COS}' && has(t.version) && t.version == 'latest'))",
         "channel: and version: latest cannot both appear in the same imageSelectorTerms",
         lambda terms: not (any(t.channel for t in terms)
                            and any(t.family == COS and t.version == "latest" for t in terms))),
)
_LABEL_RULES = ruled(
    Rule("self.all(k, k != '')", "empty tag keys aren't supported", lambda m: "" not in m),
    Rule("self.all(k, !k.startsWith('kubernetes.io/cluster') )",
         "tag contains a restricted tag matching kubernetes.io/cluster/",
         lambda m: not any(k.startswith("kubernetes.io/cluster") for k in m)),
    *map(_key_refused, (*_RESTRICTED_LABELS, f"{GROUP}/gcenodeclass")),
)
_DISKS_RULES = ruled(
    Rule("self.filter(d, has(d.boot) && d.boot).size() <= 1", "at most one disk may be the boot disk",
         lambda disks: sum(d.boot for d in disks) <= 1),
    Rule("self.all(d, !(has(d.boot) && d.boot && has(d.category) && d.category == 'local-ssd'))",
         "a local SSD cannot be the boot disk",
         lambda disks: not any(d.boot and d.category == "local-ssd" for d in disks)),
    Rule("self.all(d, !(has(d.category) && d.category == 'local-ssd' && has(d.sizeGiB) && "
         "d.sizeGiB != 375))",
         "a local SSD has GCE's fixed size: sizeGiB 375 or unset",
         lambda disks: not any(d.category == "local-ssd" and d.size_gib not in (None, 375)
                               for d in disks)),
)
_METADATA_RULES = ruled(
    Rule(" && ".join(f"!('{key}' in self)" for key in RESERVED_METADATA),
         "spec.metadata contains a reserved GKE metadata key",
         lambda m: not set(m) & set(RESERVED_METADATA)),
)
_SIZE_RULES = ruled(Rule("self >= 10", "size invalid", lambda size: size >= 10))
DiskCategory = Literal[
    "hyperdisk-balanced", "hyperdisk-balanced-high-availability", "hyperdisk-extreme",
    "hyperdisk-ml", "hyperdisk-throughput", "local-ssd", "pd-balanced", "pd-extreme", "pd-ssd",
    "pd-standard",
]
# fmt: on


class ImageSelectorTerm(KubeModel):
    """Selects node images: exactly one of an alias, an image id, or a family with a channel or
    a version."""

    alias: Annotated[str, Field(max_length=60), *_ALIAS_RULES] | None = None
    """Deprecated: ``<family>@<version>``, e.g. ContainerOptimizedOS@latest or Ubuntu@v20260416."""
    id: Annotated[str, Field(max_length=160)] | None = None
    """An image by its resource path, e.g. projects/gke-node-images/global/images/<name>."""
    family: Literal["ContainerOptimizedOS", "Ubuntu2404", "Ubuntu2204"] | None = None
    """The OS image family (with channel or version)."""
    channel: Literal["rapid", "regular", "stable", "extended", "cluster"] | None = None
    """The GKE release channel to follow (ContainerOptimizedOS only)."""
    version: Annotated[str, Field(max_length=32)] | None = None
    """'latest' or a pinned version: COS milestone.build.build.build, Ubuntu vYYYYMMDD."""


class Disk(KubeModel):
    """A disk of the instance: the boot disk (it gets the node image) or a data disk."""

    size_gib: Annotated[int, *_SIZE_RULES] | None = Field(default=None, alias="sizeGiB")
    """The size in GiB (at least 10)."""
    category: DiskCategory | None = None
    """The disk type, e.g. pd-balanced, pd-ssd, hyperdisk-balanced or local-ssd."""
    boot: bool = False
    """Whether this is the boot disk."""


class NetworkConfig(KubeModel):
    """The network of the instances' primary interface."""

    enable_private_nodes: bool | None = None
    """Internal IP addresses only (no external IP); unset: the cluster's setting."""
    subnetwork: str | None = None
    """projects/<project>/regions/<region>/subnetworks/<name> or its name; unset: the
    cluster's subnetwork."""


class GCENodeClassSpec(KubeModel):
    """How instances are launched: image, identity, network, disks, metadata and kubelet."""

    service_account: (
        Annotated[str, *_pattern(_SERVICE_ACCOUNT, "a service account email")] | None
    ) = None
    """The IAM service account email of the instances."""
    disks: Annotated[list[Disk], Field(max_length=10), *_DISKS_RULES] = Field(default_factory=list)
    """The disks of the instances (at most 10); none: a 100 GiB boot disk."""
    image_selector_terms: Annotated[
        list[Annotated[ImageSelectorTerm, *_TERM_RULES]],
        Field(min_length=1, max_length=30),
        *_TERMS_RULES,
    ]
    """Image selector terms (1 to 30), ORed."""
    image_family: Literal["Ubuntu", "ContainerOptimizedOS"] | None = None
    """The image family when no alias term names one."""
    kubelet_configuration: KubeletConfiguration | None = None
    """Kubelet settings of the nodes."""
    labels: Annotated[
        dict[str, Annotated[str, *_pattern(_LABEL_VALUE, "a GCE label value")]],
        Field(max_length=20),
        *_LABEL_RULES,
    ] = Field(default_factory=dict)
    """Labels of the instances (at most 20)."""
    metadata: Annotated[dict[str, str], *_METADATA_RULES] = Field(default_factory=dict)
    """Custom instance metadata (not the keys the GKE bootstrap owns)."""
    network_tags: Annotated[
        list[
            Annotated[
                str, Field(min_length=1, max_length=63), *_pattern(_NETWORK_TAG, "a network tag")
            ]
        ],
        Field(max_length=20),
    ] = Field(default_factory=list)
    """Network tags of the instances (at most 20; RFC 1035 names)."""
    network_config: NetworkConfig | None = None
    """The primary interface's subnetwork and whether nodes are private."""

    def family(self) -> str:
        """The image family: imageFamily, else the first alias's, else the first family term's
        (Ubuntu for the Ubuntu releases), else Custom."""
        if self.image_family:
            return self.image_family
        alias = next((t.alias for t in self.image_selector_terms if t.alias), None)
        if alias:
            return alias.partition("@")[0]
        families = (t.family for t in self.image_selector_terms if t.family)
        return next((COS if f == COS else UBUNTU for f in families), CUSTOM)

    def boot_disk_gib(self) -> int:
        """The boot disk's size (GiB): the boot disk's, else 100."""
        boot = next((d for d in self.disks if d.boot and d.size_gib), None)
        return boot.size_gib or DEFAULT_BOOT_DISK_GIB if boot else DEFAULT_BOOT_DISK_GIB


class Image(KubeModel):
    """A node image the selector terms resolved to, and the instance types it is for."""

    source_image: str
    """The image, e.g. projects/gke-node-images/global/images/<name>."""
    requirements: list[NodeSelectorRequirement]
    """Requirements an instance type must meet to boot this image (architecture, GPU)."""


class GCENodeClassStatus(KubeModel):
    """What the spec resolved to, and whether the GCENodeClass is ready."""

    images: list[Image] = Field(default_factory=list)
    """The node images instances may boot, in selector term order."""
    subnetwork: str | None = None
    """The primary interface's subnetwork (projects/<p>/regions/<r>/subnetworks/<name>)."""
    conditions: Conditions = Field(default_factory=list)
    """ImagesReady, SubnetworkReady, and Ready once both are True."""


class GCENodeClass(KubeObject, ReadyByConditions):
    """How Karpenter launches GCE instances, referenced by NodePools in
    spec.template.spec.nodeClassRef."""

    api_version: Literal["karpenter.k8s.gcp/v1alpha1"] = "karpenter.k8s.gcp/v1alpha1"
    kind: Literal["GCENodeClass"] = "GCENodeClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: GCENodeClassSpec
    status: GCENodeClassStatus = Field(default_factory=GCENodeClassStatus)


def nodeclass_hash(spec: GCENodeClassSpec) -> str:
    """The drift hash of ``spec``: every field but imageSelectorTerms (images drift on their
    own), with the image family they imply; lists count as sets, unset and empty alike."""
    fields = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    fields.pop("imageSelectorTerms")
    return spec_hash({**fields, "imageFamily": spec.family()})


_COLUMNS = [
    PrinterColumn("Ready", "string", f'.status.conditions[?(@.type=="{CONDITION_READY}")].status'),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
]
NODE_CLASS = NodeClassInfo(
    GCENodeClass, GROUP, VERSION, KIND, PLURAL, [c.to_dict() for c in _COLUMNS], ("gcenc", "gcencs")
)
"""The GCENodeClass kind as the provider's record lists it (its CRD: ``python -m
karpenter_core.sdk.crds gcp``)."""
