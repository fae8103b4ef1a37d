"""EC2 instance types as core ``InstanceType``s: labels, capacity and overhead (pure).

A ``Shape`` is parsed once from a DescribeInstanceTypes entry (the dict boto3 returns) and holds
what does not depend on the EC2NodeClass: the labels, vCPUs, memory, ENI limits and accelerator
counts. ``build`` then applies the NodeClass-dependent inputs (``BuildOptions``: AMI family,
kubelet settings, root volume) and the zones and offerings, following upstream's formulas:

- memory = SizeInMiB (less 64 MiB on Graviton) less ceil(that x vm-memory-overhead-percent) MiB;
- pods = kubelet maxPods, else ENIs x (IPv4 per ENI - 1) + 2 (110 on Windows), capped by
  podsPerCore x vCPUs;
- kube-reserved cpu 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% of the rest;
  memory 11 MiB x pods + 255 MiB; ephemeral-storage 1Gi;
- eviction threshold memory 100Mi and 10% of ephemeral storage, or the kubelet's evictionHard.
  Soft eviction thresholds do not reduce allocatable capacity.

Every instance type defines every provider label (and ``node.kubernetes.io/windows-build``): a
label it lacks, such as the GPU count of a type without GPUs, is a DoesNotExist requirement, so a
NodePool requiring the label (Exists, In, Gt ...) excludes the type instead of ignoring the key.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from karpenter_aws import labels
from karpenter_aws.amis import ARCHITECTURES, WINDOWS_BUILDS
from karpenter_aws.nodeclass import (
    AMI_FAMILY_AL2023,
)
from karpenter_core.apis import labels as wk
from karpenter_core.apis.quantity import parse_quantity, to_milli
from karpenter_core.sdk.reserved import overrides, signal_milli
from karpenter_core.sdk.types import InstanceType, Offering, Overhead, Requirement, Requirements

__all__ = [
    "DEFAULT_AMI_FAMILY",
    "DEFAULT_EPHEMERAL_STORAGE",
    "RESOURCE_AMD_GPU",
    "RESOURCE_EFA",
    "RESOURCE_HABANA_GAUDI",
    "RESOURCE_NEURON",
    "RESOURCE_NEURON_CORE",
    "RESOURCE_NVIDIA_GPU",
    "RESOURCE_PRIVATE_IPV4",
    "BuildOptions",
    "Shape",
    "build",
    "default_ephemeral_storage",
    "instance_type",
    "shape",
]

RESOURCE_NVIDIA_GPU = "nvidia.com/gpu"
RESOURCE_AMD_GPU = "amd.com/gpu"
RESOURCE_NEURON = "aws.amazon.com/neuron"
RESOURCE_NEURON_CORE = "aws.amazon.com/neuroncore"
RESOURCE_HABANA_GAUDI = "habana.ai/gaudi"
RESOURCE_EFA = "vpc.amazonaws.com/efa"
RESOURCE_PRIVATE_IPV4 = "vpc.amazonaws.com/PrivateIPv4Address"

DEFAULT_AMI_FAMILY = AMI_FAMILY_AL2023
"""The AMI family when there is no EC2NodeClass."""

_MIB = 2**20
_GIB = 2**30
DEFAULT_EPHEMERAL_STORAGE = 20 * _GIB
"""Bytes of ephemeral storage when nothing else says (the default root volume)."""
_WINDOWS_EPHEMERAL_STORAGE = 50 * _GIB
_WINDOWS_PODS = 110
_CAPACITY_TYPES = frozenset({wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT})
_CPU_TIERS = ((0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025))
_KUBE_RESERVED_EPHEMERAL = to_milli(parse_quantity("1Gi"))
_EVICTION_MEMORY = to_milli(parse_quantity("100Mi"))
_CATEGORY = re.compile(r"(^[a-z]+)(-[0-9]+tb)?([0-9]+).*\.")
_EVICTION_SIGNALS = {"memory.available": "memory", "nodefs.available": "ephemeral-storage"}
_INSTANCE_LABELS = (
    labels.LABEL_INSTANCE_CATEGORY,
    labels.LABEL_INSTANCE_FAMILY,
    labels.LABEL_INSTANCE_GENERATION,
    labels.LABEL_INSTANCE_SIZE,
    labels.LABEL_INSTANCE_CPU,
    labels.LABEL_INSTANCE_CPU_MANUFACTURER,
    labels.LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    labels.LABEL_INSTANCE_MEMORY,
    labels.LABEL_INSTANCE_EBS_BANDWIDTH,
    labels.LABEL_INSTANCE_NETWORK_BANDWIDTH,
    labels.LABEL_INSTANCE_HYPERVISOR,
    labels.LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT,
    labels.LABEL_INSTANCE_GPU_NAME,
    labels.LABEL_INSTANCE_GPU_MANUFACTURER,
    labels.LABEL_INSTANCE_GPU_COUNT,
    labels.LABEL_INSTANCE_GPU_MEMORY,
    labels.LABEL_INSTANCE_ACCELERATOR_NAME,
    labels.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER,
    labels.LABEL_INSTANCE_ACCELERATOR_COUNT,
    labels.LABEL_INSTANCE_LOCAL_NVME,
    labels.LABEL_INSTANCE_CAPABILITY_FLEX,
)
"""The provider's instance labels; those a type lacks are DoesNotExist requirements."""
_ABSENT = {key: Requirement(key, False) for key in (*_INSTANCE_LABELS, wk.WINDOWS_BUILD)}
_GPU_RESOURCES = {
    "NVIDIA": RESOURCE_NVIDIA_GPU,
    "AMD": RESOURCE_AMD_GPU,
    "Habana": RESOURCE_HABANA_GAUDI,
}


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """The inputs beside the instance type itself; hashable, so usable as a cache key.

    Reservations and eviction thresholds are ``(resource or signal, value)`` pairs as written in
    the EC2NodeClass kubelet block; ``ephemeral_storage`` is in bytes (the root volume's size, or
    ``default_ephemeral_storage``); ``instance_store_raid0`` uses the instance-store disks instead.
    """

    ami_family: str = DEFAULT_AMI_FAMILY
    vm_memory_overhead_percent: float = 0.075
    reserved_enis: int = 0
    max_pods: int | None = None
    pods_per_core: int | None = None
    kube_reserved: tuple[tuple[str, str], ...] = ()
    system_reserved: tuple[tuple[str, str], ...] = ()
    eviction_hard: tuple[tuple[str, str], ...] = ()
    ephemeral_storage: int = DEFAULT_EPHEMERAL_STORAGE
    instance_store_raid0: bool = False
    region: str = ""


