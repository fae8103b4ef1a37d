"""Compute Engine machine types as core ``InstanceType``s: labels, capacity, overhead and
offerings (pure).

``build(machine_type, options, prices, unavailable)`` follows GKE's published node sizing
(cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes), as the community provider
does: kube-reserved cpu and memory by tiers of the node's size (``kube_reserved``; 1060m cpu on
the shared-core e2 types), kube-reserved ephemeral-storage from the boot disk or local SSDs,
system-reserved cpu 100m (kube-proxy), eviction at 100 MiB of memory and 10% of the disk, the
kubelet configuration's reservations and evictionHard over those; memory capacity less the VM
overhead percentage, pods by maxPods and podsPerCore, ``nvidia.com/gpu`` by the type's GPUs.

Offerings: on-demand and spot in each zone of the type; one without a price, or marked
unavailable, is unavailable. Every ``karpenter.k8s.gcp/instance-*`` label is defined on every
type, DoesNotExist where the type has no value (the GPU labels of a type without GPUs).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.reserved import overrides, signal_milli, tiered
from karpenter_core.sdk.types import InstanceType, Offering, Overhead, Requirement, Requirements

__all__ = [
    "GROUP",
    "INSTANCE_LABELS",
    "LABEL_GKE_ACCELERATOR",
    "RESOURCE_NVIDIA_GPU",
    "SHARED_CORE",
    "BuildOptions",
    "MachineType",
    "Prices",
    "build",
    "kube_reserved",
    "name_labels",
]

GROUP = "karpenter.k8s.gcp"
_GPU_SUFFIXES = ("gpu-name", "gpu-count", "gpu-memory")
INSTANCE_LABELS = tuple(
    f"{GROUP}/instance-{n}"
    for n in ("family", "shape", "generation", "size", "cpu", "memory", *_GPU_SUFFIXES)
)
"""The machine type labels every instance type defines (DoesNotExist where it has no value)."""
(FAMILY, SHAPE, GENERATION, SIZE, CPU, MEMORY, GPU_NAME, GPU_COUNT, GPU_MEMORY) = INSTANCE_LABELS
LABEL_GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
"""GKE's GPU label, which the NVIDIA device plugin's DaemonSet selects nodes by."""
RESOURCE_NVIDIA_GPU = "nvidia.com/gpu"
SHARED_CORE = frozenset({"e2-micro", "e2-small", "e2-medium"})
"""The shared-core E2 types, which GKE reserves 1060m of cpu on."""
_MIB = 2**20
_GIB = 2**30
_CPU_TIERS = ((1.0, 0.06), (2.0, 0.01), (4.0, 0.005), (math.inf, 0.0025))
_MEMORY_TIERS = ((4.0, 0.25), (8.0, 0.20), (16.0, 0.10), (128.0, 0.06), (math.inf, 0.02))
_SIGNALS = {"memory.available": "memory", "nodefs.available": "ephemeral-storage"}
"""The eviction signals that reduce allocatable (imagefs and pid ones do not)."""
_CAPACITY_TYPES = (wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT)
_ABSENT = {key: Requirement(key, False) for key in (*INSTANCE_LABELS, LABEL_GKE_ACCELERATOR)}


@dataclass(frozen=True, slots=True)
class MachineType:
    """A machine type of a region: its shape, GPUs and the zones that offer it."""

    name: str
    vcpus: int
    memory_mib: int
    zones: tuple[str, ...]
    architecture: str = "amd64"
    gpu_name: str = ""
    gpu_count: int = 0
    gpu_memory_mib: int = 0


Prices = Callable[[str, MachineType, str], float | None]
"""``(capacity_type, machine type, zone) -> hourly price`` or None when unknown."""


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """What besides the machine type shapes an instance type; hashable, so a cache key.

    Reservations and eviction thresholds are ``(resource or signal, value)`` pairs as the
    GCENodeClass's kubelet configuration writes them; disk sizes in GiB.
    """

    region: str
    max_pods: int = 110
    pods_per_core: int | None = None
    boot_disk_gib: int = 100
    local_ssd_gib: int = 0
    local_ssd_count: int = 0
    kube_reserved: tuple[tuple[str, str], ...] = ()
    system_reserved: tuple[tuple[str, str], ...] = ()
    eviction_hard: tuple[tuple[str, str], ...] = ()
    vm_memory_overhead_percent: float = 0.07


def name_labels(name: str) -> dict[str, str]:
    """Family, shape, generation and size from a name as the community provider splits it:
    ``n2-standard-8`` is n2, standard, 2, 8; ``a3-edgegpu-8g-nolssd`` has size 8g."""
    parts = name.split("-")
    if len(parts) < 2:
        return {}
    family = parts[0]
    generation = family[-2] if len(family) == 3 else family[-1]
    size = parts[-2] if len(parts) > 3 else parts[-1]
    return {FAMILY: family, SHAPE: parts[1], GENERATION: generation, SIZE: size}


@functools.cache
def kube_reserved(name: str, vcpus: int, memory_mib: int) -> tuple[int, int]:
    """GKE's kube-reserved cpu (millicores) and memory (MiB) of a machine type, rounded down."""
    cpu = 1060 if name in SHARED_CORE else int(round(1000 * tiered(vcpus, _CPU_TIERS), 6))
    memory = (
        255
        if memory_mib <= 1024
        else int(round(1024 * tiered(memory_mib / 1024, _MEMORY_TIERS), 6))
    )
    return cpu, memory


