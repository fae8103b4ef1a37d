"""Provider discovery: real distributions installed with pip, real entry points, the real CLI.

The session fixture installs the two fixture providers (tests/fixtures/providers/good and
broken) into a temporary directory; ``karpenter providers`` then runs in a subprocess with that
directory on PYTHONPATH. The registry's validation rules are tested in-process with plugin objects.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from karpenter_core.cloudprovider.plugin import (
    API_VERSION,
    ProviderContext,
    ProviderOption,
    ProviderRecord,
    hookimpl,
)
from karpenter_core.cloudprovider.registry import (
    PluginSource,
    RegistryError,
    UnknownProviderError,
    _pypi_name,
    build_registry,
    discover,
)
from karpenter_core.cloudprovider.types import CloudProvider

# pip installs test distributions; tests run the karpenter command
pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parents[1] / "fixtures" / "providers"
KARPENTER = Path(sys.executable).parent / "karpenter"


@pytest.fixture(scope="session")
def provider_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the installed good and broken fixture distributions."""
    root = tmp_path_factory.mktemp("providers")
    target = root / "site"
    sources = []
    for name in ("good", "broken"):  # copied, so the build leaves nothing in the source tree
        sources.append(shutil.copytree(FIXTURES / name, root / "src" / name))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            *map(str, sources),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


