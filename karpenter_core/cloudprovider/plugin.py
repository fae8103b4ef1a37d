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

    from karpenter_core.cloudprovider.convert import NodeClassConverter
    from karpenter_core.cloudprovider.types import CloudProvider

__all__ = [
    "API_VERSION",
    "PROJECT_NAME",
    "Capability",
    "NodeClassInfo",
    "NodeClassLookup",
    "OptionConflict",
    "ProviderContext",
    "ProviderOption",
    "ProviderRecord",
    "hookimpl",
    "hookspec",
    "option_env",
    "option_flag",
    "option_key",
    "provider_settings",
]

PROJECT_NAME = "karpenter"
ENTRY_POINT_GROUP = "karpenter.providers"
CLI_ENTRY_POINT_GROUP = "karpenter.cli"
"""Entry points that add commands to ``karpenter``: each loads a ``click.Command``."""
API_VERSION = 2
"""The record version this core speaks. A change to the record, the context or the provider SDK
either stays compatible (new optional names) or raises it; discovery refuses a record of another
version (``karpenter_core.sdk.versions`` says what each version changed)."""
ENV_PREFIX = "KARPENTER_"
"""Every provider option's environment variable starts so (``KARPENTER_AWS_REGION``): clear of
the clouds' own SDK variables (``AWS_*``, ``AZURE_*``, ``ARM_*``, ``GOOGLE_*``)."""

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
    """A provider setting: its name, help, default and the environment variable it was read from
    before record version 2 (still read when one provider runs).

    The core offers it as ``--<provider>-<name>`` and reads ``KARPENTER_<PROVIDER>_<NAME>``
    (``option_flag``, ``option_env``); when one provider runs, ``--<name>`` and ``env`` too."""

    name: str
    help: str
    default: str | None = None
    env: str | None = None
    simulate: bool = True
    """False for a setting only the running controller reads (creating or tagging resources):
    ``karpenter simulate`` does not offer it."""


def _qualified(provider: str, name: str) -> str:
    """``<provider>-<name>``, or the name alone when it starts with the provider's name."""
    return name if name.startswith(f"{provider}-") else f"{provider}-{name}"


def option_flag(provider: str, name: str) -> str:
    """The command-line flag of option ``name`` of ``provider``: ``--aws-region`` (an option
    already named after its provider keeps its name: ``aws-endpoint-url``)."""
    return f"--{_qualified(provider, name)}"


def option_env(provider: str, name: str) -> str:
    """The environment variable of option ``name`` of ``provider``: ``KARPENTER_AWS_REGION``."""
    return ENV_PREFIX + _qualified(provider, name).upper().replace("-", "_")


def option_key(provider: str, name: str) -> str:
    """The key of ``option_flag`` among parsed command-line values (``aws_region``)."""
    return _qualified(provider, name).replace("-", "_")


class OptionConflict(ValueError):
    """An unprefixed option was given while several providers that declare it run."""


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
    api_version: int = field(kw_only=True)
    """The record version the provider is built for, as a number (``api_version=2``): required,
    so that a provider written before the field was required (version 1) is refused by name."""
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

    def settings(
        self,
        values: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
        *,
        aliases: Callable[[str], bool] = lambda _: True,
    ) -> dict[str, Any]:
        """The value of each declared option, keyed by its name: from ``values`` (command-line
        values keyed as parsers give them: ``aws_region``), else ``KARPENTER_<PROVIDER>_<NAME>``
        in ``environ`` (default: this process's), else its default. Options for which
        ``aliases(name)`` holds also read the unprefixed key (``region``) after the prefixed
        one and the option's own ``env`` after the prefixed variable."""
        environ = os.environ if environ is None else environ
        settings: dict[str, Any] = {}
        for option in self.options:
            alias = aliases(option.name)
            candidates = [
                values.get(option_key(self.name, option.name)),
                values.get(option.name.replace("-", "_")) if alias else None,
                environ.get(option_env(self.name, option.name)),
                environ.get(option.env) if alias and option.env else None,
            ]
            value = next((v for v in candidates if v is not None), None)
            settings[option.name] = option.default if value is None else value
        return settings


def provider_settings(
    records: Sequence[ProviderRecord],
    values: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The settings of each provider that runs, by provider name (``ProviderRecord.settings``).

    With one provider, its unprefixed flags and former variables are read too. With several, an
    unprefixed flag or former variable counts only for the one provider declaring it; an
    unprefixed flag given that several of them declare raises ``OptionConflict`` naming the
    prefixed flags (a former variable several declare is not read: the environment is shared
    with the clouds' own tools)."""
    owners: dict[str, list[str]] = {}
    for record in records:
        for option in record.options:
            owners.setdefault(option.name, []).append(record.name)
    for name, providers in owners.items():
        if len(providers) > 1 and values.get(name.replace("-", "_")) is not None:
            flags = " or ".join(option_flag(p, name) for p in providers)
            raise OptionConflict(
                f"--{name} is an option of {len(providers)} of the providers that run "
                f"({', '.join(providers)}): use {flags}"
            )
    return {
        record.name: record.settings(values, environ, aliases=lambda n: len(owners[n]) == 1)
        for record in records
    }


class ProviderSpec:
    """Hook specifications of the ``karpenter`` plugin project."""

    @hookspec
    def karpenter_register_providers(self) -> Sequence[ProviderRecord]:  # type: ignore[empty-body]
        """Return the provider records this plugin contributes."""
