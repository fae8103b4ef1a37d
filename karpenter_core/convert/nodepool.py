"""NodePools from older APIs: a v1alpha5 Provisioner to a v1beta1 NodePool, a v1beta1 NodePool to
a v1 NodePool, and checks of a v1 NodePool against what this project supports.

Where v1's defaults would change what the old object meant, the old meaning is written out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.cloudprovider.convert import Finding, describe, pop_field

__all__ = [
    "V1",
    "V1ALPHA5",
    "V1BETA1",
    "check_v1",
    "check_weights",
    "metadata",
    "provisioner_to_v1beta1",
    "seconds",
    "v1beta1_to_v1",
]

V1ALPHA5 = "karpenter.sh/v1alpha5"
V1BETA1 = "karpenter.sh/v1beta1"
V1 = "karpenter.sh/v1"

_DEFAULT_BUDGETS = [{"nodes": "10%"}]
_UNSUPPORTED_V1 = {
    "spec.replicas": (
        "static NodePools (a fixed node count) are not supported by this project: left out of "
        "the output, so this NodePool launches nodes for pending pods instead"
    ),
}
"""Upstream v1.x NodePool fields this project lacks, with what leaving them out means."""

RefConverter = Callable[[Mapping[str, Any]], "dict[str, str] | None"]


def seconds(value: int) -> str:
    """A whole number of seconds as a duration (``720h``, ``5m``, ``30s``)."""
    if value and value % 3600 == 0:
        return f"{value // 3600}h"
    if value and value % 60 == 0:
        return f"{value // 60}m"
    return f"{value}s"


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _ttl(spec: Mapping[str, Any], key: str, source: str, out: list[Finding]) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        out.append(
            Finding(source, f"spec.{key}", f"{value!r} is not a whole number of seconds: ignored")
        )
        return None
    return value


def provisioner_to_v1beta1(obj: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The v1beta1 NodePool for a v1alpha5 Provisioner (None when it cannot be converted), and
    what was decided on the way."""
    source = describe(obj)
    findings: list[Finding] = []
    spec = _mapping(obj.get("spec"))
    if spec.get("provider") is not None and spec.get("providerRef") is None:
        findings.append(
            Finding(
                source,
                "spec.provider",
                "inline provider settings cannot be converted: move them into a NodeClass "
                "(AWSNodeTemplate on AWS), reference it with spec.providerRef, convert again; "
                "this Provisioner is left out of the output",
            )
        )
        return None, findings
    template_spec: dict[str, Any] = {
        key: copy.deepcopy(spec[key]) for key in ("taints", "startupTaints") if spec.get(key)
    }
    template_spec["requirements"] = copy.deepcopy(spec.get("requirements") or [])
    if spec.get("providerRef") is not None:
        template_spec["nodeClassRef"] = copy.deepcopy(spec["providerRef"])
    if spec.get("kubeletConfiguration") is not None:
        template_spec["kubelet"] = copy.deepcopy(spec["kubeletConfiguration"])
    template_metadata = {
        key: copy.deepcopy(spec[key]) for key in ("labels", "annotations") if spec.get(key)
    }
    nodepool_spec: dict[str, Any] = {
        "template": {"metadata": template_metadata, "spec": template_spec}
        if template_metadata
        else {"spec": template_spec},
        "disruption": _v1alpha5_disruption(spec, source, findings),
    }
    limits = _mapping(spec.get("limits"))
    if limits:
        nodepool_spec["limits"] = copy.deepcopy(_mapping(limits.get("resources")))
        findings.append(
            Finding(source, "spec.limits.resources", "became spec.limits (same values)", "note")
        )
    if spec.get("weight") is not None:
        nodepool_spec["weight"] = spec["weight"]
    return {
        "apiVersion": V1BETA1,
        "kind": "NodePool",
        "metadata": metadata(obj),
        "spec": nodepool_spec,
    }, findings