def _ephemeral(options: BuildOptions) -> tuple[int, int]:
    """GiB of the ephemeral disk and of its reservation (local SSDs when the node has them)."""
    if options.local_ssd_count and options.local_ssd_gib:
        return options.local_ssd_gib, {1: 50, 2: 75}.get(options.local_ssd_count, 100)
    boot = options.boot_disk_gib
    return boot, min(round(boot * 0.5), round(boot * 0.35 + 6), 100)


@functools.cache
def _label(key: str, value: str) -> Requirement:
    """``key In [value]``, shared between types (requirements are never mutated)."""
    return Requirement(key, False, frozenset((value,)))


@functools.cache
def _offering_requirements(capacity_type: str, zone: str) -> Requirements:
    return Requirements((_label(wk.CAPACITY_TYPE, capacity_type), _label(wk.TOPOLOGY_ZONE, zone)))


def _requirements(mt: MachineType, options: BuildOptions, live: list[Offering]) -> Requirements:
    values = {CPU: str(mt.vcpus), MEMORY: str(mt.memory_mib), **name_labels(mt.name)}
    if mt.gpu_count:
        values.update({GPU_COUNT: str(mt.gpu_count), LABEL_GKE_ACCELERATOR: mt.gpu_name})
        values.update({GPU_NAME: mt.gpu_name, GPU_MEMORY: str(mt.gpu_memory_mib)})
    reqs = [_label(key, value) for key, value in values.items() if value]
    reqs += [_ABSENT[key] for key in _ABSENT if not values.get(key)]
    reqs += [
        _label(wk.INSTANCE_TYPE, mt.name),
        _label(wk.ARCH, mt.architecture),
        _label(wk.OS, "linux"),
        _label(wk.TOPOLOGY_REGION, options.region),
        Requirement(wk.TOPOLOGY_ZONE, False, frozenset(o.zone for o in live)),
        Requirement(wk.CAPACITY_TYPE, False, frozenset(o.capacity_type for o in live)),
    ]
    return Requirements(reqs)


def _overhead(mt: MachineType, options: BuildOptions, memory: int, disk: int) -> Overhead:
    cpu, memory_mib = kube_reserved(mt.name, mt.vcpus, mt.memory_mib)
    disk_gib, reserved_gib = _ephemeral(options)
    kube = {"cpu": cpu, "memory": memory_mib * _MIB * 1000}
    kube["ephemeral-storage"] = reserved_gib * _GIB * 1000
    system = {"cpu": 100}
    for resource, milli in overrides(options.system_reserved).items():
        system[resource] = system.get(resource, 0) + milli
    eviction = {"memory": 100 * _MIB * 1000, "ephemeral-storage": int(disk_gib * 0.1) * _GIB * 1000}
    capacities = {"memory": memory, "ephemeral-storage": disk}
    for signal, value in options.eviction_hard:
        key = _SIGNALS.get(signal)
        threshold = signal_milli(capacities[key], value) if key else None
        if key and threshold is not None:
            eviction[key] = threshold
    return Overhead(
        kube_reserved={**kube, **overrides(options.kube_reserved)},
        system_reserved=system,
        eviction_threshold=eviction,
    )


def build(
    mt: MachineType,
    options: BuildOptions,
    prices: Prices,
    unavailable: Callable[[str, str, str], bool],
) -> InstanceType:
    """The core InstanceType of ``mt`` under ``options``: ``prices(capacity_type, mt, zone)``
    gives offering prices, ``unavailable(capacity_type, name, zone)`` says whether an offering
    is kept out."""
    offerings: list[Offering] = []
    for capacity_type in _CAPACITY_TYPES:
        for zone in mt.zones:
            price = prices(capacity_type, mt, zone)
            available = price is not None and not unavailable(capacity_type, mt.name, zone)
            requirements = _offering_requirements(capacity_type, zone)
            offerings.append(Offering(requirements, price or 0.0, available))
    live = [o for o in offerings if o.available]
    memory = mt.memory_mib * _MIB
    memory -= int(memory * options.vm_memory_overhead_percent)
    disk = _ephemeral(options)[0] * _GIB
    pods = options.max_pods
    if options.pods_per_core:
        pods = min(pods, options.pods_per_core * mt.vcpus)
    capacity = {
        "cpu": mt.vcpus * 1000,
        "memory": memory * 1000,
        "ephemeral-storage": disk * 1000,
        "pods": pods * 1000,
        RESOURCE_NVIDIA_GPU: mt.gpu_count * 1000,
    }
    overhead = _overhead(mt, options, memory, disk)
    return InstanceType(mt.name, _requirements(mt, options, live), offerings, capacity, overhead)
