"""The record's version: a provider built for another version is refused at discovery, by
``karpenter simulate`` and by the controller, with one line saying what changed and what to do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from karpenter_core.cli.main import cli
from karpenter_core.cloudprovider.registry import PluginSource, Registry, build_registry, discover
from karpenter_core.sdk.record import API_VERSION, ProviderRecord, hookimpl
from karpenter_core.sdk.versions import CHANGES, mismatch

REFUSAL = (
    "provider 'foo' was built for provider record version 1; this core speaks version 2: "
    "options are now prefixed --foo-<name> (environment KARPENTER_FOO_<NAME>), providers import "
    "only karpenter_core.sdk, and NodeClasses reach a provider through "
    "ProviderContext.node_classes (the use_node_classes hook is gone)"
)
FIX = (
    "install a release of it built for version 2, or rebuild it: import from karpenter_core.sdk "
    "only, read NodeClasses through context.node_classes and declare api_version=2 (see "
    "docs/writing-a-provider.md#versions)"
)


def _source(name: str, build: Callable[[], ProviderRecord]) -> PluginSource:
    class Plugin:
        @hookimpl
        def karpenter_register_providers(self) -> list[ProviderRecord]:
            return [build()]

    return PluginSource(
        f"{name} = karpenter_{name}.plugin",
        f"karpenter_{name}.plugin",
        f"karpenter-{name}",
        "0.1.0",
        Plugin,
    )


def _factory(context: Any) -> Any:
    return discover().provider("kwok").factory(context)


def _registry() -> Registry:
    return build_registry(
        [
            _source("foo", lambda: ProviderRecord(name="foo", factory=_factory, api_version=1)),
            _source("kwok", _current),
        ]
    )


def _current() -> ProviderRecord:
    return ProviderRecord(name="kwok", factory=_factory, api_version=API_VERSION)


def test_the_changelog_ends_at_the_cores_version() -> None:
    assert API_VERSION == 2
    assert [change.version for change in CHANGES] == list(range(1, API_VERSION + 1))
    assert all(change.changed for change in CHANGES)
    assert all(change.upgrade for change in CHANGES[1:])


def test_a_record_of_version_1_is_refused_and_a_current_one_loads() -> None:
    registry = _registry()

    assert list(registry.records) == ["kwok"]
    (failure,) = registry.failures
    assert (failure.reason, failure.fix) == (REFUSAL, FIX)
    assert (failure.reason, failure.fix) == mismatch("foo", 1)


def test_a_record_passing_a_field_the_record_no_longer_has_is_refused() -> None:
    def old() -> ProviderRecord:
        return ProviderRecord(name="bar", factory=_factory, use_node_classes=True)  # type: ignore[call-arg]

    (failure,) = build_registry([_source("bar", old)]).failures

    assert failure.reason.startswith(
        "provider 'bar' passes ProviderRecord field 'use_node_classes', which this core's "
        "record (version 2) does not have: it was built for an earlier version; since "
        "version 1, options are now prefixed --bar-<name>"
    )
    assert failure.fix == FIX
    assert "\n" not in failure.reason


def test_a_record_without_a_version_is_refused_as_built_for_version_1() -> None:
    """Version 1 records left ``api_version`` at its default; the field is required since."""

    def old() -> ProviderRecord:
        return ProviderRecord(name="baz", factory=_factory)  # type: ignore[call-arg]

    registry = build_registry([_source("baz", old), _source("kwok", _current)])

    assert list(registry.records) == ["kwok"]
    (failure,) = registry.failures
    assert failure.reason == (
        "provider 'baz' does not say which provider record version it is built for "
        "(api_version), so it was built for version 1; this core speaks version 2: options are "
        "now prefixed --baz-<name> (environment KARPENTER_BAZ_<NAME>), providers import only "
        "karpenter_core.sdk, and NodeClasses reach a provider through "
        "ProviderContext.node_classes (the use_node_classes hook is gone)"
    )
    assert failure.fix == FIX


@pytest.mark.parametrize(
    "args",
    [["simulate", "--provider", "foo"], ["controller", "--provider", "foo"]],
    ids=["simulate", "controller"],
)
def test_the_cli_refuses_a_version_1_provider_in_one_line(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = _registry()
    monkeypatch.setattr("karpenter_core.cli.simulate.discover", lambda: registry)
    monkeypatch.setattr("karpenter_core.cli.controller.discover", lambda: registry)

    result = CliRunner().invoke(cli, args)

    assert result.exit_code == 1
    assert result.output == (
        f"Error: provider 'foo' (karpenter-foo) failed to load: {REFUSAL}; fix: {FIX}\n"
    )


def test_the_cli_runs_a_current_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = _registry()
    monkeypatch.setattr("karpenter_core.cli.simulate.discover", lambda: registry)

    result = CliRunner().invoke(cli, ["simulate", "--provider", "kwok", "-o", "json"])

    assert result.exit_code == 0, result.output
    assert '"provider": "kwok"' in result.output
