"""The ``karpenter`` command line.

Other distributions add commands through ``karpenter.cli`` entry points (each loads a
``click.Command``), so the core never imports them; a known command whose distribution is not
installed says which one to install, and how (from the checkout: no index serves it).
"""

from __future__ import annotations

import importlib.metadata

import click

from karpenter_core.cli.chart import chart
from karpenter_core.cli.checkout import pip_install
from karpenter_core.cli.controller import controller
from karpenter_core.cli.convert import convert
from karpenter_core.cli.crds import crds
from karpenter_core.cli.providers import providers
from karpenter_core.cli.rbac import rbac
from karpenter_core.cli.simulate import simulate
from karpenter_core.cloudprovider.plugin import CLI_ENTRY_POINT_GROUP

CONTRIBUTED = {"conformance": "karpenter-conformance", "new-provider": "karpenter-conformance"}
"""Commands other distributions contribute, and the distribution that does."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="karpenter-core")
def cli() -> None:
    """Karpenter: launch the nodes pending pods need, and keep the cluster cheap."""


cli.add_command(chart)
cli.add_command(controller)
cli.add_command(convert)
cli.add_command(crds)
cli.add_command(providers)
cli.add_command(rbac)
cli.add_command(simulate)


def _unavailable(name: str, reason: str) -> click.Command:
    """A stand-in for a contributed command that cannot run, saying why."""

    @click.command(
        name,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
        help=f"(unavailable: {reason})",
    )
    def command() -> None:
        raise click.ClickException(f"`karpenter {name}` is unavailable: {reason}")

    return command


def add_contributed_commands(group: click.Group) -> None:
    """Add the commands of the ``karpenter.cli`` entry points, and a stand-in for each known
    command that none contributes."""
    for point in importlib.metadata.entry_points(group=CLI_ENTRY_POINT_GROUP):
        dist = point.dist.name if point.dist is not None else "its distribution"
        try:
            command = point.load()
        except Exception as error:
            reason = f"{point.value} ({dist}) failed to load: {type(error).__name__}: {error}"
            group.add_command(_unavailable(point.name, reason))
            continue
        if not isinstance(command, click.Command):
            reason = f"{point.value} ({dist}) is not a click command"
            group.add_command(_unavailable(point.name, reason))
            continue
        group.add_command(command, point.name)
    for name, dist in CONTRIBUTED.items():
        if name not in group.commands:
            hint = (
                f"it comes with {dist}, installed from a karpenter-py checkout: {pip_install(dist)}"
            )
            group.add_command(_unavailable(name, hint))


add_contributed_commands(cli)


def main() -> None:
    """Console-script entry point."""
    cli()
