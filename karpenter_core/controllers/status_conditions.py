"""Status condition metrics: what operatorpkg's status controller exports for NodeClaims and
NodePools, computed from the cluster state.

Every pass (10 s, or sooner after a change, at most every 5 s: a pass over a thousand NodeClaims
takes a tenth of a second, and a scaling cluster changes all the time) looks at each object's
conditions: one ``..._status_condition_count`` and ``..._current_status_seconds`` series per
condition, a transition counted whenever a condition's status differs from the last pass (the
first sight of an object counts each of its conditions, as upstream), and how long the old
status lasted. A terminating object exports how long it has been terminating; once it is gone,
its series are dropped and its termination time is recorded. Transitions faster than a pass are
missed, as upstream's are between two reconciles.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from karpenter_core.apis import labels as wk
from karpenter_core.controllers.runtime import LoopController
from karpenter_core.operator import metrics

if TYPE_CHECKING:
    from pydantic import BaseModel

    from karpenter_core.controllers.context import Context

__all__ = ["ConditionObserver", "StatusConditionController", "nodeclass_label_keys"]

_Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class _Seen:
    """An object as the last pass saw it."""

    conditions: dict[str, tuple[str, str, float]]
    """type -> (status, reason, last transition time)."""
    values: tuple[str, ...]
    deleted: float | None


class ConditionObserver:
    """Keeps one kind's status metrics in line with the objects it is shown."""

    def __init__(self, exported: metrics.StatusMetrics, labels: Sequence[str]) -> None:
        self.exported = exported
        self.labels = tuple(labels)
        self._seen: dict[_Key, _Seen] = {}

    def _values(self, obj: Any) -> tuple[str, ...]:
        """The object's values of the extra labels; a NodeClass label missing from a NodeClaim
        is read from its nodeClassRef."""
        own = obj.metadata.labels
        ref = getattr(getattr(obj, "spec", None), "node_class_ref", None)
        values = []
        for key in self.labels:
            value = own.get(key, "")
            if (
                not value
                and ref is not None
                and key == wk.node_class_label_key(ref.group, ref.kind)
            ):
                value = ref.name
            values.append(value)
        return tuple(values)

    def observe(self, objects: Iterable[Any], now: float) -> None:
        """One look at every object of the kind (``now`` in epoch seconds)."""
        exported = self.exported
        current: dict[_Key, _Seen] = {}
        for obj in objects:
            key = (obj.metadata.namespace or "", obj.metadata.name or "")
            deletion = obj.metadata.deletion_timestamp
            seen = _Seen(
                {
                    c.type: (c.status, c.reason, c.last_transition_time.timestamp())
                    for c in obj.status.conditions
                },
                self._values(obj),
                deletion.timestamp() if deletion is not None else None,
            )
            current[key] = seen
            old = self._seen.get(key)
            if old is not None:
                for kind, (status, reason, _) in old.conditions.items():
                    now_has = seen.conditions.get(kind)
                    changed = now_has is None or now_has[:2] != (status, reason)
                    if changed or old.values != seen.values:
                        exported.forget_condition(key, (kind, status, reason), old.values, changed)
            for kind, (status, reason, since) in seen.conditions.items():
                exported.condition(key, (kind, status, reason), seen.values, max(now - since, 0.0))
                before = old.conditions.get(kind) if old is not None else None
                if before is not None and before[0] == status:
                    continue
                lasted = (before[0], max(since - before[2], 0.0)) if before else None
                exported.transition((kind, status, reason), seen.values, lasted)
            if seen.deleted is not None:
                exported.terminating_for(key, seen.values, max(now - seen.deleted, 0.0))
        for key, old in self._seen.items():
            if key in current:
                continue
            for kind, (status, reason, _) in old.conditions.items():
                exported.forget_condition(key, (kind, status, reason), old.values, True)
            terminating = max(now - old.deleted, 0.0) if old.deleted is not None else None
            exported.terminated(key, old.values, terminating)
        self._seen = current


def nodeclass_label_keys(models: Iterable[type[BaseModel]]) -> list[str]:
    """The NodeClass labels (``<group>/<lowercase kind>``) of the provider's NodeClass models."""
    keys = []
    for model in models:
        fields = model.model_fields
        api_version = fields["api_version"].default if "api_version" in fields else None
        kind = fields["kind"].default if "kind" in fields else None
        if isinstance(api_version, str) and isinstance(kind, str):
            keys.append(wk.node_class_label_key(api_version.split("/")[0], kind))
    return keys


class StatusConditionController(LoopController):
    """Exports the status condition and termination metrics of NodeClaims and NodePools: per
    kind (``operator_nodeclaim_...``, ``operator_nodepool_...``) and in the generic form with
    group and kind labels, as upstream does by default."""

    name = "status_conditions"
    period = 10.0
    min_interval = 5.0

    def __init__(self, context: Context) -> None:
        super().__init__(context.state)
        self.context = context
        claim_labels = [
            *nodeclass_label_keys(context.provider.supported_node_classes()),
            wk.NODEPOOL,
        ]
        self.nodeclaims = ConditionObserver(
            metrics.StatusMetrics("karpenter.sh", "NodeClaim", claim_labels, generic=True),
            claim_labels,
        )
        self.nodepools = ConditionObserver(
            metrics.StatusMetrics("karpenter.sh", "NodePool", (), generic=True), ()
        )

    def reconcile(self) -> None:
        """One look at every NodeClaim and NodePool."""
        now = time.time()
        state = self.context.state
        self.nodeclaims.observe(state.nodeclaims(), now)
        self.nodepools.observe(state.nodepools(), now)
