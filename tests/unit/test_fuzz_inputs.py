"""Bad input, fuzzed: manifests for ``karpenter simulate`` and ``karpenter convert``, NodePools,
NodeClaims and NodeClasses through the controller's decoding, and providers' catalogs through
the core's checks. Each case ends in a result or a one-line error naming the object and field,
never a traceback, and within ``CASE_SECONDS``.

Seeded (``derandomize``): ``FUZZ_CASES`` cases in all (200 by default; ``benchmarks/fuzz.py``
runs 5,000). The inputs are built by ``tests.unit.fuzz_inputs``.
"""

from __future__ import annotations

import copy
import json
import logging
from datetime import UTC, datetime
from typing import Any

import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cli.disrupt import after_provisioning, with_pod_events
from karpenter_core.cli.main import cli
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.registry import discover
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.disruption.planner import Options, plan
from karpenter_core.manifests import ManifestError, build_snapshot, load_default_scenario
from karpenter_core.scheduling.scheduler import schedule
from karpenter_core.state.informer import Informer
from tests.unit import fuzz_inputs as fuzz


def _settings(target: str) -> settings:
    return settings(
        max_examples=fuzz.cases(target),
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


def _one_line_error(result: Result, case: str) -> None:
    """The command ended with a result, or with one ``Error:`` line; never a traceback."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{case}\nraised {result.exception!r}") from result.exception
    if result.exit_code != 0:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, f"{case}\nstderr: {result.stderr}"
        assert lines[0].startswith("Error: "), f"{case}\nstderr: {result.stderr}"


def _invoke(args: list[str], text: str) -> Result:
    try:
        with fuzz.time_limit():
            return CliRunner().invoke(cli, args, input=text)
    except fuzz.CaseTimeout:
        raise AssertionError(f"over {fuzz.CASE_SECONDS:g}s: {args}\n{text}") from None


@_settings("simulate")
@given(
    text=fuzz.manifests(fuzz.SIMULATE_CORPUS),
    provider=st.sampled_from(("kwok", "aws", "azure", "gcp")),
    options=st.lists(st.sampled_from(("--disrupt", "--strict", "json")), unique=True),
)
def test_simulate_bad_manifests(text: str, provider: str, options: list[str]) -> None:
    args = ["simulate", "-f", "-", "--provider", provider]
    args += [o for o in options if o != "json"] + (["-o", "json"] if "json" in options else [])
    result = _invoke(args, text)
    _one_line_error(result, text)
    if result.exit_code == 0 and "json" in options:
        json.loads(result.stdout)


@_settings("convert")
@given(text=fuzz.manifests(fuzz.CONVERT_CORPUS), output=st.sampled_from(("yaml", "json")))
def test_convert_bad_manifests(text: str, output: str) -> None:
    result = _invoke(["convert", "-f", "-", "-o", output], text)
    _one_line_error(result, text)
    if result.exit_code == 0:  # what kubectl apply reads: the objects written, nothing more
        written = (
            json.loads(result.stdout)["items"]
            if output == "json"
            else list(yaml.safe_load_all(result.stdout))
        )
        assert all(set(obj) <= {"apiVersion", "kind", "metadata", "spec"} for obj in written)


def _decoders() -> dict[str, Any]:
    """The informers' decoders of the Karpenter kinds, by kind."""
    decoders: dict[str, Any] = {"NodePool": NodePool.from_manifest}
    decoders["NodeClaim"] = NodeClaim.from_manifest
    for record in discover().records.values():
        for info in record.node_classes:
            decoders[info.kind] = getattr(info.model, "from_manifest", info.model.model_validate)
    return decoders


_DECODERS = _decoders()
_KARPENTER_OBJECTS = [
    doc
    for _, docs in fuzz.SIMULATE_CORPUS
    for doc in docs
    if isinstance(doc, dict) and doc.get("kind") in _DECODERS
]


@_settings("decode")
@given(data=st.data())
def test_controller_decodes_bad_objects(data: st.DataObject, caplog: Any) -> None:
    """A NodePool, NodeClaim or NodeClass the informer cannot decode is left out with one
    warning line naming the object and field, not a logged traceback."""
    obj = copy.deepcopy(data.draw(st.sampled_from(_KARPENTER_OBJECTS)))
    decode = _DECODERS[obj["kind"]]
    for _ in range(data.draw(st.integers(1, 4))):
        data.draw(fuzz.mutated_value([obj]))
    informer: Informer[Any] = Informer(None, "/apis/x", decode)  # type: ignore[arg-type]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="karpenter.informer"), fuzz.time_limit():
        informer._decode(obj)
    for record in caplog.records:
        assert record.exc_info is None, f"{obj}\nlogged a traceback: {record.getMessage()}"
        assert "\n" not in record.getMessage()


@_settings("provider")
@given(catalog=fuzz.instance_types(), zoned=st.booleans())
def test_provider_bad_catalogs(catalog: list[Any], zoned: bool) -> None:
    """A provider's catalog is used, or refused with one error naming the provider and
    instance type: scheduling and disruption never trip over it."""
    record = discover().provider("kwok")
    context = ProviderContext(
        settings=record.settings({}),
        logger=logging.getLogger("fuzz"),
        node_classes=lambda kind, name: None,
    )
    cloud = record.factory(context)
    cloud.get_instance_types = lambda nodepool: list(catalog)  # type: ignore[method-assign]
    docs = load_default_scenario()
    if zoned:
        requirements = docs[0].obj["spec"]["template"]["spec"]["requirements"]
        requirements.append({"key": fuzz.ZONE_LABEL, "operator": "In", "values": ["zone-a"]})
    now = datetime.now(UTC)
    with fuzz.time_limit():
        try:
            built = build_snapshot(docs, cloud)
        except (ManifestError, CloudProviderError) as err:
            assert "\n" not in str(err)
            return
        results = schedule(built.snapshot)
        plan(after_provisioning(with_pod_events(built.snapshot), results, now), now, Options())
