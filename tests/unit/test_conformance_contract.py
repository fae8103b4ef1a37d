"""The contract level of the conformance suite: its core set, broken providers failing it with a
message naming what they did; the core rejects invalid provider output clearly. Each bundled
provider runs the suite in its own tests (providers/*/tests) and pins its skips there."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import karpenter_core
from karpenter_conformance.suite.runner import Report, run
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cli import main as cli_main
from karpenter_core.cloudprovider.plugin import ProviderRecord
from karpenter_core.cloudprovider.registry import discover
from karpenter_core.cloudprovider.types import (
    InstanceType,
    NodeClaimNotFound,
    Offering,
)
from karpenter_kwok.catalog import generic_catalog
from karpenter_kwok.cloudprovider import KWOKCloudProvider
from karpenter_kwok.conformance import KWOKProfile

# the conformance suite and the karpenter command run in subprocesses
pytestmark = pytest.mark.slow

KARPENTER = Path(sys.executable).parent / "karpenter"
CHECKOUT = Path(karpenter_core.__file__).resolve().parents[1]
"""The checkout the core under test runs from: the one install hints name."""
CORE = {
    "record",
    "instance-types-are-valid",
    "instance-types-are-priced",
    "instance-types-have-well-known-labels",
    "allocatable-is-capacity-less-overhead",
    "create-returns-the-chosen-offering",
    "create-is-idempotent",
    "get-and-list",
    "delete-removes-the-instance",
    "not-found-for-a-gone-instance",
    "insufficient-capacity",
}


def kwok_variant(provider: type[KWOKCloudProvider], **changes: Any) -> ProviderRecord:
    """The KWOK record with another provider class (and other record fields)."""
    record = discover().provider("kwok")
    return dataclasses.replace(record, factory=provider.from_context, **changes)


def outcomes(report: Report) -> dict[str, tuple[str, str]]:
    return {r.name: (r.outcome, r.message) for r in report.results}


def test_the_core_set_and_every_check_described() -> None:
    report = run(discover().provider("kwok"), None, "--collect-only")
    assert report.exit_code == 0
    assert {r.name for r in report.results if r.core} == CORE
    assert all(r.description for r in report.results)


class NotIdempotent(KWOKCloudProvider):
    """Launches a new instance on every create, even for the same NodeClaim."""

    def create(self, nodeclaim: NodeClaim) -> NodeClaim:
        again = nodeclaim.model_copy(deep=True)
        again.metadata.uid = str(uuid.uuid4())
        return super().create(again)


class NaNPrice(KWOKCloudProvider):
    """Prices the first offering of the first instance type at NaN."""

    def get_instance_types(self, nodepool: Any) -> list[InstanceType]:
        types = super().get_instance_types(nodepool)
        first = types[0]
        offerings = [Offering(o.requirements, o.price, o.available) for o in first.offerings]
        offerings[0].price = math.nan
        broken = InstanceType(
            first.name, first.requirements, offerings, first.capacity, first.overhead
        )
        return [broken, *types[1:]]


class DeleteKeepsInstance(KWOKCloudProvider):
    """Reports an instance terminated without deleting it."""

    def delete(self, nodeclaim: NodeClaim) -> None:
        raise NodeClaimNotFound("terminated")


@pytest.mark.parametrize(
    ("provider", "check", "message"),
    [
        (
            NotIdempotent,
            "create-is-idempotent",
            "the provider returned kwok://{} then kwok://{} for one NodeClaim; expected the same "
            "instance",
        ),
        (
            NaNPrice,
            "instance-types-are-valid",
            "the provider returned an invalid instance type: provider 'kwok' (NodePool "
            "'conformance'), instance type 'c-1x-amd64-linux': offering spot in test-zone-a has "
            "the price nan (a price must be a finite number, not negative); expected valid ones",
        ),
        (
            DeleteKeepsInstance,
            "delete-removes-the-instance",
            "the provider still returns kwok://{} from get() after delete; expected "
            "NodeClaimNotFound",
        ),
    ],
)
def test_a_provider_breaking_a_core_contract_fails_naming_it(
    provider: type[KWOKCloudProvider], check: str, message: str
) -> None:
    report = run(kwok_variant(provider), check)
    assert not report.ok
    ((outcome, got),) = outcomes(report).values()
    assert outcome == "failed"
    prefix, _, rest = message.partition("{}")
    assert got.startswith(prefix), got
    if rest:
        assert rest.rsplit("{}", 1)[-1] in got, got


class NoFaults(KWOKProfile):
    unsupported = {**KWOKProfile.unsupported, "insufficient_capacity": "no faults here"}


def test_a_core_check_cannot_be_skipped() -> None:
    report = run(kwok_variant(KWOKCloudProvider, conformance=NoFaults), "insufficient-capacity")
    assert outcomes(report) == {
        "insufficient-capacity": (
            "failed",
            "core check insufficient-capacity cannot be skipped: profile has no "
            "insufficient_capacity: no faults here",
        )
    }
    assert not report.ok


def test_the_suite_ignores_the_project_it_is_run_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the current directory's pytest settings nor its conftest.py reach the suite."""
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option\n")
    (tmp_path / "conftest.py").write_text("import no_such_module_anywhere\n")
    monkeypatch.chdir(tmp_path)
    report = run(discover().provider("kwok"), "record")
    assert outcomes(report) == {"record": ("passed", "")}, report


