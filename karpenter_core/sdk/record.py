"""What a provider registers: its record, the context its factory receives, its options, and the
files of its package the record points at; whether the factory's context is offline."""

from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from importlib.resources.abc import Traversable

from karpenter_core.cloudprovider.plugin import (
    API_VERSION,
    Capability,
    NodeClassInfo,
    NodeClassLookup,
    ProviderContext,
    ProviderOption,
    ProviderRecord,
    hookimpl,
    option_env,
    option_flag,
)

__all__ = [
    "API_VERSION",
    "Capability",
    "NodeClassInfo",
    "NodeClassLookup",
    "ProviderContext",
    "ProviderOption",
    "ProviderRecord",
    "hookimpl",
    "is_offline",
    "offline_default",
    "offline_fallback",
    "option_env",
    "option_flag",
    "packaged_file",
    "packaged_text",
]


def packaged_file(package: str, *parts: str) -> Traversable:
    """A file shipped in ``package`` (e.g. the record's ``cluster_role``)."""
    return resources.files(package).joinpath(*parts)


def packaged_text(package: str, *parts: str) -> Callable[[], str]:
    """Reads the text file ``parts`` of ``package`` when called (e.g. the record's
    ``default_scenario``: ``packaged_text("karpenter_acme", "scenarios", "default.yaml")``)."""
    return lambda: packaged_file(package, *parts).read_text(encoding="utf-8")


def is_offline(context: ProviderContext) -> bool:
    """Whether the factory builds an offline provider (``karpenter simulate``): no cluster and no
    cloud clients handed in, so it serves a packaged catalog and launches nothing."""
    return context.kube_client is None and not context.clients


def offline_default(
    context: ProviderContext, name: str, default: Callable[[], str]
) -> ProviderContext:
    """``context`` with option ``name`` set to ``default()`` when it is offline and the option is
    not given (e.g. a region to price the packaged catalog in); else ``context`` itself."""
    if not is_offline(context) or context.settings.get(name):
        return context
    return replace(context, settings={**context.settings, name: default()})


def offline_fallback(
    context: ProviderContext, name: str, fallback: str, what: str
) -> ProviderContext:
    """``offline_default`` with a fixed ``fallback``, logged as a warning when it is used:
    ``no <what> is configured; using <fallback>`` (``what`` names the setting and where it is
    read from, e.g. ``GCP region (--region, CLUSTER_LOCATION)``)."""

    def warned() -> str:
        context.logger.warning("no %s is configured; using %s", what, fallback)
        return fallback

    return offline_default(context, name, warned)
