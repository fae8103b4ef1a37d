"""Azure VM sizes as core ``InstanceType``s: labels, capacity, overhead and offerings (pure).

``build(sku, options, prices, unavailable)`` follows upstream's formulas:

- memory = whole GiB of the size (upstream truncates) less ceil(that x vm-memory-overhead-percent);
- ephemeral-storage = the AKSNodeClass's osDiskSizeGB (default 128) in decimal GB;
- pods = the AKSNodeClass's maxPods, else by network plugin and mode (``max_pods``): 250 for
  Azure CNI overlay and for no CNI, 30 for Azure CNI node subnet, 110 for kubenet;
- kube-reserved cpu: 6% of the first core, 4% of the second, 2% of cores 3-4, 1% above;
  memory: 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% up to 128 GiB, 2%
  above; system-reserved nothing; eviction threshold memory.available 750Mi;
- ``nvidia.com/gpu`` / ``amd.com/gpu`` by the size's GPUs and maker.

Offerings: per zone of the SKU (``<region>-<n>``) and a regional placement (zone ``"0"``, as AKS
labels regional nodes), on-demand always and spot where the SKU is LowPriorityCapable; a price
the price book lacks or an unavailable mark makes an offering unavailable. The zone,
capacity-type, placement-scope and AKS priority (``kubernetes.azure.com/scalesetpriority`` and
``/priority``: ``regular`` or ``spot``) requirements are those of the available offerings, as
upstream's are; ``kubernetes.azure.com/sku-cpu`` and ``/sku-memory`` repeat the size's.

Every ``karpenter.azure.com/sku-*`` label is defined on every type: where a size has no value
(the GPU name of a size without GPUs, the ephemeral OS disk size where Azure gives none) the
requirement is DoesNotExist, so a NodePool requiring the label excludes the size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from karpenter_azure.skus import Sku
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.reserved import tiered
from karpenter_core.sdk.types import InstanceType, Offering, Overhead, Requirement, Requirements

__all__ = [
    "AKS_DOMAIN",
    "DEFAULT_OS_DISK_SIZE_GB",
    "EVICTION_MEMORY_AVAILABLE",
    "GROUP",
    "LABEL_AKS_PRIORITY",
    "LABEL_AKS_SCALESET_PRIORITY",
    "LABEL_AKS_SKU_CPU",
    "LABEL_AKS_SKU_MEMORY",
    "LABEL_PLACEMENT_SCOPE",
    "LABEL_SKU_ACCELERATED_NETWORKING",
    "LABEL_SKU_CPU",
    "LABEL_SKU_EPHEMERAL_OS_MAX_SIZE",
    "LABEL_SKU_FAMILY",
    "LABEL_SKU_GPU_COUNT",
    "LABEL_SKU_GPU_MANUFACTURER",
    "LABEL_SKU_GPU_NAME",
    "LABEL_SKU_HYPERV_GENERATION",
    "LABEL_SKU_MEMORY",
    "LABEL_SKU_NAME",
    "LABEL_SKU_SERIES",
    "LABEL_SKU_STORAGE_PREMIUM_CAPABLE",
    "LABEL_SKU_VERSION",
    "REGIONAL_ZONE",
    "RESOURCE_AMD_GPU",
    "RESOURCE_NVIDIA_GPU",
    "SKU_LABELS",
    "BuildOptions",
    "Prices",
    "build",
    "kube_reserved",
    "max_pods",
    "memory_capacity",
    "zone_label",
]

GROUP = "karpenter.azure.com"
LABEL_SKU_NAME = f"{GROUP}/sku-name"
LABEL_SKU_FAMILY = f"{GROUP}/sku-family"
LABEL_SKU_SERIES = f"{GROUP}/sku-series"
LABEL_SKU_VERSION = f"{GROUP}/sku-version"
LABEL_SKU_CPU = f"{GROUP}/sku-cpu"
LABEL_SKU_MEMORY = f"{GROUP}/sku-memory"
LABEL_SKU_ACCELERATED_NETWORKING = f"{GROUP}/sku-networking-accelerated"
LABEL_SKU_STORAGE_PREMIUM_CAPABLE = f"{GROUP}/sku-storage-premium-capable"
LABEL_SKU_EPHEMERAL_OS_MAX_SIZE = f"{GROUP}/sku-storage-ephemeralos-maxsize"
LABEL_SKU_GPU_NAME = f"{GROUP}/sku-gpu-name"
LABEL_SKU_GPU_MANUFACTURER = f"{GROUP}/sku-gpu-manufacturer"
LABEL_SKU_GPU_COUNT = f"{GROUP}/sku-gpu-count"
LABEL_SKU_HYPERV_GENERATION = f"{GROUP}/sku-hyperv-generation"
LABEL_PLACEMENT_SCOPE = f"{GROUP}/placement-scope"
AKS_DOMAIN = "kubernetes.azure.com"
LABEL_AKS_SKU_CPU = f"{AKS_DOMAIN}/sku-cpu"
LABEL_AKS_SKU_MEMORY = f"{AKS_DOMAIN}/sku-memory"
LABEL_AKS_SCALESET_PRIORITY = f"{AKS_DOMAIN}/scalesetpriority"
LABEL_AKS_PRIORITY = f"{AKS_DOMAIN}/priority"
SKU_LABELS = (
    LABEL_SKU_NAME,
    LABEL_SKU_FAMILY,
    LABEL_SKU_SERIES,
    LABEL_SKU_VERSION,
    LABEL_SKU_CPU,
    LABEL_SKU_MEMORY,
    LABEL_SKU_ACCELERATED_NETWORKING,
    LABEL_SKU_STORAGE_PREMIUM_CAPABLE,
    LABEL_SKU_EPHEMERAL_OS_MAX_SIZE,
    LABEL_SKU_GPU_NAME,
    LABEL_SKU_GPU_MANUFACTURER,
    LABEL_SKU_GPU_COUNT,
    LABEL_SKU_HYPERV_GENERATION,
)
"""The size labels every instance type defines (DoesNotExist where a size has no value)."""

RESOURCE_NVIDIA_GPU = "nvidia.com/gpu"
RESOURCE_AMD_GPU = "amd.com/gpu"
REGIONAL_ZONE = "0"
"""The zone of a regional (non-zonal) placement, as AKS labels such nodes."""
DEFAULT_OS_DISK_SIZE_GB = 128
EVICTION_MEMORY_AVAILABLE = 750 * 2**20
"""Bytes of the memory.available hard eviction threshold."""

_GIB = 2**30
_MEMORY_TAX_GIB = ((4.0, 0.25), (8.0, 0.20), (16.0, 0.10), (128.0, 0.06), (math.inf, 0.02))
_CPU_TAX_CORES = ((1.0, 0.06), (2.0, 0.04), (4.0, 0.02), (math.inf, 0.01))
_SCOPE_ZONAL = "zonal"
_SCOPE_REGIONAL = "regional"
_CAPACITY_TYPES = (wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT)
_PRIORITY = {wk.CAPACITY_TYPE_ON_DEMAND: "regular", wk.CAPACITY_TYPE_SPOT: "spot"}
_ABSENT = {key: Requirement(key, False) for key in SKU_LABELS}

Prices = Callable[[str, str], float | None]
"""``(capacity_type, sku name) -> hourly price`` or None when unknown."""


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """What besides the SKU shapes an instance type; hashable, so usable as a cache key.

    The AKSNodeClass gives ``max_pods`` (already resolved with ``max_pods``), ``os_disk_size_gb``
    and ``encryption_at_host``; the settings give ``region`` and the VM memory overhead.
    """

    region: str
    max_pods: int
    os_disk_size_gb: int = DEFAULT_OS_DISK_SIZE_GB
    encryption_at_host: bool = False
    vm_memory_overhead_percent: float = 0.075


def max_pods(network_plugin: str, network_plugin_mode: str, node_class_max_pods: int | None) -> int:
    """Pods per node: the AKSNodeClass's maxPods, else 250 for Azure CNI overlay or no CNI, 30
    for Azure CNI in node subnet mode, 110 otherwise (kubenet)."""
    if node_class_max_pods is not None:
        return node_class_max_pods
    if network_plugin == "none":
        return 250
    if network_plugin == "azure":
        return 250 if network_plugin_mode == "overlay" else 30
    return 110


def zone_label(region: str, arm_zone: str) -> str:
    """``topology.kubernetes.io/zone`` of an ARM zone: ``<region>-<n>``, ``"0"`` when regional."""
    return f"{region.lower()}-{arm_zone}" if arm_zone else REGIONAL_ZONE


def kube_reserved(vcpus: int, memory_gib: float) -> dict[str, int]:
    """AKS's kube-reserved cpu and memory, in thousandths (milli-cores, milli-bytes)."""
    return dict(_kube_reserved(vcpus, memory_gib))


