"""The KWOK catalog: upstream's 144-type matrix, and JSON files in upstream's format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from karpenter_core.apis import labels
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import InstanceType
from karpenter_kwok.catalog import CatalogError, generic_catalog, parse_catalog
from karpenter_kwok.cloudprovider import KWOKCloudProvider, load_instance_types
from karpenter_kwok.labels import INSTANCE_CPU, INSTANCE_FAMILY, INSTANCE_MEMORY, INSTANCE_SIZE

GIB = 2**30
MIB = 2**20


@pytest.fixture(scope="module")
def catalog() -> dict[str, InstanceType]:
    return {it.name: it for it in load_instance_types(None)}


KWOK_NODEPOOL = NodePool.from_manifest(
    {
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": "default",
                    },
                    "requirements": [],
                }
            }
        },
    }
)


def _prices(it: InstanceType) -> dict[str, set[float]]:
    prices: dict[str, set[float]] = {}
    for offering in it.offerings:
        prices.setdefault(offering.capacity_type, set()).add(offering.price)
    return prices


def test_the_matrix_has_144_types(catalog: dict[str, InstanceType]) -> None:
    assert len(catalog) == 144
    cpus = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
    expected = {
        f"{family}-{cpu}x-{arch}-{os}"
        for cpu in cpus
        for family in "csm"
        for arch in ("amd64", "arm64")
        for os in ("linux", "windows")
    }
    assert set(catalog) == expected


def test_c_1x_prices_match_upstream(catalog: dict[str, InstanceType]) -> None:
    prices = _prices(catalog["c-1x-amd64-linux"])
    assert prices == {"on-demand": {0.027147483648}, "spot": {0.019003238553599998}}
    assert round(next(iter(prices["on-demand"])), 6) == 0.027147
    assert round(next(iter(prices["spot"])), 6) == 0.019003


@pytest.mark.parametrize(("family", "gib_per_cpu"), [("c", 2), ("s", 4), ("m", 8)])
@pytest.mark.parametrize("cpu", [1, 48, 256])
def test_price_memory_and_pods_follow_the_formula(
    catalog: dict[str, InstanceType], family: str, gib_per_cpu: int, cpu: int
) -> None:
    it = catalog[f"{family}-{cpu}x-arm64-windows"]
    memory = cpu * gib_per_cpu * GIB
    assert it.capacity == {
        "cpu": cpu * 1000,
        "memory": memory * 1000,
        "pods": min(16 * cpu, 1024) * 1000,
        "ephemeral-storage": 20 * GIB * 1000,
    }
    (on_demand,), (spot,) = _prices(it)["on-demand"], _prices(it)["spot"]
    assert on_demand == pytest.approx(0.025 * cpu + 0.001 * memory / 1e9, rel=1e-12)
    assert spot == pytest.approx(0.7 * on_demand, rel=1e-12)


def test_offerings_cover_four_zones_and_two_capacity_types(
    catalog: dict[str, InstanceType],
) -> None:
    for it in catalog.values():
        pairs = {(o.zone, o.capacity_type) for o in it.offerings}
        assert len(it.offerings) == len(pairs) == 8
        assert {z for z, _ in pairs} == {f"test-zone-{x}" for x in "abcd"}
        assert {c for _, c in pairs} == {"spot", "on-demand"}
        assert all(o.available for o in it.offerings)


def test_overhead_and_allocatable(catalog: dict[str, InstanceType]) -> None:
    it = catalog["c-1x-amd64-linux"]
    assert it.overhead.kube_reserved == {"cpu": 100, "memory": 10 * MIB * 1000}
    assert it.allocatable["cpu"] == 900
    assert it.allocatable["memory"] == (2 * GIB - 10 * MIB) * 1000
    assert it.allocatable["pods"] == 16_000


def test_labels(catalog: dict[str, InstanceType]) -> None:
    small = catalog["c-1x-amd64-linux"].requirements
    assert small.labels() == {
        labels.INSTANCE_TYPE: "c-1x-amd64-linux",
        labels.ARCH: "amd64",
        labels.OS: "linux",
        INSTANCE_SIZE: "1",
        INSTANCE_FAMILY: "c",
        INSTANCE_CPU: "1",
        INSTANCE_MEMORY: "2Gi",
    }
    assert small[labels.TOPOLOGY_ZONE].values == {f"test-zone-{x}" for x in "abcd"}
    assert small[labels.CAPACITY_TYPE].values == {"spot", "on-demand"}
    assert catalog["m-256x-arm64-windows"].requirements[INSTANCE_MEMORY].values == {"2Ti"}


def test_instance_types_are_built_once(catalog: dict[str, InstanceType]) -> None:
    provider = KWOKCloudProvider.from_context(ProviderContext())
    first, second = (
        provider.get_instance_types(KWOK_NODEPOOL),
        provider.get_instance_types(KWOK_NODEPOOL),
    )
    assert first == second
    assert all(a is b for a, b in zip(first, second, strict=True))


# INSTANCE_TYPES_FILE_PATH -------------------------------------------------------------------


def _entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": "m5.large",
        "offerings": [
            {
                "Price": 0.096,
                "Available": True,
                "Requirements": [
                    {"key": labels.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                    {"key": labels.TOPOLOGY_ZONE, "operator": "In", "values": ["us-east-1a"]},
                ],
            },
            {
                "Price": 0.035,
                "Available": False,
                "Requirements": [
                    {"key": labels.CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
                    {"key": labels.TOPOLOGY_ZONE, "operator": "In", "values": ["us-east-1b"]},
                ],
            },
        ],
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": "2", "memory": "8192Mi", "nvidia.com/gpu": 1},
    }
    entry.update(changes)
    return entry


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "instance_types.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_file_replaces_the_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTANCE_TYPES_FILE_PATH", str(_write(tmp_path, [_entry()])))
    provider = KWOKCloudProvider.from_context(ProviderContext())
    (it,) = provider.get_instance_types(KWOK_NODEPOOL)
    assert it.name == "m5.large"
    assert it.capacity == {
        "cpu": 2000,
        "memory": 8 * GIB * 1000,
        "pods": 110_000,
        "nvidia.com/gpu": 1000,
    }
    assert it.requirements.labels()[INSTANCE_SIZE] == "large"
    assert it.requirements.labels()[INSTANCE_FAMILY] == "m5"
    assert it.requirements.labels()[INSTANCE_MEMORY] == "8Gi"
    assert it.requirements[labels.TOPOLOGY_ZONE].values == {"us-east-1a", "us-east-1b"}
    assert [(o.capacity_type, o.price, o.available) for o in it.offerings] == [
        ("on-demand", 0.096, True),
        ("spot", 0.035, False),
    ]


def test_the_setting_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTANCE_TYPES_FILE_PATH", str(tmp_path / "missing.json"))
    path = _write(tmp_path, [_entry(name="custom")])
    context = ProviderContext(settings={"instance-types-file-path": str(path)})
    provider = KWOKCloudProvider.from_context(context)
    assert [it.name for it in provider.get_instance_types(KWOK_NODEPOOL)] == ["custom"]


def test_the_generated_matrix_round_trips_through_a_file(
    tmp_path: Path, catalog: dict[str, InstanceType]
) -> None:
    loaded = load_instance_types(str(_write(tmp_path, generic_catalog())))
    assert [it.name for it in loaded] == list(catalog)
    for it in loaded:
        assert it.capacity == catalog[it.name].capacity
        assert it.requirements == catalog[it.name].requirements
        assert _prices(it) == _prices(catalog[it.name])


def _offering(**changes: Any) -> dict[str, Any]:
    return {**_entry()["offerings"][0], **changes}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ('[{"name": ', "not valid JSON: Expecting value at line 1 column 11"),
        ({"name": "x"}, "expected a JSON list of instance types, got an object"),
        (["m5.large"], "entry 0: expected an object, got a string"),
        ([_entry(name="")], "entry 0: 'name' must be a non-empty string"),
        ([_entry(), _entry()], "entry 1 (m5.large): duplicate name, already used by entry 0"),
        ([_entry(architecture=None)], "entry 0 (m5.large): 'architecture' must be"),
        ([_entry(operatingSystems="linux")], "entry 0 (m5.large): 'operatingSystems' must be"),
        ([_entry(resources={"memory": "1Gi"})], "entry 0 (m5.large): resources.cpu is missing"),
        ([_entry(resources={"cpu": "2", "memory": "8Gx"})], "resources.memory: '8Gx' is not a"),
        ([_entry(resources={"cpu": "-2", "memory": "8Gi"})], "resources.cpu: '-2' is negative"),
        ([_entry(resources={"cpu": True, "memory": "8Gi"})], "resources.cpu: expected a quantity"),
        ([_entry(offerings={})], "entry 0 (m5.large): 'offerings' must be a list, got an object"),
        (
            [_entry(offerings=[{"zone": "a", "capacityType": "spot", "price": 1.0}])],
            "offerings[0]: 'Requirements' is missing (this looks like the old KWOK format",
        ),
        (
            [_entry(offerings=[_offering(Price="0.1")])],
            "offerings[0].Price: expected a non-negative number, got '0.1'",
        ),
        (
            [_entry(offerings=[_offering(Available="yes")])],
            "offerings[0].Available: expected true or false, got 'yes'",
        ),
        (
            [
                _entry(
                    offerings=[
                        _offering(
                            Requirements=[
                                {"key": labels.TOPOLOGY_ZONE, "operator": "In", "values": ["a"]}
                            ]
                        )
                    ]
                )
            ],
            "offerings[0].Requirements: an offering must define a zone and a capacity type",
        ),
        (
            [
                _entry(
                    offerings=[
                        _offering(
                            Requirements=[
                                {"key": labels.TOPOLOGY_ZONE, "operator": "Near", "values": ["a"]}
                            ]
                        )
                    ]
                )
            ],
            "offerings[0].Requirements: unknown operator 'Near'",
        ),
        (
            [_entry(offerings=[_offering(Requirements=[{"operator": "In", "values": ["a"]}])])],
            "offerings[0].Requirements: each requirement needs a string 'key'",
        ),
    ],
)
def test_bad_files_name_the_file_entry_and_field(
    tmp_path: Path, data: object, message: str
) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(CatalogError) as error:
        load_instance_types(str(path))
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(
        CatalogError, match=r"missing\.json: cannot read the instance-types file: No such file"
    ):
        load_instance_types(str(tmp_path / "missing.json"))


def test_a_file_that_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "instance_types.json"
    path.write_bytes(b"\xff\xfe[]")
    with pytest.raises(
        CatalogError, match=r"^.*\.json: not valid JSON: not UTF-8 text \(byte 0\)$"
    ):
        load_instance_types(str(path))


def test_parse_catalog_is_pure() -> None:
    with pytest.raises(CatalogError, match=r"^inline: entry 0 \(x\): 'offerings' must be a list"):
        parse_catalog([_entry(name="x", offerings=None)], "inline")


@pytest.mark.slow
def test_a_bad_file_is_one_line_on_the_command_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [_entry(resources={"cpu": "2"})])
    result = subprocess.run(
        [str(Path(sys.executable).parent / "karpenter"), "simulate"],
        capture_output=True,
        text=True,
        env={**os.environ, "INSTANCE_TYPES_FILE_PATH": str(path)},
        check=False,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr == f"Error: {path}: entry 0 (m5.large): resources.memory is missing\n"
