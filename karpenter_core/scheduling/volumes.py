"""Volume topology: where a pod's PersistentVolumeClaims let it run.

A claim bound to a zonal PersistentVolume pins the pod to the volume's node affinity; an unbound
claim whose StorageClass waits for the first consumer follows the class's allowedTopologies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from karpenter_core.scheduling.requirements import Requirement, RequirementError, Requirements
from karpenter_core.scheduling.snapshot import PodInfo

__all__ = ["VolumeTopology"]

_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


class VolumeTopology:
    """Indexes claims, volumes and classes once; answers per pod."""

    def __init__(
        self,
        claims: Sequence[Mapping[str, Any]],
        volumes: Sequence[Mapping[str, Any]],
        classes: Sequence[Mapping[str, Any]],
    ) -> None:
        self.claims = {
            (
                (c.get("metadata") or {}).get("namespace") or "default",
                (c.get("metadata") or {}).get("name"),
            ): c
            for c in claims
        }
        self.volumes = {(v.get("metadata") or {}).get("name"): v for v in volumes}
        self.classes = {(s.get("metadata") or {}).get("name"): s for s in classes}
        self.default_class = next(
            (
                name
                for name, s in self.classes.items()
                if ((s.get("metadata") or {}).get("annotations") or {}).get(_DEFAULT_CLASS)
                == "true"
            ),
            None,
        )

    def requirements(self, pod: PodInfo) -> Requirements | str:
        """The node requirements the pod's volumes impose, or why they cannot be met."""
        out = Requirements()
        for name in pod.volume_claims:
            claim = self.claims.get((pod.namespace, name))
            if claim is None:
                return f"PersistentVolumeClaim {pod.namespace}/{name} not found"
            spec = claim.get("spec") or {}
            try:
                if spec.get("volumeName"):
                    out.add(*self._bound(spec["volumeName"]).values())
                    continue
                found = self._unbound(spec)
            except (RequirementError, KeyError, TypeError) as err:
                return f"PersistentVolumeClaim {pod.namespace}/{name}: unreadable topology ({err})"
            if isinstance(found, str):
                return f"PersistentVolumeClaim {pod.namespace}/{name}: {found}"
            out.add(*found.values())
        return out

    def _bound(self, volume_name: str) -> Requirements:
        volume = self.volumes.get(volume_name)
        if volume is None:
            return Requirements()
        terms = (((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get(
            "nodeSelectorTerms"
        ) or ()
        if not terms:
            return Requirements()
        return Requirements.from_node_selector(terms[0].get("matchExpressions") or ())

    def _unbound(self, spec: Mapping[str, Any]) -> Requirements | str:
        name = spec.get("storageClassName", self.default_class)
        if not name:
            return Requirements()
        storage_class = self.classes.get(name)
        if storage_class is None:
            return f"StorageClass {name} not found"
        if storage_class.get("volumeBindingMode") != "WaitForFirstConsumer":
            return f"not bound yet, and StorageClass {name} binds volumes immediately"
        topologies = storage_class.get("allowedTopologies") or ()
        if not topologies:
            return Requirements()
        return Requirements(
            Requirement.new(str(e["key"]), "In", e.get("values") or ())
            for e in topologies[0].get("matchLabelExpressions") or ()
        )
