"""Bad input the fuzzer (``test_fuzz_inputs``) found tripping the commands, the controller's
decoding or the checks of providers' data: each case ends in a one-line error naming the object
and field, as every other bad input does."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.cli.main import cli
from karpenter_core.cloudprovider.types import InstanceType, Offering
from karpenter_core.cloudprovider.validation import InvalidProviderOutput, validate_instance_types
from karpenter_core.convert.nodepool import check_weights
from karpenter_core.disruption.budgets import allowed_disruptions, schedule_error
from karpenter_core.manifests.workloads import MAX_PODS
from karpenter_core.state.informer import Informer, object_key


def _run(*args: str, text: str) -> Result:
    return CliRunner().invoke(cli, list(args), input=text)


def _error_line(result: Result) -> str:
    """The command's one error line (it failed, without a traceback)."""
    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    (line,) = result.stderr.strip().splitlines()
    return line


def _default_scenario(**changes: Any) -> str:
    """The core's default scenario with ``changes`` made to its NodePool's disruption and its
    Deployment's spec."""
    from importlib import resources

    text = resources.files("karpenter_core").joinpath("scenarios", "default.yaml").read_text()
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        if doc["kind"] == "NodePool":
            doc["spec"]["disruption"].update(changes.get("disruption", {}))
        if doc["kind"] == "Deployment":
            doc["spec"].update(changes.get("deployment", {}))
    return yaml.safe_dump_all(docs)


# -- karpenter simulate -----------------------------------------------------------------------


def test_a_huge_replica_count_is_refused_not_expanded() -> None:
    """``replicas: 100000000`` made a hundred million pods (out of memory, minutes)."""
    text = _default_scenario(deployment={"replicas": 100_000_000})
    line = _error_line(_run("simulate", "-f", "-", text=text))
    assert line.startswith("Error: <stdin>: Deployment default/burst: spec.replicas: 100000000")
    assert f"at most {MAX_PODS:,}" in line


def test_replicas_up_to_the_limit_are_simulated() -> None:
    text = _default_scenario(deployment={"replicas": 2_000})
    result = _run("simulate", "-f", "-", text=text)
    assert result.exit_code == 0, result.output
    assert "2000 pod(s)" in result.stdout


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ("0 0 31 2 *", "'0 0 31 2 *' never fires: no date matches it"),
        ("0 0 30 2 *", "'0 0 30 2 *' never fires: no date matches it"),
        ("60 * * * *", "'60 * * * *' is not a valid cron schedule"),
    ],
)
def test_a_budget_schedule_that_cannot_be_used_is_one_line(schedule: str, problem: str) -> None:
    """February 30th raised croniter's CroniterBadDateError from ``simulate --disrupt``; minute
    60 was silently read as a budget that allows nothing."""
    budget = {"nodes": "0", "schedule": schedule, "duration": "1h"}
    text = _default_scenario(disruption={"budgets": [budget]})
    line = _error_line(_run("simulate", "-f", "-", "--disrupt", text=text))
    assert line == (
        f"Error: <stdin>: NodePool default: spec.disruption.budgets[0].schedule: {problem}"
    )


def test_a_schedule_that_never_fires_allows_no_disruption() -> None:
    """What the controller does with such a NodePool (the apiserver admits it): fail closed."""
    budget = {"nodes": "5", "schedule": "0 0 31 2 *", "duration": "1h"}
    assert allowed_disruptions([budget], "Empty", 10, 0, datetime(2026, 3, 1, tzinfo=UTC)) == 0
    assert schedule_error("0 0 29 2 *") is None  # leap days do come


@pytest.mark.parametrize("name", ["\x85", "a\nb", "a\u2028b"])
def test_an_object_name_with_a_line_break_stays_on_the_error_line(name: str) -> None:
    """A Pod named ``"\\N"`` (YAML's next-line character) broke the error over two lines."""
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}})
    line = _error_line(_run("simulate", "-f", "-", text=text))
    escaped = repr(name)[1:-1]
    assert line == (
        f"Error: <stdin>: Pod default/{escaped}: spec.containers: a pod needs at least one "
        "container"
    )


# -- karpenter convert ------------------------------------------------------------------------

_SHARED_PLACEHOLDER = """\
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: pool}
spec:
  template:
    spec:
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: default}
      kubelet: {maxPods: 50}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: default}
spec:
  kubeletConfiguration: {maxPods: 110}
"""


def test_a_placeholder_nodeclass_also_named_by_another_nodepool_is_written_once_each() -> None:
    """A Provisioner naming no NodeClass gets the placeholder EC2NodeClass default; a NodePool
    naming EC2NodeClass default (not in the input) with other kubelet settings took its name,
    and writing the placeholder raised IndexError."""
    result = _run("convert", "-f", "-", text=_SHARED_PLACEHOLDER)
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "EC2NodeClass"}
    assert {name: c["spec"]["kubelet"] for name, c in classes.items()} == {
        "default": {"maxPods": 50},
        "default-default": {"maxPods": 110},
    }
    assert "# written for NodePool pool, which references it: fill in" in result.stdout
    assert "# written for Provisioner default, which names no NodeClass: fill in" in result.stdout