class Shape:
    """What an instance type is, independent of any EC2NodeClass."""

    __slots__ = (
        "arm64",
        "capacity_types",
        "efa",
        "enis",
        "extended",
        "ipv4_per_eni",
        "local_storage_gb",
        "memory_mib",
        "name",
        "requirements",
        "vcpus",
    )

    def __init__(
        self,
        name: str,
        vcpus: int,
        memory_mib: int,
        arm64: bool,
        enis: int,
        ipv4_per_eni: int,
        capacity_types: frozenset[str],
        requirements: Requirements,
        extended: dict[str, int],
        efa: int,
        local_storage_gb: int | None,
    ) -> None:
        self.name = name
        self.vcpus = vcpus
        self.memory_mib = memory_mib
        self.arm64 = arm64
        self.enis = enis
        self.ipv4_per_eni = ipv4_per_eni
        self.capacity_types = capacity_types
        self.requirements = requirements
        self.extended = extended
        self.efa = efa
        self.local_storage_gb = local_storage_gb

    def eni_limited_pods(self, reserved_enis: int) -> int:
        """Pods the VPC CNI can address: usable ENIs x (IPv4 per ENI - 1) + 2."""
        usable = max(self.enis - reserved_enis, 0)
        return usable * (self.ipv4_per_eni - 1) + 2 if usable else 0

    def memory_bytes(self, overhead_percent: float) -> int:
        """Memory capacity after the VM overhead (and Graviton's 64 MiB CMA reservation)."""
        mib = self.memory_mib - 64 if self.arm64 else self.memory_mib
        overhead = math.ceil(float(mib * _MIB) * overhead_percent / 1024 / 1024)
        return (mib - overhead) * _MIB

    def __repr__(self) -> str:
        return f"Shape({self.name})"