# -- the command line ---------------------------------------------------------------------------


def test_karpenter_conformance_prints_json() -> None:
    result = subprocess.run(
        [str(KARPENTER), "conformance", "--provider", "kwok", "-k", "record", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # progress goes to stderr, stdout holds only the JSON
    assert "[conformance] [1/1] record passed" in result.stderr
    assert report["provider"] == "kwok"
    assert [(c["name"], c["result"], c["core"]) for c in report["checks"]] == [
        ("record", "passed", True)
    ]


def test_karpenter_conformance_names_an_unknown_provider() -> None:
    result = subprocess.run(
        [str(KARPENTER), "conformance", "--provider", "nope"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 1
    assert "unknown provider 'nope'; available:" in result.stderr
    assert "Traceback" not in result.stderr


def _group_with(points: list[Any], monkeypatch: pytest.MonkeyPatch) -> click.Group:
    monkeypatch.setattr(cli_main.importlib.metadata, "entry_points", lambda group: points)
    group = click.Group("karpenter")
    cli_main.add_contributed_commands(group)
    return group


def test_without_karpenter_conformance_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = _group_with([], monkeypatch)
    result = CliRunner().invoke(group, ["conformance", "--provider", "kwok"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: `karpenter conformance` is unavailable: it comes with karpenter-conformance, "
        f"installed from a karpenter-py checkout: pip install -e {CHECKOUT / 'conformance'}"
    )


def test_a_command_entry_point_that_fails_to_load_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    point = importlib.metadata.EntryPoint(
        name="conformance", value="karpenter_missing_cli:conformance", group="karpenter.cli"
    )
    group = _group_with([point], monkeypatch)
    result = CliRunner().invoke(group, ["conformance"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: `karpenter conformance` is unavailable: karpenter_missing_cli:conformance (its "
        "distribution) failed to load: ModuleNotFoundError: No module named "
        "'karpenter_missing_cli'"
    )


# -- the core's validation of provider output -----------------------------------------------------


def test_simulate_names_the_instance_type_with_a_nan_price(tmp_path: Path) -> None:
    catalog = generic_catalog()
    catalog[3]["offerings"][1]["Price"] = math.nan
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    result = subprocess.run(
        [str(KARPENTER), "simulate"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={"INSTANCE_TYPES_FILE_PATH": str(path), "PATH": "/usr/bin:/bin"},
    )
    assert "Traceback" not in result.stderr
    assert result.returncode != 0
    name = catalog[3]["name"]
    assert f"provider 'kwok' (NodePool 'default'), instance type '{name}': offering" in (
        result.stderr
    )
    assert "has the price nan (a price must be a finite number, not negative)" in result.stderr
