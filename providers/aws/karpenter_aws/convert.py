"""``karpenter convert`` for AWS: AWSNodeTemplate (v1alpha1) and v1beta1 EC2NodeClass to the v1
EC2NodeClass, and checks of the NodePools that use them.

AWSNodeTemplate goes to v1beta1 as upstream's karpenter-convert did, then to v1 as upstream's v1
migration does: the AMI family becomes an alias term, kubelet settings arrive from the NodePools,
and defaults v1 changed (the IMDS hop limit) are written out.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from karpenter_aws.labels import (
    GROUP,
    LABEL_INSTANCE_CATEGORY,
    LABEL_INSTANCE_FAMILY,
    LABEL_INSTANCE_GENERATION,
)
from karpenter_aws.nodeclass import ALIAS_FAMILIES, AMI_FAMILY_AL2, KIND, VERSION, EC2NodeClass
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.convert import (
    Converted,
    Finding,
    NodeClassVariant,
    describe,
    metadata,
    model_schema,
    pop_field,
    unknown_fields,
)

__all__ = ["CLUSTER_PLACEHOLDER", "ROLE_PLACEHOLDER", "AWSConverter"]

V1ALPHA1 = f"{GROUP}/v1alpha1"
V1BETA1 = f"{GROUP}/v1beta1"
V1 = f"{GROUP}/{VERSION}"
OLD_KIND = "AWSNodeTemplate"
ROLE_PLACEHOLDER = "$KARPENTER_NODE_ROLE"
"""Written as the node role when the input names none (``envsubst`` replaces it)."""
CLUSTER_PLACEHOLDER = "${CLUSTER_NAME}"
"""Stands for the cluster's name in the default EC2NodeClass (``envsubst`` replaces it)."""
DEFAULT_NAME = "default"
DEFAULT_ALIAS = "al2023@latest"
DISCOVERY_TAG = "karpenter.sh/discovery"
OLD_HOP_LIMIT = 2
"""The IMDS hop limit v1alpha1 and v1beta1 defaulted to; v1 defaults to 1."""

_IDS = ("aws-ids", "aws::ids")
_FAMILY_WILDCARD = re.compile(r"^([a-z0-9-]+)\.\*$")
_V1BETA1_COPIED = (
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "amiSelectorTerms",
    "amiFamily",
    "userData",
    "role",
    "instanceProfile",
    "tags",
    "blockDeviceMappings",
    "instanceStorePolicy",
    "detailedMonitoring",
    "associatePublicIPAddress",
    "metadataOptions",
    "context",
)


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


