"""NodeClass readiness and conditions, the wording of a NodeClass manifest's problems, and
``NodeClassBinding``: a provider's NodeClass kind bound to the context's read view.

A NodeClass model whose status carries its controller's conditions inherits ``not_ready`` and
``not_ready_reason`` from ``ReadyByConditions``; its status controller judges Ready with
``ready_verdict`` and returns ``resolved_status``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from karpenter_core.apis.v1.common import CONDITION_READY
from karpenter_core.cloudprovider.nodeclass import (
    NotReady,
    Verdict,
    launchable_node_class,
    no_view,
    node_class_ref_readiness,
    not_ready,
    stamp_conditions,
    validation_problems,
)
from karpenter_core.cloudprovider.types import NodeClassReadiness

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.apis.v1.common import Condition, NodeClassReference, ObjectMeta
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.plugin import NodeClassInfo, ProviderContext

__all__ = [
    "BoundNodeClass",
    "NodeClassBinding",
    "NotReady",
    "ReadyByConditions",
    "Verdict",
    "launchable_node_class",
    "node_class_ref_readiness",
    "not_ready",
    "ready_verdict",
    "resolved_status",
    "stamp_conditions",
    "validation_problems",
]


class _Conditioned(Protocol):
    @property
    def conditions(self) -> Sequence[Condition]: ...


class _WithConditions(Protocol):
    """What ``ReadyByConditions`` needs of the model it is mixed into."""

    @property
    def kind(self) -> str: ...

    @property
    def metadata(self) -> ObjectMeta: ...

    @property
    def status(self) -> _Conditioned: ...

    def not_ready(self) -> NotReady | None: ...


class ReadyByConditions:
    """Mixed into a NodeClass model (``kind``, ``metadata``, ``status.conditions``): it is ready
    when its Ready condition is True for the current spec."""

    __slots__ = ()

    def not_ready(self: _WithConditions) -> NotReady | None:
        """None when the Ready condition is True for the current spec (its observedGeneration,
        when set, is ``metadata.generation``); else why not."""
        return not_ready(self.kind, self.status.conditions, self.metadata.generation)

    def not_ready_reason(self: _WithConditions) -> str | None:
        """None when the NodeClass is ready (see ``not_ready``); else why not."""
        problem = self.not_ready()
        return None if problem is None else problem.reason


def ready_verdict(verdicts: Mapping[str, Verdict], dependents: Iterable[str]) -> Verdict:
    """Ready's verdict: True when every one of ``dependents`` is True in ``verdicts``; else
    False (UnhealthyDependents), naming each that is not with its status and message."""
    unhealthy = [name for name in dependents if verdicts[name].status != "True"]
    if not unhealthy:
        return Verdict.true(CONDITION_READY)
    return Verdict(
        "False",
        "UnhealthyDependents",
        "; ".join(
            f"{name}={verdicts[name].status}: {verdicts[name].message}" for name in unhealthy
        ),
    )


def resolved_status(
    status: BaseModel, verdicts: Mapping[str, Verdict]
) -> tuple[dict[str, Any], bool]:
    """What a status controller's ``resolve`` returns: ``status`` as its manifest (camelCase,
    no None) and whether a verdict came from a failed cloud call."""
    manifest = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return manifest, any(verdict.cloud_error for verdict in verdicts.values())


class BoundNodeClass(Protocol):
    """What ``NodeClassBinding`` needs of a NodeClass model."""

    @property
    def metadata(self) -> ObjectMeta: ...

    def not_ready(self) -> NotReady | None: ...

    def not_ready_reason(self) -> str | None: ...


N = TypeVar("N", bound=BoundNodeClass)


@dataclass(frozen=True)  # no slots: a slotted frozen generic cannot be built as Binding[Model](...)
class NodeClassBinding(Generic[N]):
    """The provider ``provider``'s NodeClass kind ``info`` as read through ``context``'s view
    (``ProviderContext.node_classes``): lookups, readiness and the launchable NodeClass.

    Parametrise it with the model: ``NodeClassBinding[AKSNodeClass]("azure", NODE_CLASS, ctx)``.
    """

    provider: str
    info: NodeClassInfo
    context: ProviderContext

    @property
    def has_view(self) -> bool:
        """Whether the context gave a read view of the NodeClasses."""
        return self.context.node_classes is not None

    def owns(self, ref: NodeClassReference) -> bool:
        """Whether ``ref`` names this kind (its group and kind)."""
        return (ref.group, ref.kind) == (self.info.group, self.info.kind)

    def get(self, name: str) -> N | None:
        """The NodeClass ``name``; None when it is missing, is being deleted (it launches
        nothing), is not of the model, or there is no view."""
        lookup = self.context.node_classes
        found = lookup(self.info.kind, name) if lookup is not None and name else None
        if not isinstance(found, self.info.model):
            return None
        node_class = cast("N", found)
        return None if node_class.metadata.deletion_timestamp is not None else node_class

    def of_nodepool(self, nodepool: NodePool) -> N | None:
        """The NodePool's NodeClass; None for another kind or as ``get``."""
        ref = nodepool.spec.template.spec.node_class_ref
        return self.get(ref.name) if self.owns(ref) else None

    def of_nodeclaim(self, nodeclaim: NodeClaim) -> N | None:
        """The NodeClaim's NodeClass; None for another kind or as ``get``."""
        ref = nodeclaim.spec.node_class_ref
        return self.get(ref.name) if self.owns(ref) else None

    def readiness(self, nodepool: NodePool, *, live: bool = True) -> NodeClassReadiness:
        """Whether the NodePool's NodeClass is of this kind, exists and is Ready (always ready
        when not ``live``: offline, nothing is resolved; never without a view)."""
        if not live:
            return NodeClassReadiness(ready=True)
        info = self.info
        ref = nodepool.spec.template.spec.node_class_ref
        if self.owns(ref) and not self.has_view:
            return NodeClassReadiness(False, no_view(info.kind, ref.name))
        return node_class_ref_readiness(self.provider, info.group, info.kind, ref, self.get)

    def launchable(self, nodeclaim: NodeClaim) -> N:
        """The NodeClass the NodeClaim launches with (see ``launchable_node_class`` for the
        errors raised when it cannot)."""
        return launchable_node_class(
            self.provider,
            self.info.group,
            self.info.kind,
            nodeclaim.metadata.name or "",
            nodeclaim.spec.node_class_ref,
            self.get if self.has_view else None,
        )

    def supported(self) -> builtins.list[type[Any]]:
        """The models a ``CloudProvider.supported_node_classes`` returns: this kind's."""
        return [self.info.model]

    def reference(self, name: str) -> dict[str, str]:
        """A ``nodeClassRef`` to the NodeClass ``name`` ("unknown" when not known)."""
        return {"group": self.info.group, "kind": self.info.kind, "name": name or "unknown"}
