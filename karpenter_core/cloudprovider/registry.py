"""Provider discovery: entry points, loaded one by one, registered with pluggy, records validated.

Each entry point of the ``karpenter.providers`` group is imported in isolation: a provider that
fails to import (a missing cloud SDK, a bug) becomes a ``ProviderFailure`` with a fix, and the
others still load. Records are validated after collection, because pluggy checks no types.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable

import pluggy

from karpenter_core.cloudprovider.plugin import (
    API_VERSION,
    ENTRY_POINT_GROUP,
    PROJECT_NAME,
    NodeClassInfo,
    ProviderOption,
    ProviderRecord,
    ProviderSpec,
)
from karpenter_core.sdk.versions import changes_since, mismatch, upgrade_fix

__all__ = [
    "PluginSource",
    "ProviderFailure",
    "Registry",
    "RegistryError",
    "UnknownProviderError",
    "build_registry",
    "discover",
    "entry_point_sources",
]

HOOK_NAME = "karpenter_register_providers"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
MAX_NAME_LENGTH = 63

# Import names whose PyPI distribution is spelled differently.
_PYPI_NAMES = {
    "yaml": "PyYAML",
    "dateutil": "python-dateutil",
    "jwt": "PyJWT",
    "OpenSSL": "pyOpenSSL",
    "Crypto": "pycryptodome",
    "grpc": "grpcio",
    "google.protobuf": "protobuf",
    "google.auth": "google-auth",
    "googleapiclient": "google-api-python-client",
    "azure": "azure-identity azure-mgmt-compute",
    "azure.mgmt": "azure-mgmt-compute",
    "google.cloud": "google-cloud-compute",
}
_UNEXPECTED_FIELD = re.compile(
    r"^(ProviderRecord|ProviderOption|ProviderContext|NodeClassInfo)\.__init__\(\) got an "
    r"unexpected keyword argument '(\w+)'"
)
_MISSING_VERSION = re.compile(
    r"^ProviderRecord\.__init__\(\) missing 1 required keyword-only argument: 'api_version'"
)
_IMPORT_STATEMENT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\b|import\s+([\w.]+))")
# Namespace packages: the distribution is named after the first components of the module path.
_NAMESPACES = {"azure.mgmt": 3, "azure": 2, "google.cloud": 3}


class RegistryError(Exception):
    """The installed providers cannot be combined (two of them claim the same name)."""


class UnknownProviderError(LookupError):
    """No provider with the requested name was loaded."""


@dataclass(frozen=True, slots=True)
class ProviderFailure:
    """A provider entry point that did not load, why, and what to run to fix it."""

    entry_point: str
    distribution: str
    reason: str
    fix: str


@dataclass(frozen=True, slots=True)
class PluginSource:
    """A plugin to register: the entry point it comes from and how to load it."""

    entry_point: str
    module: str
    distribution: str
    version: str
    load: Callable[[], object]

    @classmethod
    def from_entry_point(cls, entry_point: importlib.metadata.EntryPoint) -> PluginSource:
        """Describe an installed entry point."""
        dist = entry_point.dist
        return cls(
            entry_point=f"{entry_point.name} = {entry_point.value}",
            module=entry_point.module,
            distribution=dist.name if dist is not None else "(unknown distribution)",
            version=dist.version if dist is not None else "",
            load=entry_point.load,
        )


@dataclass(frozen=True)
class Registry:
    """The providers that loaded, where each came from, and the entry points that failed."""

    records: dict[str, ProviderRecord]
    distributions: dict[str, tuple[str, str]]
    failures: list[ProviderFailure]

    def provider(self, name: str) -> ProviderRecord:
        """The record of provider ``name``; ``UnknownProviderError`` says what is available."""
        record = self.records.get(name)
        if record is not None:
            return record
        for failure in self.failures:
            if failure.entry_point.split(" = ", 1)[0] == name:
                raise UnknownProviderError(
                    f"provider {name!r} ({failure.distribution}) failed to load: "
                    f"{failure.reason}; fix: {failure.fix}"
                )
        available = ", ".join(sorted(self.records)) or "none"
        message = f"unknown provider {name!r}; available: {available}"
        if self.failures:
            failed = "; ".join(
                f"{f.entry_point} ({f.distribution}): {f.reason}" for f in self.failures
            )
            message += f"; failed to load: {failed}"
        raise UnknownProviderError(message)


class _PluginError(Exception):
    """A loaded plugin misbehaved; the message is the reason shown to the user."""


def build_registry(sources: Iterable[PluginSource]) -> Registry:
    """Load, register and validate every source; raise ``RegistryError`` on duplicate names."""
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(ProviderSpec)
    records: dict[str, ProviderRecord] = {}
    owners: dict[str, PluginSource] = {}
    failures: list[ProviderFailure] = []
    for source in sources:
        try:
            plugin = source.load()
        except Exception as error:
            failures.append(_import_failure(source, error))
            continue
        try:
            collected = _collect(manager, source, plugin)
        except Exception as error:
            refused = _removed_field(source, error) or (_describe(error), _reinstall(source))
            failures.append(_failure(source, *refused))
            continue
        for record in collected:
            problem = _invalid(record)
            if problem is not None:
                reason, fix = problem
                failures.append(_failure(source, reason, fix or _reinstall(source)))
                continue
            previous = owners.get(record.name)
            if previous is not None:
                raise RegistryError(
                    f"provider name {record.name!r} is registered twice: by "
                    f"{_origin(previous)} and by {_origin(source)}; uninstall one of them "
                    f"(pip uninstall {previous.distribution} or {source.distribution})"
                )
            owners[record.name] = source
            records[record.name] = record
    return Registry(
        records=records,
        distributions={n: (s.distribution, s.version) for n, s in owners.items()},
        failures=failures,
    )


def entry_point_sources() -> list[PluginSource]:
    """The installed ``karpenter.providers`` entry points, in a stable order."""
    points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    sources = [PluginSource.from_entry_point(ep) for ep in points]
    return sorted(sources, key=lambda s: (s.distribution, s.entry_point))


@functools.cache
def discover() -> Registry:
    """The providers installed in this environment (computed once per process)."""
    return build_registry(entry_point_sources())


def _collect(
    manager: pluggy.PluginManager, source: PluginSource, plugin: object
) -> list[ProviderRecord]:
    """Register ``plugin`` and call its hook alone, so one bad plugin cannot hide the others."""
    manager.register(plugin, name=source.entry_point)
    try:
        caller = manager.subset_hook_caller(
            HOOK_NAME, remove_plugins=[p for p in manager.get_plugins() if p is not plugin]
        )
        if not caller.get_hookimpls():
            others = sorted(c.name for c in manager.get_hookcallers(plugin) or ())
            found = f" (it implements {', '.join(others)})" if others else ""
            raise _PluginError(
                f"{source.module} has no @hookimpl function named {HOOK_NAME}{found}"
            )
        records: list[ProviderRecord] = []
        for result in caller():
            if isinstance(result, str | bytes) or not isinstance(result, Sequence):
                raise _PluginError(
                    f"{HOOK_NAME} must return a list of ProviderRecord, got {type(result).__name__}"
                )
            records.extend(result)
        return records
    except Exception:
        manager.unregister(plugin)
        raise


def _invalid(record: object) -> tuple[str, str | None] | None:
    """Why a record cannot be used, and a fix if the generic one does not apply; or None."""
    if not isinstance(record, ProviderRecord):
        return f"{HOOK_NAME} returned a {type(record).__name__}, not a ProviderRecord", None
    label = f"provider {record.name!r}"
    version = record.api_version
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return f"{label} has an invalid api_version {version!r}", None
    name = record.name
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not NAME_PATTERN.match(name):
        return (
            f"invalid provider name {name!r} (lowercase letters, digits and '-', starting with "
            f"a letter, at most {MAX_NAME_LENGTH} characters)",
            None,
        )
    if version != API_VERSION:
        return mismatch(name, version)
    if not callable(record.factory):
        return f"{label} has a factory that is not callable", None
    for hook in ("controllers", "conformance", "default_scenario", "convert"):
        if getattr(record, hook) is not None and not callable(getattr(record, hook)):
            return f"{label} has a {hook} hook that is not callable", None
    for field_name, kind in (("node_classes", NodeClassInfo), ("options", ProviderOption)):
        items = getattr(record, field_name)
        if isinstance(items, str) or not all(isinstance(i, kind) for i in items):
            return f"{label}: {field_name} must hold {kind.__name__} objects", None
    capabilities = record.capabilities
    if not isinstance(capabilities, frozenset) or not all(isinstance(c, str) for c in capabilities):
        return f"{label}: capabilities must be a frozenset of strings", None
    role = record.cluster_role
    if role is not None and not isinstance(role, Traversable):
        return f"{label}: cluster_role must be a file of its package (importlib.resources)", None
    if role is not None and not role.is_file():
        return f"{label}: its cluster_role file {role} does not exist", None
    return None


def _removed_field(source: PluginSource, error: Exception) -> tuple[str, str] | None:
    """For a plugin that built a record without ``api_version`` or with a field this core's
    record does not have (written for version 1): the reason and fix naming it; else None."""
    if not isinstance(error, TypeError):
        return None
    provider = source.entry_point.split(" = ", 1)[0]
    if _MISSING_VERSION.match(str(error)):
        reason = (
            f"provider {provider!r} does not say which provider record version it is built for "
            f"(api_version), so it was built for version 1; this core speaks version "
            f"{API_VERSION}: {changes_since(provider, 1)}"
        )
        return reason, upgrade_fix(1)
    match = _UNEXPECTED_FIELD.match(str(error))
    if match is None:
        return None
    cls, field_name = match.groups()
    reason = (
        f"provider {provider!r} passes {cls} field {field_name!r}, which this core's record "
        f"(version {API_VERSION}) does not have: it was built for an earlier version; since "
        f"version 1, {changes_since(provider, 1)}"
    )
    return reason, upgrade_fix(1)


def _import_failure(source: PluginSource, error: Exception) -> ProviderFailure:
    missing = _missing_module(error) if isinstance(error, ModuleNotFoundError) else None
    if missing and not _is_own_module(missing, source.module):
        return _failure(source, _describe(error), f"pip install {_pypi_name(missing)}")
    return _failure(source, _describe(error), _reinstall(source))


def _missing_module(error: ModuleNotFoundError) -> str | None:
    """The module the failing import statement asked for.

    ``error.name`` is only the first missing part (``azure`` for ``from azure.mgmt.compute
    import X``); the statement itself names the distribution to install more precisely.
    """
    missing = error.name
    frames = [
        f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<")
    ]
    if missing and frames:
        match = _IMPORT_STATEMENT.match(frames[-1].line or "")
        wanted = match and (match.group(1) or match.group(2))
        if wanted and (wanted == missing or wanted.startswith(missing + ".")):
            return wanted
    return missing


def _is_own_module(missing: str, module: str) -> bool:
    """Whether the missing module is the provider's own package (a broken installation)."""
    return module == missing or module.startswith(missing + ".")


