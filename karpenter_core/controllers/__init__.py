"""The controllers the operator runs in the leader: provisioning, NodeClaim lifecycle, pod
events, the Consolidatable and Drifted conditions, NodePool status, termination, garbage
collection, disruption and (behind the NodeRepair gate) node repair."""

from __future__ import annotations

from typing import TYPE_CHECKING

from karpenter_core.controllers.context import Context
from karpenter_core.controllers.disruption import DisruptionController
from karpenter_core.controllers.garbage_collection import GarbageCollector
from karpenter_core.controllers.node_repair import NodeRepair
from karpenter_core.controllers.nodeclaim.consolidatable import ConsolidatableController
from karpenter_core.controllers.nodeclaim.drifted import DriftedController
from karpenter_core.controllers.nodeclaim.lifecycle import LifecycleController
from karpenter_core.controllers.nodeclaim.podevents import PodEventsController
from karpenter_core.controllers.nodepool import NodePoolController
from karpenter_core.controllers.provisioning import Provisioner
from karpenter_core.controllers.status_conditions import StatusConditionController
from karpenter_core.controllers.termination import TerminationController

if TYPE_CHECKING:
    from karpenter_core.operator.operator import Controller, Operator

__all__ = ["Context", "build_controllers"]


def build_controllers(operator: Operator) -> list[Controller]:
    """Every controller, sharing one context built from the operator."""
    context = Context(
        settings=operator.settings,
        client=operator.kube,
        state=operator.state,
        provider=operator.provider,
        events=operator.events,
    )
    provisioner = Provisioner(context)
    context.trigger_provisioning = provisioner.batcher.trigger
    controllers: list[Controller] = [
        provisioner,
        LifecycleController(context),
        PodEventsController(context),
        ConsolidatableController(context),
        DriftedController(context),
        NodePoolController(context),
        StatusConditionController(context),
        TerminationController(context),
        GarbageCollector(context),
        DisruptionController(context),
    ]
    if operator.settings.feature("NodeRepair"):
        controllers.append(NodeRepair(context))
    return controllers