@functools.cache
def _kube_reserved(vcpus: int, memory_gib: float) -> tuple[tuple[str, int], ...]:
    cpu_milli = int(1000 * tiered(float(vcpus), _CPU_TAX_CORES))
    memory_mib = int(1024 * tiered(memory_gib, _MEMORY_TAX_GIB))
    return (("cpu", cpu_milli), ("memory", memory_mib * 2**20 * 1000))


def memory_capacity(memory_gib: float, overhead_percent: float) -> int:
    """Bytes of memory capacity: the size's whole GiB less the VM overhead, rounded up."""
    total = int(memory_gib) * _GIB
    return total - math.ceil(total * overhead_percent)


@functools.cache
def _label(key: str, value: str) -> Requirement:
    """``key In [value]``, shared between types (requirements are never mutated)."""
    return Requirement(key, False, frozenset((value,)))


@functools.cache
def _label_set(key: str, values: frozenset[str]) -> Requirement:
    """``key In values``, shared between types like ``_label``."""
    return Requirement(key, False, values)


@functools.cache
def _offering_requirements(capacity_type: str, zone: str) -> Requirements:
    scope = _SCOPE_REGIONAL if zone == REGIONAL_ZONE else _SCOPE_ZONAL
    return Requirements(
        (
            _label(wk.CAPACITY_TYPE, capacity_type),
            _label(wk.TOPOLOGY_ZONE, zone),
            _label(LABEL_PLACEMENT_SCOPE, scope),
            _label(LABEL_AKS_SCALESET_PRIORITY, _PRIORITY[capacity_type]),
            _label(LABEL_AKS_PRIORITY, _PRIORITY[capacity_type]),
        )
    )


