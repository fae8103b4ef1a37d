"""Converting a set of manifests: NodePools first (they decide the kubelet settings each NodeClass
gets), then the providers' NodeClasses, with workloads checked for v1alpha5 names."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.convert import (
    Converted,
    Finding,
    NodeClassConverter,
    NodeClassVariant,
    describe,
)
from karpenter_core.convert.nodepool import (
    V1,
    V1ALPHA5,
    V1BETA1,
    check_v1,
    check_weights,
    metadata,
    provisioner_to_v1beta1,
    v1beta1_to_v1,
)
from karpenter_core.convert.workloads import check_workload
from karpenter_core.manifests.fields import model_schema, unknown_fields
from karpenter_core.manifests.validation import is_pattern

__all__ = ["Conversion", "convert_objects", "input_field", "needs_conversion"]

_LEFT_OUT = {
    (V1ALPHA5, "Machine"): "Machines are created by the controller, not applied: left out",
    (V1BETA1, "NodeClaim"): "NodeClaims are created by the controller, not applied: left out "
    "(karpenter simulate reads v1beta1 NodeClaims as existing capacity)",
    (V1, "NodeClaim"): "NodeClaims are created by the controller, not applied: left out",
    ("karpenter.sh/v1alpha1", "NodeOverlay"): "NodeOverlays are not supported by this project: "
    "left out, so instance types keep their catalog prices and capacity",
}
"""Karpenter kinds ``convert`` does not write out, and why."""


@dataclass(slots=True)
class Conversion:
    """The converted Karpenter objects, the objects passed through unchanged, and findings."""

    objects: list[Converted] = field(default_factory=list)
    others: list[int] = field(default_factory=list)
    """Positions in the input of the objects that are not Karpenter's (workloads, nodes): they
    are not converted."""
    findings: list[Finding] = field(default_factory=list)


@dataclass(slots=True)
class _Placeholder:
    """A provider's default NodeClass, written for the NodePools whose input named none."""

    obj: dict[str, Any]
    comments: list[str]
    """Why its values are what they are (the provider's)."""
    converter: NodeClassConverter
    pools: list[_Pool]
    fill: str
    """The placeholders to fill in (``${CLUSTER_NAME}``)."""


@dataclass(slots=True)
class _Pool:
    obj: dict[str, Any]
    source: str
    kubelet: Mapping[str, Any] | None
    converter: NodeClassConverter | None
    unnamed: bool = False
    """The input named no NodeClass (a Provisioner without ``providerRef``): the NodePool gets
    its provider's default one."""

    def add(self, result: Conversion, findings: Sequence[Finding]) -> None:
        """Add findings about the v1 NodePool, with the input's field paths."""
        for finding in findings:
            result.findings.append(
                replace(finding, field=input_field(finding.object, finding.field))
            )


def input_field(source: str, path: str) -> str:
    """The path in the input object ``source`` of a v1 NodePool field: a Provisioner (v1alpha5)
    kept the template's fields at the top of its spec."""
    if not source.startswith("Provisioner "):
        return path
    for new, old in (
        ("spec.template.spec.nodeClassRef", "spec.providerRef"),
        ("spec.template.spec.kubelet", "spec.kubeletConfiguration"),
        ("spec.template.spec.", "spec."),
        ("spec.template.metadata.", "spec."),
    ):
        if path.startswith(new):
            return old + path.removeprefix(new)
    return path


def needs_conversion(obj: Mapping[str, Any], converters: Sequence[NodeClassConverter]) -> bool:
    """Whether an object is of an older Karpenter API that ``convert_objects`` rewrites."""
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    if (api_version, kind) in ((V1ALPHA5, "Provisioner"), (V1BETA1, "NodePool")):
        return True
    if (api_version, kind) == (V1BETA1, "NodeClaim"):
        return True
    return any(c.handles(api_version, kind) for c in converters) and not api_version.endswith("/v1")


