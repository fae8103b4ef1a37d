"""From documents to the scheduler's ``Snapshot``: decode, validate and sort objects by kind."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.types import CloudProvider, InstanceType
from karpenter_core.cloudprovider.validation import instance_types_of
from karpenter_core.manifests.errors import ManifestError
from karpenter_core.manifests.fields import Schema, core_schema, model_schema, unknown_fields
from karpenter_core.manifests.loader import Document
from karpenter_core.manifests.validation import (
    check_budget_schedules,
    check_node,
    check_quantities,
    check_requirements,
    from_validation_error,
    is_pattern,
    mapping,
)
from karpenter_core.manifests.workloads import POD_KINDS, collect_pods
from karpenter_core.scheduling.cluster import (
    check_budget,
    not_launchable,
    paired,
    rescheduled_pods,
    with_expected_allocatable,
    with_nodeclaim,
)
from karpenter_core.scheduling.snapshot import DecodeError, NodeInfo, Snapshot

__all__ = ["SimulationInput", "build_snapshot"]

_RAW_KINDS = {
    "PodDisruptionBudget": "pdbs",
    "PersistentVolume": "persistent_volumes",
    "PersistentVolumeClaim": "persistent_volume_claims",
    "StorageClass": "storage_classes",
}
"""Kinds the snapshot keeps as plain dicts, and the Snapshot field for each."""

_ELSEWHERE = POD_KINDS | {"NodePool"}
"""Kinds read in their own pass (NodePools first, pods last)."""

_USED_KINDS = _ELSEWHERE | {"NodeClaim", "Node", *_RAW_KINDS}

_MODELS: Mapping[str, type[BaseModel]] = {"NodePool": NodePool, "NodeClaim": NodeClaim}

_Model = TypeVar("_Model", bound=BaseModel)


@dataclass(slots=True)
class SimulationInput:
    """What a set of manifests gives the simulation."""

    snapshot: Snapshot
    notes: list[str] = field(default_factory=list)
    """What was skipped or assumed, and why."""
    warnings: list[str] = field(default_factory=list)
    """Fields no schema of their kind has (``NodePool default: unknown field spec.x``)."""
    unserved: dict[str, str] = field(default_factory=dict)
    """NodePools left out because they launch nothing (the provider does not serve their
    NodeClass; they are being deleted or not Ready): the reason, by NodePool name."""


def build_snapshot(
    documents: Sequence[Document],
    provider: CloudProvider,
    *,
    strict: bool = False,
    node_class_view: MutableMapping[tuple[str, str], Any] | None = None,
) -> SimulationInput:
    """The snapshot the documents describe, with notes on what was skipped and why.

    Instance types come from ``provider.get_instance_types`` per NodePool; NodeClasses are the
    kinds ``provider.supported_node_classes()`` lists. Before the provider is asked for instance
    types, the validated NodeClasses go into ``node_class_view`` by (kind, name): the mapping
    behind the provider's ``ProviderContext.node_classes`` read view.
    A NodePool whose NodeClass kind the provider does not list, or that is being deleted or not
    Ready, is left out (``unserved``). Nodes are paired with their NodeClaims, and the pods of
    nodes being deleted that are to be evicted are pending again, as the controller sees them
    (``karpenter_core.scheduling.cluster``).
    Fields an object's kind does not have are warnings, or with ``strict`` a ``ManifestError``.
    Raises ``ManifestError`` for a bad object.
    """
    node_classes = {_kind_of(model): model for model in provider.supported_node_classes()}
    read = [d for d in documents if d.kind in _USED_KINDS or d.kind in node_classes]
    _check_names(read)
    built = SimulationInput(Snapshot(), warnings=_unknown_fields(read, node_classes, strict))
    snapshot, notes = built.snapshot, built.notes
    given_node_classes = {
        (doc.kind, doc.name): _validated(doc, node_classes[doc.kind])
        for doc in documents
        if doc.kind in node_classes
    }
    snapshot.nodeclasses = list(given_node_classes.values())
    if node_class_view is not None:
        node_class_view.update(given_node_classes)
    nodepool_docs = [d for d in documents if d.kind == "NodePool"]
    catalog = _nodepools(nodepool_docs, provider, node_classes, built)
    given = {(d.kind, d.name) for d in documents if d.kind in node_classes}
    for nodepool in snapshot.nodepools:
        ref = nodepool.spec.template.spec.node_class_ref
        if (ref.kind, ref.name) not in given:
            notes.append(
                f"NodePool {nodepool.metadata.name} references {ref.kind} {ref.name}, which is "
                "not in the input; assuming its defaults"
            )
    nodes: dict[str, NodeInfo] = {}
    for doc in documents:
        if doc.kind in _ELSEWHERE:
            continue
        if doc.kind == "Node":
            node = _decode(doc, _node)
            nodes[node.name] = node
        elif doc.kind == "NodeClaim":
            snapshot.nodeclaims.append(_validated(doc, NodeClaim))
        elif doc.kind in node_classes:
            continue
        elif doc.kind in _RAW_KINDS:
            if doc.kind == "PodDisruptionBudget":
                _decode(doc, lambda d: check_budget(d.obj))
            getattr(snapshot, _RAW_KINDS[doc.kind]).append(doc.obj)
        elif doc.kind.endswith("NodeClass"):
            notes.append(
                f"skipped {doc.describe()}: not a NodeClass of the {provider.name} provider "
                f"(it reads {', '.join(sorted(node_classes)) or 'none'})"
            )
        else:
            notes.append(f"skipped {doc.describe()}: not used by the simulation")
    notes.extend(_pair(nodes, snapshot.nodeclaims))
    snapshot.nodeclaims = with_expected_allocatable(
        snapshot.nodeclaims, {it.name: it for it in catalog}
    )
    claims = frozenset(
        (d.namespace, d.kind, d.name) for d in documents if d.kind == "PersistentVolumeClaim"
    )
    pods = collect_pods(documents, catalog, claims)
    notes.extend(pods.notes)
    snapshot.pending = pods.pending
    snapshot.daemonsets = pods.daemonsets
    snapshot.persistent_volume_claims.extend(pods.claims)
    for pod in pods.bound:
        bound_to = nodes.get(pod.node_name or "")
        if bound_to is None:
            notes.append(
                f"skipped Pod {pod.key}: bound to node {pod.node_name}, which is not in the input"
            )
        else:
            bound_to.pods.append(pod)
    snapshot.nodes = list(nodes.values())
    _reschedule(snapshot, notes)
    return built


def _pair(nodes: Mapping[str, NodeInfo], nodeclaims: Sequence[NodeClaim]) -> list[str]:
    """Each Node seen with its NodeClaim (``cluster.paired``), as the controller sees it:
    launching until initialized, and being deleted while its NodeClaim is
    (``cluster.with_nodeclaim``). When the input holds NodeClaims, a Node labelled with a
    NodePool without one is not Karpenter's (a note says so); when it holds none (``kubectl get
    nodes`` without ``nodeclaims``), the input cannot tell, and such Nodes are taken as
    launched by Karpenter."""
    if not nodeclaims:
        return []
    pairs = paired(nodes.values(), nodeclaims)
    notes = []
    for name, node in nodes.items():
        with_nodeclaim(node, pairs.get(name))
        if node.unclaimed:
            notes.append(
                f"Node {name} is labelled {wk.NODEPOOL}={node.nodepool} but no NodeClaim in "
                "the input is its own: not launched by Karpenter, so never disrupted"
            )
    return notes


def _reschedule(snapshot: Snapshot, notes: list[str]) -> None:
    """The pods of nodes being deleted that are to be evicted move to the pending pods, as
    the controller provisions for them (``cluster.rescheduled_pods``)."""
    moving = rescheduled_pods(snapshot, time.time())
    if not moving:
        return
    keys = {pod.key for pod in moving}
    for node in snapshot.nodes:
        if not node.marked_for_deletion:
            continue
        kept = [pod for pod in node.pods if pod.key not in keys]
        if len(kept) < len(node.pods):
            notes.append(
                f"Node {node.name} is being deleted: {len(node.pods) - len(kept)} of its pods "
                "are scheduled again"
            )
            node.pods = kept
    snapshot.pending.extend(moving)


def _unknown_fields(
    documents: Iterable[Document], node_classes: Mapping[str, type[BaseModel]], strict: bool
) -> list[str]:
    """One warning per field an object's kind lacks; with ``strict``, an error naming the first
    object that has any, its fields, and the other objects that have some."""
    warnings: list[str] = []
    found: list[tuple[Document, list[str]]] = []
    for doc in documents:
        schema = _schema(doc, node_classes)
        paths = unknown_fields(doc.obj, schema) if schema is not None else []
        if paths:
            found.append((doc, paths))
        warnings.extend(f"{doc.describe()}: unknown field {path}" for path in paths)
    if strict and found:
        (doc, paths), others = found[0], [other.describe() for other, _ in found[1:]]
        message = f"unknown field{'s' if len(paths) > 1 else ''} {', '.join(paths)}"
        if others:
            message += f"; other objects with unknown fields: {', '.join(others)}"
        raise doc.error("", message)
    return warnings


def _schema(doc: Document, node_classes: Mapping[str, type[BaseModel]]) -> Schema | None:
    model = _MODELS.get(doc.kind) or node_classes.get(doc.kind)
    if model is not None:
        return model_schema(model)
    api_version = doc.obj.get("apiVersion")
    return core_schema(api_version if isinstance(api_version, str) else "v1", doc.kind)


def _nodepools(
    docs: Sequence[Document],
    provider: CloudProvider,
    node_classes: Mapping[str, type[BaseModel]],
    built: SimulationInput,
) -> list[InstanceType]:
    """Validate the NodePools into the snapshot with their instance types; return all of those.

    Requirements and limits are checked before pydantic's errors are raised, so their more
    specific messages win. A hint for an instance-type wildcard reads the catalog, so each
    NodePool's catalog is fetched first, for the NodePool without its wildcard requirements.
    A NodePool whose NodeClass the provider does not serve, or that launches nothing now
    (``cluster.not_launchable``), goes to ``built.unserved`` instead.
    """
    invalid: tuple[Document, ValidationError] | None = None
    catalog: list[InstanceType] = []
    for doc in docs:
        try:
            nodepool = NodePool.from_manifest(_without_wildcards(doc.obj))
        except ValidationError as err:
            invalid = invalid or (doc, err)
            continue
        ref = nodepool.spec.template.spec.node_class_ref
        model = node_classes.get(ref.kind)
        if model is None or _group_of(model) not in ("", ref.group):
            built.unserved[doc.name] = (
                f"NodePool {doc.name} uses {ref.kind} (group {ref.group}), which provider "
                f"{provider.name} does not serve"
            )
            continue
        reason = not_launchable(nodepool)
        if reason is not None:
            built.unserved[doc.name] = f"NodePool {doc.name} launches nothing: {reason}"
            built.notes.append(built.unserved[doc.name])
            continue
        built.snapshot.nodepools.append(nodepool)
        instance_types = instance_types_of(provider, nodepool)
        built.snapshot.instance_types[doc.name] = instance_types
        catalog.extend(instance_types)
    for doc in docs:
        _decode(doc, lambda d: _check_nodepool(d.obj, catalog))
    if invalid is not None:
        raise _invalid(*invalid)
    return catalog


def _without_wildcards(obj: dict[str, Any]) -> dict[str, Any]:
    """The NodePool manifest without instance-type requirements that hold a wildcard."""
    try:
        requirements = obj["spec"]["template"]["spec"]["requirements"]
    except (KeyError, TypeError):
        return obj
    if not isinstance(requirements, list):
        return obj  # a wrong type is reported by the checks that follow
    kept = [r for r in requirements if not _is_wildcard(r)]
    if len(kept) == len(requirements):
        return obj
    spec = obj["spec"]
    template = spec["template"]
    return {
        **obj,
        "spec": {
            **spec,
            "template": {**template, "spec": {**template["spec"], "requirements": kept}},
        },
    }


def _is_wildcard(requirement: Any) -> bool:
    if not isinstance(requirement, dict):
        return False
    key, values = requirement.get("key"), requirement.get("values")
    return (
        isinstance(key, str)
        and wk.NORMALIZED_LABELS.get(key, key) == wk.INSTANCE_TYPE
        and isinstance(values, list)
        and any(isinstance(v, str) and is_pattern(v) for v in values)
    )


def _node(doc: Document) -> NodeInfo:
    check_node(doc.obj)
    return NodeInfo.from_manifest(doc.obj)


def _check_nodepool(obj: Mapping[str, Any], catalog: Sequence[InstanceType]) -> None:
    spec = mapping(obj.get("spec"), "spec")
    template = mapping(spec.get("template"), "spec.template")
    template_spec = mapping(template.get("spec"), "spec.template.spec")
    path = "spec.template.spec.requirements"
    check_requirements(template_spec.get("requirements"), path, catalog, min_values=True)
    check_quantities(spec.get("limits"), "spec.limits")
    check_budget_schedules(spec.get("disruption"), "spec.disruption")


def _kind_of(model: type[BaseModel]) -> str:
    """A model's ``kind`` field default (API objects declare it), else its class name."""
    field = model.model_fields.get("kind")
    default = field.default if field is not None else None
    return default if isinstance(default, str) and default else model.__name__


