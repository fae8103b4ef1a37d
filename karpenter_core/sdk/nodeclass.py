"""NodeClass readiness and conditions, the wording of a NodeClass manifest's problems, and
``NodeClassBinding``: a provider's NodeClass kind bound to the context's read view."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

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
    from karpenter_core.apis.v1.common import NodeClassReference, ObjectMeta
    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.apis.v1.nodepool import NodePool
    from karpenter_core.cloudprovider.plugin import NodeClassInfo, ProviderContext

__all__ = [
    "BoundNodeClass",
    "NodeClassBinding",
    "NotReady",
    "Verdict",
    "launchable_node_class",
    "node_class_ref_readiness",
    "not_ready",
    "stamp_conditions",
    "validation_problems",
]


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
