"""Capacity, overhead, labels and offerings of Azure instance types."""

from __future__ import annotations

import pytest

from karpenter_azure.instancetype import (
    EVICTION_MEMORY_AVAILABLE,
    LABEL_AKS_PRIORITY,
    LABEL_AKS_SCALESET_PRIORITY,
    LABEL_AKS_SKU_CPU,
    LABEL_PLACEMENT_SCOPE,
    LABEL_SKU_EPHEMERAL_OS_MAX_SIZE,
    LABEL_SKU_GPU_COUNT,
    LABEL_SKU_GPU_MANUFACTURER,
    LABEL_SKU_GPU_NAME,
    LABEL_SKU_HYPERV_GENERATION,
    LABEL_SKU_MEMORY,
    LABEL_SKU_SERIES,
    LABEL_SKU_VERSION,
    REGIONAL_ZONE,
    RESOURCE_AMD_GPU,
    RESOURCE_NVIDIA_GPU,
    SKU_LABELS,
    BuildOptions,
    build,
    kube_reserved,
    max_pods,
)
from karpenter_azure.skus import Sku, parse_size
from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Operator, Requirement, Requirements
from karpenter_core.cloudprovider.types import InstanceType

GIB = 2**30
MIB = 2**20
OPTIONS = BuildOptions(region="eastus", max_pods=250)
PRICES = {("on-demand", "Standard_D4s_v5"): 0.192, ("spot", "Standard_D4s_v5"): 0.021}


def sku(name: str = "Standard_D4s_v5", vcpus: int = 4, memory_gib: float = 16, **kw: object) -> Sku:
    size = parse_size(name)
    assert size is not None
    fields: dict[str, object] = {
        "architecture": "amd64",
        "zones": ("1", "2", "3"),
        "spot": True,
        "accelerated_networking": True,
        "premium_io": True,
        "hyperv_generations": ("V1", "V2"),
        "gpus": 0,
    }
    fields.update(kw)
    return Sku(name=name, size=size, vcpus=vcpus, memory_gib=memory_gib, **fields)  # type: ignore[arg-type]


def built(
    item: Sku,
    options: BuildOptions = OPTIONS,
    prices: dict[tuple[str, str], float] | None = None,
    unavailable: frozenset[tuple[str, str]] = frozenset(),
) -> InstanceType:
    table = PRICES if prices is None else prices
    result = build(
        item,
        options,
        lambda capacity_type, name: table.get((capacity_type, name)),
        lambda capacity_type, _name, zone: (capacity_type, zone) in unavailable,
    )
    assert result is not None
    return result


def test_capacity_and_overhead_follow_aks_formulas() -> None:
    instance_type = built(sku())
    assert instance_type.capacity["cpu"] == 4000
    # 16 GiB less ceil(16 GiB x 7.5%)
    assert instance_type.capacity["memory"] == (16 * GIB - 1288490189) * 1000
    assert instance_type.capacity["ephemeral-storage"] == 128 * 10**9 * 1000
    assert instance_type.capacity["pods"] == 250_000
    # cpu 60 + 40 + 2 x 20 milli-cores; memory 25% x 4 + 20% x 4 + 10% x 8 GiB = 2662 MiB
    assert instance_type.overhead.kube_reserved == {"cpu": 140, "memory": 2662 * MIB * 1000}
    assert instance_type.overhead.eviction_threshold == {"memory": 750 * MIB * 1000}
    assert EVICTION_MEMORY_AVAILABLE == 750 * MIB


@pytest.mark.parametrize(
    ("vcpus", "memory_gib", "cpu_milli", "memory_mib"),
    [
        (2, 8, 100, 1843),  # 6% + 4% of cores; 25% x 4 + 20% x 4 GiB = 1.8 GiB
        (64, 256, 740, 12165),  # 100 + 2 x 20 + 60 x 10; 1 + .8 + .8 + 6.72 + 2.56 GiB
        (1, 3.5, 60, 896),
    ],
)
def test_kube_reserved_tiers(
    vcpus: int, memory_gib: float, cpu_milli: int, memory_mib: int
) -> None:
    assert kube_reserved(vcpus, memory_gib) == {
        "cpu": cpu_milli,
        "memory": memory_mib * MIB * 1000,
    }


@pytest.mark.parametrize(
    ("plugin", "mode", "node_class", "pods"),
    [
        ("azure", "overlay", None, 250),
        ("azure", "", None, 30),
        ("kubenet", "", None, 110),
        ("none", "", None, 250),
        ("azure", "overlay", 42, 42),
    ],
)
def test_max_pods_by_network_plugin_and_mode(
    plugin: str, mode: str, node_class: int | None, pods: int
) -> None:
    assert max_pods(plugin, mode, node_class) == pods


def test_the_aksnodeclass_shapes_pods_and_ephemeral_storage() -> None:
    options = BuildOptions(region="eastus", max_pods=30, os_disk_size_gb=512)
    instance_type = built(sku(), options)
    assert instance_type.capacity["pods"] == 30_000
    assert instance_type.capacity["ephemeral-storage"] == 512 * 10**9 * 1000