class AWSConverter:
    """The AWS provider's ``NodeClassConverter``."""

    def handles(self, api_version: str, kind: str) -> bool:
        """AWSNodeTemplate v1alpha1 and EC2NodeClass v1beta1 and v1."""
        return (api_version, kind) in ((V1ALPHA1, OLD_KIND), (V1BETA1, KIND), (V1, KIND))

    def node_class_ref(self, ref: Mapping[str, Any]) -> dict[str, str] | None:
        """v1's reference for a providerRef (AWSNodeTemplate, the default kind) or a v1beta1
        nodeClassRef (EC2NodeClass, the default kind)."""
        kind = ref.get("kind")
        group = ref.get("group") or str(ref.get("apiVersion") or "").rpartition("/")[0]
        if kind not in (None, "", OLD_KIND, KIND) or group not in ("", GROUP):
            return None
        return {"group": GROUP, "kind": KIND, "name": str(ref.get("name") or "")}

    def convert(
        self, obj: Mapping[str, Any], variants: Sequence[NodeClassVariant]
    ) -> tuple[list[Converted], list[Finding]]:
        """The v1 EC2NodeClass of each variant."""
        source = describe(obj)
        findings: list[Finding] = []
        current = {**obj, "metadata": metadata(obj)}
        if obj.get("apiVersion") == V1ALPHA1:
            current = _v1alpha1_to_v1beta1(obj, source, findings)
        if current.get("apiVersion") == V1BETA1:
            current = _v1beta1_to_v1(current, source, findings)
        current.pop("status", None)
        for path in unknown_fields(current, model_schema(EC2NodeClass)):
            value = pop_field(current, path)
            findings.append(
                Finding(
                    source,
                    path,
                    f"{value!r}: a field this project's EC2NodeClass does not have "
                    "(capacity reservations and the like): left out of the output",
                )
            )
        name = str(_mapping(current.get("metadata")).get("name") or "")
        converted: list[Converted] = []
        for variant in variants or (NodeClassVariant(name, None),):
            out = copy.deepcopy(current)
            out["metadata"]["name"] = variant.name
            comments = []
            if variant.kubelet is not None:
                out["spec"]["kubelet"] = copy.deepcopy(dict(variant.kubelet))
                comments.append(
                    f"spec.kubelet: moved from NodePool(s) {', '.join(variant.nodepools)}"
                )
            if variant.name != name:
                comments.append(
                    f"a copy of {KIND} {name} for NodePool(s) {', '.join(variant.nodepools)}, "
                    "whose kubelet settings differ from the other NodePools using it"
                )
            converted.append(Converted(out, source, comments))
        return converted, findings

    def check_nodepool(self, nodepool: Mapping[str, Any], source: str) -> list[Finding]:
        """Capacity reservations, which this provider does not launch into."""
        spec = _mapping(nodepool.get("spec"))
        requirements = _mapping(_mapping(spec.get("template")).get("spec")).get("requirements")
        findings = []
        for index, requirement in enumerate(requirements if isinstance(requirements, list) else []):
            requirement = _mapping(requirement)
            values = requirement.get("values")
            if (
                isinstance(values, list)
                and requirement.get("key") == wk.CAPACITY_TYPE
                and requirement.get("operator") == "In"
                and wk.CAPACITY_TYPE_RESERVED in values
            ):
                findings.append(
                    Finding(
                        source,
                        f"spec.template.spec.requirements[{index}].values",
                        "reserved: this project's AWS provider does not launch into capacity "
                        "reservations, so only the other capacity types are used",
                    )
                )
        return findings

    def v1alpha5_defaults(self, nodepool: Mapping[str, Any]) -> list[tuple[dict[str, Any], str]]:
        """What upstream's v1alpha5 AWS webhook added to a Provisioner without them: on-demand
        capacity, amd64, and instance categories c, m, r of generation 3 or later unless
        instance types, families, categories or generations were required."""
        template = _mapping(_mapping(nodepool.get("spec")).get("template"))
        requirements = _mapping(template.get("spec")).get("requirements")
        keys = {
            wk.NORMALIZED_LABELS.get(str(r.get("key")), str(r.get("key")))
            for r in (requirements if isinstance(requirements, list) else [])
            if isinstance(r, Mapping)
        } | set(_mapping(_mapping(template.get("metadata")).get("labels")))
        defaults: list[tuple[dict[str, Any], str]] = []
        for key, operator, values, unless in (
            (wk.CAPACITY_TYPE, "In", [wk.CAPACITY_TYPE_ON_DEMAND], ()),
            (wk.ARCH, "In", [wk.ARCH_AMD64], ()),
            (LABEL_INSTANCE_CATEGORY, "In", ["c", "m", "r"], (LABEL_INSTANCE_FAMILY,)),
            (LABEL_INSTANCE_GENERATION, "Gt", ["2"], (LABEL_INSTANCE_FAMILY,)),
        ):
            if keys.isdisjoint({key, *unless, *((wk.INSTANCE_TYPE,) if unless else ())}):
                requirement = {"key": key, "operator": operator, "values": values}
                defaults.append(
                    (requirement, "the Provisioner did not set it and v1alpha5 defaulted to it")
                )
        return defaults

    def wildcard_replacement(self, requirement: Mapping[str, Any]) -> dict[str, Any] | None:
        """``node.kubernetes.io/instance-type In [m5.*, c5.*]`` means
        ``karpenter.k8s.aws/instance-family In [m5, c5]`` (``NotIn`` likewise)."""
        key = wk.NORMALIZED_LABELS.get(str(requirement.get("key")), requirement.get("key"))
        operator = requirement.get("operator")
        values = requirement.get("values") or []
        matches = [_FAMILY_WILDCARD.match(str(v)) for v in values]
        if key != wk.INSTANCE_TYPE or operator not in ("In", "NotIn"):
            return None
        if not values or not all(matches):
            return None
        families = list(dict.fromkeys(m[1] for m in matches if m))
        replacement = {"key": LABEL_INSTANCE_FAMILY, "operator": operator, "values": families}
        if requirement.get("minValues") is not None:
            replacement["minValues"] = requirement["minValues"]
        return replacement

    def default_node_class(self) -> tuple[dict[str, Any], list[str]]:
        """The EC2NodeClass ``default`` of Karpenter's getting-started guide: the node role and
        the discovery tags named after the cluster, left as ``${CLUSTER_NAME}``."""
        discovery = [{"tags": {DISCOVERY_TAG: CLUSTER_PLACEHOLDER}}]
        obj = {
            "apiVersion": V1,
            "kind": KIND,
            "metadata": {"name": DEFAULT_NAME},
            "spec": {
                "role": f"KarpenterNodeRole-{CLUSTER_PLACEHOLDER}",
                "amiSelectorTerms": [{"alias": DEFAULT_ALIAS}],
                "subnetSelectorTerms": copy.deepcopy(discovery),
                "securityGroupSelectorTerms": discovery,
            },
        }
        comments = [
            "as Karpenter's getting-started guide writes it: the node role "
            "KarpenterNodeRole-<cluster> (which the guide's CloudFormation stack and this "
            f"project's create), subnets and security groups tagged {DISCOVERY_TAG}: <cluster>",
            f"amiSelectorTerms {DEFAULT_ALIAS}: Amazon Linux 2023 (v1alpha5 launched AL2, which "
            "is end of life); @latest drifts every node to each new AMI release: pin a version "
            "(al2023@v20240807 and the like) to roll out AMIs when you choose",
        ]
        return obj, comments


