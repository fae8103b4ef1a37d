"""NodeClass CRDs: generated from the provider's pydantic model, rendered as YAML, and written
into the provider's package.

A provider declares each NodeClass kind once, as a ``NodeClassInfo`` in its nodeclass module,
and lists it in its record; ``python -m karpenter_core.sdk.crds <provider>`` writes the CRD of
every kind the record lists to ``<package>/crds/<group>_<plural>.yaml``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from karpenter_core.apis.crdgen import KubeSchema, PrinterColumn, cel, generate_crd
from karpenter_core.cli.crds import render_crd
from karpenter_core.cloudprovider.crds import node_class_crd
from karpenter_core.cloudprovider.plugin import NodeClassInfo, ProviderRecord

__all__ = [
    "KubeSchema",
    "PrinterColumn",
    "cel",
    "crd_file",
    "crd_path",
    "generate_crd",
    "main",
    "node_class_crd",
    "render_crd",
    "write_crds",
]


def crd_path(info: NodeClassInfo) -> Path:
    """Where the provider's package ships the kind's CRD: ``crds/<group>_<plural>.yaml`` beside
    the package of its model."""
    package = info.model.__module__.partition(".")[0]
    return Path(str(resources.files(package))) / "crds" / f"{info.group}_{info.plural}.yaml"


def crd_file(provider: str, info: NodeClassInfo) -> str:
    """The text of the kind's shipped CRD file: a header naming how it is made, then the CRD."""
    header = (
        f"# Generated from {info.model.__module__}: python -m karpenter_core.sdk.crds {provider}\n"
    )
    return header + render_crd(node_class_crd(info))


def write_crds(record: ProviderRecord) -> list[Path]:
    """Write the CRD of every NodeClass kind of ``record`` into its package; the paths written."""
    written = []
    for info in record.node_classes:
        path = crd_path(info)
        path.parent.mkdir(exist_ok=True)
        path.write_text(crd_file(record.name, info), encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m karpenter_core.sdk.crds <provider>...``: write those providers' CRDs."""
    from karpenter_core.cloudprovider.registry import discover

    names = list(sys.argv[1:] if argv is None else argv)
    records = discover().records
    unknown = [name for name in names if name not in records]
    if not names or unknown:
        known = ", ".join(sorted(records)) or "none"
        problem = f"unknown provider(s): {', '.join(unknown)}; " if unknown else ""
        print(
            f"usage: python -m karpenter_core.sdk.crds PROVIDER...; {problem}installed: {known}",
            file=sys.stderr,
        )
        return 2
    for name in names:
        for path in write_crds(records[name]):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
