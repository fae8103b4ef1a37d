"""``karpenter new-provider``: bad arguments are named, nothing is overwritten, and the package
it writes is ruff-clean and passes the conformance suite as generated.

The fast tests import the generated package from its directory; the slow ones install it into
a virtual environment of its own (so no other test sees it) and run ``karpenter conformance``
there, the contract level and, with a cluster, the cluster level.
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from packaging.requirements import Requirement

import karpenter_core
from karpenter_conformance.suite.runner import run
from karpenter_core.apis.crdgen import generate_crd
from karpenter_core.cli import checkout
from karpenter_core.cli import main as cli_main
from karpenter_core.cli.main import cli
from karpenter_core.cloudprovider.plugin import ProviderRecord
from karpenter_core.sdk.crds import crd_file

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT = Path(karpenter_core.__file__).resolve().parents[1]
"""The checkout the core under test runs from: the one install hints name."""
BIN = Path(sys.executable).parent
NAME = "scaffoldcheck"
LONGEST = "a" + "-b2" * 20 + "cd"
"""A 63-character name: the longest a provider may have."""


def _new_provider(*arguments: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["new-provider", *arguments])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("scaffold") / f"karpenter-{NAME}"
    code, output = _new_provider(NAME, "--dir", str(directory))
    assert code == 0, output
    return directory


@pytest.fixture(scope="module")
def record(generated: Path) -> Iterator[ProviderRecord]:
    """The generated provider's record, imported from its directory."""
    package = f"karpenter_{NAME}"
    sys.path.insert(0, str(generated))
    try:
        plugin = importlib.import_module(f"{package}.plugin")
        [found] = plugin.karpenter_register_providers()
        yield found
    finally:
        sys.path.remove(str(generated))
        for module in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[module]


# -- arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["Acme", "acme_cloud", "1acme", "acme-", "acme--cloud", "a" * 64, ""],
)
def test_a_bad_name_is_refused_naming_the_argument(name: str, tmp_path: Path) -> None:
    code, output = _new_provider(name, "--dir", str(tmp_path / "out"))
    assert code == 2
    assert "Invalid value for 'NAME'" in output
    assert "lowercase letters, digits" in output
    assert not (tmp_path / "out").exists()


def test_the_name_of_an_installed_provider_is_refused(tmp_path: Path) -> None:
    code, output = _new_provider("kwok", "--dir", str(tmp_path / "out"))
    assert code == 2
    assert "Invalid value for 'NAME'" in output
    assert "installed provider" in output


def test_an_existing_directory_is_not_overwritten(tmp_path: Path) -> None:
    kept = tmp_path / "mine.txt"
    kept.write_text("keep me")
    code, output = _new_provider(NAME, "--dir", str(tmp_path))
    assert code == 2
    assert "Invalid value for '--dir'" in output
    assert "already exists" in output
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]
    assert kept.read_text() == "keep me"


@pytest.mark.parametrize(
    ("group", "why"),
    [("nodes.karpenter.sh", "restricted"), ("Acme.Example", "DNS subdomain"), ("acme", "dot")],
)
def test_a_bad_group_is_refused_naming_the_option(group: str, why: str, tmp_path: Path) -> None:
    code, output = _new_provider(NAME, "--dir", str(tmp_path / "out"), "--group", group)
    assert code == 2
    assert "Invalid value for '--group'" in output
    assert why in output


def test_without_karpenter_conformance_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli_main.importlib.metadata, "entry_points", lambda group: [])
    group = click.Group("karpenter")
    cli_main.add_contributed_commands(group)
    result = CliRunner().invoke(group, ["new-provider", "acme"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: `karpenter new-provider` is unavailable: it comes with karpenter-conformance, "
        f"installed from a karpenter-py checkout: pip install -e {CHECKOUT / 'conformance'}"
    )


def test_the_source_tree_of_a_package_is_its_checkout_only_when_it_runs_from_one() -> None:
    assert checkout.source_tree("karpenter_core") == CHECKOUT
    assert checkout.source_tree("yaml") is None  # an installed copy
    assert checkout.source_tree("no_such_package_anywhere") is None


def test_away_from_a_checkout_the_hint_names_a_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkout, "source_tree", lambda package: None)
    assert checkout.pip_install("karpenter-core", "karpenter-conformance", extra=("a b",)) == (
        "pip install -e path/to/karpenter-py -e path/to/karpenter-py/conformance -e 'a b'"
    )


def test_the_next_steps_install_the_core_and_the_kit_from_the_checkout(tmp_path: Path) -> None:
    directory = tmp_path / "my providers" / "karpenter-acme"
    code, output = _new_provider("acme", "--dir", str(directory))
    assert code == 0, output
    install = next(line.strip() for line in output.splitlines() if "pip install" in line)
    assert shlex.split(install) == [
        *("pip", "install", "-e", str(CHECKOUT), "-e", str(CHECKOUT / "conformance")),
        *("-e", f"{directory}[test]"),
    ]
    readme = (directory / "README.md").read_text()
    assert f"pip install -e {CHECKOUT} -e {CHECKOUT / 'conformance'} -e '.[test]'" in readme
    assert f"MYPYPATH={CHECKOUT}:{CHECKOUT / 'conformance'} mypy" in readme


# -- the generated package ---------------------------------------------------------------------