def _size_requirements(sku: Sku) -> list[Requirement]:
    size = sku.size
    memory_mib = int(sku.memory_gib * 1024)
    reqs = [
        _label(wk.INSTANCE_TYPE, sku.name),
        _label(wk.ARCH, sku.architecture),
        _label(wk.OS, "linux"),
        _label(LABEL_SKU_NAME, sku.name),
        _label(LABEL_SKU_FAMILY, size.family),
        _label(LABEL_SKU_SERIES, size.series),
        _label(LABEL_SKU_VERSION, size.version_number),
        _label(LABEL_SKU_CPU, str(sku.vcpus)),
        _label(LABEL_SKU_MEMORY, str(memory_mib)),
        _label(LABEL_AKS_SKU_CPU, str(sku.vcpus)),
        _label(LABEL_AKS_SKU_MEMORY, str(memory_mib)),
        _label(LABEL_SKU_ACCELERATED_NETWORKING, str(sku.accelerated_networking).lower()),
        _label(LABEL_SKU_STORAGE_PREMIUM_CAPABLE, str(sku.premium_io).lower()),
        _label(LABEL_SKU_GPU_COUNT, str(sku.gpus)),
    ]
    if sku.ephemeral_os_max_gb:
        reqs.append(_label(LABEL_SKU_EPHEMERAL_OS_MAX_SIZE, str(sku.ephemeral_os_max_gb)))
    generations = frozenset(g.removeprefix("V") for g in sku.hyperv_generations)
    if generations:
        reqs.append(Requirement(LABEL_SKU_HYPERV_GENERATION, False, generations))
    manufacturer = sku.gpu_manufacturer
    if manufacturer is not None:
        reqs.append(_label(LABEL_SKU_GPU_MANUFACTURER, manufacturer))
        if size.accelerator:
            reqs.append(_label(LABEL_SKU_GPU_NAME, size.accelerator))
    present = {r.key for r in reqs}
    reqs.extend(_ABSENT[key] for key in SKU_LABELS if key not in present)
    return reqs