def _kebab(value: str) -> str:
    return value.replace(" ", "-").lower()


@functools.cache
def _single(key: str, value: str) -> Requirement:
    return Requirement(key, False, frozenset((value,)))


def _label(key: str, value: object) -> Requirement:
    """``key In [value]``, shared between the types that have the same label (never mutated)."""
    return _single(key, str(value))


def _architecture(info: Mapping[str, Any]) -> str | None:
    """The ``kubernetes.io/arch`` of a type Karpenter launches; None when it is not hvm (when
    that is stated) or neither x86_64 nor arm64."""
    virtualization = info.get("SupportedVirtualizationTypes")
    if virtualization is not None and "hvm" not in virtualization:
        return None
    architectures: Sequence[str] = (info.get("ProcessorInfo") or {}).get(
        "SupportedArchitectures"
    ) or ()
    return next((ARCHITECTURES[a] for a in architectures if a in ARCHITECTURES), None)


def _name_labels(name: str) -> list[Requirement]:
    """Category, generation, family, size and flex, read from the type's name."""
    reqs = []
    parts = _CATEGORY.match(name)
    if parts is not None:
        reqs.append(_label(labels.LABEL_INSTANCE_CATEGORY, parts.group(1)))
        reqs.append(_label(labels.LABEL_INSTANCE_GENERATION, parts.group(3)))
    family, dot, size = name.partition(".")
    if dot and "." not in size:
        reqs.append(_label(labels.LABEL_INSTANCE_FAMILY, family))
        reqs.append(_label(labels.LABEL_INSTANCE_SIZE, size))
    reqs.append(
        _label(labels.LABEL_INSTANCE_CAPABILITY_FLEX, "true" if "-flex" in family else "false")
    )
    return reqs


def _local_storage(info: Mapping[str, Any]) -> tuple[int | None, list[Requirement]]:
    """GB of instance store (None without), and its local-nvme label when it is NVMe."""
    storage = info.get("InstanceStorageInfo")
    if storage is None or storage.get("TotalSizeInGB") is None:
        return None, []
    local_storage_gb = int(storage["TotalSizeInGB"])
    if storage.get("NvmeSupport") == "unsupported":
        return local_storage_gb, []
    return local_storage_gb, [_label(labels.LABEL_INSTANCE_LOCAL_NVME, local_storage_gb)]


def _hardware_labels(info: Mapping[str, Any]) -> list[Requirement]:
    """Network bandwidth, CPU manufacturer and clock speed, and EBS bandwidth, when stated."""
    reqs = []
    cards = (info.get("NetworkInfo") or {}).get("NetworkCards") or ()
    bandwidth = [c["BaselineBandwidthInGbps"] for c in cards if "BaselineBandwidthInGbps" in c]
    if bandwidth:
        megabits = round(sum(bandwidth) * 1000)
        reqs.append(_label(labels.LABEL_INSTANCE_NETWORK_BANDWIDTH, megabits))
    processor = info.get("ProcessorInfo") or {}
    if processor:
        manufacturer = _kebab(processor.get("Manufacturer", ""))
        reqs.append(_label(labels.LABEL_INSTANCE_CPU_MANUFACTURER, manufacturer))
        mhz = math.floor(float(processor.get("SustainedClockSpeedInGhz") or 0) * 1000 + 0.5)
        reqs.append(_label(labels.LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ, mhz))
    ebs = info.get("EbsInfo") or {}
    if ebs.get("EbsOptimizedSupport") == "default" and ebs.get("EbsOptimizedInfo"):
        ebs_mbps = ebs["EbsOptimizedInfo"].get("MaximumBandwidthInMbps", 0)
        reqs.append(_label(labels.LABEL_INSTANCE_EBS_BANDWIDTH, ebs_mbps))
    return reqs


