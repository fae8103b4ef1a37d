"""The ``karpenter.k8s.aws/v1`` EC2NodeClass: how Karpenter launches EC2 instances.

Subnets, security groups and AMIs are chosen by selector terms (resolved into ``status`` by the
nodeclass controller); the rest of the spec shapes the launch template. Every rule is checked here
(errors name the field) and carried in the generated CRD as OpenAPI keywords or CEL, so the
apiserver accepts the objects these models accept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from karpenter_aws.labels import (
    ANNOTATION_NODECLASS_HASH,
    ANNOTATION_NODECLASS_HASH_VERSION,
    GROUP,
    TAG_CLUSTER_PREFIX,
    TAG_EKS_CLUSTER_NAME,
    TAG_NODECLAIM,
    TAG_NODECLASS,
    TAG_NODEPOOL,
)
from karpenter_core.apis.quantity import parse_quantity
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
from karpenter_core.sdk.kubeletconfig import (
    KubeletConfiguration,
    explicit_nulls,
    listed,
    matching,
)
from karpenter_core.sdk.nodeclass import ReadyByConditions, validation_problems
from karpenter_core.sdk.nodeimages import NodeSelectorRequirement
from karpenter_core.sdk.record import NodeClassInfo

__all__ = [
    "ALIAS_FAMILIES",
    "AMI_FAMILIES",
    "AMI_FAMILY_AL2",
    "AMI_FAMILY_AL2023",
    "AMI_FAMILY_BOTTLEROCKET",
    "AMI_FAMILY_CUSTOM",
    "AMI_FAMILY_WINDOWS2019",
    "AMI_FAMILY_WINDOWS2022",
    "AMI_FAMILY_WINDOWS2025",
    "CONDITION_AMIS_READY",
    "CONDITION_INSTANCE_PROFILE_READY",
    "CONDITION_SECURITY_GROUPS_READY",
    "CONDITION_SUBNETS_READY",
    "CONDITION_TYPES",
    "CONDITION_VALIDATION_SUCCEEDED",
    "EC2NODECLASS_PRINTER_COLUMNS",
    "GROUP",
    "HASH_ANNOTATION",
    "HASH_VERSION",
    "HASH_VERSION_ANNOTATION",
    "KIND",
    "NODE_CLASS",
    "PLURAL",
    "RESTRICTED_TAG_KEYS",
    "SHORT_NAMES",
    "VERSION",
    "AMISelectorTerm",
    "AMIStatus",
    "BlockDevice",
    "BlockDeviceMapping",
    "EC2NodeClass",
    "EC2NodeClassSpec",
    "EC2NodeClassStatus",
    "KubeletConfiguration",
    "MetadataOptions",
    "NodeSelectorRequirement",
    "SecurityGroupSelectorTerm",
    "SecurityGroupStatus",
    "SubnetSelectorTerm",
    "SubnetStatus",
    "nodeclass_hash",
    "validation_problems",
]

VERSION = "v1"
KIND = "EC2NodeClass"
PLURAL = "ec2nodeclasses"

HASH_ANNOTATION = ANNOTATION_NODECLASS_HASH
"""Annotation on an EC2NodeClass and its NodeClaims: ``nodeclass_hash`` of the spec."""
HASH_VERSION_ANNOTATION = ANNOTATION_NODECLASS_HASH_VERSION
"""Annotation next to the hash: the ``HASH_VERSION`` it was computed with."""
HASH_VERSION = "py-v1"
"""Bumped whenever a change to the hashed fields would change existing EC2NodeClasses' hashes."""

