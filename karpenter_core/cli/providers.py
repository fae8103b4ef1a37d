"""``karpenter providers``: which cloud providers are installed, and which failed to load."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from karpenter_core.cloudprovider.plugin import option_env, option_flag
from karpenter_core.cloudprovider.registry import Registry, RegistryError, discover

__all__ = ["providers"]


@click.command("providers")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option("--strict", is_flag=True, help="Exit with status 1 if any provider failed to load.")
def providers(output: str, strict: bool) -> None:
    """List the installed cloud providers and the ones that failed to load."""
    try:
        registry = discover()
    except RegistryError as error:
        raise click.ClickException(str(error)) from None
    if output == "json":
        click.echo(json.dumps(as_json(registry), indent=2))
    else:
        click.echo(as_text(registry), nl=False)
    if strict and registry.failures:
        sys.exit(1)


def as_json(registry: Registry) -> dict[str, Any]:
    """The registry as plain data: ``providers`` and ``failures``."""
    listed = []
    for name in sorted(registry.records):
        record = registry.records[name]
        distribution, version = registry.distributions[name]
        listed.append(
            {
                "name": name,
                "distribution": distribution,
                "version": version,
                "nodeClasses": [
                    {"group": c.group, "version": c.version, "kind": c.kind, "plural": c.plural}
                    for c in record.node_classes
                ],
                "capabilities": sorted(record.capabilities),
                "options": [
                    {
                        "name": o.name,
                        "flag": option_flag(name, o.name),
                        "env": option_env(name, o.name),
                        "formerEnv": o.env,
                        "default": o.default,
                        "help": o.help,
                    }
                    for o in record.options
                ],
                "description": record.description,
            }
        )
    failures = [
        {
            "entryPoint": f.entry_point,
            "distribution": f.distribution,
            "reason": f.reason,
            "fix": f.fix,
        }
        for f in registry.failures
    ]
    return {"providers": listed, "failures": failures}


def as_text(registry: Registry) -> str:
    """A table of providers, then one block per failure."""
    lines: list[str] = []
    if registry.records:
        rows = [("NAME", "DISTRIBUTION", "NODECLASSES", "CAPABILITIES", "DESCRIPTION")]
        for name in sorted(registry.records):
            record = registry.records[name]
            distribution, version = registry.distributions[name]
            rows.append(
                (
                    name,
                    f"{distribution}=={version}",
                    ", ".join(f"{c.kind} ({c.group}/{c.version})" for c in record.node_classes)
                    or "-",
                    ",".join(sorted(record.capabilities)) or "-",
                    record.description,
                )
            )
        lines += _table(rows)
    else:
        lines.append("No providers installed (try: pip install karpenter-kwok).")
    if registry.failures:
        count = len(registry.failures)
        lines += ["", f"{count} provider{'s' if count > 1 else ''} failed to load:"]
        for failure in registry.failures:
            lines += [
                f"  {failure.entry_point}  ({failure.distribution})",
                f"    reason: {failure.reason}",
                f"    fix:    {failure.fix}",
            ]
    return "\n".join(lines) + "\n"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(
            [*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]
        ).rstrip()
        for row in rows
    ]