def _gpus(info: Mapping[str, Any]) -> tuple[list[Requirement], dict[str, int]]:
    """The GPU labels (for a type with one kind of GPU) and GPU counts by resource."""
    counts: dict[str, int] = {}
    gpus: Sequence[Any] = (info.get("GpuInfo") or {}).get("Gpus") or ()
    for gpu in gpus:
        resource = _GPU_RESOURCES.get(gpu.get("Manufacturer", ""))
        if resource is not None:
            counts[resource] = counts.get(resource, 0) + int(gpu.get("Count", 0))
    if len(gpus) != 1:
        return [], counts
    gpu = gpus[0]
    gpu_memory = (gpu.get("MemoryInfo") or {}).get("SizeInMiB", 0)
    return [
        _label(labels.LABEL_INSTANCE_GPU_NAME, _kebab(gpu.get("Name", ""))),
        _label(labels.LABEL_INSTANCE_GPU_MANUFACTURER, _kebab(gpu.get("Manufacturer", ""))),
        _label(labels.LABEL_INSTANCE_GPU_COUNT, gpu.get("Count", 0)),
        _label(labels.LABEL_INSTANCE_GPU_MEMORY, gpu_memory),
    ], counts


def _accelerator_labels(name: str, manufacturer: str, count: object) -> list[Requirement]:
    """The accelerator name, manufacturer and count labels."""
    return [
        _label(labels.LABEL_INSTANCE_ACCELERATOR_NAME, _kebab(name)),
        _label(labels.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER, manufacturer),
        _label(labels.LABEL_INSTANCE_ACCELERATOR_COUNT, count),
    ]


def _accelerators(info: Mapping[str, Any]) -> tuple[list[Requirement], dict[str, int]]:
    """The accelerator labels (an inference accelerator, or one kind of Neuron device) and the
    Neuron device and core counts."""
    reqs: list[Requirement] = []
    counts: dict[str, int] = {}
    accelerators: Sequence[Any] = (info.get("InferenceAcceleratorInfo") or {}).get(
        "Accelerators"
    ) or ()
    if len(accelerators) == 1 and not info.get("NeuronInfo"):
        accelerator = accelerators[0]
        manufacturer = _kebab(accelerator.get("Manufacturer", ""))
        reqs += _accelerator_labels(
            accelerator.get("Name", ""), manufacturer, accelerator.get("Count", 0)
        )
    neuron: Sequence[Any] = (info.get("NeuronInfo") or {}).get("NeuronDevices") or ()
    if neuron:
        counts[RESOURCE_NEURON] = sum(int(d.get("Count", 0)) for d in neuron)
        first = neuron[0]
        cores = int(first.get("Count", 0)) * int((first.get("CoreInfo") or {}).get("Count", 0))
        if cores:
            counts[RESOURCE_NEURON_CORE] = cores
        if len(neuron) == 1:
            reqs += _accelerator_labels(first.get("Name", ""), "aws", first.get("Count", 0))
    return reqs, counts