AMI_FAMILY_AL2 = "AL2"
AMI_FAMILY_AL2023 = "AL2023"
AMI_FAMILY_BOTTLEROCKET = "Bottlerocket"
AMI_FAMILY_CUSTOM = "Custom"
AMI_FAMILY_WINDOWS2019 = "Windows2019"
AMI_FAMILY_WINDOWS2022 = "Windows2022"
AMI_FAMILY_WINDOWS2025 = "Windows2025"
AMI_FAMILIES = (
    AMI_FAMILY_AL2,
    AMI_FAMILY_AL2023,
    AMI_FAMILY_BOTTLEROCKET,
    AMI_FAMILY_CUSTOM,
    AMI_FAMILY_WINDOWS2019,
    AMI_FAMILY_WINDOWS2022,
    AMI_FAMILY_WINDOWS2025,
)
ALIAS_FAMILIES: Mapping[str, str] = {
    family.lower(): family for family in AMI_FAMILIES if family != AMI_FAMILY_CUSTOM
}
"""Alias family prefix (``al2023``) to AMI family (``AL2023``)."""
_WINDOWS_ALIASES = tuple(alias for alias in ALIAS_FAMILIES if alias.startswith("windows"))
AMIFamily = Literal[
    "AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025"
]

CONDITION_AMIS_READY = "AMIsReady"
CONDITION_SUBNETS_READY = "SubnetsReady"
CONDITION_SECURITY_GROUPS_READY = "SecurityGroupsReady"
CONDITION_INSTANCE_PROFILE_READY = "InstanceProfileReady"
CONDITION_VALIDATION_SUCCEEDED = "ValidationSucceeded"
CONDITION_TYPES = (
    CONDITION_SUBNETS_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_AMIS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
    CONDITION_VALIDATION_SUCCEEDED,
)
"""The conditions that together make an EC2NodeClass Ready (all True), in status order."""

EC2NODECLASS_PRINTER_COLUMNS = (
    PrinterColumn("Ready", "string", f'.status.conditions[?(@.type=="{CONDITION_READY}")].status'),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    PrinterColumn("Role", "string", ".spec.role", priority=1),
)
"""``kubectl get ec2nodeclasses`` columns (``-o wide`` adds Role)."""
SHORT_NAMES = ("ec2nc", "ec2ncs")
"""``kubectl get`` short names of EC2NodeClasses."""

RESTRICTED_TAG_KEYS = (TAG_NODEPOOL, TAG_NODECLAIM, TAG_NODECLASS, TAG_EKS_CLUSTER_NAME)
"""Tag keys Karpenter sets itself on what it launches; ``kubernetes.io/cluster/*`` too."""
_CLUSTER_TAG_PREFIX = TAG_CLUSTER_PREFIX.rstrip("/")

MAX_SELECTOR_TERMS = 30

_ALIAS_PATTERN = r"^[a-zA-Z0-9]+@.+$"
_VOLUME_SIZE_PATTERN = (
    r"^(([1-9][0-9]{0,3}|[1-4][0-9]{4}|5[0-8][0-9]{3}|59000)Gi"
    r"|([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-3][0-9]{3}|64000)G"
    r"|([1-9]|[1-4][0-9]|5[0-8])Ti"
    r"|([1-9]|[1-5][0-9]|6[0-4])T)$"
)
_FAMILY_ROOT_DEVICE = {
    AMI_FAMILY_AL2: "/dev/xvda",
    AMI_FAMILY_AL2023: "/dev/xvda",
    AMI_FAMILY_BOTTLEROCKET: "/dev/xvdb",
    AMI_FAMILY_WINDOWS2019: "/dev/sda1",
    AMI_FAMILY_WINDOWS2022: "/dev/sda1",
    AMI_FAMILY_WINDOWS2025: "/dev/sda1",
}
"""The device that holds the kubelet's ephemeral storage, per AMI family (none for Custom)."""


def _selector_tags_error(tags: dict[str, str]) -> str | None:
    if any(key == "" or value == "" for key, value in tags.items()):
        return "empty tag keys or values aren't supported"
    return None


SelectorTags = Annotated[
    dict[str, str],
    Field(min_length=1, max_length=20),
    checked(_selector_tags_error),
    KubeSchema(
        rules=(
            cel(
                "self.all(k, k != '' && self[k] != '')",
                "empty tag keys or values aren't supported",
            ),
        )
    ),
]
"""Tags to match (1 to 20); the value ``*`` matches any value of the key."""