def _selector_terms(selector: Mapping[str, Any]) -> list[dict[str, Any]]:
    """v1alpha1's tag map (``aws-ids`` / ``aws::ids`` listing ids) as v1beta1 selector terms."""
    terms: list[dict[str, Any]] = []
    tags = {k: str(v) for k, v in selector.items() if k not in _IDS}
    for key in _IDS:
        for id_ in str(selector.get(key) or "").split(","):
            if id_.strip():
                terms.append({"id": id_.strip()})
    if tags:
        terms.append({"tags": tags})
    return terms


def _ami_terms(selector: Mapping[str, Any]) -> list[dict[str, Any]]:
    """v1alpha1's amiSelector (``aws::ids``, ``aws::name``, ``aws::owners``, tags) as terms."""
    special = (*_IDS, "aws::name", "aws::owners")
    tags = {k: str(v) for k, v in selector.items() if k not in special}
    terms = [t for t in _selector_terms({k: selector[k] for k in _IDS if k in selector})]
    name = selector.get("aws::name")
    owners = [o.strip() for o in str(selector.get("aws::owners") or "").split(",") if o.strip()]
    if name is not None or owners or tags:
        base: dict[str, Any] = {}
        if name is not None:
            base["name"] = str(name)
        if tags:
            base["tags"] = tags
        terms.extend([{**base, "owner": owner} for owner in owners] or [base])
    return terms


