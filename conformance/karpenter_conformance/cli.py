"""``karpenter conformance``: run the conformance suite for an installed provider.

Contributed to the ``karpenter`` command through a ``karpenter.cli`` entry point; the suite and
pytest are imported only when the command runs.
"""

from __future__ import annotations

import json
import sys

import click

__all__ = ["conformance"]


@click.command("conformance")
@click.option("--provider", "name", required=True, metavar="NAME", help="The provider to check.")
@click.option("-k", "select", default=None, metavar="CHECK", help="Run only these checks.")
@click.option(
    "--cluster",
    is_flag=True,
    default=False,
    help="Also run the cluster level: the controller on a local KWOK cluster (built and started "
    "on first use).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
def conformance(name: str, select: str | None, cluster: bool, output: str) -> None:
    """Check that a provider keeps the contract the core relies on (exit 1 on any failure).

    Runs the contract level (the provider against its profile's fake cloud, no cluster, seconds);
    --cluster adds the cluster level. Progress (each check as it ends, the local cluster's build
    and start) goes to stderr; the table or the JSON to stdout."""
    from karpenter_conformance.suite.runner import NOT_RUN, OUTCOMES, as_dict, run
    from karpenter_conformance.suite.version import UnsupportedRecordVersion
    from karpenter_core.cloudprovider.registry import (
        RegistryError,
        UnknownProviderError,
        discover,
    )

    try:
        record = discover().provider(name)
        # progress on stderr: stdout carries only the table or the JSON
        report = run(record, select, *(["--cluster"] if cluster else []), progress=sys.stderr)
    except (RegistryError, UnknownProviderError, UnsupportedRecordVersion) as error:
        raise click.ClickException(str(error)) from None
    if not report.results:
        raise click.ClickException(
            f"no check matches {select!r}"
            if select
            else f"the suite did not run ({report.exit_code})"
        )
    if output == "json":
        click.echo(json.dumps(as_dict(report), indent=2))
    else:
        width = max(len(r.name) for r in report.results)
        click.echo(f"{'CHECK':<{width}}  RESULT   SECONDS  NOTE")
        for r in report.results:
            note = r.message if r.outcome != "passed" else ""
            core = " (core)" if r.core and r.outcome == "failed" else ""
            click.echo(f"{r.name:<{width}}  {r.outcome:<7}  {r.seconds:7.2f}  {note}{core}")
        counts = [(o, sum(r.outcome == o for r in report.results)) for o in OUTCOMES]
        summary = ", ".join(f"{n} {o}" for o, n in counts if n or o != NOT_RUN)
        click.echo(f"\n{report.provider}: {summary} in {report.seconds:.1f}s")
    if not report.ok:
        raise SystemExit(1)