def _v1alpha5_disruption(
    spec: Mapping[str, Any], source: str, findings: list[Finding]
) -> dict[str, Any]:
    consolidation = _mapping(spec.get("consolidation")).get("enabled") is True
    empty = _ttl(spec, "ttlSecondsAfterEmpty", source, findings)
    expire = _ttl(spec, "ttlSecondsUntilExpired", source, findings)
    disruption: dict[str, Any]
    if consolidation:
        disruption = {"consolidationPolicy": "WhenUnderutilized"}
        findings.append(
            Finding(
                source,
                "spec.consolidation.enabled",
                "became consolidationPolicy WhenEmptyOrUnderutilized with consolidateAfter 0s",
                "note",
            )
        )
        if empty is not None:
            findings.append(
                Finding(
                    source,
                    "spec.ttlSecondsAfterEmpty",
                    f"set together with spec.consolidation.enabled, a pair upstream refused; "
                    f"the output keeps consolidation (WhenEmptyOrUnderutilized, consolidateAfter "
                    f"0s: empty and underutilized nodes go at once) and drops "
                    f"ttlSecondsAfterEmpty {empty}; to wait before consolidating any node, set "
                    f"consolidateAfter: {seconds(empty)}",
                )
            )
    elif empty is not None:
        disruption = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": seconds(empty)}
        findings.append(
            Finding(
                source,
                "spec.ttlSecondsAfterEmpty",
                f"became consolidationPolicy WhenEmpty with consolidateAfter {seconds(empty)}",
                "note",
            )
        )
    else:
        disruption = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
        findings.append(
            Finding(
                source,
                "spec.consolidation",
                "neither consolidation nor ttlSecondsAfterEmpty is set, so nodes were never "
                "consolidated: written as consolidateAfter Never (v1's default, 0s with "
                "WhenEmptyOrUnderutilized, would consolidate them)",
                "note",
            )
        )
    if expire is None:
        disruption["expireAfter"] = "Never"
        findings.append(
            Finding(
                source,
                "spec.ttlSecondsUntilExpired",
                "not set, so nodes never expired: written as expireAfter Never (v1's default "
                "is 720h)",
                "note",
            )
        )
    else:
        disruption["expireAfter"] = seconds(expire)
    return disruption


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of metadata worth carrying to a new object (name, labels, annotations)."""
    metadata = _mapping(obj.get("metadata"))
    return {
        key: copy.deepcopy(metadata[key])
        for key in ("name", "labels", "annotations")
        if metadata.get(key)
    }


def v1beta1_to_v1(
    obj: Mapping[str, Any],
    source: str,
    node_class_ref: RefConverter,
    *,
    from_v1alpha5: bool = False,
) -> tuple[dict[str, Any], Mapping[str, Any] | None, list[Finding]]:
    """The v1 NodePool for a v1beta1 NodePool, the kubelet settings it carried (v1 moves them to
    the NodeClass), and what was decided. ``source`` names the input object in findings;
    ``node_class_ref`` turns an older reference into v1's (group, kind, name). For a NodePool
    made from a v1alpha5 Provisioner, notes on the v1beta1 fields it moved are left out (that
    step's notes name the Provisioner's fields)."""
    findings: list[Finding] = []
    notes = not from_v1alpha5
    spec = copy.deepcopy(_mapping(obj.get("spec")))
    template = _mapping(spec.get("template"))
    template_spec = _mapping(template.get("spec"))
    kubelet = template_spec.pop("kubelet", None)
    if kubelet is not None and not isinstance(kubelet, Mapping):
        findings.append(
            Finding(
                source,
                "spec.template.spec.kubelet",
                f"{kubelet!r} is not a map of kubelet settings: left out",
            )
        )
        kubelet = None
    template_spec.setdefault("requirements", [])
    if template_spec.pop("resources", None) is not None:
        findings.append(
            Finding(
                source,
                "spec.template.spec.resources",
                "v1 NodePools have no resources: left out (node sizes follow the pods)",
            )
        )
    ref = template_spec.get("nodeClassRef")
    if ref is not None and not isinstance(ref, Mapping):
        findings.append(
            Finding(
                source,
                "spec.template.spec.nodeClassRef",
                f"{ref!r} is not a reference (a map of group, kind and name): read as none",
            )
        )
    template_spec["nodeClassRef"] = _ref(_mapping(ref), source, node_class_ref, findings)
    disruption = _mapping(spec.get("disruption"))
    expire = disruption.pop("expireAfter", None)
    if expire is not None:
        template_spec["expireAfter"] = expire
    if expire is not None and notes:
        findings.append(
            Finding(
                source,
                "spec.disruption.expireAfter",
                "moved to spec.template.spec.expireAfter",
                "note",
            )
        )
    policy = disruption.get("consolidationPolicy", "WhenUnderutilized")
    if policy == "WhenUnderutilized":
        disruption["consolidationPolicy"] = "WhenEmptyOrUnderutilized"
        disruption.setdefault("consolidateAfter", "0s")
        if notes:
            findings.append(
                Finding(
                    source,
                    "spec.disruption.consolidationPolicy",
                    "WhenUnderutilized became WhenEmptyOrUnderutilized with consolidateAfter 0s "
                    "(consolidate as soon as a move saves)",
                    "note",
                )
            )
    elif "consolidateAfter" not in disruption:
        disruption["consolidateAfter"] = "0s"
        findings.append(
            Finding(
                source,
                "spec.disruption.consolidateAfter",
                f"not set with {policy}: written as 0s, v1's default",
                "note",
            )
        )
    if "budgets" not in disruption:
        disruption["budgets"] = copy.deepcopy(_DEFAULT_BUDGETS)
        findings.append(
            Finding(
                source,
                "spec.disruption.budgets",
                'not set: the default budget, nodes "10%", is written out',
                "note",
            )
        )
    spec["disruption"] = disruption
    template["spec"] = template_spec
    spec["template"] = template
    return (
        {"apiVersion": V1, "kind": "NodePool", "metadata": metadata(obj), "spec": spec},
        kubelet,
        findings,
    )


def _ref(
    ref: Mapping[str, Any],
    source: str,
    node_class_ref: RefConverter,
    findings: list[Finding],
) -> dict[str, Any]:
    converted = node_class_ref(ref)
    if converted is not None:
        # A reference without a name gets the provider's default NodeClass (convert_objects).
        if ref.get("name") and converted.get("kind") != ref.get("kind"):
            was = f"{ref['kind']} {ref['name']}" if ref.get("kind") else f"{ref['name']} (no kind)"
            findings.append(
                Finding(
                    source,
                    "spec.template.spec.nodeClassRef",
                    f"{was} became {converted['kind']} {converted['name']} "
                    f"(group {converted['group']})",
                    "note",
                )
            )
        return converted
    group = ref.get("group") or str(ref.get("apiVersion") or "").rpartition("/")[0]
    out = {"group": group, "kind": ref.get("kind"), "name": ref.get("name")}
    missing = [key for key, value in out.items() if not value]
    if not ref:
        findings.append(
            Finding(
                source,
                "spec.template.spec.nodeClassRef",
                "not set, and no installed provider converts NodeClasses: v1 needs a reference "
                "(group, kind, name): fill it in before applying",
            )
        )
    elif missing:
        findings.append(
            Finding(
                source,
                "spec.template.spec.nodeClassRef",
                f"v1 needs {', '.join(missing)} and no installed provider knows this "
                "reference's kind: fill them in before applying",
            )
        )
    return out


def check_v1(nodepool: dict[str, Any], source: str, unknown: Sequence[str]) -> list[Finding]:
    """Findings about a v1 NodePool: fields this project's NodePool lacks (``unknown``, paths
    from a schema check); each is removed from ``nodepool`` and reported, never dropped
    silently."""
    findings: list[Finding] = []
    for path in unknown:
        value = pop_field(nodepool, path)
        message = _UNSUPPORTED_V1.get(
            path, "a field this project's NodePool does not have: left out of the output"
        )
        findings.append(Finding(source, path, f"{value!r}: {message}"))
    return findings


def check_weights(nodepools: Sequence[tuple[str, Mapping[str, Any]]]) -> list[Finding]:
    """A warning for each weight that reads like a share of capacity: on a NodePool that allows
    several capacity types (``weight: 70`` for "70% spot"), or on NodePools whose weights add up
    to 100. ``nodepools`` are (source, v1 NodePool) pairs."""
    weighted: list[tuple[str, Mapping[str, Any], int]] = []
    for source, nodepool in nodepools:
        weight = _mapping(nodepool.get("spec")).get("weight")
        if isinstance(weight, int) and not isinstance(weight, bool):
            weighted.append((source, nodepool, weight))
    split = len(weighted) > 1 and sum(w for _, _, w in weighted) == 100
    return [
        Finding(
            source,
            "spec.weight",
            f"{weight} orders NodePools (the highest that can launch is used, the others only "
            f"when it cannot); it is not a share of capacity. For a ratio (say 70% spot) use two "
            f"NodePools that each set a custom label to a few values in that ratio, and a "
            f"topologySpreadConstraint on that label in the workloads",
        )
        for source, nodepool, weight in weighted
        if split or len(_capacity_types(nodepool)) != 1
    ]


def _capacity_types(nodepool: Mapping[str, Any]) -> set[str]:
    """The capacity types a NodePool's requirements allow by ``In`` ("" for any)."""
    spec = _mapping(_mapping(_mapping(nodepool.get("spec")).get("template")).get("spec"))
    requirements = spec.get("requirements")
    for requirement in requirements if isinstance(requirements, list) else []:
        requirement = _mapping(requirement)
        values = requirement.get("values")
        if requirement.get("key") == wk.CAPACITY_TYPE and requirement.get("operator") == "In":
            return {str(value) for value in values} if isinstance(values, list) else set()
    return {""}