def _v1alpha1_to_v1beta1(
    obj: Mapping[str, Any], source: str, findings: list[Finding]
) -> dict[str, Any]:
    old = _mapping(obj.get("spec"))
    spec: dict[str, Any] = {}
    for old_key, new_key, convert in (
        ("subnetSelector", "subnetSelectorTerms", _selector_terms),
        ("securityGroupSelector", "securityGroupSelectorTerms", _selector_terms),
        ("amiSelector", "amiSelectorTerms", _ami_terms),
    ):
        if old.get(old_key) is not None and not isinstance(old[old_key], Mapping):
            findings.append(
                Finding(
                    source,
                    f"spec.{old_key}",
                    f"expected a map of tags, got {old[old_key]!r}: not converted",
                )
            )
        elif old.get(old_key):
            spec[new_key] = convert(old[old_key])
            findings.append(Finding(source, f"spec.{old_key}", f"became spec.{new_key}", "note"))
    spec["amiFamily"] = old.get("amiFamily") or AMI_FAMILY_AL2
    for key in (
        "userData",
        "tags",
        "blockDeviceMappings",
        "detailedMonitoring",
        "metadataOptions",
        "context",
        "instanceProfile",
    ):
        if old.get(key) is not None:
            spec[key] = copy.deepcopy(old[key])
    if old.get("launchTemplate") is not None:
        findings.append(
            Finding(
                source,
                "spec.launchTemplate",
                f"{old['launchTemplate']!r}: launch templates of your own are not supported "
                "since v1beta1: left out; put their settings in the EC2NodeClass (userData, "
                "blockDeviceMappings, metadataOptions, amiSelectorTerms)",
            )
        )
    return {"apiVersion": V1BETA1, "kind": KIND, "metadata": metadata(obj), "spec": spec}


def _v1beta1_to_v1(obj: Mapping[str, Any], source: str, findings: list[Finding]) -> dict[str, Any]:
    old = _mapping(obj.get("spec"))
    spec = {k: copy.deepcopy(old[k]) for k in _V1BETA1_COPIED if old.get(k) is not None}
    spec.update({k: copy.deepcopy(v) for k, v in old.items() if k not in spec})
    family = spec.get("amiFamily")
    if not spec.get("amiSelectorTerms"):
        _alias(spec, str(family or AMI_FAMILY_AL2), source, findings)
    elif family is None:
        spec["amiFamily"] = AMI_FAMILY_AL2
        findings.append(
            Finding(
                source,
                "spec.amiFamily",
                "not set: written as AL2, v1beta1's default (v1 requires it with "
                "amiSelectorTerms that have no alias); Amazon Linux 2 is end of life: plan "
                "a move to AL2023",
            )
        )
    if spec.get("role") is None and spec.get("instanceProfile") is None:
        spec["role"] = ROLE_PLACEHOLDER
        findings.append(
            Finding(
                source,
                "spec.role",
                f"the input names no node role or instance profile (upstream read "
                f"aws.defaultInstanceProfile from its settings): written as {ROLE_PLACEHOLDER}; "
                "replace it with the node role's name before applying",
            )
        )
    options = _mapping(spec.get("metadataOptions"))
    if "httpPutResponseHopLimit" not in options:
        options["httpPutResponseHopLimit"] = OLD_HOP_LIMIT
        spec["metadataOptions"] = options
        findings.append(
            Finding(
                source,
                "spec.metadataOptions.httpPutResponseHopLimit",
                f"not set: written as {OLD_HOP_LIMIT}, the default before v1 (v1's default, 1, "
                "keeps pods without host networking from reaching the instance metadata)",
                "note",
            )
        )
    return {"apiVersion": V1, "kind": KIND, "metadata": metadata(obj), "spec": spec}


def _alias(spec: dict[str, Any], family: str, source: str, findings: list[Finding]) -> None:
    """amiFamily without amiSelectorTerms: v1 selects the family's AMIs with an alias term."""
    prefix = family.lower()
    if prefix not in ALIAS_FAMILIES:
        findings.append(
            Finding(
                source,
                "spec.amiFamily",
                f"{family} has no alias in v1 (families: "
                f"{', '.join(ALIAS_FAMILIES.values())}, or Custom with amiSelectorTerms): "
                "choose one before applying",
            )
        )
        return
    alias = f"{prefix}@latest"
    spec.pop("amiFamily", None)
    spec["amiSelectorTerms"] = [{"alias": alias}]
    message = (
        f"amiFamily {family} became amiSelectorTerms [{{alias: {alias}}}]; @latest drifts "
        f"every node to each new AMI release: pin a version ({prefix}@v20240807 and the "
        "like) to roll out AMIs when you choose"
    )
    if family == AMI_FAMILY_AL2:
        message += "; Amazon Linux 2 is end of life: plan a move to al2023"
    findings.append(Finding(source, "spec.amiSelectorTerms", message))
