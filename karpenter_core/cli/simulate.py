"""``karpenter simulate``: what nodes Karpenter would launch for these manifests, at what price."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from karpenter_core.apis.quantity import format_quantity
from karpenter_core.cli.convert import converted_documents
from karpenter_core.cli.disrupt import (
    after_provisioning,
    command_json,
    drift_check,
    print_disruption,
    with_pod_events,
)
from karpenter_core.cli.provider_log import WarningCollector, collecting_logger
from karpenter_core.cloudprovider.plugin import (
    ProviderContext,
    option_env,
    option_flag,
    option_key,
    provider_settings,
)
from karpenter_core.cloudprovider.registry import UnknownProviderError, discover
from karpenter_core.cloudprovider.types import CloudProviderError, Offering
from karpenter_core.disruption.planner import Options, plan
from karpenter_core.manifests import (
    Document,
    ManifestError,
    build_snapshot,
    load_default_scenario,
    load_documents,
)
from karpenter_core.operator.settings import (
    MIN_VALUES_POLICIES,
    PREFERENCE_POLICIES,
    parse_feature_gates,
)
from karpenter_core.scheduling.scheduler import NewNodeClaim, Results, schedulable, schedule

_F = TypeVar("_F", bound=Callable[..., Any])
"""A command function being decorated (or the command made of it)."""


def _provider_options(command: _F, *, offline: bool = False, reserved: Collection[str] = ()) -> _F:
    """Add every discovered provider's options as ``--<provider>-<name>`` (``offline``: only
    those ``simulate`` reads), and each unprefixed ``--<name>`` as a hidden alias the running
    provider reads (``provider_settings``) unless the command declares that name itself
    (``reserved``, the controller's ``cluster_name``)."""
    declared: list[tuple[str, str, str]] = []  # flag, parameter name, help
    helps: dict[str, list[str]] = {}  # unprefixed flag -> each provider's help
    for record in discover().records.values():
        for option in record.options:
            if offline and not option.simulate:
                continue
            former = f", or {option.env}" if option.env else ""
            env = f"{option_env(record.name, option.name)}{former}"
            key = option_key(record.name, option.name)
            declared.append(
                (option_flag(record.name, option.name), key, f"{option.help} [env {env}]")
            )
            helps.setdefault(option.name, []).append(f"[{record.name}] {option.help}")
    flags = {flag for flag, _, _ in declared}
    for name, texts in helps.items():
        key = name.replace("-", "_")
        if f"--{name}" not in flags and key not in reserved:
            click.option(f"--{name}", key, default=None, hidden=True, help=" ".join(texts))(command)
    if not isinstance(command, click.Command):  # a function's options are listed backwards
        declared.reverse()
    for flag, key, help_text in declared:
        click.option(flag, key, default=None, help=help_text)(command)
    return command


def _settings(provider: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``provider``, the one provider that runs, from the command's values."""
    return provider_settings([discover().provider(provider)], values)[provider]


def _amount(name: str, amount: int) -> str:
    if name == "cpu":
        return f"{amount / 1000:g}"
    return format_quantity(Fraction(amount, 1000), binary=name in ("memory", "ephemeral-storage"))


_BINARY_UNITS = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def _bytes(milli: int) -> str:
    """Bytes (given in thousandths) in the largest binary unit, to at most two decimals:
    ``15.5Gi``, ``512Mi``, ``900``."""
    value, unit = milli / 1000, ""
    for suffix in _BINARY_UNITS:
        if value < 1024:
            break
        value, unit = value / 1024, suffix
    return f"{value:.2f}".rstrip("0").rstrip(".") + unit


def _explain_unserved(results: Results, unserved: Mapping[str, str], served: bool) -> None:
    """Add the NodePools the provider does not serve to each unschedulable pod's reason."""
    if not unserved:
        return
    for pod, reason in results.unschedulable.items():
        parts = (
            [reason, *unserved.values()]
            if served
            else [*unserved.values(), "no existing node has room"]
        )
        results.unschedulable[pod] = "; ".join(parts)


def _claim_json(claim: NewNodeClaim) -> dict[str, Any]:
    return {
        "nodepool": claim.nodepool,
        "instance_type": claim.instance_type.name,
        "capacity_type": claim.offering.capacity_type,
        "zone": claim.offering.zone,
        "price": round(claim.price, 6),
        "price_estimated": claim.offering.estimated,
        "instance_type_options": len(claim.instance_types),
        "pods": [pod.key for pod in claim.pods],
        "requests": {n: _amount(n, a) for n, a in sorted(claim.requests.items())},
        "allocatable": {
            n: _amount(n, a) for n, a in sorted(claim.instance_type.allocatable.items())
        },
    }


def _report(provider: str, results: Results, pods: int, seconds: float) -> dict[str, Any]:
    return {
        "provider": provider,
        "nodeclaims": [_claim_json(claim) for claim in results.new_nodeclaims],
        "existing": [
            {"node": node, "pods": [pod.key for pod in placed]}
            for node, placed in sorted(results.existing.items())
        ],
        "unschedulable": [
            {"pod": pod, "reason": reason} for pod, reason in results.unschedulable.items()
        ],
        "warnings": results.warnings,
        "summary": {
            "pods": pods,
            "nodeclaims": len(results.new_nodeclaims),
            "cost_per_hour": round(results.cost_per_hour, 6),
            "cost_estimated": any(c.offering.estimated for c in results.new_nodeclaims),
            "scheduling_seconds": round(seconds, 6),
        },
    }


def _price(price: float, offering: Offering) -> str:
    """The price, marked ``~`` when the provider only estimates it."""
    return f"~{price:.6f}" if offering.estimated else f"{price:.6f}"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _used(claim: NewNodeClaim, name: str) -> str:
    used = claim.requests.get(name, 0)
    allocatable = claim.instance_type.allocatable.get(name, 0)
    shown = _amount if name == "cpu" else lambda _, amount: _bytes(amount)
    return f"{shown(name, used)}/{shown(name, allocatable)}"


def _print_text(
    report: dict[str, Any], results: Results, notes: list[str], warnings: list[str]
) -> None:
    for note in notes:
        click.echo(f"note: {note}", err=True)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    for warning in results.warnings:
        click.echo(f"warning: {warning}")
    if results.new_nodeclaims:
        rows = [
            ["NODEPOOL", "INSTANCE TYPE", "ZONE", "CAPACITY", "PRICE/H", "PODS", "CPU", "MEMORY"]
        ]
        for claim in results.new_nodeclaims:
            rows.append(
                [
                    claim.nodepool,
                    claim.instance_type.name,
                    claim.offering.zone,
                    claim.offering.capacity_type,
                    _price(claim.price, claim.offering),
                    str(len(claim.pods)),
                    _used(claim, "cpu"),
                    _used(claim, "memory"),
                ]
            )
        click.echo(_table(rows))
        if any(claim.offering.estimated for claim in results.new_nodeclaims):
            click.echo("~ estimated price (no live price source)")
    else:
        click.echo("No new nodes needed.")
    for entry in report["existing"]:
        click.echo(f"existing node {entry['node']}: {len(entry['pods'])} pod(s)")
    if results.unschedulable:
        click.echo("\nUnschedulable pods:")
        for pod, reason in results.unschedulable.items():
            click.echo(f"  {pod}: {reason}")
    summary = report["summary"]
    click.echo(
        f"\n{summary['pods']} pod(s), {summary['nodeclaims']} new node(s), "
        f"cost {summary['cost_per_hour']:.6f}/h, scheduled in {summary['scheduling_seconds']:.3f}s"
    )


def _field(obj: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    """The mapping at ``path`` in ``obj``; empty where any step is missing or not a mapping (the
    manifest checks report such a field later, naming it)."""
    for key in path:
        value = obj.get(key)
        if not isinstance(value, Mapping):
            return {}
        obj = value
    return obj


def _referenced_provider(documents: Sequence[Document]) -> str | None:
    """The one installed provider whose NodeClass kinds the NodePools reference or the input
    holds, or None (none, or several)."""
    owners = {
        (info.group, info.kind): name
        for name, record in discover().records.items()
        for info in record.node_classes
    }
    found = set()
    for doc in documents:
        obj = doc.obj
        group = str(obj.get("apiVersion") or "").partition("/")[0]
        found.add(owners.get((group, str(obj.get("kind") or ""))))
        if group == "karpenter.sh" and obj.get("kind") == "NodePool":
            ref = _field(obj, "spec", "template", "spec", "nodeClassRef")
            found.add(owners.get((str(ref.get("group") or ""), str(ref.get("kind") or ""))))
    found.discard(None)
    return found.pop() if len(found) == 1 else None


@click.command()
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    metavar="FILE",
    help="Manifests to read ('-' for stdin); repeatable. Without it, an embedded default scenario.",
)
@click.option("--provider", default="kwok", show_default=True, help="Cloud provider to price with.")
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option(
    "--disrupt",
    is_flag=True,
    help="Also show the disruption commands (emptiness, drift, consolidation, expiration) the "
    "controller would issue for the existing nodes, with their savings.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse manifests with fields their kind does not have (by default each is a warning, "
    "and the simulation ignores the field).",
)
@click.option(
    "--feature-gates",
    default="",
    envvar="FEATURE_GATES",
    help="Feature gates, e.g. SpotToSpotConsolidation=true.",
)
@click.option(
    "--preference-policy",
    type=click.Choice(PREFERENCE_POLICIES),
    default="Respect",
    show_default=True,
    envvar="PREFERENCE_POLICY",
    show_envvar=True,
    help="Ignore drops pod preferences (preferred affinity, ScheduleAnyway spread) up front.",
)
@click.option(
    "--min-values-policy",
    type=click.Choice(MIN_VALUES_POLICIES),
    default="Strict",
    show_default=True,
    envvar="MIN_VALUES_POLICY",
    show_envvar=True,
    help="BestEffort launches a NodeClaim that cannot meet a requirement's minValues anyway.",
)
@click.pass_context
def simulate(
    ctx: click.Context,
    files: tuple[str, ...],
    provider: str,
    output: str,
    disrupt: bool,
    strict: bool,
    feature_gates: str,
    preference_policy: str,
    min_values_policy: str,
    **_settings_: str | None,
) -> None:
    """Show the nodes Karpenter would launch for the pending pods in the manifests.

    A field a manifest's kind does not have (a typo such as ``consolidateAftr``) is a warning
    and is ignored; --strict makes it an error. NodePools, NodeClaims and NodeClasses are checked
    against their CRD schemas, core kinds against the API types of the Kubernetes client.

    Provider options are --<provider>-<name> (--aws-region); --<name> (--region) is read too.
    """
    collected = WarningCollector()
    try:
        converted_notes: list[str] = []
        converted_warnings: list[str] = []
        documents = None
        if files:
            documents = load_documents(files)
            documents, converted_notes, converted_warnings = converted_documents(documents)
            if ctx.get_parameter_source("provider") is ParameterSource.DEFAULT:
                chosen = _referenced_provider(documents)
                if chosen is not None and chosen != provider:
                    converted_notes.append(
                        f"provider {chosen}: the input's NodeClasses are its own "
                        "(--provider chooses another)"
                    )
                    provider = chosen
        record = discover().provider(provider)
        given: dict[tuple[str, str], Any] = {}  # the input's NodeClasses, by kind and name
        context = ProviderContext(
            settings=_settings(provider, ctx.params),
            logger=collecting_logger("karpenter.simulate.provider", collected),
            node_classes=lambda kind, name: given.get((kind, name)),
        )
        cloud = record.factory(context)
        if documents is None:
            scenario = record.default_scenario
            documents = load_default_scenario(scenario() if scenario else None)
        built = build_snapshot(documents, cloud, strict=strict, node_class_view=given)
    except (ManifestError, UnknownProviderError, CloudProviderError) as err:
        raise click.ClickException(str(err)) from None
    snapshot, notes = built.snapshot, [*converted_notes, *collected.messages, *built.notes]
    built.warnings[:0] = [w.removeprefix("warning: ") for w in converted_warnings]
    pods = schedulable(snapshot.pending)
    started = time.perf_counter()
    results = schedule(
        snapshot,
        ignore_preferences=preference_policy == "Ignore",
        min_values_strict=min_values_policy == "Strict",
    )
    seconds = time.perf_counter() - started
    _explain_unserved(results, built.unserved, served=bool(snapshot.nodepools))
    report = _report(provider, results, len(pods), seconds)
    disruption = None
    if disrupt:
        try:
            gates = parse_feature_gates(feature_gates)
        except ValueError as err:
            raise click.ClickException(f"--feature-gates: {err}") from None
        options = Options(
            spot_to_spot=gates["SpotToSpotConsolidation"],
            drifted=drift_check(cloud, snapshot.nodeclaims, notes),
            preference_policy=preference_policy,
            min_values_policy=min_values_policy,
        )
        now = datetime.now(UTC)
        cluster = after_provisioning(with_pod_events(snapshot), results, now)
        disruption = plan(cluster, now, options)
        report["disruption"] = [command_json(command) for command in disruption.commands]
        report["disruption_blocked"] = disruption.blocked
    if output == "json":
        report["notes"] = notes
        report["warnings"] = [*built.warnings, *results.warnings]
        click.echo(json.dumps(report, indent=2))
    else:
        _print_text(report, results, notes, built.warnings)
        if disruption is not None:
            print_disruption(disruption)


_provider_options(simulate, offline=True)