def test_every_sku_label_is_defined_and_absent_values_do_not_exist() -> None:
    requirements = built(sku()).requirements
    assert set(SKU_LABELS) <= set(requirements)
    for key in (LABEL_SKU_GPU_NAME, LABEL_SKU_GPU_MANUFACTURER, LABEL_SKU_EPHEMERAL_OS_MAX_SIZE):
        assert requirements[key].operator() is Operator.DOES_NOT_EXIST
    assert requirements[LABEL_SKU_SERIES].values == {"Ds_v5"}
    assert requirements[LABEL_SKU_VERSION].values == {"5"}
    assert requirements[LABEL_SKU_MEMORY].values == {"16384"}
    assert requirements[LABEL_SKU_GPU_COUNT].values == {"0"}
    assert requirements[LABEL_SKU_HYPERV_GENERATION].values == {"1", "2"}
    # a NodePool requiring a GPU maker excludes the size instead of ignoring the key
    wants_gpu = Requirements([Requirement.new(LABEL_SKU_GPU_MANUFACTURER, "Exists")])
    assert requirements.intersects(wants_gpu) is not None


def test_gpu_sizes_carry_their_maker_name_and_resource() -> None:
    nvidia = built(
        sku("Standard_NC24ads_A100_v4", 24, 220, gpus=1),
        prices={("on-demand", "Standard_NC24ads_A100_v4"): 3.67},
    )
    assert nvidia.requirements[LABEL_SKU_GPU_MANUFACTURER].values == {"nvidia"}
    assert nvidia.requirements[LABEL_SKU_GPU_NAME].values == {"A100"}
    assert (nvidia.capacity[RESOURCE_NVIDIA_GPU], nvidia.capacity[RESOURCE_AMD_GPU]) == (1000, 0)
    amd = built(sku("Standard_NV16as_v4", 16, 56, gpus=1), prices={})
    assert amd.requirements[LABEL_SKU_GPU_MANUFACTURER].values == {"amd"}
    assert (amd.capacity[RESOURCE_NVIDIA_GPU], amd.capacity[RESOURCE_AMD_GPU]) == (0, 1000)


def test_offerings_per_zone_and_regional_with_spot_only_when_low_priority_capable() -> None:
    instance_type = built(sku())
    pairs = {(o.capacity_type, o.zone) for o in instance_type.offerings}
    zones = {"eastus-1", "eastus-2", "eastus-3", REGIONAL_ZONE}
    assert pairs == {(c, z) for c in ("on-demand", "spot") for z in zones}
    regional = next(o for o in instance_type.offerings if o.zone == REGIONAL_ZONE)
    assert regional.requirements[LABEL_PLACEMENT_SCOPE].values == {"regional"}
    no_spot = built(sku(spot=False))
    assert {o.capacity_type for o in no_spot.offerings} == {"on-demand"}
    assert no_spot.requirements[wk.CAPACITY_TYPE].values == {"on-demand"}


def test_a_size_without_zones_is_offered_regionally_only() -> None:
    instance_type = built(sku(zones=()))
    assert {o.zone for o in instance_type.offerings} == {REGIONAL_ZONE}
    assert instance_type.requirements[LABEL_PLACEMENT_SCOPE].values == {"regional"}


def test_unavailable_and_unpriced_offerings_leave_the_requirements() -> None:
    marked = frozenset({("spot", "eastus-1"), ("on-demand", "eastus-1")})
    instance_type = built(sku(), unavailable=marked)
    out = {(o.capacity_type, o.zone) for o in instance_type.offerings if not o.available}
    assert out == marked
    assert "eastus-1" not in instance_type.requirements[wk.TOPOLOGY_ZONE].values
    unpriced = built(sku(), prices={("on-demand", "Standard_D4s_v5"): 0.192})
    assert not any(o.available for o in unpriced.offerings if o.capacity_type == "spot")
    assert unpriced.requirements[wk.CAPACITY_TYPE].values == {"on-demand"}


def test_encryption_at_host_excludes_sizes_known_not_to_support_it() -> None:
    wanting = BuildOptions(region="eastus", max_pods=250, encryption_at_host=True)
    table = PRICES
    refuse = sku(encryption_at_host=False)
    assert build(refuse, wanting, lambda c, n: table.get((c, n)), lambda *_: False) is None
    assert built(sku(encryption_at_host=True), wanting) is not None
    assert built(refuse) is not None


def test_aks_priority_labels_follow_the_capacity_type() -> None:
    instance_type = built(sku())
    spot = next(o for o in instance_type.offerings if o.capacity_type == "spot")
    on_demand = next(o for o in instance_type.offerings if o.capacity_type == "on-demand")
    assert spot.requirements[LABEL_AKS_SCALESET_PRIORITY].values == {"spot"}
    assert on_demand.requirements[LABEL_AKS_PRIORITY].values == {"regular"}
    assert instance_type.requirements[LABEL_AKS_PRIORITY].values == {"regular", "spot"}
    assert instance_type.requirements[LABEL_AKS_SKU_CPU].values == {"4"}
    wants_spot = Requirements([Requirement.new(LABEL_AKS_SCALESET_PRIORITY, "In", ["spot"])])
    assert built(sku(spot=False)).requirements.intersects(wants_spot) is not None