def test_the_package_has_every_piece(generated: Path) -> None:
    package = generated / f"karpenter_{NAME}"
    pyproject = (generated / "pyproject.toml").read_text()
    assert f'name = "karpenter-{NAME}"' in pyproject
    assert f'{NAME} = "karpenter_{NAME}.plugin"' in pyproject
    assert 'license = "Apache-2.0"' in pyproject
    assert '"setuptools>=77"' in pyproject
    extra = tomllib.loads(pyproject)["project"]["optional-dependencies"]["test"]
    assert {Requirement(r).name for r in extra} >= {"pytest", "ruff", "mypy", "types-PyYAML"}
    for piece in (
        "plugin.py",
        "provider.py",
        "catalog.json",
        "nodeclass.py",
        "rbac/clusterrole.yaml",
        "fakecloud.py",
        "conformance.py",
        "scenario.yaml",
    ):
        assert (package / piece).is_file(), piece
    assert (generated / "tests" / "test_conformance.py").is_file()


def test_the_shipped_crd_is_generated_from_the_model(
    generated: Path, record: ProviderRecord
) -> None:
    [info] = record.node_classes
    [path] = (generated / f"karpenter_{NAME}" / "crds").iterdir()
    assert path.name == f"{info.group}_{info.plural}.yaml"
    assert info.model.__module__ == f"karpenter_{NAME}.nodeclass"
    assert path.read_text() == crd_file(NAME, info), "not what the SDK's CRD writer writes"
    assert yaml.safe_load(path.read_text()) == generate_crd(
        info.model,
        group=info.group,
        kind=info.kind,
        plural=info.plural,
        version=info.version,
        categories=("karpenter",),
    )


@pytest.mark.parametrize("name", ["x", "acme-cloud", LONGEST])
def test_the_package_is_ruff_clean_under_its_own_config(name: str, tmp_path: Path) -> None:
    directory = tmp_path / "provider"
    code, output = _new_provider(name, "--dir", str(directory))
    assert code == 0, output
    for command in (["check", "--no-cache", "."], ["format", "--no-cache", "--check", "."]):
        checked = subprocess.run(
            [str(BIN / "ruff"), *command],
            cwd=directory,
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_package_passes_the_contract_level_as_generated(record: ProviderRecord) -> None:
    report = run(record)
    outcomes = {r.name: (r.outcome, r.message) for r in report.results}
    assert report.ok, outcomes
    assert {o for o, _ in outcomes.values()} == {"passed"}, outcomes
    assert len(outcomes) >= 17


# -- installed into its own virtual environment (slow) -----------------------------------------


@dataclass
class Installed:
    """The generated package in a virtual environment of its own, and when generation began."""

    directory: Path
    bin: Path
    started: float


def _pip(bin_dir: Path, *arguments: str) -> None:
    done = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """``karpenter new-provider``, then a new virtual environment holding karpenter-core,
    karpenter-conformance and the generated package, installed as the command's hint says
    (editable, dependencies from pip's cache or the index)."""
    root = tmp_path_factory.mktemp("scaffold-venv")
    directory = root / f"karpenter-{NAME}"
    started = time.monotonic()
    printed = subprocess.run(
        [str(BIN / "karpenter"), "new-provider", NAME, "--dir", str(directory)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    hint = shlex.split(next(line for line in printed.splitlines() if "pip install" in line))
    assert hint[:2] == ["pip", "install"], printed
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    # without build isolation (the environment's setuptools builds the packages): no index
    # access for setuptools in each build
    _pip(bin_dir, "setuptools>=77")
    _pip(bin_dir, "--no-build-isolation", *hint[2:])
    print(f"\nnew-provider and install: {time.monotonic() - started:.1f}s")
    return Installed(directory, bin_dir, started)


def _conformance(installed: Installed, *arguments: str) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    command = [str(installed.bin / "karpenter"), "conformance", "--provider", NAME, "-o", "json"]
    done = subprocess.run(
        [*command, *arguments],
        cwd=installed.directory,
        capture_output=True,
        text=True,
        check=False,
        env=environment,
    )
    assert done.stdout, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    failed = [c for c in report["checks"] if c["result"] != "passed"]
    assert done.returncode == 0 and report["ok"], failed
    assert not failed
    return report


@pytest.mark.slow
def test_installed_in_its_own_venv_it_passes_the_contract_level(installed: Installed) -> None:
    report = _conformance(installed)
    print(
        f"new-provider to a green contract level: {time.monotonic() - installed.started:.1f}s "
        f"(suite {report['seconds']}s)"
    )
    tests = subprocess.run(
        [str(installed.bin / "pytest"), "-q", "-m", "not integration", "-p", "no:cacheprovider"],
        cwd=installed.directory,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


@pytest.mark.slow
def test_its_test_extra_checks_it_ruff_and_mypy_clean(installed: Installed) -> None:
    """With the ruff and mypy its ``[test]`` extra installs, as its README says."""
    readme = (installed.directory / "README.md").read_text()
    mypypath = os.pathsep.join([str(CHECKOUT), str(CHECKOUT / "conformance")])
    assert f"MYPYPATH={mypypath} mypy" in readme
    for command, env in (
        (["ruff", "check", "--no-cache", "."], {}),
        (["ruff", "format", "--no-cache", "--check", "."], {}),
        (["mypy", "--cache-dir", os.devnull], {"MYPYPATH": mypypath}),
    ):
        checked = subprocess.run(
            [str(installed.bin / command[0]), *command[1:]],
            cwd=installed.directory,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": "", **env},
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow
@pytest.mark.integration
def test_installed_in_its_own_venv_it_passes_the_cluster_level(installed: Installed) -> None:
    report = _conformance(installed, "--cluster")
    names = {c["name"] for c in report["checks"]}
    assert "crash-between-launch-and-status" in names
    print(
        f"new-provider to a green cluster level: {time.monotonic() - installed.started:.1f}s "
        f"(suite {report['seconds']}s)"
    )
