"""A NodeClass's conditions and readiness, and the wording of its problems.

Pure helpers for providers whose NodeClass carries a status controller's Ready condition:
``stamp_conditions`` builds the conditions from ``Verdict``s, ``not_ready`` judges them,
``node_class_ref_readiness`` answers the cloud provider's ``node_class_readiness`` for a
NodePool, ``launchable_node_class`` finds a NodeClaim's NodeClass for ``create`` (or raises the
error the core expects), ``validation_problems`` words a manifest's errors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from pydantic import ValidationError

from karpenter_core.apis.v1.common import CONDITION_READY, Condition, NodeClassReference
from karpenter_core.cloudprovider.types import (
    CloudProviderError,
    CreateError,
    InsufficientCapacity,
    NodeClassNotReady,
    NodeClassReadiness,
)

__all__ = [
    "NotReady",
    "Verdict",
    "launchable_node_class",
    "no_view",
    "node_class_ref_readiness",
    "not_ready",
    "stamp_conditions",
    "validation_problems",
]


@dataclass(frozen=True, slots=True)
class NotReady:
    """Why a NodeClass is not ready; ``unknown`` while it is not resolved yet (Ready is missing
    or Unknown) rather than resolved as not ready."""

    reason: str
    unknown: bool


@dataclass(frozen=True, slots=True)
class Verdict:
    """One condition's verdict; ``cloud_error`` when it comes from a failed cloud call (the
    NodeClass is then resolved again sooner)."""

    status: str
    reason: str
    message: str = ""
    cloud_error: bool = False

    @classmethod
    def true(cls, condition: str) -> Verdict:
        """True, with the condition's name as the reason."""
        return cls("True", condition)


def stamp_conditions(
    verdicts: Mapping[str, Verdict],
    previous: Iterable[Condition],
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """The conditions of ``verdicts`` (by type, in order), observed at ``generation``; each keeps
    its ``previous`` lastTransitionTime unless its status changes (then ``now``, to the
    second)."""
    earlier = {condition.type: condition for condition in previous}
    stamp = now.replace(microsecond=0)
    conditions = []
    for kind, verdict in verdicts.items():
        before = earlier.get(kind)
        conditions.append(
            Condition(
                type=kind,
                status=verdict.status,
                reason=verdict.reason,
                message=verdict.message,
                last_transition_time=(
                    before.last_transition_time
                    if before is not None and before.status == verdict.status
                    else stamp
                ),
                observed_generation=generation,
            )
        )
    return conditions


def not_ready(
    kind: str, conditions: Sequence[Condition], generation: int | None
) -> NotReady | None:
    """None when the Ready condition is True for the current spec (its observedGeneration, when
    set, is ``generation``); else why not. ``kind`` names the NodeClass kind in the reason."""
    ready = next((c for c in conditions if c.type == CONDITION_READY), None)
    if ready is None:
        return NotReady(f"the {kind} has no Ready condition yet", unknown=True)
    if ready.status != "True":
        return NotReady(ready.message or ready.reason, unknown=ready.status != "False")
    if generation is not None and ready.observed_generation not in (None, generation):
        return NotReady(
            f"status has not been reconciled against the latest spec (generation "
            f"{generation}, Ready observed generation {ready.observed_generation})",
            unknown=False,
        )
    return None


class _Judged(Protocol):
    def not_ready_reason(self) -> str | None: ...


def node_class_ref_readiness(
    provider: str,
    group: str,
    kind: str,
    ref: NodeClassReference,
    find: Callable[[str], _Judged | None],
) -> NodeClassReadiness:
    """Whether the NodeClass ``ref`` names is of ``provider``'s ``kind`` (``group``), exists
    (``find`` by name) and is ready."""
    if (ref.group, ref.kind) != (group, kind):
        return NodeClassReadiness(
            False, f"the {provider} provider reads {kind} ({group}), not {ref.kind} ({ref.group})"
        )
    node_class = find(ref.name)
    if node_class is None:
        return NodeClassReadiness(False, f"{kind} {ref.name!r} not found")
    reason = node_class.not_ready_reason()
    if reason is not None:
        return NodeClassReadiness(False, reason)
    return NodeClassReadiness(ready=True)


class _Launchable(Protocol):
    def not_ready(self) -> NotReady | None: ...


L = TypeVar("L", bound=_Launchable)


def no_view(kind: str, name: str) -> str:
    """Why the NodeClass ``name`` of ``kind`` cannot be read: the provider has no view."""
    return (
        f"no view of {kind} objects to read {name!r} from: launching needs the controller's "
        "NodeClass view (ProviderContext.node_classes)"
    )


def launchable_node_class(
    provider: str,
    group: str,
    kind: str,
    nodeclaim: str,
    ref: NodeClassReference,
    find: Callable[[str], L | None] | None,
) -> L:
    """The NodeClass the NodeClaim ``nodeclaim`` launches with, found by name with ``find``
    (None: the provider has no view of its NodeClasses).

    Raises ``NodeClassNotReady`` for another provider's kind or a NodeClass that is not ready,
    ``CloudProviderError`` without a view, ``InsufficientCapacity`` when it does not exist (as
    upstream) and ``CreateError`` (retried) while it is not resolved yet.
    """
    if (ref.group, ref.kind) != (group, kind):
        raise NodeClassNotReady(
            f"NodeClaim {nodeclaim!r} references {ref.kind} ({ref.group}); "
            f"the {provider} provider reads {kind} ({group})"
        )
    if find is None:
        raise CloudProviderError(no_view(kind, ref.name))
    node_class = find(ref.name)
    if node_class is None:
        raise InsufficientCapacity(f"{kind} {ref.name!r} not found")
    problem = node_class.not_ready()
    if problem is not None and problem.unknown:
        raise CreateError(
            "NodeClassReadinessUnknown",
            f"{kind} {ref.name!r} is not resolved yet: {problem.reason}",
        )
    if problem is not None:
        raise NodeClassNotReady(f"{kind} {ref.name!r} is not ready: {problem.reason}")
    return node_class


def validation_problems(error: ValidationError) -> str:
    """The problems of a pydantic ``ValidationError``, ``<field.path>: <message>; ...``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
