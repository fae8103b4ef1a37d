"""EC2 instance types as core InstanceTypes: labels, capacity and overhead, with exact figures."""

from __future__ import annotations

import copy
import gzip
import json
import time
from importlib import resources
from typing import Any

import pytest

from karpenter_aws import instancetype, labels
from karpenter_aws.amis import map_to_instance_types
from karpenter_aws.instancetype import BuildOptions, build, shape
from karpenter_aws.nodeclass import AMIStatus
from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Operator, Requirements

MIB = 2**20
GIB = 2**30
ZONES = {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1"}

# m5.large as DescribeInstanceTypes returns it (boto3 dict), unpruned.
M5_LARGE: dict[str, Any] = {
    "InstanceType": "m5.large",
    "CurrentGeneration": True,
    "FreeTierEligible": False,
    "SupportedUsageClasses": ["on-demand", "spot"],
    "SupportedRootDeviceTypes": ["ebs"],
    "SupportedVirtualizationTypes": ["hvm"],
    "BareMetal": False,
    "Hypervisor": "nitro",
    "ProcessorInfo": {
        "SupportedArchitectures": ["x86_64"],
        "SustainedClockSpeedInGhz": 3.1,
        "Manufacturer": "Intel",
    },
    "VCpuInfo": {
        "DefaultVCpus": 2,
        "DefaultCores": 1,
        "DefaultThreadsPerCore": 2,
        "ValidCores": [1],
        "ValidThreadsPerCore": [1, 2],
    },
    "MemoryInfo": {"SizeInMiB": 8192},
    "InstanceStorageSupported": False,
    "EbsInfo": {
        "EbsOptimizedSupport": "default",
        "EncryptionSupport": "supported",
        "EbsOptimizedInfo": {
            "BaselineBandwidthInMbps": 650,
            "BaselineThroughputInMBps": 81.25,
            "BaselineIops": 3600,
            "MaximumBandwidthInMbps": 4750,
            "MaximumThroughputInMBps": 593.75,
            "MaximumIops": 18750,
        },
        "NvmeSupport": "required",
    },
    "NetworkInfo": {
        "NetworkPerformance": "Up to 10 Gigabit",
        "MaximumNetworkInterfaces": 3,
        "MaximumNetworkCards": 1,
        "DefaultNetworkCardIndex": 0,
        "NetworkCards": [
            {
                "NetworkCardIndex": 0,
                "NetworkPerformance": "Up to 10 Gigabit",
                "MaximumNetworkInterfaces": 3,
                "BaselineBandwidthInGbps": 0.75,
                "PeakBandwidthInGbps": 10.0,
            }
        ],
        "Ipv4AddressesPerInterface": 10,
        "Ipv6AddressesPerInterface": 10,
        "Ipv6Supported": True,
        "EnaSupport": "required",
        "EfaSupported": False,
        "EncryptionInTransitSupported": False,
        "EnaSrdSupported": False,
    },
    "PlacementGroupInfo": {"SupportedStrategies": ["cluster", "partition", "spread"]},
    "HibernationSupported": True,
    "BurstablePerformanceSupported": False,
    "DedicatedHostsSupported": True,
    "AutoRecoverySupported": True,
    "SupportedBootModes": ["legacy-bios", "uefi"],
    "NitroEnclavesSupport": "supported",
    "NitroTpmSupport": "supported",
}


def _packaged() -> dict[str, dict[str, Any]]:
    raw = resources.files("karpenter_aws").joinpath("data/instance_types.json.gz").read_bytes()
    return {i["InstanceType"]: i for i in json.loads(gzip.decompress(raw))["instance_types"]}


PACKAGED = _packaged()


def _build(info: dict[str, Any], **options: Any) -> Any:
    options.setdefault("region", "us-east-1")
    built = instancetype.instance_type(info, BuildOptions(**options), ZONES)
    assert built is not None
    return built


def _labels(it: Any) -> dict[str, str]:
    return it.requirements.labels()


def test_m5_large_capacity_overhead_and_labels() -> None:
    it = _build(M5_LARGE)
    assert it.capacity == {
        "cpu": 2000,
        "memory": 7577 * MIB * 1000,  # 8192 MiB less ceil(8192 x 0.075) = 615 MiB
        "ephemeral-storage": 20 * GIB * 1000,
        "pods": 29_000,  # 3 ENIs x (10 - 1) + 2
    }
    assert dict(it.overhead.kube_reserved) == {
        "cpu": 70,  # 60m of the first core + 10m of the second
        "memory": (11 * 29 + 255) * MIB * 1000,
        "ephemeral-storage": GIB * 1000,
    }
    assert dict(it.overhead.system_reserved) == {}
    assert dict(it.overhead.eviction_threshold) == {
        "memory": 100 * MIB * 1000,
        "ephemeral-storage": 2 * GIB * 1000,
    }
    assert it.allocatable["cpu"] == 1930
    assert it.allocatable["memory"] == 7_238_320_128_000
    assert it.allocatable["pods"] == 29_000
    assert _labels(it) == {
        wk.INSTANCE_TYPE: "m5.large",
        wk.ARCH: "amd64",
        wk.OS: "linux",
        wk.TOPOLOGY_REGION: "us-east-1",
        labels.LABEL_INSTANCE_CPU: "2",
        labels.LABEL_INSTANCE_MEMORY: "8192",
        labels.LABEL_INSTANCE_HYPERVISOR: "nitro",
        labels.LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT: "false",
        labels.LABEL_INSTANCE_CATEGORY: "m",
        labels.LABEL_INSTANCE_GENERATION: "5",
        labels.LABEL_INSTANCE_FAMILY: "m5",
        labels.LABEL_INSTANCE_SIZE: "large",
        labels.LABEL_INSTANCE_CAPABILITY_FLEX: "false",
        labels.LABEL_INSTANCE_NETWORK_BANDWIDTH: "750",
        labels.LABEL_INSTANCE_CPU_MANUFACTURER: "intel",
        labels.LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: "3100",
        labels.LABEL_INSTANCE_EBS_BANDWIDTH: "4750",
    }
    assert it.requirements[wk.TOPOLOGY_ZONE].values == frozenset(ZONES)
    assert it.requirements[labels.LABEL_TOPOLOGY_ZONE_ID].values == frozenset(ZONES.values())
    assert it.requirements[wk.CAPACITY_TYPE].values == frozenset({"on-demand", "spot"})
    absent = {
        key
        for key, requirement in it.requirements.items()
        if requirement.operator() is Operator.DOES_NOT_EXIST
    }
    assert absent == {
        wk.WINDOWS_BUILD,
        labels.LABEL_INSTANCE_GPU_NAME,
        labels.LABEL_INSTANCE_GPU_MANUFACTURER,
        labels.LABEL_INSTANCE_GPU_COUNT,
        labels.LABEL_INSTANCE_GPU_MEMORY,
        labels.LABEL_INSTANCE_ACCELERATOR_NAME,
        labels.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER,
        labels.LABEL_INSTANCE_ACCELERATOR_COUNT,
        labels.LABEL_INSTANCE_LOCAL_NVME,
    }


def test_graviton_loses_64_mib_before_the_vm_overhead() -> None:
    it = _build(PACKAGED["c6g.xlarge"])
    assert it.capacity["memory"] == 7518 * MIB * 1000  # (8192 - 64) less ceil(8128 x 0.075)
    assert it.capacity["pods"] == 58_000  # 4 ENIs x (15 - 1) + 2
    assert it.overhead.kube_reserved["cpu"] == 80
    assert it.overhead.kube_reserved["memory"] == (11 * 58 + 255) * MIB * 1000
    assert _labels(it)[wk.ARCH] == "arm64"
    assert _labels(it)[labels.LABEL_INSTANCE_CPU_MANUFACTURER] == "aws"
    assert _labels(it)[labels.LABEL_INSTANCE_MEMORY] == "8192"


def test_gpu_type_has_gpu_resources_and_labels() -> None:
    it = _build(PACKAGED["g5.xlarge"])
    assert it.capacity["nvidia.com/gpu"] == 1000
    assert it.capacity["memory"] == 15155 * MIB * 1000
    assert {k: v for k, v in _labels(it).items() if "gpu" in k or "nvme" in k} == {
        labels.LABEL_INSTANCE_GPU_NAME: "a10g",
        labels.LABEL_INSTANCE_GPU_MANUFACTURER: "nvidia",
        labels.LABEL_INSTANCE_GPU_COUNT: "1",
        labels.LABEL_INSTANCE_GPU_MEMORY: "22888",
        labels.LABEL_INSTANCE_LOCAL_NVME: "250",
    }


def test_metal_type() -> None:
    it = _build(PACKAGED["m5.metal"])
    assert it.capacity["cpu"] == 96_000
    assert it.capacity["memory"] == 363_724 * MIB * 1000  # 393216 less 29492 MiB
    assert it.capacity["pods"] == 737_000  # 15 ENIs x (50 - 1) + 2
    assert it.overhead.kube_reserved["cpu"] == 310  # 60 + 10 + 10 + 0.25% of 92 cores
    assert it.overhead.kube_reserved["memory"] == (11 * 737 + 255) * MIB * 1000
    assert _labels(it)[labels.LABEL_INSTANCE_SIZE] == "metal"
    assert _labels(it)[labels.LABEL_INSTANCE_HYPERVISOR] == ""
    assert _labels(it)[labels.LABEL_INSTANCE_NETWORK_BANDWIDTH] == "25000"


def test_neuron_and_efa_resources() -> None:
    inf2 = _build(PACKAGED["inf2.xlarge"])
    assert inf2.capacity["aws.amazon.com/neuron"] == 1000
    assert inf2.capacity["aws.amazon.com/neuroncore"] == 2000
    assert _labels(inf2)[labels.LABEL_INSTANCE_ACCELERATOR_NAME] == "inferentia2"
    assert _labels(inf2)[labels.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER] == "aws"
    assert _labels(inf2)[labels.LABEL_INSTANCE_ACCELERATOR_COUNT] == "1"
    p4d = _build(PACKAGED["p4d.24xlarge"])
    assert p4d.capacity["nvidia.com/gpu"] == 8000
    assert p4d.capacity["vpc.amazonaws.com/efa"] == 4000
    assert _labels(p4d)[labels.LABEL_INSTANCE_NETWORK_BANDWIDTH] == "400000"


def test_kubelet_max_pods_pods_per_core_and_reserved_enis() -> None:
    it = _build(M5_LARGE, max_pods=20, pods_per_core=4)
    assert it.capacity["pods"] == 8_000  # min(4 x 2 vCPUs, 20)
    # AL2023 sizes kube-reserved memory by the ENI limit, not by maxPods
    assert it.overhead.kube_reserved["memory"] == (11 * 29 + 255) * MIB * 1000
    it = _build(M5_LARGE, reserved_enis=1)
    assert it.capacity["pods"] == 20_000  # 2 ENIs x 9 + 2
    assert _build(M5_LARGE, reserved_enis=3).capacity["pods"] == 0


def test_bottlerocket_ignores_pods_per_core_and_sizes_overhead_by_pods() -> None:
    it = _build(M5_LARGE, ami_family="Bottlerocket", max_pods=20, pods_per_core=4)
    assert it.capacity["pods"] == 20_000
    assert it.overhead.kube_reserved["memory"] == (11 * 20 + 255) * MIB * 1000


def test_kubelet_reservations_and_eviction_hard() -> None:
    it = _build(
        M5_LARGE,
        kube_reserved=(("cpu", "200m"), ("memory", "1Gi")),
        system_reserved=(("memory", "100Mi"),),
        eviction_hard=(("memory.available", "5%"), ("nodefs.available", "15%")),
    )
    assert dict(it.overhead.kube_reserved) == {
        "cpu": 200,
        "memory": GIB * 1000,
        "ephemeral-storage": GIB * 1000,
    }
    assert dict(it.overhead.system_reserved) == {"memory": 100 * MIB * 1000}
    assert dict(it.overhead.eviction_threshold) == {
        "memory": 397_253_018 * 1000,  # ceil(5% of 7577 MiB)
        "ephemeral-storage": 3_221_225_472 * 1000,  # 15% of 20Gi
    }
    quantity = _build(M5_LARGE, eviction_hard=(("memory.available", "500Mi"),))
    assert quantity.overhead.eviction_threshold["memory"] == 500 * MIB * 1000
    disabled = _build(M5_LARGE, eviction_hard=(("memory.available", "100%"),))
    assert disabled.overhead.eviction_threshold["memory"] == 0


def test_root_volume_and_instance_store() -> None:
    assert _build(M5_LARGE, ephemeral_storage=100 * GIB).capacity["ephemeral-storage"] == (
        100 * GIB * 1000
    )
    raid = _build(PACKAGED["g5.xlarge"], instance_store_raid0=True)
    assert raid.capacity["ephemeral-storage"] == 250 * 10**9 * 1000
    assert raid.overhead.eviction_threshold["ephemeral-storage"] == 25 * 10**9 * 1000
    # without instance storage, RAID0 keeps the root volume
    assert _build(M5_LARGE, instance_store_raid0=True).capacity["ephemeral-storage"] == (
        20 * GIB * 1000
    )
    assert instancetype.default_ephemeral_storage("Windows2022") == 50 * GIB
    assert instancetype.default_ephemeral_storage("Bottlerocket") == 20 * GIB


def test_windows() -> None:
    it = _build(
        M5_LARGE,
        ami_family="Windows2022",
        ephemeral_storage=instancetype.default_ephemeral_storage("Windows2022"),
    )
    assert _labels(it)[wk.OS] == "windows"
    assert _labels(it)[wk.WINDOWS_BUILD] == "10.0.20348"
    assert it.capacity["pods"] == 110_000
    assert it.capacity["vpc.amazonaws.com/PrivateIPv4Address"] == 9000
    assert it.capacity["ephemeral-storage"] == 50 * GIB * 1000
    assert it.overhead.kube_reserved["memory"] == (11 * 110 + 255) * MIB * 1000
    graviton = shape(PACKAGED["c6g.xlarge"])
    assert graviton is not None
    assert build(graviton, BuildOptions(ami_family="Windows2022"), ZONES, ()) is None


@pytest.mark.parametrize(
    ("change", "kept"),
    [
        ({"SupportedVirtualizationTypes": ["paravirtual"]}, False),
        ({"ProcessorInfo": {"SupportedArchitectures": ["i386"]}}, False),
        ({"ProcessorInfo": {"SupportedArchitectures": ["x86_64_mac"]}}, False),
        ({"ProcessorInfo": {"SupportedArchitectures": ["i386", "x86_64"]}}, True),
        ({"SupportedVirtualizationTypes": ["hvm", "paravirtual"]}, True),
    ],
)
def test_which_entries_are_skipped(change: dict[str, Any], kept: bool) -> None:
    info = copy.deepcopy(M5_LARGE)
    info.update(change)
    assert (shape(info) is not None) is kept


def test_capacity_types_follow_supported_usage_classes() -> None:
    info = copy.deepcopy(M5_LARGE)
    info["SupportedUsageClasses"] = ["on-demand", "capacity-block"]
    assert _build(info).requirements[wk.CAPACITY_TYPE].values == frozenset({"on-demand"})


def test_name_parsing() -> None:
    flex = _build(PACKAGED["c7i-flex.large"])
    assert _labels(flex)[labels.LABEL_INSTANCE_FAMILY] == "c7i-flex"
    assert _labels(flex)[labels.LABEL_INSTANCE_CAPABILITY_FLEX] == "true"
    assert _labels(flex)[labels.LABEL_INSTANCE_GENERATION] == "7"
    high_memory = _build(PACKAGED["u-6tb1.112xlarge"])
    assert _labels(high_memory)[labels.LABEL_INSTANCE_CATEGORY] == "u"
    assert _labels(high_memory)[labels.LABEL_INSTANCE_GENERATION] == "1"


def _node_pool(key: str, operator: str, *values: str) -> Requirements:
    return Requirements.from_node_selector([{"key": key, "operator": operator, "values": values}])


def test_every_type_defines_every_provider_label() -> None:
    options = BuildOptions(region="us-east-1")
    keys = {
        frozenset(built.requirements)
        for built in (build(s, options, ZONES, ()) for s in map(shape, PACKAGED.values()) if s)
        if built is not None
    }
    assert len(keys) == 1
    (defined,) = keys
    provider = {getattr(labels, name) for name in dir(labels) if name.startswith("LABEL_INSTANCE")}
    assert provider | {wk.WINDOWS_BUILD} <= defined


@pytest.mark.parametrize(
    ("requirement", "cpu_type", "gpu_type"),
    [
        ((labels.LABEL_INSTANCE_GPU_COUNT, "Exists"), False, True),
        ((labels.LABEL_INSTANCE_GPU_COUNT, "In", "1"), False, True),
        ((labels.LABEL_INSTANCE_GPU_COUNT, "Gt", "0"), False, True),
        ((labels.LABEL_INSTANCE_GPU_COUNT, "DoesNotExist"), True, False),
        ((labels.LABEL_INSTANCE_GPU_COUNT, "NotIn", "1"), True, False),
        ((labels.LABEL_INSTANCE_GPU_NAME, "In", "a10g"), False, True),
        ((labels.LABEL_INSTANCE_LOCAL_NVME, "Gt", "100"), False, True),
        ((labels.LABEL_INSTANCE_LOCAL_NVME, "DoesNotExist"), True, False),
        ((labels.LABEL_INSTANCE_ACCELERATOR_COUNT, "Exists"), False, False),
        ((labels.LABEL_INSTANCE_ACCELERATOR_COUNT, "DoesNotExist"), True, True),
        ((wk.WINDOWS_BUILD, "Exists"), False, False),
        ((wk.WINDOWS_BUILD, "DoesNotExist"), True, True),
    ],
)
def test_a_requirement_on_a_label_a_type_lacks(
    requirement: tuple[str, ...], cpu_type: bool, gpu_type: bool
) -> None:
    """Requiring a label selects only the types that have it, as the scheduler filters them."""
    node_pool = _node_pool(*requirement)
    m5 = _build(M5_LARGE)
    g5 = _build(PACKAGED["g5.xlarge"])
    assert (node_pool.intersects(m5.requirements) is None) is cpu_type
    assert (node_pool.intersects(g5.requirements) is None) is gpu_type


def test_windows_types_define_the_windows_build() -> None:
    windows = _build(M5_LARGE, ami_family="Windows2019")
    assert _node_pool(wk.WINDOWS_BUILD, "In", "10.0.17763").intersects(windows.requirements) is None
    assert _node_pool(wk.WINDOWS_BUILD, "DoesNotExist").intersects(windows.requirements)


def test_ami_variants_match_the_types_they_are_for() -> None:
    variants = {
        "standard": [
            {"key": labels.LABEL_INSTANCE_ACCELERATOR_COUNT, "operator": "DoesNotExist"},
            {"key": labels.LABEL_INSTANCE_GPU_COUNT, "operator": "DoesNotExist"},
        ],
        "nvidia": [{"key": labels.LABEL_INSTANCE_GPU_COUNT, "operator": "Exists"}],
        "neuron": [{"key": labels.LABEL_INSTANCE_ACCELERATOR_COUNT, "operator": "Exists"}],
    }
    amis = [
        AMIStatus.model_validate(
            {
                "id": name,
                "requirements": [*reqs, {"key": wk.ARCH, "operator": "In", "values": ["amd64"]}],
            }
        )
        for name, reqs in variants.items()
    ]
    types = [_build(M5_LARGE), _build(PACKAGED["g5.xlarge"]), _build(PACKAGED["inf2.xlarge"])]
    mapping = map_to_instance_types(types, amis)
    assert {ami: [t.name for t in its] for ami, its in mapping.items()} == {
        "standard": ["m5.large"],
        "nvidia": ["g5.xlarge"],
        "neuron": ["inf2.xlarge"],
    }


def test_building_every_packaged_type_is_fast() -> None:
    started = time.perf_counter()
    shapes = [s for s in map(shape, PACKAGED.values()) if s is not None]
    parsed = time.perf_counter()
    options = BuildOptions(region="us-east-1")
    built = [build(s, options, ZONES, ()) for s in shapes]
    done = time.perf_counter()
    assert len(built) == len(PACKAGED) > 1000
    # generous bounds for slow machines; typically about 30 ms each
    assert parsed - started < 1.0
    assert done - parsed < 1.0