def _resource_id(prefix: str, what: str) -> tuple[AfterValidator, KubeSchema]:
    """The validator and CRD pattern of an EC2 resource id (``<prefix>-<hex>``)."""
    pattern = f"^{prefix}-[0-9a-z]+$"
    return (
        checked(matching(pattern, f"a {what} id ({prefix}-...)")),
        KubeSchema(keywords={"pattern": pattern}),
    )


SubnetID = Annotated[str, *_resource_id("subnet", "subnet")]
SecurityGroupID = Annotated[str, *_resource_id("sg", "security group")]
AMIID = Annotated[str, *_resource_id("ami", "AMI")]


def _exclusive(field: str, others: tuple[str, ...], where: str) -> dict[str, str]:
    return cel(
        f"!(has(self.{field}) && ({' || '.join(f'has(self.{o})' for o in others)}))",
        f"'{field}' is mutually exclusive, cannot be set with a combination of other fields "
        f"in {where}",
    )


def _at_least_one(fields: tuple[str, ...]) -> dict[str, str]:
    return cel(
        " || ".join(f"has(self.{field})" for field in fields),
        f"expected at least one, got none, [{listed(fields)}]",
    )


def _check_term(
    term: KubeModel,
    exclusive: Mapping[str, tuple[str, ...]],
    where: str,
    selecting: tuple[str, ...] | None = None,
) -> None:
    """Raise when no field of ``term`` that selects (default: any field) is set, or an
    exclusive field is set with another."""
    set_fields = {
        str(info.alias or name)
        for name, info in type(term).model_fields.items()
        if getattr(term, name) is not None
    }
    if selecting is None:
        selecting = tuple(str(info.alias or name) for name, info in type(term).model_fields.items())
    if not set_fields & set(selecting):
        raise ValueError(f"expected at least one, got none, [{listed(selecting)}]")
    for field, others in exclusive.items():
        clash = sorted(set_fields & set(others))
        if field in set_fields and clash:
            raise ValueError(
                f"'{field}' is mutually exclusive, cannot be set with a combination of other "
                f"fields in {where} (also set: {', '.join(clash)})"
            )


# Selector terms


_SUBNET_EXCLUSIVE = {"id": ("tags",)}


