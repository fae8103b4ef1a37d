"""GKE's node sizing formulas, the instance-* labels and the offerings of GCP instance types."""

from __future__ import annotations

import pytest

from karpenter_core.apis.requirements import Operator
from karpenter_gcp.instancetype import (
    INSTANCE_LABELS,
    LABEL_GKE_ACCELERATOR,
    RESOURCE_NVIDIA_GPU,
    BuildOptions,
    MachineType,
    build,
    kube_reserved,
    name_labels,
)

GIB = 2**30
MIB = 2**20
ZONES = ("us-central1-a", "us-central1-b")
E2 = MachineType("e2-standard-8", 8, 32768, ZONES)
A2 = MachineType("a2-highgpu-2g", 24, 174080, ZONES, "amd64", "nvidia-tesla-a100", 2, 40960)


def _build(mt: MachineType, options: BuildOptions | None = None, **kw: object):
    prices = kw.get("prices", lambda ct, m, zone: 1.0 if ct == "on-demand" else 0.4)
    unavailable = kw.get("unavailable", lambda ct, name, zone: False)
    return build(mt, options or BuildOptions("us-central1"), prices, unavailable)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "vcpus", "memory_mib", "cpu", "memory"),
    [
        ("e2-micro", 2, 1024, 1060, 255),  # shared core; at most 1 GiB
        ("e2-standard-2", 2, 8192, 70, 1843),  # 60+10; 1024+819
        ("e2-standard-8", 8, 32768, 90, 3645),  # 60+10+10+10; 1024+819+819+983
        ("n2-highmem-96", 96, 786432, 310, 22650),  # +230; 1843+819+6881+13107 (2% of 640 GiB)
    ],
)
def test_kube_reserved_follows_gke_tiers(name, vcpus, memory_mib, cpu, memory):
    assert kube_reserved(name, vcpus, memory_mib) == (cpu, memory)


def test_capacity_and_overhead_of_a_general_type():
    it = _build(E2)
    memory = 32768 * MIB - int(32768 * MIB * 0.07)
    assert it.capacity == {
        "cpu": 8000,
        "memory": memory * 1000,
        "ephemeral-storage": 100 * GIB * 1000,
        "pods": 110_000,
        RESOURCE_NVIDIA_GPU: 0,
    }
    assert it.overhead.kube_reserved == {
        "cpu": 90,
        "memory": 3645 * MIB * 1000,
        "ephemeral-storage": 41 * GIB * 1000,  # min(50, 41, 100) GiB of a 100 GiB boot disk
    }
    assert it.overhead.system_reserved == {"cpu": 100}
    assert it.overhead.eviction_threshold == {
        "memory": 100 * MIB * 1000,
        "ephemeral-storage": 10 * GIB * 1000,
    }
    assert it.allocatable["cpu"] == 8000 - 190


def test_kubelet_configuration_and_local_ssds_change_the_overhead():
    options = BuildOptions(
        "us-central1",
        max_pods=64,
        pods_per_core=4,
        local_ssd_gib=750,
        local_ssd_count=2,
        kube_reserved=(("cpu", "500m"),),
        system_reserved=(("memory", "1Gi"),),
        eviction_hard=(("memory.available", "5%"), ("pid.available", "10%")),
    )
    it = _build(E2, options)
    assert it.capacity["pods"] == 32_000  # 4 per core caps maxPods
    assert it.capacity["ephemeral-storage"] == 750 * GIB * 1000
    assert it.overhead.kube_reserved["cpu"] == 500
    assert it.overhead.kube_reserved["ephemeral-storage"] == 75 * GIB * 1000
    assert it.overhead.system_reserved == {"cpu": 100, "memory": GIB * 1000}
    memory = 32768 * MIB - int(32768 * MIB * 0.07)
    assert it.overhead.eviction_threshold["memory"] == -(-memory * 5 // 100) * 1000
    assert it.overhead.eviction_threshold["ephemeral-storage"] == 75 * GIB * 1000


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        ("n2-standard-8", ("n2", "standard", "2", "8")),
        ("n2d-highmem-4", ("n2d", "highmem", "2", "4")),
        ("e2-medium", ("e2", "medium", "2", "medium")),
        ("a3-edgegpu-8g-nolssd", ("a3", "edgegpu", "3", "8g")),
    ],
)
def test_name_labels_split_as_the_community_provider_does(name, labels):
    assert tuple(name_labels(name).values()) == labels


def test_every_instance_label_is_defined_and_gpu_ones_do_not_exist_without_gpus():
    reqs = _build(E2).requirements
    assert {*INSTANCE_LABELS, LABEL_GKE_ACCELERATOR} <= set(reqs)
    gpu_name = reqs["karpenter.k8s.gcp/instance-gpu-name"]
    assert gpu_name.operator() is Operator.DOES_NOT_EXIST
    assert reqs["karpenter.k8s.gcp/instance-memory"].values == frozenset({"32768"})


def test_a_gpu_type_offers_nvidia_gpus_and_names_them():
    it = _build(A2)
    assert it.capacity[RESOURCE_NVIDIA_GPU] == 2000
    reqs = it.requirements
    assert reqs["karpenter.k8s.gcp/instance-gpu-name"].values == {"nvidia-tesla-a100"}
    assert reqs["karpenter.k8s.gcp/instance-gpu-count"].values == {"2"}
    assert reqs["karpenter.k8s.gcp/instance-gpu-memory"].values == {"40960"}
    assert reqs[LABEL_GKE_ACCELERATOR].values == {"nvidia-tesla-a100"}


def test_offerings_per_zone_and_capacity_type_unavailable_without_price_or_when_marked():
    it = _build(
        E2,
        prices=lambda ct, mt, zone: None if (ct, zone) == ("spot", "us-central1-b") else 0.3,
        unavailable=lambda ct, name, zone: (ct, zone) == ("on-demand", "us-central1-a"),
    )
    available = {(o.capacity_type, o.zone) for o in it.offerings if o.available}
    assert available == {("on-demand", "us-central1-b"), ("spot", "us-central1-a")}
    assert len(it.offerings) == 4
    assert it.requirements["topology.kubernetes.io/zone"].values == set(ZONES)
