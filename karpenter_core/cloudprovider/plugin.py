"""The provider seam: a pluggy hookspec through which a provider registers a small record.

A provider distribution declares an entry point in the ``karpenter.providers`` group whose module
implements ``karpenter_register_providers``. Discovery happens once; afterwards the core calls the
provider object directly (pluggy's dispatch is too slow for hot paths).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from pydantic import BaseModel

    from karpenter_core.cloudprovider.types import CloudProvider
    from karpenter_core.convert.types import NodeClassConverter

__all__ = [
    "API_VERSION",
    "PROJECT_NAME",
    "Capability",
    "NodeClassInfo",
    "NodeClassLookup",
    "ProviderContext",
    "ProviderOption",
    "ProviderRecord",
    "hookimpl",
    "hookspec",
]

PROJECT_NAME = "karpenter"
ENTRY_POINT_GROUP = "karpenter.providers"
CLI_ENTRY_POINT_GROUP = "karpenter.cli"
"""Entry points that add commands to ``karpenter``: each loads a ``click.Command``."""
API_VERSION = 1
"""The record version this core understands; records only ever gain optional fields."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class Capability:
    """Capability flags a provider may declare (the conformance suite reads them)."""

    SPOT = "spot"
    INTERRUPTION = "interruption"
    DRIFT = "drift"
    REPAIR = "repair"
    OFFLINE_CATALOG = "offline-catalog"


@dataclass(frozen=True, slots=True)
class NodeClassInfo:
    """A NodeClass kind the provider reads, and how to publish its CRD."""

    model: type[BaseModel]
    group: str
    version: str
    kind: str
    plural: str
    printer_columns: Sequence[Mapping[str, Any]] = ()
    short_names: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class ProviderOption:
    """A provider setting: CLI flag ``--<name>``, environment variable, default and help."""

    name: str
    help: str
    default: str | None = None
    env: str | None = None
    simulate: bool = True
    """False for a setting only the running controller reads (creating or tagging resources):
    ``karpenter simulate`` does not offer it."""


NodeClassLookup = Callable[[str, str], Any]
"""``lookup(kind, name)``: the provider's NodeClass of that kind and name, decoded with its
``NodeClassInfo.model``, or None when there is none. It answers from memory (no I/O)."""


@dataclass(frozen=True, slots=True)
class ProviderContext:
    """What a provider factory receives.

    ``kube_client`` is a ``kubernetes.client.ApiClient`` connected to the cluster, or None offline
    (``simulate``); ``settings`` holds the values of the provider's declared options;
    ``clients`` holds SDK clients the caller hands in by the names the provider documents (a
    provider builds the ones not given; tests hand in instrumented clients); ``events`` is the
    core's event recorder when running as the controller, or None offline: an object with
    ``publish(obj, event_type, reason, message)`` (True when the event was queued, False when it
    was a recent duplicate or dropped), ``obj`` being a manifest dict with ``apiVersion``,
    ``kind`` and ``metadata`` (``name``, ``namespace`` if namespaced, ``uid``); it de-duplicates,
    caps the message and sends off the caller's thread.

    ``node_classes`` is the provider's read view of its NodeClasses (a ``NodeClassLookup``):
    the controller's informer cache when running as the controller, the input's NodeClasses in
    ``simulate``; None when the caller has no view (a provider built only to list instances,
    as the conformance registrar does), and then the provider knows no NodeClass.
    """

    settings: Mapping[str, Any] = field(default_factory=dict)
    kube_client: Any = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("karpenter.provider"))
    clients: Mapping[str, Any] = field(default_factory=dict)
    events: Any = None
    node_classes: NodeClassLookup | None = None


@dataclass(frozen=True, slots=True)
class ProviderRecord:
    """Everything the core needs to know about a provider, registered once at discovery."""

    name: str
    factory: Callable[[ProviderContext], CloudProvider]
    node_classes: Sequence[NodeClassInfo] = ()
    options: Sequence[ProviderOption] = ()
    controllers: Callable[[ProviderContext, CloudProvider], Sequence[Any]] | None = None
    capabilities: frozenset[str] = frozenset()
    description: str = ""
    api_version: int = API_VERSION
    default_scenario: Callable[[], str] | None = None
    """The YAML ``karpenter simulate --provider <name>`` reads when given no file (default: the
    core's KWOK scenario)."""
    conformance: Callable[[], Any] | None = None
    """Returns the provider's conformance profile: how the ``karpenter-conformance`` suite starts
    a fake of the provider's cloud and acts on it (see docs/writing-a-provider.md)."""
    cluster_role: Traversable | None = None
    """A YAML file in the provider's package holding one ClusterRole: the permissions the
    provider needs beyond the core's. ``karpenter rbac --provider <name>`` publishes its rules as
    the ClusterRole ``karpenter-<name>``, bound to the controller's ServiceAccount."""
    convert: Callable[[], NodeClassConverter] | None = None
    """Returns the provider's converter of its NodeClass kinds (older APIs to v1, and checks of
    NodePools that use them) for ``karpenter convert`` and ``simulate``."""

    def settings(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The value of each declared option: from ``values`` (keyed by the option's name with
        ``_`` for ``-``, as command-line parsers give them), else its environment variable,
        else its default."""
        settings: dict[str, Any] = {}
        for option in self.options:
            value = values.get(option.name.replace("-", "_"))
            if value is None and option.env:
                value = os.environ.get(option.env)
            settings[option.name] = option.default if value is None else value
        return settings


class ProviderSpec:
    """Hook specifications of the ``karpenter`` plugin project."""

    @hookspec
    def karpenter_register_providers(self) -> Sequence[ProviderRecord]:  # type: ignore[empty-body]
        """Return the provider records this plugin contributes."""