@pytest.mark.parametrize("values", [5, 5.5, "spot"])
def test_requirement_values_that_are_not_a_list_are_a_warning(values: Any) -> None:
    """``values: 5`` on a capacity-type requirement raised TypeError in the AWS converter's
    capacity-reservation check."""
    text = yaml.safe_dump(
        {
            "apiVersion": "karpenter.sh/v1beta1",
            "kind": "NodePool",
            "metadata": {"name": "pool"},
            "spec": {
                "weight": 10,
                "template": {
                    "spec": {
                        "nodeClassRef": {
                            "apiVersion": "karpenter.k8s.aws/v1beta1",
                            "kind": "EC2NodeClass",
                            "name": "beta",
                        },
                        "requirements": [
                            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": values}
                        ],
                    }
                },
            },
        }
    )
    result = _run("convert", "-f", "-", text=text)
    assert result.exit_code == 0, result.output
    assert (
        "warning: NodePool pool: spec.template.spec.requirements[0].values: the output NodePool "
        "does not validate"
    ) in result.stderr


def test_a_name_with_a_line_break_cannot_add_fields_to_the_output() -> None:
    """The comment ``# from Provisioner a`` + line break + ``spec: ...`` wrote the rest of the
    name into the converted object as YAML."""
    text = yaml.safe_dump(
        {
            "apiVersion": "karpenter.sh/v1alpha5",
            "kind": "Provisioner",
            "metadata": {"name": "a\nstatus: injected"},
            "spec": {"providerRef": {"name": "default"}},
        }
    )
    result = _run("convert", "-f", "-", text=text)
    assert result.exit_code == 0, result.output
    (nodepool,) = yaml.safe_load_all(result.stdout)
    assert "status" not in nodepool
    assert "# from Provisioner a\\nstatus: injected\n" in result.stdout


def test_weights_with_capacity_type_values_not_a_list() -> None:
    """The weight check read ``values: 5.5`` as a list of capacity types (TypeError)."""
    nodepool = {
        "spec": {
            "weight": 10,
            "template": {
                "spec": {
                    "requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": 5.5}]
                }
            },
        }
    }
    (finding,) = check_weights([("NodePool pool", nodepool)])
    assert (finding.object, finding.field) == ("NodePool pool", "spec.weight")


# -- the controller's decoding ----------------------------------------------------------------


def test_an_undecodable_nodepool_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    """The informer logged pydantic's ValidationError with its traceback."""
    from karpenter_core.apis.v1.nodepool import NodePool

    path = "/apis/karpenter.sh/v1/nodepools"
    informer: Informer[Any] = Informer(None, path, NodePool.from_manifest)  # type: ignore[arg-type]
    bad = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": 5}}},
    }
    with caplog.at_level(logging.WARNING, logger="karpenter.informer"):
        assert informer._decode(bad) is None
    (record,) = caplog.records
    assert record.exc_info is None
    assert record.getMessage() == (
        "cannot decode NodePool default: spec.template.spec.requirements: Input should be a "
        "valid list (got 5) (and 1 more error); left out of the cache"
    )


def test_an_undecodable_object_named_with_a_line_break_is_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A kind of ``"\\n"`` split the informer's warning over two lines."""
    from karpenter_core.apis.v1.nodepool import NodePool

    path = "/apis/karpenter.sh/v1/nodepools"
    informer: Informer[Any] = Informer(None, path, NodePool.from_manifest)  # type: ignore[arg-type]
    bad = {"apiVersion": "karpenter.sh/v1", "kind": "\n", "metadata": {"name": "a\nb"}}
    with caplog.at_level(logging.WARNING, logger="karpenter.informer"):
        assert informer._decode(bad) is None
    (record,) = caplog.records
    assert record.getMessage().startswith("cannot decode \\n a\\nb: kind: Input should be")


def test_an_object_whose_metadata_is_not_a_mapping_has_a_key() -> None:
    """``object_key`` (the informer's cache key, also in its log lines) raised AttributeError."""
    assert object_key({"metadata": "x"}) == ""
    assert object_key({"metadata": {"name": "a", "namespace": "ns"}}) == "ns/a"


# -- providers' data --------------------------------------------------------------------------


def _instance_type(name: str) -> InstanceType:
    offering = Offering(
        Requirements.from_labels({wk.TOPOLOGY_ZONE: "zone-a", wk.CAPACITY_TYPE: "on-demand"}), 0.1
    )
    labels = Requirements.from_labels({wk.INSTANCE_TYPE: name})
    return InstanceType(name, labels, [offering], {"cpu": 2000, "memory": 4 * 2**30 * 1000})


def test_an_instance_type_returned_twice_is_refused() -> None:
    """Two instance types of one name made which one a NodeClaim launches depend on order."""
    with pytest.raises(InvalidProviderOutput) as raised:
        validate_instance_types("acme", "default", [_instance_type("a-2"), _instance_type("a-2")])
    assert str(raised.value) == (
        "provider 'acme' (NodePool 'default'), instance type 'a-2': returned twice (names must "
        "be unique)"
    )
    validate_instance_types("acme", "default", [_instance_type("a-2"), _instance_type("a-4")])


def test_simulate_names_a_provider_catalog_with_duplicates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from karpenter_kwok.cloudprovider import KWOKCloudProvider

    monkeypatch.setattr(
        KWOKCloudProvider,
        "get_instance_types",
        lambda self, nodepool: [_instance_type("a-2"), _instance_type("a-2")],
    )
    line = _error_line(_run("simulate", text=""))
    assert line == (
        "Error: provider 'kwok' (NodePool 'default'), instance type 'a-2': returned twice "
        "(names must be unique)"
    )
