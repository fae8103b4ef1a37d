"""The distributions declare their license as an SPDX expression and ask for a setuptools that
reads one (77 or newer), so building them prints no license deprecation warnings."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECTS = [
    ROOT / "pyproject.toml",
    *sorted(ROOT.glob("providers/*/pyproject.toml")),
    ROOT / "conformance" / "pyproject.toml",
]
SPDX_SETUPTOOLS = Version("77")


def _load(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def _minimum(requirement: str) -> Version | None:
    """The lowest version a ``>=`` specifier of the requirement allows, if it has one."""
    floors = [Version(s.version) for s in Requirement(requirement).specifier if s.operator == ">="]
    return max(floors, default=None)


def _setuptools_requirements(pyproject: dict[str, Any]) -> list[str]:
    extras = pyproject["project"].get("optional-dependencies", {}).values()
    candidates = [*pyproject["build-system"]["requires"], *(r for extra in extras for r in extra)]
    return [r for r in candidates if Requirement(r).name == "setuptools"]


def test_every_distribution_is_covered() -> None:
    names = {_load(path)["project"]["name"] for path in PYPROJECTS}
    assert {"karpenter-core", "karpenter-kwok", "karpenter-aws", "karpenter-conformance"} <= names


@pytest.mark.parametrize("path", PYPROJECTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_license_is_an_spdx_expression(path: Path) -> None:
    license_ = _load(path)["project"]["license"]
    assert isinstance(license_, str), f"{path}: project.license must be an SPDX string"
    assert canonicalize_license_expression(license_) == license_ == "Apache-2.0"


@pytest.mark.parametrize("path", PYPROJECTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_setuptools_is_new_enough_for_spdx_licenses(path: Path) -> None:
    pyproject = _load(path)
    assert pyproject["build-system"]["build-backend"] == "setuptools.build_meta"
    requirements = _setuptools_requirements(pyproject)
    assert any(r in pyproject["build-system"]["requires"] for r in requirements)
    for requirement in requirements:
        minimum = _minimum(requirement)
        assert minimum is not None and minimum >= SPDX_SETUPTOOLS, f"{path}: {requirement}"


def test_make_setup_installs_a_new_enough_setuptools() -> None:
    pip_lines = [
        line for line in (ROOT / "Makefile").read_text().splitlines() if "pip install" in line
    ]
    requirements = [r for line in pip_lines for r in re.findall(r'"(setuptools[^"]*)"', line)]
    assert requirements, "the setup rule installs no pinned setuptools"
    for requirement in requirements:
        minimum = _minimum(requirement)
        assert minimum is not None and minimum >= SPDX_SETUPTOOLS, requirement