def build(
    sku: Sku,
    options: BuildOptions,
    prices: Prices,
    unavailable: Callable[[str, str, str], bool],
) -> InstanceType | None:
    """The core InstanceType of ``sku`` under ``options``; None when the AKSNodeClass cannot run
    it (encryption at host asked for and the size does not support it).

    ``prices(capacity_type, name)`` gives offering prices; ``unavailable(capacity_type, name,
    zone)`` says whether an offering is kept out.
    """
    if options.encryption_at_host and sku.encryption_at_host is False:
        return None
    zones = [zone_label(options.region, z) for z in sku.zones] + [REGIONAL_ZONE]
    offerings: list[Offering] = []
    for capacity_type in _CAPACITY_TYPES:
        if capacity_type == wk.CAPACITY_TYPE_SPOT and not sku.spot:
            continue
        price = prices(capacity_type, sku.name)
        for zone in zones:
            available = price is not None and not unavailable(capacity_type, sku.name, zone)
            offerings.append(
                Offering(
                    _offering_requirements(capacity_type, zone),
                    0.0 if price is None else price,
                    available,
                )
            )
    live = [o for o in offerings if o.available]
    priorities = frozenset(_PRIORITY[o.capacity_type] for o in live)
    requirements = Requirements(_size_requirements(sku))
    requirements.add(
        _label(wk.TOPOLOGY_REGION, options.region),
        _label_set(wk.TOPOLOGY_ZONE, frozenset(o.zone for o in live)),
        _label_set(wk.CAPACITY_TYPE, frozenset(o.capacity_type for o in live)),
        _label_set(LABEL_AKS_SCALESET_PRIORITY, priorities),
        _label_set(LABEL_AKS_PRIORITY, priorities),
        _label_set(
            LABEL_PLACEMENT_SCOPE,
            frozenset(_SCOPE_REGIONAL if o.zone == REGIONAL_ZONE else _SCOPE_ZONAL for o in live),
        ),
    )
    capacity = {
        "cpu": sku.vcpus * 1000,
        "memory": memory_capacity(sku.memory_gib, options.vm_memory_overhead_percent) * 1000,
        "ephemeral-storage": options.os_disk_size_gb * 10**9 * 1000,
        "pods": options.max_pods * 1000,
    }
    manufacturer = sku.gpu_manufacturer
    capacity[RESOURCE_NVIDIA_GPU] = sku.gpus * 1000 if manufacturer == "nvidia" else 0
    capacity[RESOURCE_AMD_GPU] = sku.gpus * 1000 if manufacturer == "amd" else 0
    overhead = Overhead(
        kube_reserved=kube_reserved(sku.vcpus, sku.memory_gib),
        system_reserved={"cpu": 0, "memory": 0},
        eviction_threshold={"memory": EVICTION_MEMORY_AVAILABLE * 1000},
    )
    return InstanceType(sku.name, requirements, offerings, capacity, overhead)
