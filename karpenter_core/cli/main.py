"""The ``karpenter`` command line."""

from __future__ import annotations

import click

from karpenter_core.cli.controller import controller
from karpenter_core.cli.crds import crds
from karpenter_core.cli.providers import providers
from karpenter_core.cli.simulate import simulate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="karpenter-core")
def cli() -> None:
    """Karpenter: launch the nodes pending pods need, and keep the cluster cheap."""


cli.add_command(controller)
cli.add_command(crds)
cli.add_command(providers)
cli.add_command(simulate)


def main() -> None:
    """Console-script entry point."""
    cli()
