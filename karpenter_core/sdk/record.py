"""What a provider registers: its record, the context its factory receives, its options."""

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
]
