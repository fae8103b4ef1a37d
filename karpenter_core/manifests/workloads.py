"""Pods from manifests: plain Pods, and the pods Deployments, ReplicaSets, StatefulSets and Jobs
would create; DaemonSets become the pods every new node runs (their newest pod in the input, if
any, else their template: ``cluster.daemonset_pods``).

Objects whose pods are already in the input (a ``kubectl get all -o yaml`` dump holds the
Deployment, its ReplicaSet and its Pods) are not expanded a second time.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from karpenter_core.cloudprovider.types import InstanceType
from karpenter_core.manifests.loader import Document
from karpenter_core.manifests.validation import (
    check_pod_metadata,
    check_pod_spec,
    mapping,
    sequence,
)
from karpenter_core.scheduling.cluster import daemonset_pods
from karpenter_core.scheduling.snapshot import DecodeError, PodInfo

__all__ = ["MAX_PODS", "POD_KINDS", "WORKLOAD_KINDS", "Pods", "collect_pods"]

WORKLOAD_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "Job"})
"""Kinds expanded into ``<name>-<index>`` pods."""

POD_KINDS = WORKLOAD_KINDS | {"Pod", "DaemonSet"}
"""Every kind ``collect_pods`` reads."""

MAX_PODS = 100_000
"""The most pods the workloads of one input may make (a simulation of that many takes seconds;
a typo such as ``replicas: 1000000000`` would otherwise run out of memory)."""

_DONE_PHASES = ("Succeeded", "Failed")

_Key = tuple[str, str, str]
"""(namespace, kind, name)."""


@dataclass(slots=True)
class Pods:
    """The pods of the input, sorted by role."""

    pending: list[PodInfo] = field(default_factory=list)
    bound: list[PodInfo] = field(default_factory=list)
    """Pods with ``spec.nodeName``, to be placed on their node."""
    daemonsets: list[PodInfo] = field(default_factory=list)
    daemon_pods: list[PodInfo] = field(default_factory=list)
    """DaemonSet-owned Pods of the input, bound or not, with their creation times (their
    DaemonSet's requests come from the newest)."""
    claims: list[dict[str, Any]] = field(default_factory=list)
    """PersistentVolumeClaims StatefulSets' volumeClaimTemplates create."""
    notes: list[str] = field(default_factory=list)


def collect_pods(
    documents: Sequence[Document],
    instance_types: Sequence[InstanceType],
    existing_claims: frozenset[_Key] = frozenset(),
) -> Pods:
    """Decode and expand every pod-making object; ``ManifestError`` names a bad field.

    Pods get strictly increasing ``created`` values in input order. ``instance_types`` (the
    provider's catalog) inform the hint for an instance-type wildcard; ``existing_claims`` are the
    PersistentVolumeClaims of the input (namespace, kind, name), which StatefulSets reuse.
    """
    relevant = [d for d in documents if d.kind in POD_KINDS]
    owners = {_key(d): owner for d in relevant if (owner := _owner(d)) is not None}
    with_pods = _ancestors_of_pods(relevant, owners)
    present = {_key(d) for d in relevant if d.kind in WORKLOAD_KINDS}
    daemonsets = {(d.namespace, d.name) for d in relevant if d.kind == "DaemonSet"}
    out = Pods()
    order = itertools.count()
    for doc in relevant:
        try:
            if doc.kind == "Pod":
                _add_pod(doc, out, instance_types, order, daemonsets)
            elif doc.kind == "DaemonSet":
                out.daemonsets.extend(_template_pods(doc, [doc.name], instance_types, order))
            elif _key(doc) in with_pods:
                out.notes.append(f"skipped {doc.describe()}: its pods are in the input")
            elif (owner := owners.get(_key(doc))) in present:
                ns, kind, name = owner
                out.notes.append(
                    f"skipped {doc.describe()}: its owner {kind} {ns}/{name} is expanded"
                )
            else:
                count = _replicas(doc)
                if len(out.pending) + count > MAX_PODS:
                    field = "spec.replicas" if doc.kind != "Job" else "spec.parallelism"
                    earlier = f" (and {len(out.pending)} before them)" if out.pending else ""
                    raise DecodeError(
                        field,
                        f"{count} pods{earlier} are more than a simulation takes (at most "
                        f"{MAX_PODS:,} in all)",
                    )
                names = [f"{doc.name}-{index}" for index in range(count)]
                out.pending.extend(_template_pods(doc, names, instance_types, order))
                if doc.kind == "StatefulSet":
                    out.claims.extend(_claims(doc, names, existing_claims))
        except DecodeError as err:
            raise doc.error(err.field, err.message) from None
    templates = out.daemonsets
    out.daemonsets = daemonset_pods(templates, out.daemon_pods)
    for template, daemon in zip(templates, out.daemonsets, strict=True):
        if daemon.requests != template.requests:
            out.notes.append(
                f"DaemonSet {template.key}: sized by the requests of its newest pod, which "
                "differ from its template's"
            )
    return out


def _key(doc: Document) -> _Key:
    return (doc.namespace, doc.kind, doc.name)


def _owner(doc: Document) -> _Key | None:
    references = doc.metadata.get("ownerReferences")
    if not isinstance(references, list):
        return None
    owner = next((o for o in references if isinstance(o, Mapping) and o.get("controller")), None)
    if owner is None:
        return None
    return (doc.namespace, str(owner.get("kind") or ""), str(owner.get("name") or ""))


def _ancestors_of_pods(documents: Sequence[Document], owners: Mapping[_Key, _Key]) -> set[_Key]:
    found: set[_Key] = set()
    for doc in documents:
        if doc.kind != "Pod":
            continue
        key = owners.get(_key(doc))
        while key is not None and key not in found:
            found.add(key)
            key = owners.get(key)
    return found


def _add_pod(
    doc: Document,
    out: Pods,
    instance_types: Sequence[InstanceType],
    order: Iterator[int],
    daemonsets: Set[tuple[str, str]],
) -> None:
    check_pod_metadata(doc.metadata, "metadata")
    check_pod_spec(doc.obj.get("spec"), "spec", instance_types)
    pod = PodInfo.from_manifest(doc.obj)
    phase = mapping(doc.obj.get("status"), "status").get("phase")
    ours = pod.is_daemon() and (pod.namespace, pod.owner_name) in daemonsets
    if ours and phase not in _DONE_PHASES:
        out.daemon_pods.append(copy.copy(pod))  # ``created`` still its creationTimestamp
    pod.created = float(next(order))
    if phase in _DONE_PHASES:
        out.notes.append(f"skipped {doc.describe()}: it has finished ({phase})")
    elif pod.node_name:
        out.bound.append(pod)
    elif ours:
        out.notes.append(
            f"skipped {doc.describe()}: a pod of DaemonSet {pod.namespace}/{pod.owner_name} "
            "with no node is not pending (the DaemonSet runs on every new node; its newest pod "
            "sizes it)"
        )
    elif pod.is_daemon() or pod.is_mirror():
        out.notes.append(
            f"skipped {doc.describe()}: a DaemonSet or mirror pod with no node is not pending"
        )
    else:
        out.pending.append(pod)


def _template_pods(
    doc: Document,
    names: Sequence[str],
    instance_types: Sequence[InstanceType],
    order: Iterator[int],
) -> list[PodInfo]:
    """Pods made from the object's ``spec.template``, owned by the object.

    A StatefulSet's claim templates replace same-named volumes, each pod with its own claim.
    """
    template = mapping(_spec(doc).get("template"), "spec.template")
    if not template:
        raise DecodeError("spec.template", f"missing; a {doc.kind} needs a pod template")
    meta = dict(mapping(template.get("metadata"), "spec.template.metadata"))
    check_pod_metadata(meta, "spec.template.metadata")
    check_pod_spec(template.get("spec"), "spec.template.spec", instance_types)
    meta["ownerReferences"] = [{"kind": doc.kind, "name": doc.name, "controller": True}]
    spec = template["spec"]
    claim_templates = (
        [name for name, _ in _claim_templates(doc)] if doc.kind == "StatefulSet" else []
    )
    if claim_templates:
        volumes = [v for v in spec.get("volumes") or () if v.get("name") not in claim_templates]
        spec = {**spec, "volumes": volumes}
    base = PodInfo.from_spec(doc.namespace, doc.name, spec, meta)
    pods = []
    for name in names:
        pod = base.renamed(name)
        if claim_templates:
            pod.volume_claims = (*base.volume_claims, *(f"{t}-{name}" for t in claim_templates))
        pod.created = float(next(order))
        pods.append(pod)
    return pods


def _spec(doc: Document) -> Mapping[str, Any]:
    return mapping(doc.obj.get("spec"), "spec")


def _replicas(doc: Document) -> int:
    """How many pods the workload runs at once."""
    spec = _spec(doc)
    if doc.kind != "Job":
        return _count(spec, "replicas")
    if spec.get("suspend") is True:
        return 0
    parallelism = _count(spec, "parallelism")
    if spec.get("completions") is None:
        return parallelism
    succeeded = mapping(doc.obj.get("status"), "status").get("succeeded")
    done = succeeded if isinstance(succeeded, int) else 0
    return max(min(parallelism, _count(spec, "completions") - done), 0)


def _count(spec: Mapping[str, Any], name: str) -> int:
    value = spec.get(name)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DecodeError(f"spec.{name}", f"expected a non-negative integer, got {value!r}")
    return value


def _claim_templates(doc: Document) -> Iterator[tuple[str, Mapping[str, Any]]]:
    templates = sequence(_spec(doc).get("volumeClaimTemplates"), "spec.volumeClaimTemplates")
    for i, template in enumerate(templates):
        at = f"spec.volumeClaimTemplates[{i}]"
        name = mapping(mapping(template, at).get("metadata"), f"{at}.metadata").get("name")
        if not isinstance(name, str) or not name:
            raise DecodeError(f"{at}.metadata.name", "a volume claim template needs a name")
        mapping(template.get("spec"), f"{at}.spec")
        yield name, template


def _claims(
    doc: Document, pod_names: Sequence[str], existing: frozenset[_Key]
) -> Iterator[dict[str, Any]]:
    """The PersistentVolumeClaims the StatefulSet controller would create for its pods."""
    for template_name, template in _claim_templates(doc):
        for pod_name in pod_names:
            name = f"{template_name}-{pod_name}"
            if (doc.namespace, "PersistentVolumeClaim", name) in existing:
                continue
            yield {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {**template["metadata"], "name": name, "namespace": doc.namespace},
                "spec": dict(template.get("spec") or {}),
            }