def karpenter(*args: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the ``karpenter`` console script, with ``path`` on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run(
        [str(KARPENTER), *args], capture_output=True, text=True, env=env, check=False, timeout=120
    )


@pytest.fixture(scope="module")
def environment() -> dict[str, Any]:
    """What ``karpenter providers -o json`` reports without the fixture providers (whatever else
    is installed here)."""
    result = karpenter("providers", "-o", "json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _names(report: dict[str, Any]) -> set[str]:
    return {p["name"] for p in report["providers"]}


def test_lists_installed_providers_and_reports_the_broken_one(
    provider_path: Path, environment: dict[str, Any]
) -> None:
    result = karpenter("providers", path=provider_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines[1 : lines.index("")]}
    assert {"kwok", "test"} <= set(rows)
    assert set(rows) == _names(environment) | {"test"}
    assert "karpenter-testprovider==0.1.0" in rows["test"]
    assert "TestNodeClass (karpenter.test.sh/v1)" in rows["test"]
    assert "karpenter-kwok==" in rows["kwok"]
    assert "KWOKNodeClass (karpenter.kwok.sh/v1alpha1)" in rows["kwok"]
    failures = "\n".join(lines[lines.index("") + 1 :])
    count = len(environment["failures"]) + 1
    assert f"{count} provider{'s' if count > 1 else ''} failed to load" in failures
    assert "broken = karpenter_brokenprovider.plugin  (karpenter-brokenprovider)" in failures
    assert "reason: ModuleNotFoundError: No module named 'karpenter_missing_sdk'" in failures
    assert "fix:    pip install karpenter-missing-sdk" in failures


def test_json_output(provider_path: Path, environment: dict[str, Any]) -> None:
    result = karpenter("providers", "-o", "json", path=provider_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    by_name = {p["name"]: p for p in report["providers"]}
    assert {"kwok", "test"} <= set(by_name)
    assert set(by_name) == _names(environment) | {"test"}
    assert by_name["test"]["distribution"] == "karpenter-testprovider"
    assert by_name["test"]["version"] == "0.1.0"
    assert by_name["test"]["capabilities"] == ["offline-catalog"]
    assert by_name["kwok"]["nodeClasses"] == [
        {
            "group": "karpenter.kwok.sh",
            "version": "v1alpha1",
            "kind": "KWOKNodeClass",
            "plural": "kwoknodeclasses",
        }
    ]
    assert [f for f in report["failures"] if f not in environment["failures"]] == [
        {
            "entryPoint": "broken = karpenter_brokenprovider.plugin",
            "distribution": "karpenter-brokenprovider",
            "reason": "ModuleNotFoundError: No module named 'karpenter_missing_sdk'",
            "fix": "pip install karpenter-missing-sdk",
        }
    ]


def test_strict_fails_only_when_a_provider_failed(provider_path: Path) -> None:
    broken = karpenter("providers", "--strict", path=provider_path)
    assert broken.returncode == 1
    assert "karpenter-brokenprovider" in broken.stdout
    clean = karpenter("providers", "--strict")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "failed to load" not in clean.stdout


def test_discovered_test_provider_launches(provider_path: Path) -> None:
    """The example provider of the guide works end to end through discovery."""
    script = """
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.registry import discover
from karpenter_core.cloudprovider.types import CloudProvider, NodeClaimNotFound

cloud = discover().provider("test").factory(ProviderContext())
assert isinstance(cloud, CloudProvider)
claim = NodeClaim.from_manifest({
    "metadata": {"name": "claim-1"},
    "spec": {
        "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                          "values": ["test-medium", "test-large"]}],
        "nodeClassRef": {"group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "x"},
    },
})
launched = cloud.create(claim)
assert cloud.create(claim) is launched
assert [c.status.provider_id for c in cloud.list()] == ["test://claim-1"]
try:
    cloud.delete(launched)
except NodeClaimNotFound:
    pass
print(launched.metadata.labels["node.kubernetes.io/instance-type"], cloud.list())
"""
    env = {**os.environ, "PYTHONPATH": str(provider_path)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["test-medium", "[]"]


# The registry, in-process -------------------------------------------------------------------


def _record(name: str = "alpha", **changes: object) -> ProviderRecord:
    record = ProviderRecord(name=name, factory=lambda context: None, api_version=API_VERSION)  # type: ignore[arg-type,return-value]
    return dataclasses.replace(record, **changes)


class _Plugin:
    """A plugin object returning fixed records from its hook."""

    def __init__(self, *records: object) -> None:
        self.records = list(records)

    @hookimpl
    def karpenter_register_providers(self) -> list[object]:
        return self.records


def _source(entry: str, load: Callable[[], object], distribution: str = "") -> PluginSource:
    name, _, module = entry.partition(" = ")
    return PluginSource(
        entry_point=entry,
        module=module,
        distribution=distribution or f"karpenter-{name}",
        version="1.0",
        load=load,
    )


def _plugin_source(name: str, *records: object) -> PluginSource:
    return _source(f"{name} = plugins.{name}", lambda: _Plugin(*records))


def test_registry_collects_records_with_their_distribution() -> None:
    registry = build_registry(
        [_plugin_source("a", _record("alpha")), _plugin_source("b", _record("beta"))]
    )
    assert sorted(registry.records) == ["alpha", "beta"]
    assert registry.distributions == {
        "alpha": ("karpenter-a", "1.0"),
        "beta": ("karpenter-b", "1.0"),
    }
    assert registry.failures == []
    assert registry.provider("beta").name == "beta"


def test_duplicate_provider_names_name_both_distributions() -> None:
    sources = [_plugin_source("a", _record("same")), _plugin_source("b", _record("same"))]
    with pytest.raises(RegistryError) as error:
        build_registry(sources)
    message = str(error.value)
    assert "'same' is registered twice" in message
    assert "karpenter-a 1.0 (entry point a = plugins.a)" in message
    assert "karpenter-b 1.0 (entry point b = plugins.b)" in message
    assert message.endswith("(pip uninstall karpenter-a or karpenter-b)")


def test_a_newer_record_api_version_fails_alone() -> None:
    registry = build_registry(
        [
            _plugin_source("new", _record("future", api_version=API_VERSION + 1)),
            _plugin_source("ok", _record("present")),
        ]
    )
    assert list(registry.records) == ["present"]
    (failure,) = registry.failures
    assert failure.distribution == "karpenter-new"
    assert failure.reason == (
        f"provider 'future' was built for provider record version {API_VERSION + 1}; "
        f"this core speaks version {API_VERSION}"
    )
    assert failure.fix == "pip install --upgrade karpenter-core"


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (_record(api_version=0), "invalid api_version 0"),
        (_record(api_version="1"), "invalid api_version '1'"),
        (_record("Bad_Name"), "invalid provider name 'Bad_Name'"),
        (_record("x" * 64), "at most 63 characters"),
        (_record(factory="not callable"), "factory that is not callable"),
        (_record(convert="not callable"), "has a convert hook that is not callable"),
        (_record(node_classes=["KWOKNodeClass"]), "node_classes must hold NodeClassInfo"),
        (_record(capabilities={"spot"}), "capabilities must be a frozenset"),
        (_record(cluster_role="rbac/role.yaml"), "cluster_role must be a file of its package"),
        (_record(cluster_role=Path("/nonexistent/role.yaml")), "cluster_role file /nonexistent"),
        ("alpha", "returned a str, not a ProviderRecord"),
    ],
)
def test_invalid_records_become_failures(record: object, reason: str) -> None:
    registry = build_registry([_plugin_source("bad", record)])
    assert registry.records == {}
    (failure,) = registry.failures
    assert reason in failure.reason
    assert failure.fix.startswith("pip install --force-reinstall karpenter-bad")


def test_a_hook_that_raises_is_reported_with_its_location() -> None:
    class Raising:
        @hookimpl
        def karpenter_register_providers(self) -> list[ProviderRecord]:
            raise RuntimeError("credentials file is corrupt")

    registry = build_registry(
        [_source("raising = plugins.raising", Raising), _plugin_source("ok", _record("ok"))]
    )
    assert list(registry.records) == ["ok"]
    (failure,) = registry.failures
    assert failure.reason.startswith("RuntimeError: credentials file is corrupt (at ")
    assert __file__ in failure.reason


def test_a_module_without_the_hook_is_reported() -> None:
    class Misspelled:
        @hookimpl
        def karpenter_register_provider(self) -> list[ProviderRecord]:
            return [_record()]

    registry = build_registry([_source("typo = plugins.typo", Misspelled)])
    (failure,) = registry.failures
    assert failure.reason == (
        "plugins.typo has no @hookimpl function named karpenter_register_providers "
        "(it implements karpenter_register_provider)"
    )


def test_a_hook_must_return_a_list() -> None:
    registry = build_registry([_source("one = plugins.one", lambda: _OneRecord())])
    (failure,) = registry.failures
    assert failure.reason == (
        "karpenter_register_providers must return a list of ProviderRecord, got ProviderRecord"
    )


class _OneRecord:
    @hookimpl
    def karpenter_register_providers(self) -> ProviderRecord:
        return _record()


@pytest.mark.parametrize(
    ("statement", "fix"),
    [
        ("import karpenter_missing_sdk", "pip install karpenter-missing-sdk"),
        (
            "from azure.mgmt.containerservice import ContainerServiceClient",
            "pip install azure-mgmt-containerservice",
        ),
        ("from azure.cosmos import CosmosClient", "pip install azure-cosmos"),
        ("import google.cloud.storage", "pip install google-cloud-storage"),
        ("import yaml.missing_part", "pip install PyYAML"),
    ],
)
def test_a_missing_dependency_gets_a_pip_install_fix(
    statement: str, fix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"karpenter_cloud_{abs(hash(statement))}"
    (tmp_path / f"{module}.py").write_text(f"{statement}\n")
    monkeypatch.syspath_prepend(tmp_path)
    registry = build_registry(
        [_source(f"cloud = {module}", lambda: importlib.import_module(module))]
    )
    (failure,) = registry.failures
    assert failure.reason.startswith("ModuleNotFoundError: No module named ")
    assert failure.fix == fix


@pytest.mark.parametrize(
    ("module", "distribution"),
    [
        ("yaml", "PyYAML"),
        ("dateutil.parser", "python-dateutil"),
        ("azure", "azure-identity azure-mgmt-compute"),
        ("boto3", "boto3"),
    ],
)
def test_import_names_map_to_pypi_names(module: str, distribution: str) -> None:
    assert _pypi_name(module) == distribution


def test_a_provider_whose_own_package_is_missing_gets_reinstalled() -> None:
    source = _source(
        "gone = karpenter_gone.plugin",
        lambda: importlib.import_module("karpenter_gone.plugin"),
        distribution="karpenter-gone",
    )
    (failure,) = build_registry([source]).failures
    assert failure.fix.startswith("pip install --force-reinstall karpenter-gone")


def test_unknown_provider_lists_what_is_available_and_what_failed() -> None:
    registry = build_registry(
        [
            _plugin_source("a", _record("alpha")),
            _source("aws = karpenter_aws.plugin", lambda: importlib.import_module("boto3_missing")),
        ]
    )
    with pytest.raises(UnknownProviderError) as unknown:
        registry.provider("gcp")
    assert str(unknown.value) == (
        "unknown provider 'gcp'; available: alpha; failed to load: aws = karpenter_aws.plugin "
        "(karpenter-aws): ModuleNotFoundError: No module named 'boto3_missing'"
    )
    with pytest.raises(UnknownProviderError) as failed:
        registry.provider("aws")
    assert str(failed.value) == (
        "provider 'aws' (karpenter-aws) failed to load: ModuleNotFoundError: No module named "
        "'boto3_missing'; fix: pip install boto3-missing"
    )


def test_discover_finds_kwok_once_per_process() -> None:
    registry = discover()
    assert discover() is registry
    assert registry.distributions["kwok"][0] == "karpenter-kwok"
    provider = registry.provider("kwok").factory(ProviderContext())
    assert isinstance(provider, CloudProvider)


def test_record_settings_take_the_value_then_the_environment_then_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = ProviderRecord(
        name="x",
        api_version=API_VERSION,
        factory=lambda context: None,  # type: ignore[arg-type,return-value]
        options=[
            ProviderOption("given-one", "h", default="d1", env="X_GIVEN"),
            ProviderOption("from-env", "h", default="d2", env="X_FROM_ENV"),
            ProviderOption("defaulted", "h", default="d3", env="X_DEFAULTED"),
        ],
    )
    monkeypatch.setenv("X_GIVEN", "env1")
    monkeypatch.setenv("X_FROM_ENV", "env2")
    monkeypatch.delenv("X_DEFAULTED", raising=False)
    assert record.settings({"given_one": "v1", "from_env": None}) == {
        "given-one": "v1",
        "from-env": "env2",
        "defaulted": "d3",
    }