class SubnetSelectorTerm(KubeModel):
    """Selects subnets by tags or by id; fields of one term are ANDed."""

    model_config = ConfigDict(
        json_schema_extra=KubeSchema(
            rules=(
                _at_least_one(("tags", "id")),
                _exclusive("id", _SUBNET_EXCLUSIVE["id"], "a subnet selector term"),
            )
        )
    )

    tags: SelectorTags | None = None
    """Tags the subnet must have; '*' as a value selects any value of the key."""
    id: SubnetID | None = None
    """The subnet id."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        """Check the term sets a field, and an exclusive one alone."""
        _check_term(self, _SUBNET_EXCLUSIVE, "a subnet selector term")
        return self


_SECURITY_GROUP_EXCLUSIVE = {"id": ("tags", "name"), "name": ("tags", "id")}


class SecurityGroupSelectorTerm(KubeModel):
    """Selects security groups by tags, id or group name; fields of one term are ANDed."""

    model_config = ConfigDict(
        json_schema_extra=KubeSchema(
            rules=(
                _at_least_one(("tags", "id", "name")),
                *(
                    _exclusive(field, others, "a security group selector term")
                    for field, others in _SECURITY_GROUP_EXCLUSIVE.items()
                ),
            )
        )
    )

    tags: SelectorTags | None = None
    """Tags the security group must have; '*' as a value selects any value of the key."""
    id: SecurityGroupID | None = None
    """The security group id."""
    name: Annotated[str, Field(min_length=1)] | None = None
    """The security group name (the GroupName field, not the Name tag)."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        """Check the term sets a field, and an exclusive one alone."""
        _check_term(self, _SECURITY_GROUP_EXCLUSIVE, "a security group selector term")
        return self


def _alias_error(alias: str) -> str | None:
    if re.fullmatch(_ALIAS_PATTERN, alias) is None:
        return f"alias {alias!r} is improperly formatted, must match the format 'family@version'"
    family, _, version = alias.partition("@")
    if family not in ALIAS_FAMILIES:
        return (
            f"alias family {family!r} is not supported, must be one of the following: "
            f"{listed(tuple(ALIAS_FAMILIES))}"
        )
    if family in _WINDOWS_ALIASES and version != "latest":
        return f"alias {alias!r}: windows families may only specify version 'latest'"
    return None


Alias = Annotated[
    str,
    Field(max_length=30),
    checked(_alias_error),
    KubeSchema(
        rules=(
            cel(
                f"self.matches('{_ALIAS_PATTERN}')",
                "'alias' is improperly formatted, must match the format 'family@version'",
            ),
            cel(
                f"self.split('@')[0] in [{listed(tuple(ALIAS_FAMILIES))}]",
                "family is not supported, must be one of the following: "
                f"{listed(tuple(ALIAS_FAMILIES))}",
            ),
            cel(
                f"self.split('@')[0] in [{listed(_WINDOWS_ALIASES)}] "
                "? self.split('@', 2)[1] == 'latest' : true",
                "windows families may only specify version 'latest'",
            ),
        )
    ),
]

_AMI_SELECTING = ("alias", "tags", "id", "name", "ssmParameter")
"""AMI term fields that select on their own (an owner only narrows the others)."""
_AMI_EXCLUSIVE = {
    "id": ("alias", "tags", "name", "owner", "ssmParameter"),
    "alias": ("id", "tags", "name", "owner", "ssmParameter"),
}


class AMISelectorTerm(KubeModel):
    """Selects AMIs by alias, tags, id, name, owner or SSM parameter; fields are ANDed."""

    model_config = ConfigDict(
        json_schema_extra=KubeSchema(
            rules=(
                _at_least_one(_AMI_SELECTING),
                *(
                    _exclusive(field, others, "amiSelectorTerms")
                    for field, others in _AMI_EXCLUSIVE.items()
                ),
            )
        )
    )

    alias: Alias | None = None
    """An EKS optimized AMI as 'family@version': families al2, al2023, bottlerocket,
    windows2019, windows2022, windows2025; the version is a release (e.g. al2023@v20240625) or
    'latest' (Windows only 'latest'). An alias must be the only term."""
    tags: SelectorTags | None = None
    """Tags the AMI must have; '*' as a value selects any value of the key."""
    id: AMIID | None = None
    """The AMI id."""
    name: Annotated[str, Field(min_length=1)] | None = None
    """The AMI name (not the Name tag); without an owner, AMIs of 'self' and 'amazon' match."""
    owner: Annotated[str, Field(min_length=1)] | None = None
    """The AMI owner: an account id, 'self', 'amazon' or 'aws-marketplace'; it narrows tags or
    name, so it cannot select alone."""
    ssm_parameter: Annotated[str, Field(min_length=1)] | None = None
    """The name (or ARN) of an SSM parameter holding the AMI id."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        """Check the term sets a field, and an exclusive one alone."""
        _check_term(self, _AMI_EXCLUSIVE, "amiSelectorTerms", _AMI_SELECTING)
        return self


def _alias_only_term(terms: list[AMISelectorTerm]) -> list[AMISelectorTerm]:
    if len(terms) > 1 and any(term.alias is not None for term in terms):
        raise ValueError(
            "'alias' is mutually exclusive, cannot be set with a combination of other "
            "amiSelectorTerms: a term with an alias must be the only term"
        )
    return terms


# Block devices, metadata options, kubelet


VolumeType = Literal["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"]


class BlockDevice(KubeModel):
    """An EBS volume attached at launch."""

    model_config = ConfigDict(
        json_schema_extra=KubeSchema(
            rules=(
                cel(
                    "has(self.snapshotID) || has(self.volumeSize)",
                    "snapshotID or volumeSize must be defined",
                ),
            )
        )
    )

    delete_on_termination: bool | None = None
    """Whether the volume is deleted when the instance terminates."""
    encrypted: bool | None = None
    """Whether the volume is encrypted."""
    iops: int | None = Field(default=None, ge=0)
    """Provisioned IOPS (gp3 3,000-16,000; io1 and io2 100-64,000)."""
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    """The KMS key (id, alias or ARN) encrypting the volume."""
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    """The EBS snapshot the volume is created from."""
    throughput: int | None = Field(default=None, ge=0)
    """Throughput of a gp3 volume in MiB/s (125-1,000)."""
    volume_size: (
        Annotated[
            str,
            checked(
                matching(
                    _VOLUME_SIZE_PATTERN,
                    "a volume size: a whole number of Gi, G, Ti or T up to 64T (e.g. '100Gi')",
                )
            ),
            KubeSchema(keywords={"pattern": _VOLUME_SIZE_PATTERN}),
        ]
        | None
    ) = None
    """The volume size in Gi, G, Ti or T, such as '100Gi'."""
    volume_type: VolumeType | None = None
    """The EBS volume type: standard, io1, io2, gp2, sc1, st1 or gp3."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        """A volume needs a snapshot or a size."""
        if self.snapshot_id is None and self.volume_size is None:
            raise ValueError("snapshotID or volumeSize must be defined")
        return self

    def size_bytes(self) -> int | None:
        """``volumeSize`` in bytes, or None when unset."""
        if self.volume_size is None:
            return None
        return int(parse_quantity(self.volume_size))


class BlockDeviceMapping(KubeModel):
    """A device of the instance and the EBS volume behind it."""

    device_name: str | None = None
    """The device name, e.g. /dev/xvda."""
    ebs: BlockDevice | None = None
    """The EBS volume set up at launch."""
    root_volume: bool = False
    """Whether the device holds the kubelet's root directory (at most one mapping)."""


