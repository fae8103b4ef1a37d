"""Workloads and nodes that still use v1alpha5's label and annotations: each use is reported with
its v1 replacement (workloads are never edited)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.cloudprovider.convert import Finding, describe

__all__ = ["OLD_ANNOTATIONS", "PROVISIONER_NAME", "check_workload"]

PROVISIONER_NAME = "karpenter.sh/provisioner-name"
OLD_ANNOTATIONS = {
    "karpenter.sh/do-not-evict": wk.DO_NOT_DISRUPT,
    "karpenter.sh/do-not-consolidate": wk.DO_NOT_DISRUPT,
}
"""v1alpha5 annotations and their v1 replacement."""

_TEMPLATE_PATHS = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
"""Where each workload kind keeps its pod template (a Pod is its own)."""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def check_workload(obj: Mapping[str, Any]) -> list[Finding]:
    """Each use of the provisioner-name label or a v1alpha5 annotation in a workload or Node."""
    kind = obj.get("kind")
    source = describe(obj)
    if kind == "Node":
        return list(_metadata(obj, "", source))
    path = _TEMPLATE_PATHS.get(str(kind))
    if path is None:
        return []
    template: Any = obj
    for part in path:
        template = _mapping(template).get(part)
    prefix = ".".join(path) + "." if path else ""
    return [*_metadata(_mapping(template), prefix, source), *_pod_spec(template, prefix, source)]


def _metadata(obj: Mapping[str, Any], prefix: str, source: str) -> Iterator[Finding]:
    metadata = _mapping(obj.get("metadata"))
    for old, new in OLD_ANNOTATIONS.items():
        if old in _mapping(metadata.get("annotations")):
            yield Finding(source, f"{prefix}metadata.annotations[{old}]", f"v1 reads {new} instead")
    if PROVISIONER_NAME in _mapping(metadata.get("labels")):
        yield Finding(
            source, f"{prefix}metadata.labels[{PROVISIONER_NAME}]", f"v1 sets {wk.NODEPOOL}"
        )


def _pod_spec(template: Any, prefix: str, source: str) -> Iterator[Finding]:
    spec = _mapping(_mapping(template).get("spec"))
    replacement = f"select {wk.NODEPOOL} instead (same values: the NodePool's name)"
    if PROVISIONER_NAME in _mapping(spec.get("nodeSelector")):
        yield Finding(source, f"{prefix}spec.nodeSelector[{PROVISIONER_NAME}]", replacement)
    affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    base = f"{prefix}spec.affinity.nodeAffinity."
    terms = required.get("nodeSelectorTerms")
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        at = f"{base}requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
        yield from _expressions(_mapping(term), at, source, replacement)
    preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    for i, term in enumerate(preferred if isinstance(preferred, list) else []):
        at = f"{base}preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
        yield from _expressions(_mapping(_mapping(term).get("preference")), at, source, replacement)
    spreads = spec.get("topologySpreadConstraints")
    for i, spread in enumerate(spreads if isinstance(spreads, list) else []):
        if _mapping(spread).get("topologyKey") == PROVISIONER_NAME:
            yield Finding(
                source,
                f"{prefix}spec.topologySpreadConstraints[{i}].topologyKey",
                f"spread over {wk.NODEPOOL} instead",
            )


def _expressions(
    term: Mapping[str, Any], at: str, source: str, replacement: str
) -> Iterator[Finding]:
    expressions = term.get("matchExpressions")
    for j, expression in enumerate(expressions if isinstance(expressions, list) else []):
        if _mapping(expression).get("key") == PROVISIONER_NAME:
            yield Finding(source, f"{at}.matchExpressions[{j}].key", replacement)
