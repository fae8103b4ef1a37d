"""The provider record's versions: what each changed, and what a provider's author does to move up.

``API_VERSION`` is the version this core speaks. A change to the record, the factory's context or
the SDK either stays compatible (new optional names) or raises it, with an entry here; discovery
refuses a record of another version with a message built from these entries
(docs/writing-a-provider.md, "Versions").
"""

from __future__ import annotations

from dataclasses import dataclass

from karpenter_core.cloudprovider.plugin import API_VERSION

__all__ = [
    "API_VERSION",
    "CHANGES",
    "GUIDE",
    "RecordVersion",
    "changes_since",
    "mismatch",
    "upgrade_fix",
]

GUIDE = "docs/writing-a-provider.md#versions"
"""Where the versions and the compatibility rule are explained."""


@dataclass(frozen=True, slots=True)
class RecordVersion:
    """One record version: what changed from the one before (``{provider}`` stands for the
    provider's name), and what a provider's author does to move up to it."""

    version: int
    changed: str
    upgrade: str


CHANGES = (
    RecordVersion(
        1,
        "the first record: ProviderRecord, ProviderContext and ProviderOption from "
        "karpenter_core.cloudprovider; options offered unprefixed as --<name>",
        "",
    ),
    RecordVersion(
        2,
        "options are now prefixed --{provider}-<name> (environment KARPENTER_{PROVIDER}_<NAME>), "
        "providers import only karpenter_core.sdk, and NodeClasses reach a provider through "
        "ProviderContext.node_classes (the use_node_classes hook is gone)",
        "import from karpenter_core.sdk only, read NodeClasses through context.node_classes "
        "and declare api_version=2",
    ),
)
"""Every record version, oldest first; the last is ``API_VERSION``."""


def changes_since(provider: str, version: int) -> str:
    """What changed after record ``version`` up to ``API_VERSION``, for ``provider``: one line."""
    return "; ".join(
        change.changed.format(provider=provider, PROVIDER=provider.upper().replace("-", "_"))
        for change in CHANGES
        if version < change.version <= API_VERSION
    )


def upgrade_fix(version: int) -> str:
    """The fix for a provider built for an older record ``version``: one line."""
    steps = "; ".join(c.upgrade for c in CHANGES if version < c.version <= API_VERSION)
    return (
        f"install a release of it built for version {API_VERSION}, or rebuild it: {steps} "
        f"(see {GUIDE})"
    )


def mismatch(provider: str, version: int) -> tuple[str, str]:
    """Why a record of ``version`` from ``provider`` is refused, and the fix: each one line."""
    built = f"provider {provider!r} was built for provider record version {version}"
    speaks = f"this core speaks version {API_VERSION}"
    if version > API_VERSION:
        return f"{built}; {speaks}", "pip install --upgrade karpenter-core"
    return f"{built}; {speaks}: {changes_since(provider, version)}", upgrade_fix(version)
