"""The skeleton of a provider's NodeClass status controller.

Every poll it lists the provider's NodeClasses and, for each:

- one that does not parse is reported once per generation and skipped;
- one being deleted keeps its termination finalizer until no NodeClaim references it and the
  provider's ``release`` is done, then loses it;
- otherwise it gets the drift hash annotations and the finalizer, and, when its generation
  changed or its last resolution is older than the resync period, the status the provider's
  ``resolve`` returns (sooner again when that hit a cloud error).

A provider subclasses ``NodeClassStatusController``, sets the class attributes naming its kind
and hash, and writes ``spec_hash``, ``kubernetes_version`` and ``resolve`` (optionally
``release`` and ``log_resolved``).
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, Self, TypeVar, cast

from pydantic import BaseModel, ValidationError

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.common import CONDITION_READY, ObjectMeta
from karpenter_core.cloudprovider.nodeclass import validation_problems
from karpenter_core.cloudprovider.plugin import NodeClassInfo, ProviderContext
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.operator import logs

__all__ = ["ERROR_RETRY", "MAX_POLL", "NodeClassModel", "NodeClassStatusController"]

MAX_POLL = timedelta(seconds=5)
"""The longest pause between two passes over the NodeClasses."""
ERROR_RETRY = timedelta(seconds=10)
"""How soon a NodeClass whose resolution hit a cloud error is resolved again."""

_MERGE_PATCH = "application/merge-patch+json"
_CONDITION_DRIFTED = "Drifted"


class NodeClassModel(Protocol):
    """What the controller reads of a NodeClass model (a ``KubeObject`` with a status)."""

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any]) -> Self: ...

    @property
    def metadata(self) -> ObjectMeta: ...

    @property
    def status(self) -> BaseModel: ...


N = TypeVar("N", bound=NodeClassModel)


@dataclass(slots=True)
class _Resolved:
    generation: int | None
    due: datetime


class _Cluster:
    """The apiserver calls the controller makes (raw JSON) for one NodeClass kind."""

    def __init__(self, api_client: Any, group: str, version: str, kind: str, plural: str) -> None:
        from kubernetes import client as k8s

        self._custom = k8s.CustomObjectsApi(api_client)
        self._version = k8s.VersionApi(api_client)
        self._resource = (group, version, plural)
        self._ref = (group, kind)
        self.api_exception = k8s.ApiException

    def version_info(self) -> dict[str, Any]:
        response = self._version.get_code(_preload_content=False)
        return dict(json.loads(response.data))

    def node_classes(self) -> list[dict[str, Any]]:
        response = self._custom.list_cluster_custom_object(*self._resource, _preload_content=False)
        return json.loads(response.data).get("items") or []

    def nodeclaims_using(self, name: str) -> list[dict[str, Any]]:
        response = self._custom.list_cluster_custom_object(
            wk.GROUP, "v1", "nodeclaims", _preload_content=False
        )
        using = []
        for item in json.loads(response.data).get("items") or ():
            ref = (item.get("spec") or {}).get("nodeClassRef") or {}
            if (ref.get("group"), ref.get("kind")) == self._ref and ref.get("name") == name:
                using.append(item)
        return using

    def patch(self, name: str, body: Mapping[str, Any]) -> None:
        self._custom.patch_cluster_custom_object(
            *self._resource, name, body, _content_type=_MERGE_PATCH, _preload_content=False
        )

    def patch_status(self, name: str, body: Mapping[str, Any]) -> None:
        self._custom.patch_cluster_custom_object_status(
            *self._resource, name, body, _content_type=_MERGE_PATCH, _preload_content=False
        )

    def patch_nodeclaim(self, name: str, body: Mapping[str, Any]) -> None:
        self._custom.patch_cluster_custom_object(
            wk.GROUP,
            "v1",
            "nodeclaims",
            name,
            body,
            _content_type=_MERGE_PATCH,
            _preload_content=False,
        )


class NodeClassStatusController(ABC, Generic[N]):
    """Keeps every NodeClass of one kind resolved, hashed and finalized.

    Subclasses set ``model``, ``group``, ``version``, ``kind``, ``plural``, ``finalizer``,
    ``hash_annotation``, ``hash_version_annotation`` and ``hash_version``, or name the kind in
    the class statement (``info=``, ``hash_version=``, see ``__init_subclass__``); with
    ``restamp_nodeclaims`` a change of hash version gives the NodeClaims of the NodeClass the
    new version (and, unless drifted, the current hash) instead of drifting them.
    """

    name = "nodeclass"
    model: type[N]
    group: str
    version: str
    kind: str
    plural: str
    finalizer: str
    hash_annotation: str
    hash_version_annotation: str
    hash_version: str
    restamp_nodeclaims = False

    def __init_subclass__(
        cls, *, info: NodeClassInfo | None = None, hash_version: str | None = None, **kwargs: Any
    ) -> None:
        """``class C(NodeClassStatusController[M], info=NODE_CLASS, hash_version="v1")``: the
        kind's attributes from ``info``, with upstream's names for the finalizer
        (``<group>/termination``) and the hash annotations (``<group>/<kind>-hash`` and
        ``<group>/<kind>-hash-version``)."""
        super().__init_subclass__(**kwargs)
        if info is not None:
            cls.model = cast("type[N]", info.model)  # the model the record lists
            cls.group, cls.version = info.group, info.version
            cls.kind, cls.plural = info.kind, info.plural
            cls.finalizer = f"{info.group}/termination"
            cls.hash_annotation = f"{info.group}/{info.kind.lower()}-hash"
            cls.hash_version_annotation = f"{cls.hash_annotation}-version"
        if hash_version is not None:
            cls.hash_version = hash_version

    def __init__(self, context: ProviderContext, resync: timedelta) -> None:
        if context.kube_client is None:
            raise CloudProviderError(
                f"the nodeclass controller needs a Kubernetes cluster to read {self.kind}es"
            )
        self._log = context.logger
        self._clock: Callable[[], datetime] = context.clock
        self._resync = resync
        self._poll = min(MAX_POLL, resync) if resync > timedelta(0) else MAX_POLL
        self._cluster = _Cluster(
            context.kube_client, self.group, self.version, self.kind, self.plural
        )
        self._resolved: dict[str, _Resolved] = {}
        self._invalid: set[tuple[str, int | None]] = set()
        self._waiting: dict[str, tuple[str, ...]] = {}

    # -- what a provider writes ----------------------------------------------------------------

    @abstractmethod
    def spec_hash(self, node_class: N) -> str:
        """The drift hash of ``node_class``'s spec."""

    @abstractmethod
    def kubernetes_version(self, version_info: Mapping[str, Any]) -> str:
        """The Kubernetes version ``resolve`` gets, from the apiserver's /version."""

    @abstractmethod
    def resolve(
        self, node_class: N, kubernetes_version: str, now: datetime
    ) -> tuple[dict[str, Any], bool]:
        """The status ``node_class`` should have (camelCase JSON) and whether a cloud call
        failed (then it is resolved again within ``ERROR_RETRY``)."""

    def release(self, node_class: N) -> bool:
        """Clean up after a deleted NodeClass no NodeClaim uses; False keeps the finalizer (to
        try again next pass)."""
        return True

    def log_resolved(self, name: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
        """Log what a new status resolved (e.g. new image ids); condition changes are logged
        by the controller."""

    # -- the loop ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Resolve the NodeClasses until ``stop`` is set; failures are logged and retried."""
        with logs.bind(controller=self.name):
            while not stop.is_set():
                try:
                    self.sync()
                except Exception as error:
                    self._log.error("nodeclass: listing %ses failed: %s", self.kind, error)
                stop.wait(self._poll.total_seconds())

    def sync(self) -> None:
        """One pass over all NodeClasses of the kind."""
        version: str | None = None
        seen: set[str] = set()
        for raw in self._cluster.node_classes():
            metadata = raw.get("metadata") or {}
            name = str(metadata.get("name") or "")
            seen.add(str(metadata.get("uid") or name))
            try:
                node_class = self.model.from_manifest(raw)
            except ValidationError as error:
                self._report_invalid(raw, error)
                continue
            try:
                if node_class.metadata.deletion_timestamp is not None:
                    self._finalize(node_class)
                    continue
                self._ensure_metadata(node_class)
                if self._due(node_class):
                    if version is None:
                        version = self.kubernetes_version(self._cluster.version_info())
                    self._reconcile(node_class, version)
            except self._cluster.api_exception as error:
                if error.status not in (404, 409):  # gone, or changed meanwhile: next pass
                    self._log.error(
                        "nodeclass: updating %s %s failed: %s %s",
                        self.kind,
                        name,
                        error.status,
                        error.reason,
                    )
            except Exception as error:
                self._log.error("nodeclass: reconciling %s %s failed: %s", self.kind, name, error)
        for uid in set(self._resolved) - seen:
            del self._resolved[uid]
        self._invalid = {key for key in self._invalid if key[0] in seen}
        self._waiting = {key: users for key, users in self._waiting.items() if key in seen}

    # -- steps ---------------------------------------------------------------------------------

    def _key(self, node_class: N) -> str:
        metadata = node_class.metadata
        return metadata.uid or metadata.name or ""

    def _due(self, node_class: N) -> bool:
        resolved = self._resolved.get(self._key(node_class))
        return (
            resolved is None
            or resolved.generation != node_class.metadata.generation
            or self._clock() >= resolved.due
        )

    def _ensure_metadata(self, node_class: N) -> None:
        metadata = node_class.metadata
        spec_hash = self.spec_hash(node_class)
        if (
            self.restamp_nodeclaims
            and metadata.annotations.get(self.hash_version_annotation) != self.hash_version
        ):
            self._restamp_nodeclaims(metadata.name or "", spec_hash)
        annotations = {
            self.hash_annotation: spec_hash,
            self.hash_version_annotation: self.hash_version,
        }
        patch: dict[str, Any] = {}
        if any(metadata.annotations.get(k) != v for k, v in annotations.items()):
            patch["annotations"] = annotations
        if self.finalizer not in metadata.finalizers:
            patch["finalizers"] = [*metadata.finalizers, self.finalizer]
            patch["resourceVersion"] = metadata.resource_version
        if patch:
            self._cluster.patch(metadata.name or "", {"metadata": patch})

    def _restamp_nodeclaims(self, name: str, spec_hash: str) -> None:
        """NodeClaims of another hash version get this one, and, unless already drifted, the
        current hash (a hash version change is no drift)."""
        for item in self._cluster.nodeclaims_using(name):
            annotations = (item.get("metadata") or {}).get("annotations") or {}
            if annotations.get(self.hash_version_annotation) == self.hash_version:
                continue
            update = {self.hash_version_annotation: self.hash_version}
            conditions = (item.get("status") or {}).get("conditions") or ()
            if not any(c.get("type") == _CONDITION_DRIFTED for c in conditions):
                update[self.hash_annotation] = spec_hash
            self._cluster.patch_nodeclaim(
                item["metadata"]["name"], {"metadata": {"annotations": update}}
            )

    def _reconcile(self, node_class: N, kubernetes_version: str) -> None:
        now = self._clock()
        name = node_class.metadata.name or ""
        status, failed = self.resolve(node_class, kubernetes_version, now)
        before = node_class.status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if status != before:
            patch = {**{key: None for key in before if key not in status}, **status}
            self._cluster.patch_status(name, {"status": patch})
            self.log_resolved(name, before, status)
            self._log_conditions(name, before, status)
        retry = min(self._resync, ERROR_RETRY) if failed else self._resync
        self._resolved[self._key(node_class)] = _Resolved(
            node_class.metadata.generation, now + retry
        )

    def _finalize(self, node_class: N) -> None:
        metadata = node_class.metadata
        name = metadata.name or ""
        if self.finalizer not in metadata.finalizers:
            return
        key = self._key(node_class)
        users = tuple(
            sorted(item["metadata"]["name"] for item in self._cluster.nodeclaims_using(name))
        )
        if users:
            if self._waiting.get(key) != users:
                self._log.info(
                    "nodeclass: %s %s is deleted; waiting for NodeClaims %s to go",
                    self.kind,
                    name,
                    ", ".join(users),
                )
                self._waiting[key] = users
            return
        self._waiting.pop(key, None)
        if not self.release(node_class):
            return
        finalizers = [f for f in metadata.finalizers if f != self.finalizer]
        self._cluster.patch(
            name,
            {"metadata": {"finalizers": finalizers, "resourceVersion": metadata.resource_version}},
        )
        self._resolved.pop(key, None)

    # -- logging -------------------------------------------------------------------------------

    def _report_invalid(self, raw: Mapping[str, Any], error: ValidationError) -> None:
        metadata = raw.get("metadata") or {}
        key = (str(metadata.get("uid") or metadata.get("name")), metadata.get("generation"))
        if key in self._invalid:
            return
        self._invalid.add(key)
        self._log.error(
            "nodeclass: %s %s is not valid, skipping it: %s",
            self.kind,
            metadata.get("name"),
            validation_problems(error),
        )

    def _log_conditions(
        self, name: str, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> None:
        old_conditions = {c["type"]: c for c in before.get("conditions") or ()}
        for condition in after.get("conditions") or ():
            old = old_conditions.get(condition["type"])
            changed = old is None or (old["status"], old.get("message")) != (
                condition["status"],
                condition.get("message"),
            )
            if changed and condition["status"] != "True" and condition["type"] != CONDITION_READY:
                self._log.warning(
                    "nodeclass: %s %s: %s is %s: %s",
                    self.kind,
                    name,
                    condition["type"],
                    condition["status"],
                    condition.get("message", ""),
                )