def shape(info: Mapping[str, Any]) -> Shape | None:
    """Parse a DescribeInstanceTypes entry; None for types Karpenter does not launch
    (not hvm when that is stated, or neither x86_64 nor arm64)."""
    arch = _architecture(info)
    if arch is None:
        return None
    name: str = info["InstanceType"]
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
    memory_mib = int(info["MemoryInfo"]["SizeInMiB"])
    network = info.get("NetworkInfo") or {}
    encryption = "true" if network.get("EncryptionInTransitSupported") else "false"
    reqs: list[Requirement] = [
        _label(wk.INSTANCE_TYPE, name),
        _label(wk.ARCH, arch),
        _label(labels.LABEL_INSTANCE_CPU, vcpus),
        _label(labels.LABEL_INSTANCE_MEMORY, memory_mib),
        _label(labels.LABEL_INSTANCE_HYPERVISOR, info.get("Hypervisor") or ""),
        _label(labels.LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT, encryption),
        *_name_labels(name),
    ]
    local_storage_gb, storage_labels = _local_storage(info)
    gpu_labels, gpus = _gpus(info)
    accelerator_labels, accelerators = _accelerators(info)
    reqs += [*storage_labels, *_hardware_labels(info), *gpu_labels, *accelerator_labels]
    present = {r.key for r in reqs}
    reqs.extend(_ABSENT[key] for key in _INSTANCE_LABELS if key not in present)
    extended = {k: v * 1000 for k, v in {**gpus, **accelerators}.items() if v}
    cards = network.get("NetworkCards") or ()
    default_card = int(network.get("DefaultNetworkCardIndex") or 0)
    architectures: Sequence[str] = (info.get("ProcessorInfo") or {}).get(
        "SupportedArchitectures"
    ) or ()
    return Shape(
        name=name,
        vcpus=vcpus,
        memory_mib=memory_mib,
        arm64=bool(architectures) and architectures[0] == "arm64",
        enis=int(cards[default_card].get("MaximumNetworkInterfaces", 0)) if cards else 0,
        ipv4_per_eni=int(network.get("Ipv4AddressesPerInterface") or 0),
        capacity_types=frozenset(info.get("SupportedUsageClasses") or ()) & _CAPACITY_TYPES,
        requirements=Requirements(reqs),
        extended=extended,
        efa=int(((network.get("EfaInfo") or {}).get("MaximumEfaInterfaces")) or 0),
        local_storage_gb=local_storage_gb,
    )


def default_ephemeral_storage(ami_family: str) -> int:
    """Bytes of ephemeral storage when no block device mapping sets it: the AMI family's default
    volume (50Gi on Windows, 20Gi otherwise)."""
    return _WINDOWS_EPHEMERAL_STORAGE if ami_family in WINDOWS_BUILDS else DEFAULT_EPHEMERAL_STORAGE


def _kube_reserved_cpu(vcpus: int) -> int:
    milli = vcpus * 1000
    total = 0
    for start, end, fraction in _CPU_TIERS:
        if milli >= start:
            span = (end if milli >= end else milli) - start
            total += int(span * fraction)
    return total


def _requirements(shape: Shape, options: BuildOptions, zones: Mapping[str, str]) -> Requirements:
    """The shape's requirements with the OS, zones, zone IDs, capacity types, region and
    Windows build."""
    family = options.ami_family
    windows = family in WINDOWS_BUILDS
    requirements = shape.requirements.copy()
    zone_ids = frozenset(zone_id for zone_id in zones.values() if zone_id)
    added = [
        _label(wk.OS, "windows" if windows else "linux"),
        Requirement(wk.TOPOLOGY_ZONE, False, frozenset(zones)),
        Requirement(wk.CAPACITY_TYPE, False, shape.capacity_types),
    ]
    if options.region:
        added.append(_label(wk.TOPOLOGY_REGION, options.region))
    if zone_ids:
        added.append(Requirement(labels.LABEL_TOPOLOGY_ZONE_ID, False, zone_ids))
    added.append(
        _label(wk.WINDOWS_BUILD, WINDOWS_BUILDS[family]) if windows else _ABSENT[wk.WINDOWS_BUILD]
    )
    requirements.add(*added)
    return requirements