def convert_objects(
    objs: Sequence[Mapping[str, Any]],
    converters: Sequence[NodeClassConverter],
    *,
    simulation: bool = False,
) -> Conversion:
    """Convert ``objs`` to v1 NodePools and NodeClasses (pure).

    With ``simulation``, v1beta1 NodeClaims are converted too (as existing capacity), and v1
    objects are passed through (``others``) for the simulation to check as it checks any input,
    but a v1 NodeClass that receives kubelet settings from an older NodePool. An
    instance-type wildcard (``m5.*``), which matches nothing and which v1 refuses as a label
    value, is replaced by the provider's requirement for what it meant, with a warning. A
    NodePool whose input named no NodeClass (a Provisioner without ``providerRef``) references
    its provider's default one, written out with placeholders unless the input has one of that
    name, with a warning.
    """
    result = Conversion()
    pools: list[_Pool] = []
    node_classes: list[tuple[int, Mapping[str, Any], NodeClassConverter]] = []
    for position, obj in enumerate(objs):
        api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
        converter = next((c for c in converters if c.handles(api_version, kind)), None)
        karpenter = converter is not None or api_version.startswith("karpenter.")
        if karpenter and not (obj.get("metadata") or {}).get("name"):
            result.findings.append(
                Finding(
                    describe(obj), "metadata.name", "missing; every object needs a name: left out"
                )
            )
            continue
        if simulation and (api_version, kind) == (V1, "NodePool"):
            result.others.append(position)  # the simulation checks it as it checks any input
        elif (api_version, kind) in (
            (V1ALPHA5, "Provisioner"),
            (V1BETA1, "NodePool"),
            (V1, "NodePool"),
        ):
            pool = _nodepool(obj, converters, result)
            if pool is not None:
                pools.append(pool)
        elif converter is not None:
            node_classes.append((position, obj, converter))
        elif simulation and (api_version, kind) in ((V1BETA1, "NodeClaim"), (V1, "NodeClaim")):
            result.objects.append(_nodeclaim(obj, converters, result))
        elif (api_version, kind) in _LEFT_OUT:
            result.findings.append(Finding(describe(obj), "", _LEFT_OUT[(api_version, kind)]))
        elif api_version.partition("/")[0].startswith("karpenter."):
            result.findings.append(
                Finding(
                    describe(obj),
                    "apiVersion",
                    f"{api_version} {kind} is not a kind any installed provider converts: left out",
                )
            )
        else:
            result.findings.extend(check_workload(obj))
            result.others.append(position)
    placeholders = _default_node_classes(pools, node_classes, result)
    given = {(id(c), _name(obj)) for _, obj, c in node_classes} | {
        (id(p.converter), _name(p.obj)) for p in placeholders
    }
    variants = _variants(pools, given, result)
    for position, obj, converter in node_classes:
        name = str((obj.get("metadata") or {}).get("name") or "")
        wanted = variants.get((id(converter), name), ())
        if (
            simulation
            and not needs_conversion(obj, converters)
            and not any(variant.kubelet for variant in wanted)
        ):
            result.others.append(position)
            continue
        converted, findings = converter.convert(obj, wanted)
        result.objects.extend(converted)
        result.findings.extend(findings)
    for placeholder in placeholders:
        _write_placeholder(placeholder, variants, pools, result)
    for pool in pools:
        _finish(pool, result)
    by_source = {pool.source: pool for pool in pools}
    for finding in check_weights([(pool.source, pool.obj) for pool in pools]):
        by_source[finding.object].add(result, [finding])
    order = {describe(obj): position for position, obj in reversed(list(enumerate(objs)))}
    result.objects.sort(key=lambda converted: order.get(converted.source, len(objs)))
    return result


def _nodepool(
    obj: Mapping[str, Any], converters: Sequence[NodeClassConverter], result: Conversion
) -> _Pool | None:
    source = describe(obj)
    api_version = obj.get("apiVersion")
    current: Mapping[str, Any] | None = obj
    kubelet: Mapping[str, Any] | None = None
    moved: list[Finding] = []
    if api_version == V1ALPHA5:
        current, findings = provisioner_to_v1beta1(obj)
        result.findings.extend(findings)
    if current is not None and current.get("apiVersion") == V1BETA1:
        current, kubelet, moved = v1beta1_to_v1(
            current, source, _ref_converter(converters), from_v1alpha5=api_version == V1ALPHA5
        )
    if current is None:
        return None
    nodepool = copy.deepcopy(dict(current))
    nodepool.pop("status", None)
    nodepool["metadata"] = metadata(nodepool)
    unknown = unknown_fields(nodepool, model_schema(NodePool))
    ref = _node_class_ref(nodepool)
    converter = next(
        (c for c in converters if c.node_class_ref(ref) is not None and ref.get("group")), None
    )
    unnamed = api_version != V1 and not ref.get("name")
    pool = _Pool(nodepool, source, kubelet, converter, unnamed=unnamed)
    requirements = _template_spec(nodepool).get("requirements")
    # requirements that are not a list are left to the output's validation to report
    if api_version == V1ALPHA5 and converter is not None and isinstance(requirements, list):
        for requirement, why in converter.v1alpha5_defaults(nodepool):
            requirements.append(requirement)
            values = ", ".join(requirement.get("values") or ())
            moved.append(
                Finding(
                    source,
                    "spec.template.spec.requirements",
                    f"{requirement['key']} {requirement['operator']} [{values}] written out: {why}",
                    "note",
                )
            )
    pool.add(result, [*moved, *check_v1(nodepool, source, unknown)])
    return pool


