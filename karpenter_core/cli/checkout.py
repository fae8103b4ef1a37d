"""Where karpenter-py's distributions are installed from.

No package index serves karpenter-core or karpenter-conformance: they are installed from a
checkout of karpenter-py. A command that tells the user what to install names the directory in
the checkout this core runs from (an editable install, or the checkout on ``PYTHONPATH``), or a
placeholder when the core runs from an installed copy.
"""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

__all__ = ["CHECKOUT_DIRS", "PLACEHOLDER", "checkout_dir", "pip_install", "source_tree"]

CHECKOUT_DIRS = {"karpenter-core": ".", "karpenter-conformance": "conformance"}
"""Each distribution's directory in a karpenter-py checkout."""
PLACEHOLDER = "path/to/karpenter-py"
"""Stands for the checkout when the core does not run from one."""


def source_tree(package: str) -> Path | None:
    """The source directory (the one holding ``pyproject.toml``) the importable ``package`` runs
    from, or None when it is not importable or runs from an installed copy."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def checkout_dir(dist: str) -> str:
    """The directory ``dist`` (a key of ``CHECKOUT_DIRS``) is installed from: in the checkout
    this core runs from when it holds the distribution, else under ``PLACEHOLDER``."""
    core = source_tree("karpenter_core")
    relative = CHECKOUT_DIRS[dist]
    if core is not None and (core / relative / "pyproject.toml").is_file():
        return str((core / relative).resolve())
    return PLACEHOLDER if relative == "." else f"{PLACEHOLDER}/{relative}"


def pip_install(*dists: str, extra: tuple[str, ...] = ()) -> str:
    """``pip install -e`` of ``dists`` from the checkout (``checkout_dir``), then of the
    ``extra`` editable requirements, as one shell command."""
    targets = [checkout_dir(dist) for dist in dists] + list(extra)
    return "pip install " + " ".join(f"-e {shlex.quote(target)}" for target in targets)