def _pypi_name(module: str) -> str:
    """The distribution to install for a missing import name (best effort)."""
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        prefix = ".".join(parts[:length])
        if prefix in _NAMESPACES and len(parts) >= _NAMESPACES[prefix]:
            kept = parts[: _NAMESPACES[prefix]]
            kept[-1] = re.sub(r"_v\d+\w*$", "", kept[-1])
            return "-".join(kept).replace("_", "-")
        if prefix in _PYPI_NAMES:
            return _PYPI_NAMES[prefix]
    return parts[0].replace("_", "-")


def _describe(error: BaseException) -> str:
    """One line: the exception type, its message and, for bugs, where it was raised."""
    if isinstance(error, _PluginError):
        return str(error)
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, ImportError | SyntaxError):
        return text
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        text += f" (at {frames[-1].filename}:{frames[-1].lineno})"
    return text


def _reinstall(source: PluginSource) -> str:
    return (
        f"pip install --force-reinstall {source.distribution}; if the error persists, "
        f"report it to the maintainers of {source.distribution}"
    )


def _failure(source: PluginSource, reason: str, fix: str) -> ProviderFailure:
    return ProviderFailure(source.entry_point, source.distribution, reason, fix)


def _origin(source: PluginSource) -> str:
    version = f" {source.version}" if source.version else ""
    return f"{source.distribution}{version} (entry point {source.entry_point})"