def _ref_converter(converters: Sequence[NodeClassConverter]) -> Any:
    def convert(ref: Mapping[str, Any]) -> dict[str, str] | None:
        for converter in converters:
            converted = converter.node_class_ref(ref)
            if converted is not None:
                return converted
        return None

    return convert


def _template_spec(nodepool: Mapping[str, Any]) -> dict[str, Any]:
    """``spec.template.spec``, or an empty map when a field on the way is not a map."""
    value: Any = nodepool
    for key in ("spec", "template", "spec"):
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _node_class_ref(nodepool: Mapping[str, Any]) -> Mapping[str, Any]:
    """``spec.template.spec.nodeClassRef``, or an empty map when it is not one (the output's
    validation reports a reference of another type)."""
    ref = _template_spec(nodepool).get("nodeClassRef")
    return ref if isinstance(ref, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


_PLACEHOLDER = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def _default_node_classes(
    pools: Sequence[_Pool],
    node_classes: Sequence[tuple[int, Mapping[str, Any], NodeClassConverter]],
    result: Conversion,
) -> list[_Placeholder]:
    """Point each NodePool whose input named no NodeClass at its provider's default NodeClass
    (one per provider, however many NodePools need it): the input's NodeClass of that name
    when there is one, else a placeholder to be written out."""
    unnamed: dict[int, tuple[NodeClassConverter, list[_Pool]]] = {}
    for pool in pools:
        if pool.unnamed and pool.converter is not None:
            unnamed.setdefault(id(pool.converter), (pool.converter, []))[1].append(pool)
    placeholders: list[_Placeholder] = []
    for converter, members in unnamed.values():
        obj, comments = converter.default_node_class()
        name, kind = _name(obj), str(obj.get("kind"))
        existing = next(
            (o for _, o, c in node_classes if c is converter and _name(o) == name), None
        )
        if existing is None:
            fill = ", ".join(dict.fromkeys(_PLACEHOLDER.findall(json.dumps(obj))))
            message = (
                f"names no NodeClass, and a v1 NodePool needs one: the output references {kind} "
                f"{name}, written out with placeholders to fill in before applying ({fill}); "
                f"if the cluster already has {kind} {name}, leave the written one out"
            )
            placeholders.append(_Placeholder(obj, comments, converter, members, fill))
        else:
            message = (
                f"names no NodeClass, and a v1 NodePool needs one: the output references {kind} "
                f"{name}, which the input's {describe(existing)} becomes; check that it suits "
                "this NodePool"
            )
        for pool in members:
            _template_spec(pool.obj)["nodeClassRef"]["name"] = name
            pool.add(result, [Finding(pool.source, "spec.template.spec.nodeClassRef", message)])
    return placeholders


def _write_placeholder(
    placeholder: _Placeholder,
    variants: Mapping[tuple[int, str], Sequence[NodeClassVariant]],
    pools: Sequence[_Pool],
    result: Conversion,
) -> None:
    """Add a default NodeClass (each of its kubelet variants) to the result, each written for
    (and placed with) the input objects whose NodePools reference it: those that named no
    NodeClass first, then any that named this one (the input does not have it)."""
    name, kind = _name(placeholder.obj), placeholder.obj.get("kind")
    converted, findings = placeholder.converter.convert(
        placeholder.obj, variants.get((id(placeholder.converter), name), ())
    )
    for item in converted:
        variant = _name(item.obj)
        users = [
            pool
            for pool in pools
            if pool.converter is placeholder.converter
            and _node_class_ref(pool.obj).get("name") == variant
        ]
        unnamed = [pool.source for pool in users if pool.unnamed]
        named = [pool.source for pool in users if not pool.unnamed]
        written = []
        if unnamed:
            names = "names" if len(unnamed) == 1 else "name"
            written.append(f"{', '.join(unnamed)}, which {names} no NodeClass")
        if named:
            written.append(f"{', '.join(named)}, which reference{'s' * (len(named) == 1)} it")
        item.source = (unnamed + named)[0]
        item.placeholder = True
        item.comments = [
            f"written for {' and '.join(written)}: fill in "
            f"{placeholder.fill} before applying (envsubst does, from the environment); if the "
            f"cluster already has {kind} {name}, leave this one out",
            *placeholder.comments,
            *item.comments,
        ]
    result.objects.extend(converted)
    result.findings.extend(findings)


def _variants(
    pools: Sequence[_Pool],
    given: Set[tuple[int, str]],
    result: Conversion,
) -> dict[tuple[int, str], list[NodeClassVariant]]:
    """Per (converter, NodeClass name): one variant per distinct kubelet among the NodePools
    that reference it, the first keeping the name; NodePools are pointed at their variant.
    ``given`` are the NodeClasses to be written, as (id of converter, name)."""
    groups: dict[tuple[int, str], dict[str, list[_Pool]]] = {}
    for pool in pools:
        ref = _node_class_ref(pool.obj)
        key = (id(pool.converter), str(ref.get("name") or ""))
        if pool.converter is None or key not in given:
            if pool.kubelet:
                result.findings.append(
                    Finding(
                        pool.source,
                        "kubelet",
                        f"v1 reads kubelet settings from the NodeClass ({ref.get('kind')} "
                        f"{ref.get('name')}), which is not in the input: add "
                        f"{json.dumps(pool.kubelet, sort_keys=True)} as its spec.kubelet",
                    )
                )
            continue
        signature = json.dumps(pool.kubelet, sort_keys=True)
        groups.setdefault(key, {}).setdefault(signature, []).append(pool)
    variants: dict[tuple[int, str], list[NodeClassVariant]] = {}
    for (converter, name), by_kubelet in groups.items():
        for index, members in enumerate(by_kubelet.values()):
            first = members[0]
            variant_name = name if index == 0 else f"{name}-{first.obj['metadata']['name']}"
            nodepools = tuple(p.obj["metadata"]["name"] for p in members)
            variants.setdefault((converter, name), []).append(
                NodeClassVariant(variant_name, first.kubelet, nodepools)
            )
            for pool in members:
                if variant_name != name:
                    _template_spec(pool.obj)["nodeClassRef"]["name"] = variant_name
                    pool.add(
                        result,
                        [
                            Finding(
                                pool.source,
                                "spec.template.spec.nodeClassRef.name",
                                f"{name} is shared by NodePools with different kubelet settings, "
                                f"which v1 keeps on the NodeClass: this NodePool uses its copy "
                                f"{variant_name}",
                            )
                        ],
                    )
    return variants


def _finish(pool: _Pool, result: Conversion) -> None:
    """Check the NodePool's requirements with its provider, replace instance-type wildcards,
    and add the NodePool to the result."""
    converter = pool.converter
    if converter is not None:
        pool.add(result, converter.check_nodepool(pool.obj, pool.source))
    requirements = _template_spec(pool.obj).get("requirements")
    if not isinstance(requirements, list):
        requirements = []
    for index, requirement in enumerate(requirements):
        if not isinstance(requirement, dict):
            continue
        operator = requirement.get("operator")
        if operator not in ("In", "NotIn"):
            continue
        values = requirement.get("values")
        if not isinstance(values, list):
            continue
        patterns = [v for v in values if isinstance(v, str) and is_pattern(v)]
        if not patterns:
            continue
        replacement = converter.wildcard_replacement(requirement) if converter else None
        does = "matches" if operator == "In" else "excludes"
        literal = (
            f"{', '.join(patterns)}: values are literal, so a wildcard {does} nothing, and v1 "
            "refuses it as a label value: "
        )
        if replacement is None:
            what = "instance types" if _is_instance_type(requirement) else "values it meant"
            message = literal + f"list the {what} instead"
        else:
            requirements[index] = replacement
            message = literal + (
                f"the output requires {replacement['key']} {replacement['operator']} "
                f"[{', '.join(replacement['values'])}] instead, which selects what it meant"
            )
        pool.add(
            result,
            [Finding(pool.source, f"spec.template.spec.requirements[{index}].values", message)],
        )
    result.objects.append(Converted(pool.obj, pool.source))


def _is_instance_type(requirement: Mapping[str, Any]) -> bool:
    key = str(requirement.get("key"))
    return wk.NORMALIZED_LABELS.get(key, key) == wk.INSTANCE_TYPE


def _nodeclaim(
    obj: Mapping[str, Any], converters: Sequence[NodeClassConverter], result: Conversion
) -> Converted:
    """A v1 NodeClaim for simulation: existing capacity, with v1's nodeClassRef."""
    source = describe(obj)
    claim = copy.deepcopy(dict(obj))
    claim["apiVersion"] = V1
    spec = claim.get("spec")
    if not isinstance(spec, dict):  # the simulation's reading of the claim reports it
        return Converted(claim, source)
    if spec.pop("kubelet", None) is not None:
        result.findings.append(
            Finding(source, "spec.kubelet", "v1 NodeClaims have no kubelet: left out", "note")
        )
    ref = spec.get("nodeClassRef")
    converted = _ref_converter(converters)(ref) if isinstance(ref, Mapping) else None
    if converted is not None:
        spec["nodeClassRef"] = converted
    return Converted(claim, source)
