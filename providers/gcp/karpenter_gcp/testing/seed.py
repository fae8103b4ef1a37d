"""Compute API MachineType JSON of a region, from the packaged catalog (the fake's seed)."""

from __future__ import annotations

import zlib
from typing import Any

from karpenter_gcp.catalog import offline_machine_types
from karpenter_gcp.instancetype import SHARED_CORE, MachineType

__all__ = ["machine_type_json", "machine_types"]


def machine_type_json(mt: MachineType, zone: str) -> dict[str, Any]:
    """``mt`` as the Compute API's MachineType resource in ``zone`` (accelerators for GPUs)."""
    body: dict[str, Any] = {
        "kind": "compute#machineType",
        "id": str(zlib.crc32(mt.name.encode())),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": mt.name,
        "description": f"{mt.vcpus} vCPUs, {mt.memory_mib / 1024:g} GB RAM",
        "guestCpus": mt.vcpus,
        "memoryMb": mt.memory_mib,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone,
        "isSharedCpu": mt.name in SHARED_CORE or mt.name in ("f1-micro", "g1-small"),
        "architecture": "ARM64" if mt.architecture == "arm64" else "X86_64",
    }
    if mt.gpu_count:
        body["accelerators"] = [
            {"guestAcceleratorType": mt.gpu_name, "guestAcceleratorCount": mt.gpu_count}
        ]
    return body


def machine_types(region: str) -> dict[str, list[dict[str, Any]]]:
    """MachineType JSON by zone for every packaged machine type of ``region``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for mt in offline_machine_types(region):
        for zone in mt.zones:
            out.setdefault(zone, []).append(machine_type_json(mt, zone))
    return dict(sorted(out.items()))
