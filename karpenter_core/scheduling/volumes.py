"""Volume topology: where a pod's PersistentVolumeClaims let it run.

Each claim offers ORed alternatives: a claim bound to a PersistentVolume, each of the volume's
required nodeSelectorTerms; an unbound claim, each allowedTopologies term of its StorageClass. A
pod may use any combination of one alternative per claim whose requirements intersect. The
hostname terms of local and hostPath volumes are ignored, as upstream Karpenter ignores them: a
pod placed on a new node cannot keep the node its volume was on.

A claim the kube-scheduler would refuse (being deleted, Lost, bound to a missing or deleted
volume, not marked bind-completed, or unbound without a usable StorageClass that waits for the
first consumer) makes the pod unschedulable, with a reason naming the objects; so does an
unreadable field of a claim or volume it uses, or of any StorageClass when the claim needs the
default class (which one is the default then cannot be told). A generic
ephemeral volume is the claim ``<pod>-<volume>``; until that claim exists its template stands in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirement, RequirementError, Requirements
from karpenter_core.scheduling.snapshot import DecodeError, PodInfo, timestamp

__all__ = ["Alternatives", "VolumeTopology"]

Alternatives = tuple[Requirements, ...]
"""ORed node requirements, in the order they are tried; empty when volumes constrain nothing."""

_DEFAULT_CLASS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _as_mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is not None and not isinstance(value, Mapping):
        raise DecodeError(path, f"expected a mapping, got {type(value).__name__}")
    return value or {}


def _mapping(obj: Mapping[str, Any], key: str, path: str = "") -> Mapping[str, Any]:
    return _as_mapping(obj.get(key), f"{path}.{key}" if path else key)


def _list(obj: Mapping[str, Any], key: str, path: str = "") -> Sequence[Any]:
    value = obj.get(key)
    if value is not None and not isinstance(value, list):
        field = f"{path}.{key}" if path else key
        raise DecodeError(field, f"expected a list, got {type(value).__name__}")
    return value or ()


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_meta(obj), "annotations", "metadata")


def _string(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise DecodeError(f"{path}.{key}", f"expected a string, got {type(value).__name__}")
    return value


def _requirement(expression: Any, path: str, operator: str | None = None) -> Requirement:
    """A node selector requirement at ``path``; a topology label expression has no operator of
    its own (``operator`` gives it)."""
    expression = _as_mapping(expression, path)
    key, operator = expression.get("key"), operator or expression.get("operator")
    for name, value in (("key", key), ("operator", operator)):
        if not isinstance(value, str):
            problem = f"expected a string, got {type(value).__name__}" if value is not None else ""
            raise DecodeError(f"{path}.{name}", problem or "missing")
    values = _list(expression, "values", path)
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise DecodeError(
                f"{path}.values[{index}]", f"expected a string, got {type(value).__name__}"
            )
    try:
        return Requirement.new(key, operator, values)
    except RequirementError as err:
        raise DecodeError(path, str(err)) from None


def _default_class(classes: Sequence[Mapping[str, Any]]) -> str | None:
    """The class a claim without ``storageClassName`` gets: of those annotated as default, the
    newest, then the first by name (as Kubernetes' admission picks it). Raises ``ValueError``
    naming the StorageClass whose annotations cannot be read."""
    defaults = []
    for s in classes:
        try:
            annotations = _annotations(s)
        except DecodeError as err:
            raise ValueError(f"StorageClass {_meta(s).get('name')}: {err}") from None
        if any(annotations.get(a) == "true" for a in _DEFAULT_CLASS):
            defaults.append(s)
    if not defaults:
        return None
    newest = min(
        defaults,
        key=lambda s: (-timestamp(_meta(s).get("creationTimestamp")), str(_meta(s).get("name"))),
    )
    return str(_meta(newest).get("name"))


def _volume_alternatives(volume: Mapping[str, Any]) -> Alternatives:
    """One alternative per required nodeSelectorTerm of a PersistentVolume; a term of a local or
    hostPath volume that only names hostnames allows anywhere. Raises ``DecodeError``."""
    spec = _mapping(volume, "spec")
    path = "spec.nodeAffinity.required"
    required = _mapping(_mapping(spec, "nodeAffinity", "spec"), "required", "spec.nodeAffinity")
    local = spec.get("local") is not None or spec.get("hostPath") is not None
    out = []
    for i, term in enumerate(_list(required, "nodeSelectorTerms", path)):
        at = f"{path}.nodeSelectorTerms[{i}]"
        expressions = _list(_as_mapping(term, at), "matchExpressions", at)
        terms = [_requirement(e, f"{at}.matchExpressions[{j}]") for j, e in enumerate(expressions)]
        kept = [r for r in terms if not (local and r.key == wk.HOSTNAME)]
        if kept or terms:
            out.append(Requirements(kept))
    return tuple(dict.fromkeys(out))


def _refused_binding(
    label: str, claim: Mapping[str, Any], volume: Mapping[str, Any], volume_name: str
) -> str:
    """Why the kube-scheduler would not bind a pending pod's claim to its volume ("" if it
    would): the volume being deleted, or the claim not marked bind-completed."""
    if _meta(volume).get("deletionTimestamp"):
        return f"{label}: PersistentVolume {volume_name} is being deleted"
    if _BIND_COMPLETED not in _annotations(claim):
        return (
            f"{label} names PersistentVolume {volume_name} but is not bound yet "
            f"(no {_BIND_COMPLETED} annotation)"
        )
    return ""


def _class_alternatives(storage_class: Mapping[str, Any]) -> Alternatives:
    """One alternative per allowedTopologies term of a StorageClass. Raises ``DecodeError``."""
    out = []
    for i, term in enumerate(_list(storage_class, "allowedTopologies")):
        at = f"allowedTopologies[{i}]"
        expressions = _list(_as_mapping(term, at), "matchLabelExpressions", at)
        if expressions:
            out.append(
                Requirements(
                    _requirement(e, f"{at}.matchLabelExpressions[{j}]", "In")
                    for j, e in enumerate(expressions)
                )
            )
    return tuple(dict.fromkeys(out))


def _shown(alternatives: Alternatives) -> str:
    return " or ".join(f"({'; '.join(map(str, a.values()))})" for a in alternatives)


class VolumeTopology:
    """Indexes claims, volumes and classes once; answers per pod."""

    def __init__(
        self,
        claims: Sequence[Mapping[str, Any]],
        volumes: Sequence[Mapping[str, Any]],
        classes: Sequence[Mapping[str, Any]],
    ) -> None:
        self.claims = {
            (_meta(c).get("namespace") or "default", _meta(c).get("name")): c for c in claims
        }
        self.volumes = {_meta(v).get("name"): v for v in volumes}
        self.classes = {_meta(s).get("name"): s for s in classes}
        self.default_class: str | None = None
        self._no_default = "none is the default"
        try:
            self.default_class = _default_class(classes)
        except ValueError as err:
            self._no_default = f"the default cannot be told: {err}"
        self._by_volume: dict[str, Alternatives | str] = {}
        self._by_class: dict[str, Alternatives | str] = {}

    def requirements(self, pod: PodInfo, in_use: bool = False) -> Alternatives | str:
        """The alternatives the pod's volumes leave it (the cross product over its claims, less
        the combinations that cannot meet), or why its volumes cannot be used. ``in_use``: the
        pod runs and is being moved (a disruption simulation): as upstream, its claims are not
        checked as a pending pod's are (being deleted, Lost, not bind-completed, a volume being
        deleted), only read for where their volumes allow it."""
        if not pod.volume_claims and not pod.ephemeral_claims:
            return ()
        alternatives: Alternatives = ()
        for name, template in self._claims_of(pod):
            try:
                found = self._claim(pod.namespace, name, template, in_use)
            except DecodeError as err:
                found = f"PersistentVolumeClaim {pod.namespace}/{name}: {err}"
            if isinstance(found, str):
                return found
            if not found:
                continue
            if not alternatives:
                alternatives = found
                continue
            merged = []
            for current in alternatives:
                for alternative in found:
                    if current.intersects(alternative) is None:
                        combined = current.copy()
                        combined.add(*alternative.values())
                        merged.append(combined)
            if not merged:
                return (
                    f"PersistentVolumeClaim {pod.namespace}/{name} needs {_shown(found)}, which "
                    f"the pod's other volumes do not allow ({_shown(alternatives)})"
                )
            alternatives = tuple(dict.fromkeys(merged))
        if all(not a for a in alternatives):
            return ()
        return alternatives

    def _claims_of(self, pod: PodInfo) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
        for name in pod.volume_claims:
            yield name, None
        for volume, template in pod.ephemeral_claims:
            yield f"{pod.name}-{volume}", template

    def _claim(
        self, namespace: str, name: str, template: Mapping[str, Any] | None, in_use: bool
    ) -> Alternatives | str:
        label = f"PersistentVolumeClaim {namespace}/{name}"
        claim = self.claims.get((namespace, name))
        if claim is None:
            if template is None:
                return f"{label} not found"
            claim = {"spec": template}
        spec = _mapping(claim, "spec")
        volume_name = _string(spec, "volumeName", "spec")
        if not in_use and _meta(claim).get("deletionTimestamp"):
            return f"{label} is being deleted"
        if not in_use and _mapping(claim, "status").get("phase") == "Lost":
            lost = f"PersistentVolume {volume_name}" if volume_name else "its PersistentVolume"
            return f"{label} is Lost: {lost} no longer exists"
        if volume_name:
            return self._bound(label, claim, volume_name, in_use)
        class_name = _string(spec, "storageClassName", "spec")
        if class_name is None:
            class_name = self.default_class
            if class_name is None:
                return f"{label} is not bound, names no StorageClass, and {self._no_default}"
        if not class_name:
            return f"{label} is not bound and its storageClassName is empty"
        return self._unbound(label, class_name)

    def _bound(
        self, label: str, claim: Mapping[str, Any], volume_name: str, in_use: bool
    ) -> Alternatives | str:
        volume = self.volumes.get(volume_name)
        if volume is None:
            return f"{label}: PersistentVolume {volume_name} not found"
        refused = "" if in_use else _refused_binding(label, claim, volume, volume_name)
        if refused:
            return refused
        found = self._by_volume.get(volume_name)
        if found is None:
            try:
                found = _volume_alternatives(volume)
            except DecodeError as err:
                found = f"PersistentVolume {volume_name}: {err}"
            self._by_volume[volume_name] = found
        return found if not isinstance(found, str) else f"{label}: {found}"

    def _unbound(self, label: str, class_name: str) -> Alternatives | str:
        found = self._by_class.get(class_name)
        if found is None:
            found = self._by_class[class_name] = self._class(class_name)
        return found if not isinstance(found, str) else f"{label} is not bound yet: {found}"

    def _class(self, name: str) -> Alternatives | str:
        storage_class = self.classes.get(name)
        if storage_class is None:
            return f"StorageClass {name} not found"
        if storage_class.get("volumeBindingMode") != "WaitForFirstConsumer":
            return f"StorageClass {name} binds volumes immediately"
        try:
            return _class_alternatives(storage_class)
        except DecodeError as err:
            return f"StorageClass {name}: {err}"
