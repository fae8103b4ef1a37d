"""Cloud machines as NodeClaims: the view ``CloudProvider.create``, ``get`` and ``list`` return.

A provider turns what it read of a VM or instance into a ``Machine`` (its names and tags, its
instance type, zone and capacity type, its provider id) and lets a ``MachineView`` make the
NodeClaim: labels from the instance type, capacity and allocatable, the NodePool and NodeClass
it was launched for.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Generic

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.types import InstanceType
from karpenter_core.sdk.nodeclass import N, NodeClassBinding

__all__ = ["ExtraLabels", "Machine", "MachineView"]


@dataclass(frozen=True, slots=True)
class Machine:
    """What a provider read of one machine, in the terms of a NodeClaim."""

    id: str
    """The machine's own name or id: the NodeClaim's name when it carries no NodeClaim tag."""
    provider_id: str
    instance_type: str
    capacity_type: str
    zone: str
    """The zone label (``topology.kubernetes.io/zone``)."""
    created: datetime | None = None
    nodeclaim: str = ""
    """The NodeClaim it was launched for (its tag), "" when untagged."""
    nodepool: str = ""
    node_class: str = ""
    """The NodeClass it was launched with (its tag), "" when untagged."""
    image_id: str = ""
    deleting: bool = False
    """Whether the cloud is terminating it (the view then has a deletionTimestamp)."""


ExtraLabels = Callable[[Machine, N | None], Mapping[str, str | None]]
"""A provider's labels beyond the view's, for a machine and its NodeClass (None when unknown):
a value of None removes the label."""


class MachineView(Generic[N]):
    """Makes NodeClaims of one provider's machines.

    ``instance_types(node_class)`` is the catalog for a NodeClass (None: the defaults);
    ``extra_labels`` adds the provider's own labels; ``requested_only`` names resources shown in
    capacity and allocatable only when the NodeClaim requests them (e.g. EFA devices).
    """

    __slots__ = ("_extra_labels", "_instance_types", "_requested_only", "binding")

    def __init__(
        self,
        binding: NodeClassBinding[N],
        instance_types: Callable[[N | None], Iterable[InstanceType]],
        *,
        extra_labels: ExtraLabels[N] | None = None,
        requested_only: Collection[str] = (),
    ) -> None:
        self.binding = binding
        self._instance_types = instance_types
        self._extra_labels = extra_labels
        self._requested_only = frozenset(requested_only)

    def nodeclaim(
        self,
        machine: Machine,
        seen: dict[str, tuple[N | None, dict[str, InstanceType]]] | None = None,
    ) -> NodeClaim:
        """The machine as a NodeClaim (``get``, ``list``). ``seen`` keeps each NodeClass read
        and its instance types by name, so that a list reads each NodeClass once."""
        seen = {} if seen is None else seen
        if machine.node_class not in seen:
            node_class = self.binding.get(machine.node_class)
            seen[machine.node_class] = (node_class, self._by_name(node_class))
        node_class, types = seen[machine.node_class]
        instance_type = types.get(machine.instance_type)
        labels = self._labels(machine, instance_type, node_class)
        if machine.nodepool:
            labels[wk.NODEPOOL] = machine.nodepool
        deleted = self.binding.context.clock() if machine.deleting else None
        claim = NodeClaim.model_validate(
            {
                "metadata": {
                    "name": machine.nodeclaim or machine.id,
                    "labels": labels,
                    "creationTimestamp": machine.created,
                    "deletionTimestamp": deleted,
                },
                "spec": {
                    "requirements": [],
                    "nodeClassRef": self.binding.reference(machine.node_class),
                },
            }
        )
        self._fill_status(claim, machine, instance_type, ())
        return claim

    def nodeclaims(self, machines: Iterable[Machine]) -> list[NodeClaim]:
        """The machines as NodeClaims, each NodeClass read once."""
        seen: dict[str, tuple[N | None, dict[str, InstanceType]]] = {}
        return [self.nodeclaim(machine, seen) for machine in machines]

    def created(
        self,
        nodeclaim: NodeClaim,
        node_class: N,
        machine: Machine,
        annotations: Mapping[str, str],
    ) -> NodeClaim:
        """What ``create`` returns: a copy of ``nodeclaim`` with the machine's labels under its
        own, ``annotations`` over its own, and its status filled."""
        claim = nodeclaim.model_copy(deep=True)
        instance_type = self._by_name(node_class).get(machine.instance_type)
        labels = self._labels(machine, instance_type, node_class)
        claim.metadata.labels = {**labels, **nodeclaim.metadata.labels}
        claim.metadata.annotations = {**nodeclaim.metadata.annotations, **annotations}
        requested = nodeclaim.spec.resources.requests
        self._fill_status(claim, machine, instance_type, requested)
        return claim

    def _by_name(self, node_class: N | None) -> dict[str, InstanceType]:
        return {t.name: t for t in self._instance_types(node_class)}

    def _labels(
        self, machine: Machine, instance_type: InstanceType | None, node_class: N | None
    ) -> dict[str, str]:
        labels = dict(instance_type.requirements.labels()) if instance_type else {}
        labels[wk.INSTANCE_TYPE] = machine.instance_type
        labels[wk.TOPOLOGY_ZONE] = machine.zone
        labels[wk.CAPACITY_TYPE] = machine.capacity_type
        if self._extra_labels is not None:
            for key, value in self._extra_labels(machine, node_class).items():
                if value is None:
                    labels.pop(key, None)
                else:
                    labels[key] = value
        return labels

    def _fill_status(
        self,
        claim: NodeClaim,
        machine: Machine,
        instance_type: InstanceType | None,
        requested: Iterable[str],
    ) -> None:
        claim.status.provider_id = machine.provider_id
        claim.status.image_id = machine.image_id or None
        if instance_type is None:
            return
        hidden = self._requested_only - set(requested)

        def shown(resources: Mapping[str, int]) -> dict[str, Fraction]:
            return {
                name: Fraction(amount, 1000)
                for name, amount in resources.items()
                if amount and name not in hidden
            }

        claim.status.capacity = shown(instance_type.capacity)
        claim.status.allocatable = shown(instance_type.allocatable)