def _one_root_volume(mappings: list[BlockDeviceMapping]) -> list[BlockDeviceMapping]:
    roots = [str(index) for index, mapping in enumerate(mappings) if mapping.root_volume]
    if len(roots) > 1:
        raise ValueError(
            f"must have only one blockDeviceMappings with rootVolume (mappings {', '.join(roots)})"
        )
    return mappings


class MetadataOptions(KubeModel):
    """How instances expose the Instance Metadata Service (IMDS)."""

    http_endpoint: Literal["enabled", "disabled"] = "enabled"
    """Whether the metadata endpoint is reachable."""
    http_protocol_ipv6: Literal["enabled", "disabled"] = Field(
        default="disabled", alias="httpProtocolIPv6"
    )
    """Whether the IPv6 metadata endpoint is enabled."""
    http_put_response_hop_limit: int = Field(default=1, ge=1, le=64)
    """How many network hops a metadata PUT response may travel (1 to 64)."""
    http_tokens: Literal["required", "optional"] = "required"
    """Whether metadata requests need a session token (IMDSv2)."""


_METADATA_DEFAULT = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "required",
}


# Spec


def _tags_error(tags: dict[str, str]) -> str | None:
    for key in tags:
        if key == "":
            return "empty tag keys aren't supported"
        if key.startswith(_CLUSTER_TAG_PREFIX):
            return f"tag {key!r} is restricted: tags matching kubernetes.io/cluster/ are set by Karpenter"
        if key in RESTRICTED_TAG_KEYS:
            return f"tag {key!r} is restricted: Karpenter sets it"
    return None