def _pods(shape: Shape, options: BuildOptions) -> int:
    """kubelet maxPods, else 110 on Windows or the ENI limit; capped by podsPerCore (but not on
    Bottlerocket)."""
    if options.max_pods is not None:
        pods = options.max_pods
    elif options.ami_family in WINDOWS_BUILDS:
        pods = _WINDOWS_PODS
    else:
        pods = shape.eni_limited_pods(options.reserved_enis)
    if options.pods_per_core and options.ami_family != "Bottlerocket":
        pods = min(options.pods_per_core * shape.vcpus, pods)
    return pods


def _capacity(shape: Shape, options: BuildOptions, pods: int) -> dict[str, int]:
    """Capacity in thousandths: cpu, memory, ephemeral storage, pods and extended resources."""
    storage = _ephemeral_storage(shape, options)
    capacity = {
        "cpu": shape.vcpus * 1000,
        "memory": shape.memory_bytes(options.vm_memory_overhead_percent) * 1000,
        "ephemeral-storage": storage * 1000,
        "pods": pods * 1000,
    }
    capacity.update(shape.extended)
    if shape.efa:
        capacity[RESOURCE_EFA] = shape.efa * 1000
    if options.ami_family in WINDOWS_BUILDS and shape.ipv4_per_eni:
        capacity[RESOURCE_PRIVATE_IPV4] = (shape.ipv4_per_eni - 1) * 1000
    return capacity


def _ephemeral_storage(shape: Shape, options: BuildOptions) -> int:
    """Bytes: the instance store under RAID0 when the type has one, else the root volume."""
    if options.instance_store_raid0 and shape.local_storage_gb is not None:
        return shape.local_storage_gb * 10**9
    return options.ephemeral_storage


def _overhead(shape: Shape, options: BuildOptions, pods: int) -> Overhead:
    """kube-reserved (upstream's formulas unless set), system-reserved and the hard eviction
    thresholds."""
    family = options.ami_family
    windows = family in WINDOWS_BUILDS
    memory = shape.memory_bytes(options.vm_memory_overhead_percent)
    storage = _ephemeral_storage(shape, options)
    overhead_pods = pods if windows or family == "Bottlerocket" else shape.eni_limited_pods(0)
    kube_reserved = {
        "cpu": _kube_reserved_cpu(shape.vcpus),
        "memory": (11 * overhead_pods + 255) * _MIB * 1000,
        "ephemeral-storage": _KUBE_RESERVED_EPHEMERAL,
    }
    kube_reserved.update(overrides(options.kube_reserved))
    eviction = {
        "memory": _EVICTION_MEMORY,
        "ephemeral-storage": math.ceil(float(storage) / 100 * 10) * 1000,
    }
    for signal, value in options.eviction_hard:
        resource = _EVICTION_SIGNALS.get(signal)
        if resource is None:
            continue
        milli = signal_milli(memory if resource == "memory" else storage, value)
        if milli is not None:
            eviction[resource] = milli
    return Overhead(
        kube_reserved=kube_reserved,
        system_reserved=overrides(options.system_reserved),
        eviction_threshold=eviction,
    )


def build(
    shape: Shape,
    options: BuildOptions,
    zones: Mapping[str, str],
    offerings: Sequence[Offering],
) -> InstanceType | None:
    """The core InstanceType for ``shape`` under ``options``, offered in ``zones`` (name to zone
    id, "" when unknown) with ``offerings``; None when the AMI family cannot run it (Windows on
    arm64)."""
    if options.ami_family in WINDOWS_BUILDS and shape.arm64:
        return None
    pods = _pods(shape, options)
    return InstanceType(
        shape.name,
        _requirements(shape, options, zones),
        offerings,
        _capacity(shape, options, pods),
        _overhead(shape, options, pods),
    )


def instance_type(
    info: Mapping[str, Any],
    options: BuildOptions,
    zones: Mapping[str, str],
    offerings: Sequence[Offering] = (),
) -> InstanceType | None:
    """Parse and build in one step (see ``shape`` and ``build``)."""
    parsed = shape(info)
    return None if parsed is None else build(parsed, options, zones, offerings)
