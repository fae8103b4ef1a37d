"""``karpenter controller``: run the autoscaler against a cluster."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from karpenter_core.cli.simulate import _provider_options, _settings
from karpenter_core.cloudprovider.registry import UnknownProviderError, discover
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.operator.settings import Settings, SettingsError

__all__ = ["controller"]

_F = TypeVar("_F", bound=Callable[..., Any])
"""A command function being decorated."""


def _settings_options(command: _F) -> _F:
    """One ``--<setting>`` option per operator setting (its environment variable otherwise),
    then every provider's options; an unprefixed provider option named as a setting
    (``--cluster-name``) is the setting's flag, and the running provider reads it too."""
    names = [name for name, _, _ in Settings.options()]
    _provider_options(command, reserved=names)
    for name, env, help_text in reversed(Settings.options()):
        flag = f"--{name.replace('_', '-')}"
        help_text = f"{help_text} [env {env}]"
        if isinstance(getattr(Settings(), name), bool):
            click.option(flag, name, is_flag=True, default=None, help=help_text)(command)
        else:
            click.option(flag, name, default=None, metavar="VALUE", help=help_text)(command)
    return command


@click.command()
@click.option("--provider", default="kwok", show_default=True, help="Cloud provider to run.")
@click.option(
    "--kubeconfig",
    default=None,
    envvar="KUBECONFIG",
    help="kubeconfig file (default: in-cluster configuration, else ~/.kube/config).",
)
@_settings_options
@click.pass_context
def controller(ctx: click.Context, provider: str, kubeconfig: str | None, **_: Any) -> None:
    """Run the controller: launch nodes for pending pods and manage their lifecycle.

    Provider options are --<provider>-<name> (--aws-region); --<name> (--region) is read too.
    """
    from kubernetes.config import ConfigException

    from karpenter_core.controllers import build_controllers  # the Kubernetes client loads here
    from karpenter_core.operator import logs
    from karpenter_core.operator.kube import KubeClient
    from karpenter_core.operator.operator import Operator

    names = {name for name, _, _ in Settings.options()}
    try:
        settings = Settings.load({k: v for k, v in ctx.params.items() if k in names})
        record = discover().provider(provider)
    except (SettingsError, UnknownProviderError) as error:
        raise click.ClickException(str(error)) from None
    logs.configure(settings.log_level)
    path = kubeconfig.split(":")[0] if kubeconfig else None
    try:
        kube = KubeClient.from_config(path, settings)
    except ConfigException as error:
        where = f" from {path}" if path else ""
        raise click.ClickException(
            f"cannot load the Kubernetes configuration{where}: {error}"
        ) from None
    try:
        operator = Operator(
            settings,
            record,
            kube,
            controllers=build_controllers,
            provider_settings=_settings(provider, ctx.params),
        )
    except CloudProviderError as error:
        raise click.ClickException(str(error)) from None
    operator.install_signal_handlers()
    code = operator.run()
    kube.close()
    sys.exit(code)
