"""What a provider registers: its record, the context its factory receives, its options, and the
files of its package the record points at."""

from collections.abc import Callable
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