def _group_of(model: type[BaseModel]) -> str:
    """The API group of a model's ``apiVersion`` field default ("" when it declares none)."""
    declared = model.model_fields.get("api_version") or model.model_fields.get("apiVersion")
    default = declared.default if declared is not None else None
    return default.rpartition("/")[0] if isinstance(default, str) else ""


def _validated(doc: Document, model: type[_Model]) -> _Model:
    try:
        return model.model_validate(doc.obj)
    except ValidationError as err:
        raise _invalid(doc, err) from None


def _invalid(doc: Document, err: ValidationError) -> ManifestError:
    """The first of pydantic's errors about ``doc``, as a one-line ``ManifestError``."""
    converted = from_validation_error(err)
    return doc.error(converted.field, converted.message)


_T = TypeVar("_T")


def _decode(doc: Document, decode: Callable[[Document], _T]) -> _T:
    try:
        return decode(doc)
    except DecodeError as err:
        raise doc.error(err.field, err.message) from None


def _check_names(documents: Iterable[Document]) -> None:
    """Every object the simulation reads has a name, and no two objects share kind and name."""
    seen: dict[tuple[str, str, str], Document] = {}
    for doc in documents:
        if not doc.name:
            raise doc.error("metadata.name", "missing; every object needs a name")
        key = (doc.kind, doc.namespace, doc.name)
        first = seen.setdefault(key, doc)
        if first is not doc:
            raise doc.error(
                "metadata.name",
                f"{doc.describe()} is defined twice (first in {first.source}, "
                f"document {first.index + 1})",
            )
