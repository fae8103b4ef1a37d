"""What a cloud provider offers and how it fails: instance types, offerings, errors, the interface."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from karpenter_core.apis import labels
from karpenter_core.apis.quantity import to_milli
from karpenter_core.apis.requirements import Requirements

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.apis.v1.nodeclaim import NodeClaim
    from karpenter_core.apis.v1.nodepool import NodePool

__all__ = [
    "CloudProvider",
    "CloudProviderError",
    "CreateError",
    "InstanceType",
    "InsufficientCapacity",
    "NodeClaimNotFound",
    "NodeClassNotReady",
    "NodeClassReadiness",
    "Offering",
    "Overhead",
    "RepairPolicy",
    "Resources",
    "launch_request",
]

Resources = dict[str, int]
"""Resource amounts in thousandths of their unit (``cpu: 1500`` is 1.5 CPU, memory in milli-bytes)."""


class Offering:
    """One way to buy an instance type: a zone and a capacity type, at a price per hour.

    ``estimated`` marks a price that is a guess rather than a quote (e.g. offline spot prices).
    """

    __slots__ = ("available", "capacity_type", "estimated", "price", "requirements", "zone")

    def __init__(
        self,
        requirements: Requirements,
        price: float,
        available: bool = True,
        estimated: bool = False,
    ) -> None:
        zone = requirements.get(labels.TOPOLOGY_ZONE)
        capacity_type = requirements.get(labels.CAPACITY_TYPE)
        if zone is None or capacity_type is None:
            raise ValueError("an offering must define a zone and a capacity type")
        self.requirements = requirements
        self.price = price
        self.available = available
        self.estimated = estimated
        self.zone = zone.any() or ""
        self.capacity_type = capacity_type.any() or ""

    def __repr__(self) -> str:
        state = "" if self.available else ", unavailable"
        return f"Offering({self.capacity_type} {self.zone} {self.price}{state})"


@dataclass(frozen=True, slots=True)
class Overhead:
    """Capacity the node keeps for itself."""

    kube_reserved: Mapping[str, int] = field(default_factory=dict)
    system_reserved: Mapping[str, int] = field(default_factory=dict)
    eviction_threshold: Mapping[str, int] = field(default_factory=dict)

    def total(self) -> Resources:
        """The sum of the three reservations."""
        out: Resources = {}
        for part in (self.kube_reserved, self.system_reserved, self.eviction_threshold):
            for name, amount in part.items():
                out[name] = out.get(name, 0) + amount
        return out


class InstanceType:
    """A machine shape with its labels (requirements), offerings, capacity and overhead."""

    __slots__ = ("allocatable", "capacity", "name", "offerings", "overhead", "requirements")

    def __init__(
        self,
        name: str,
        requirements: Requirements,
        offerings: Sequence[Offering],
        capacity: Mapping[str, int],
        overhead: Overhead | None = None,
    ) -> None:
        self.name = name
        self.requirements = requirements
        self.offerings = tuple(offerings)
        self.capacity: Resources = dict(capacity)
        self.overhead = overhead or Overhead()
        reserved = self.overhead.total()
        self.allocatable: Resources = {
            k: max(v - reserved.get(k, 0), 0) for k, v in self.capacity.items()
        }

    def cheapest_offering(self, requirements: Requirements | None = None) -> Offering | None:
        """The cheapest available offering compatible with ``requirements``, ties by zone name."""
        best: Offering | None = None
        for offering in self.offerings:
            if not offering.available:
                continue
            if requirements is not None and requirements.intersects(offering.requirements):
                continue
            if best is None or (offering.price, offering.zone) < (best.price, best.zone):
                best = offering
        return best

    def offering_for(
        self, requirements: Requirements, requests: Mapping[str, int]
    ) -> Offering | None:
        """The cheapest available offering for a NodeClaim with these requirements and requests
        (thousandths), or None when the type's labels do not meet the requirements or its
        allocatable does not cover the requests."""
        if self.requirements.intersects(requirements) is not None:
            return None
        if any(self.allocatable.get(k, 0) < v for k, v in requests.items()):
            return None
        return self.cheapest_offering(requirements)

    def __repr__(self) -> str:
        return f"InstanceType({self.name})"


def launch_request(nodeclaim: NodeClaim) -> tuple[Requirements, Resources]:
    """What a NodeClaim asks a provider for: its requirements, and its resource requests in
    thousandths."""
    requirements = Requirements.from_node_selector(
        r.model_dump(by_alias=True, exclude_none=True) for r in nodeclaim.spec.requirements
    )
    requests = {
        name: to_milli(amount) for name, amount in nodeclaim.spec.resources.requests.items()
    }
    return requirements, requests


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """Replace a node whose condition has had this status for longer than the toleration."""

    condition_type: str
    condition_status: str
    toleration: timedelta


@dataclass(frozen=True, slots=True)
class NodeClassReadiness:
    """Whether a NodePool's NodeClass can launch nodes, and if not, why."""

    ready: bool
    reason: str = ""


class CloudProviderError(Exception):
    """Base class of the errors a provider raises."""


class NodeClaimNotFound(CloudProviderError):
    """The instance behind a NodeClaim does not exist (any more)."""


class InsufficientCapacity(CloudProviderError):
    """No offering the NodeClaim allows could be launched."""


class NodeClassNotReady(CloudProviderError):
    """The NodeClass the NodeClaim references cannot launch nodes yet."""


class CreateError(CloudProviderError):
    """A launch failed for a reason worth a condition on the NodeClaim; it will be retried."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@runtime_checkable
class CloudProvider(Protocol):
    """The interface the core calls; synchronous, as cloud SDKs are.

    ``create`` must be idempotent per NodeClaim: called again for the same NodeClaim (after a
    crash), it returns the instance it launched before, never a second one.
    """

    name: str

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Launch an instance; return the NodeClaim with providerID, labels, capacity resolved."""
        ...

    def delete(self, nodeclaim: NodeClaim) -> None:
        """Start termination; raise ``NodeClaimNotFound`` once the instance is gone."""
        ...

    def get(self, provider_id: str) -> NodeClaim:
        """The instance with this providerID, as a NodeClaim; ``NodeClaimNotFound`` if none."""
        ...

    # Below this method, ``list`` in the class body names it: annotations say ``builtins.list``.
    def list(self) -> list[NodeClaim]:
        """Every instance this provider launched for the cluster (garbage collection reads it)."""
        ...

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        """All instance types for the NodePool, including those with no available offering."""
        ...

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        """Why the instance no longer matches its NodeClass, or "" if it still does."""
        ...

    def repair_policies(self) -> builtins.list[RepairPolicy]:
        """Node conditions that mean the node should be replaced."""
        ...

    def supported_node_classes(self) -> builtins.list[type[BaseModel]]:
        """NodeClass models this provider reads; the first is the default."""
        ...

    def node_class_readiness(self, nodepool: NodePool) -> NodeClassReadiness:
        """Whether the NodePool's NodeClass is ready to launch nodes."""
        ...