_TAG_RULES = (
    cel("self.all(k, k != '')", "empty tag keys aren't supported"),
    cel(
        f"self.all(k, k != '{TAG_EKS_CLUSTER_NAME}')",
        f"tag contains a restricted tag matching {TAG_EKS_CLUSTER_NAME}",
    ),
    cel(
        f"self.all(k, !k.startsWith('{_CLUSTER_TAG_PREFIX}'))",
        "tag contains a restricted tag matching kubernetes.io/cluster/",
    ),
    *(
        cel(f"self.all(k, k != '{key}')", f"tag contains a restricted tag matching {key}")
        for key in RESTRICTED_TAG_KEYS
        if key != TAG_EKS_CLUSTER_NAME
    ),
)


def _alias_family_rule(alias: str, family: str) -> dict[str, str]:
    article = "an" if family[0] in "AEIOU" else "a"
    return cel(
        "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && "
        f"x.alias.find('^[^@]+') == '{alias}') ? (self.amiFamily == 'Custom' || "
        f"self.amiFamily == '{family}') : true)",
        f"if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias",
    )


_SPEC_RULES = (
    cel(
        "(has(self.role) && !has(self.instanceProfile)) || "
        "(!has(self.role) && has(self.instanceProfile))",
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    *(_alias_family_rule(alias, family) for alias, family in ALIAS_FAMILIES.items()),
    cel(
        "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
)


def _non_empty(field: str) -> tuple[AfterValidator, KubeSchema]:
    """The validator and CEL rule refusing an empty string in ``field``."""
    message = f"{field} cannot be empty"
    return (
        checked(lambda value: message if value == "" else None),
        KubeSchema(rules=(cel("self != ''", message),)),
    )


def _family_of_alias(alias: str) -> str:
    return ALIAS_FAMILIES[alias.partition("@")[0]]


class EC2NodeClassSpec(KubeModel):
    """How instances are launched: network, image, identity, storage and kubelet settings."""

    model_config = ConfigDict(json_schema_extra=KubeSchema(rules=_SPEC_RULES))

    subnet_selector_terms: Annotated[
        list[SubnetSelectorTerm], Field(min_length=1, max_length=MAX_SELECTOR_TERMS)
    ]
    """Subnet selector terms (1 to 30), ORed; instances launch in the subnets they select."""
    security_group_selector_terms: Annotated[
        list[SecurityGroupSelectorTerm], Field(min_length=1, max_length=MAX_SELECTOR_TERMS)
    ]
    """Security group selector terms (1 to 30), ORed; instances get every group they select."""
    ami_selector_terms: Annotated[
        list[AMISelectorTerm],
        Field(min_length=1, max_length=MAX_SELECTOR_TERMS),
        AfterValidator(_alias_only_term),
        KubeSchema(
            rules=(
                cel(
                    "!(self.exists(x, has(x.alias)) && self.size() != 1)",
                    "'alias' is mutually exclusive, cannot be set with a combination of other "
                    "amiSelectorTerms",
                ),
            )
        ),
    ]
    """AMI selector terms (1 to 30), ORed; an alias term must be alone."""
    ami_family: AMIFamily | None = None
    """The AMI family, which sets the user data format and default block devices: AL2, AL2023,
    Bottlerocket, Custom, Windows2019, Windows2022 or Windows2025. Inferred from an alias term
    (then it may only be that family or Custom); required without one."""
    user_data: str | None = None
    """User data in the AMI family's format; Karpenter merges its own settings into it."""
    role: Annotated[str, *_non_empty("role")] | None = None
    """The IAM role of the nodes; Karpenter manages an instance profile for it. Exclusive with
    instanceProfile."""
    instance_profile: Annotated[str, *_non_empty("instanceProfile")] | None = None
    """An existing IAM instance profile for the nodes. Exclusive with role."""
    tags: Annotated[dict[str, str], checked(_tags_error), KubeSchema(rules=_TAG_RULES)] = Field(
        default_factory=dict
    )
    """Tags of the instances, volumes and launch templates Karpenter creates."""
    kubelet: KubeletConfiguration | None = None
    """Kubelet settings of the nodes."""
    block_device_mappings: Annotated[
        list[BlockDeviceMapping],
        Field(max_length=50),
        AfterValidator(_one_root_volume),
        KubeSchema(
            rules=(
                cel(
                    "self.filter(x, has(x.rootVolume) ? x.rootVolume == true : false).size() <= 1",
                    "must have only one blockDeviceMappings with rootVolume",
                ),
            )
        ),
    ] = Field(default_factory=list)
    """Block devices of the instances (at most 50, at most one rootVolume); unset uses the AMI
    family's default."""
    instance_store_policy: Literal["RAID0"] | None = None
    """RAID0 puts the kubelet and containerd state on a RAID-0 of the instance-store disks."""
    associate_public_ip_address: bool | None = Field(default=None, alias="associatePublicIPAddress")
    """Whether instances get a public IP address (unset: the subnet's setting)."""
    detailed_monitoring: bool | None = None
    """Whether CloudWatch detailed monitoring is enabled."""
    metadata_options: Annotated[
        MetadataOptions, KubeSchema(keywords={"default": _METADATA_DEFAULT})
    ] = Field(default_factory=MetadataOptions)
    """Instance Metadata Service options; default: endpoint enabled, IPv6 disabled, hop limit 1,
    tokens required."""

    @model_validator(mode="before")
    @classmethod
    def _cross_checked_fields_present(cls, data: Any) -> Any:
        return explicit_nulls(
            data, ("ami_family", "amiFamily"), ("instance_profile", "instanceProfile")
        )

    @field_validator("ami_family")
    @classmethod
    def _family_fits_alias(cls, family: str | None, info: ValidationInfo) -> str | None:
        terms: list[AMISelectorTerm] | None = info.data.get("ami_selector_terms")
        if terms is None:
            return family  # the terms failed validation already
        alias = next((term.alias for term in terms if term.alias is not None), None)
        if alias is None:
            if family is None:
                raise ValueError(
                    "must specify amiFamily if amiSelectorTerms does not contain an alias"
                )
            return family
        alias_family = _family_of_alias(alias)
        if family not in (None, AMI_FAMILY_CUSTOM, alias_family):
            raise ValueError(
                f"amiFamily {family!r} does not fit alias {alias!r}: if set, amiFamily must be "
                f"'{alias_family}' or 'Custom'"
            )
        return family

    @field_validator("instance_profile")
    @classmethod
    def _role_or_profile(cls, profile: str | None, info: ValidationInfo) -> str | None:
        if "role" not in info.data:
            return profile  # role failed validation already
        if (info.data["role"] is None) == (profile is None):
            raise ValueError("must specify exactly one of ['role', 'instanceProfile']")
        return profile

    def alias(self) -> tuple[str, str] | None:
        """The alias term as (AMI family, version), e.g. ("AL2023", "latest"), or None."""
        for term in self.ami_selector_terms:
            if term.alias is not None:
                family, _, version = term.alias.partition("@")
                return ALIAS_FAMILIES[family], version
        return None

    def resolved_ami_family(self) -> str:
        """``amiFamily`` if set, else the alias's family (Custom if neither)."""
        if self.ami_family is not None:
            return self.ami_family
        alias = self.alias()
        return alias[0] if alias is not None else AMI_FAMILY_CUSTOM

    def root_volume_size(self) -> int | None:
        """The size in bytes of the volume holding the kubelet's ephemeral storage, if mapped.

        The ``rootVolume`` mapping's size; else, for Custom, the last mapping's; else the
        mapping of the family's root device. None means the AMI's own (callers use 20Gi).
        """
        mappings = [m for m in self.block_device_mappings if m.ebs is not None]
        if not mappings:
            return None
        root = next((m for m in mappings if m.root_volume), None)
        if root is not None and root.ebs is not None and root.ebs.volume_size is not None:
            return root.ebs.size_bytes()
        family = self.resolved_ami_family()
        if family == AMI_FAMILY_CUSTOM:
            last = mappings[-1].ebs
            return last.size_bytes() if last is not None else None
        device = _FAMILY_ROOT_DEVICE[family]
        for mapping in mappings:
            if mapping.device_name == device and mapping.ebs is not None:
                return mapping.ebs.size_bytes()
        return None


# Status


class SubnetStatus(KubeModel):
    """A subnet the selector terms resolved to."""

    id: str
    """The subnet id."""
    zone: str
    """Its availability zone."""
    zone_id: str | None = Field(default=None, alias="zoneID")
    """Its availability zone id."""


class SecurityGroupStatus(KubeModel):
    """A security group the selector terms resolved to."""

    id: str
    """The security group id."""
    name: str | None = None
    """Its group name."""


class AMIStatus(KubeModel):
    """An AMI the selector terms resolved to, and the instance types it is for."""

    id: str
    """The AMI id."""
    name: str | None = None
    """The AMI name."""
    deprecated: bool = False
    """Whether the AMI is deprecated."""
    requirements: Annotated[list[NodeSelectorRequirement], KubeSchema(list_type="atomic")]
    """Requirements an instance type must meet to launch with this AMI."""


class EC2NodeClassStatus(KubeModel):
    """What the selector terms resolved to, and whether the EC2NodeClass is ready."""

    subnets: list[SubnetStatus] = Field(default_factory=list)
    """The subnets instances may launch in."""
    security_groups: list[SecurityGroupStatus] = Field(default_factory=list)
    """The security groups of the instances."""
    amis: list[AMIStatus] = Field(default_factory=list)
    """The AMIs instances may launch with."""
    instance_profile: str | None = None
    """The instance profile of the instances (created for the role, or the one given)."""
    conditions: Conditions = Field(default_factory=list)
    """AMIsReady, SubnetsReady, SecurityGroupsReady, InstanceProfileReady,
    ValidationSucceeded, and Ready once all are True."""


class EC2NodeClass(KubeObject, ReadyByConditions):
    """How Karpenter launches EC2 instances, referenced by NodePools in
    spec.template.spec.nodeClassRef."""

    api_version: Literal["karpenter.k8s.aws/v1"] = "karpenter.k8s.aws/v1"
    kind: Literal["EC2NodeClass"] = "EC2NodeClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: EC2NodeClassSpec
    status: EC2NodeClassStatus = Field(default_factory=EC2NodeClassStatus)

    def alias(self) -> tuple[str, str] | None:
        """The alias term as (AMI family, version), e.g. ("AL2023", "latest"), or None."""
        return self.spec.alias()

    def resolved_ami_family(self) -> str:
        """``spec.amiFamily`` if set, else the alias's family (Custom if neither)."""
        return self.spec.resolved_ami_family()

    def root_volume_size(self) -> int | None:
        """Bytes of the volume holding the kubelet's ephemeral storage, if a mapping sets it."""
        return self.spec.root_volume_size()


# Drift hash

_UNHASHED = ("subnetSelectorTerms", "securityGroupSelectorTerms", "amiSelectorTerms", "amiFamily")


def nodeclass_hash(spec: EC2NodeClassSpec) -> str:
    """The drift hash of ``spec``: everything but the selector terms, with the resolved AMI family.

    Lists count as sets and None, "", [] and {} as unset, so reordering tags or block devices,
    or writing out a default the model fills in (metadataOptions, rootVolume), keeps the hash.
    ``false`` and ``0`` are values: ``cpuCFSQuota: false`` differs from leaving it unset.
    """
    fields = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    hashed = {key: value for key, value in fields.items() if key not in _UNHASHED}
    hashed["amiFamily"] = spec.resolved_ami_family()
    return spec_hash(hashed)


NODE_CLASS = NodeClassInfo(
    EC2NodeClass,
    GROUP,
    VERSION,
    KIND,
    PLURAL,
    [c.to_dict() for c in EC2NODECLASS_PRINTER_COLUMNS],
    SHORT_NAMES,
)
"""The EC2NodeClass kind as the provider's record lists it (its CRD: ``python -m
karpenter_core.sdk.crds aws``)."""
