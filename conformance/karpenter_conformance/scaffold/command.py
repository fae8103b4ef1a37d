"""``karpenter new-provider NAME``: contributed to the ``karpenter`` command through a
``karpenter.cli`` entry point."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["new_provider"]


@click.command("new-provider")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write the package (default: ./karpenter-NAME); it must not exist.",
)
@click.option(
    "--group",
    default=None,
    metavar="GROUP",
    help="The NodeClass's API group and the provider's label domain "
    "(default: karpenter.NAME.example.com).",
)
def new_provider(name: str, directory: Path | None, group: str | None) -> None:
    """Write a provider package NAME that passes `karpenter conformance` as generated."""
    from karpenter_conformance.scaffold.generate import ScaffoldError, generate, install_command

    try:
        root = generate(name, directory, group)
    except ScaffoldError as error:
        raise click.BadParameter(error.message, param_hint=repr(error.param)) from None
    click.echo(f"wrote the {name} provider into {root}")
    click.echo(
        "next, in a virtual environment (karpenter-core and karpenter-conformance come from "
        "the karpenter-py checkout; no package index serves them):"
    )
    click.echo("  " + install_command(root.resolve()))
    click.echo(f"  karpenter conformance --provider {name}            # contract level, seconds")
    click.echo(f"  karpenter conformance --provider {name} --cluster  # on a local KWOK cluster")
