"""Write a provider package from the templates: the pieces a provider needs, passing the
conformance suite as generated.

The templates (``templates/``, package data) are ``string.Template`` files; ``package/`` becomes
the Python package. The NodeClass CRD is written from the written model's ``NODE_CLASS`` as the
SDK's writer writes it (``python -m karpenter_core.sdk.crds NAME``, which a provider runs after
changing the model).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

from karpenter_core.apis import labels as wk
from karpenter_core.cli.checkout import checkout_dir, pip_install
from karpenter_core.cloudprovider.plugin import API_VERSION, ENTRY_POINT_GROUP
from karpenter_core.cloudprovider.registry import MAX_NAME_LENGTH, NAME_PATTERN
from karpenter_core.sdk.crds import crd_file

__all__ = ["Names", "ScaffoldError", "generate", "install_command", "names_for"]

TEMPLATE_SUFFIX = ".tmpl"
PACKAGE_DIR = "package"


class ScaffoldError(ValueError):
    """A bad argument: ``param`` names it (``NAME``, ``--dir``, ``--group``)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


@dataclass(frozen=True, slots=True)
class Names:
    """Every name the templates use, derived from the provider's name."""

    name: str
    package: str
    dist: str
    group: str
    kind: str
    plural: str
    camel: str
    core_requirement: str
    conformance_requirement: str


def names_for(name: str, group: str | None = None) -> Names:
    """The names of provider ``name``; ``ScaffoldError`` for a bad name or group."""
    if len(name) > MAX_NAME_LENGTH or not NAME_PATTERN.match(name):
        raise ScaffoldError(
            "NAME",
            f"{name!r} is not a provider name: use lowercase letters, digits and single '-' "
            f"between them, starting with a letter, at most {MAX_NAME_LENGTH} characters "
            "(e.g. 'acme' or 'acme-cloud')",
        )
    taken = {point.name for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if name in taken:
        raise ScaffoldError(
            "NAME", f"{name!r} is the name of an installed provider; choose another name"
        )
    group = group or f"karpenter.{name}.example.com"
    error = wk.qualified_name_error(f"{group}/instance-family", "label key")
    if error is None:
        error = wk.restricted_label_error(f"{group}/instance-family")
    if error is not None or "." not in group:
        raise ScaffoldError(
            "--group",
            f"{group!r} cannot be the provider's API group and label domain: "
            f"{error or 'it needs a dot (a DNS subdomain such as karpenter.acme.example.com)'}",
        )
    camel = "".join(part.capitalize() for part in name.split("-"))
    version = importlib.metadata.version("karpenter-core").split(".")
    major, minor = int(version[0]), int(version[1])
    within = f">={major}.{minor},<{major}.{minor + 1}"
    return Names(
        name=name,
        package="karpenter_" + name.replace("-", "_"),
        dist=f"karpenter-{name}",
        group=group,
        kind=f"{camel}NodeClass",
        plural=f"{camel.lower()}nodeclasses",
        camel=camel,
        core_requirement=f"karpenter-core{within}",
        conformance_requirement=f"karpenter-conformance{within}",
    )


def generate(name: str, directory: Path | None = None, group: str | None = None) -> Path:
    """Write the package of provider ``name`` into ``directory`` (default ``./karpenter-NAME``),
    which must not exist; returns the directory."""
    names = names_for(name, group)
    target = directory or Path(names.dist)
    if target.exists() or target.is_symlink():
        raise ScaffoldError(
            "--dir", f"{target} already exists; choose another directory (nothing was written)"
        )
    values = {key: getattr(names, key) for key in Names.__dataclass_fields__}
    values["api_version"] = str(API_VERSION)
    values["install"] = install_command(Path("."))
    values["mypypath"] = os.pathsep.join(
        map(checkout_dir, ("karpenter-core", "karpenter-conformance"))
    )
    rendered = [
        (target / _output_path(relative, names.package), Template(text).substitute(values))
        for relative, text in _templates(resources.files(__package__).joinpath("templates"))
    ]
    try:
        target.mkdir(parents=True)
    except OSError as error:
        raise ScaffoldError("--dir", f"cannot create {target}: {error.strerror}") from None
    for path, text in rendered:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    _write_crd(names, target / names.package)
    return target


def install_command(package: Path) -> str:
    """``pip install`` of karpenter-core and karpenter-conformance from the checkout they run
    from (no index serves them), and of the generated ``package`` with its test extra."""
    return pip_install("karpenter-core", "karpenter-conformance", extra=(f"{package}[test]",))


def _templates(root: Traversable, prefix: str = "") -> list[tuple[str, str]]:
    """(relative path, text) of every template under ``root``."""
    found = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        relative = f"{prefix}{entry.name}"
        if entry.is_dir():
            found += _templates(entry, relative + "/")
        elif entry.name.endswith(TEMPLATE_SUFFIX):
            found.append((relative, entry.read_text(encoding="utf-8")))
    return found


def _output_path(relative: str, package: str) -> Path:
    parts = relative.removesuffix(TEMPLATE_SUFFIX).split("/")
    if parts[0] == PACKAGE_DIR:
        parts[0] = package
    return Path(*parts)


def _write_crd(names: Names, package_dir: Path) -> None:
    """Write the NodeClass CRD of the written model's ``NODE_CLASS`` into ``crds/``, as the SDK's
    writer does; the nodeclass module is loaded from its file on its own, under its package's
    name (any module of that name already loaded is put back after)."""
    module_name = f"{names.package}.nodeclass"
    spec = importlib.util.spec_from_file_location(module_name, package_dir / "nodeclass.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    loaded = sys.modules.get(module_name)
    sys.modules[module_name] = module  # pydantic resolves the model's annotations through it
    try:
        spec.loader.exec_module(module)
        info = module.NODE_CLASS
        path = package_dir / "crds" / f"{info.group}_{info.plural}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(crd_file(names.name, info), encoding="utf-8")
    finally:
        if loaded is None:
            del sys.modules[module_name]
        else:
            sys.modules[module_name] = loaded
