"""Nothing that ships imports the benchmark scripts.

The benchmarks are a folder of scripts, not a package: they import each other by bare name
(``import common``), so import-linter, which sees ``benchmarks...`` as an external package, cannot
tell ``import common`` from a third-party module. This test reads every shipped module (the core
and each provider's package) and checks that none imports a benchmark script by its name, nor the
``benchmarks``, ``tests`` or ``karpenter_conformance`` packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "karpenter_core", *sorted((ROOT / "providers").glob("*/karpenter_*"))]
NOT_SHIPPED = {"benchmarks", "tests", "karpenter_conformance"}


def imported_names(source: str) -> set[str]:
    """The top-level names of the absolute imports in ``source``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_imported_names_reads_plain_and_from_imports() -> None:
    source = "import common\nfrom benchmarks.fuzz import x\nfrom . import sibling\nimport a.b\n"
    assert imported_names(source) == {"common", "benchmarks", "a"}


def test_no_shipped_module_imports_a_benchmark_script_or_the_test_suites() -> None:
    scripts = {path.stem for path in (ROOT / "benchmarks").glob("*.py")}
    assert "common" in scripts, "the benchmarks folder moved; update this test"
    forbidden = scripts | NOT_SHIPPED
    modules = [path for package in SHIPPED for path in package.rglob("*.py")]
    assert len(modules) > 100, "the shipped packages were not found"
    found = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in modules
        for name in imported_names(path.read_text(encoding="utf-8")) & forbidden
    }
    assert not found, sorted(found)
