"""Regenerate the GCP provider's packaged offline catalog (karpenter_gcp/data/machinetypes.json.gz).

The source is SkyPilot's public GCP catalog (skypilot-org/skypilot-catalog,
``catalogs/v9/gcp/vms.csv``: per machine type and zone the vCPUs, memory and the on-demand and
spot prices), read from a local copy of the pinned commit whose sha256 is checked (data/README.md says how
the copy was made). TPU hosts, bare-metal types (GKE runs no nodes on them) and fractional-GPU types are left
out. The output is deterministic
(sorted keys, compact JSON, gzip with mtime 0), so the same copy gives the same bytes.

    python providers/gcp/scripts/generate_catalog.py --csv path/to/vms.csv

GPU model and count come from ``family_gpus`` (a table per machine family, GCE's accelerator type
names), since the source leaves the accelerators of a2/a3/a4/g2/g4 types empty; the memory per GPU
from ``GPU_MEMORY_MIB``, which the file carries for live rows too; arm64 for ``ARM_FAMILIES``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "karpenter_gcp" / "data" / "machinetypes.json.gz"
SOURCE = {
    "repository": "skypilot-org/skypilot-catalog",
    "path": "catalogs/v9/gcp/vms.csv",
    "commit": "2c3d7ea7d76bf84cf80d382e946c1609571485fd",
    "sha256": "172420f5ebbd02f58123e729baf915e51c75f30cebac847aecd16441c8844d1d",
}
"""Where the rows come from: the file at that commit, whose sha256 the generator checks."""
FAMILY_GPUS = {
    "a2-highgpu": "nvidia-tesla-a100",
    "a2-megagpu": "nvidia-tesla-a100",
    "a2-ultragpu": "nvidia-a100-80gb",
    "a4-highgpu": "nvidia-b200",
    "a3-edgegpu": "nvidia-h100-80gb",
    "a3-highgpu": "nvidia-h100-80gb",
    "a3-megagpu": "nvidia-h100-mega-80gb",
    "a3-ultragpu": "nvidia-h200-141gb",
    "g2-standard": "nvidia-l4",
    "g4-standard": "nvidia-rtx-pro-6000",
}
"""The GPU (GCE accelerator type) of each machine family and shape that has GPUs attached."""
GPU_MEMORY_MIB = {
    "nvidia-tesla-a100": 40960,
    "nvidia-a100-80gb": 81920,
    "nvidia-h100-80gb": 81920,
    "nvidia-h100-mega-80gb": 81920,
    "nvidia-h200-141gb": 144384,
    "nvidia-l4": 24576,
    "nvidia-b200": 184320,
    "nvidia-rtx-pro-6000": 98304,
    "nvidia-tesla-t4": 16384,
    "nvidia-tesla-v100": 16384,
    "nvidia-tesla-p100": 16384,
    "nvidia-tesla-p4": 8192,
}
"""MiB of memory per GPU by accelerator type (Google's GPU table), for offline and live rows."""
VCPU_GPUS = {
    "g2-standard": {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8},
    "g4-standard": {48: 1, 96: 2, 192: 4, 384: 8},
}
"""GPUs of the types whose names do not carry ``-<n>g``, by vCPUs (Google's GPU machine tables);
a type missing here holds a fraction of a GPU (g4-standard-6/12/24) and is left out."""
ARM_FAMILIES = frozenset({"t2a", "c4a", "n4a"})


def family_gpus(name: str, vcpus: int) -> tuple[str, int]:
    """GPU name and count of a machine type by its family ("", 0 without GPUs)."""
    gpu = FAMILY_GPUS.get("-".join(name.split("-")[:2]))
    if gpu is None:
        return "", 0
    count = re.search(r"-(\d+)g(?:-|$)", name)
    if count:
        return gpu, int(count.group(1))
    return gpu, VCPU_GPUS["-".join(name.split("-")[:2])].get(vcpus, 0)


def build(text: str) -> dict[str, Any]:
    """The packaged catalog from the CSV text: types, and per region the offers grouped by
    zones of one price pair (``[type index, zone letters, on-demand, spot]``)."""
    types: dict[str, list[Any]] = {}
    offers: dict[tuple[str, str, float, float | None], list[str]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        name, region, zone = row["InstanceType"], row["Region"], row["AvailabilityZone"]
        if not name or name.endswith(("-tpu", "-metal")):  # an accelerator, a TPU host, bare metal
            continue
        vcpus = int(float(row["vCPUs"]))
        gpu_name, gpu_count = family_gpus(name, vcpus)
        if gpu_name and not gpu_count:  # a fraction of a GPU
            continue
        if row["AcceleratorName"]:
            gpu_name, gpu_count = row["AcceleratorName"], int(float(row["AcceleratorCount"]))
        memory = round(float(row["MemoryGiB"]) * 1024)
        types[name] = [
            name,
            vcpus,
            memory,
            "arm64" if name.split("-")[0] in ARM_FAMILIES else "amd64",
            gpu_name,
            gpu_count,
        ]
        spot = float(row["SpotPrice"]) if row["SpotPrice"] else None
        key = (region, name, float(row["Price"]), spot)
        offers.setdefault(key, []).append(zone.removeprefix(region + "-"))
    names = sorted(types)
    index = {name: i for i, name in enumerate(names)}
    regions: dict[str, list[list[Any]]] = {}
    for (region, name, price, spot), zones in sorted(offers.items(), key=str):
        regions.setdefault(region, []).append([index[name], ",".join(sorted(zones)), price, spot])
    return {
        "source": SOURCE,
        "types": [types[n] for n in names],
        "regions": regions,
        "gpu_memory_mib": GPU_MEMORY_MIB,
    }


def render(catalog: dict[str, Any]) -> bytes:
    """The gzip bytes of the catalog (deterministic)."""
    raw = json.dumps(catalog, sort_keys=True, separators=(",", ":")).encode()
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=9, filename="") as gz:
        gz.write(raw)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    """Read the copy, check its sha256, write (or with ``--check`` compare) the packaged file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", required=True, type=Path, help="copy of vms.csv")
    parser.add_argument("--output", type=Path, default=DATA)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    text = args.csv.read_text(encoding="utf-8")
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != SOURCE["sha256"]:
        print(f"{args.csv}: sha256 {digest}, expected {SOURCE['sha256']}", file=sys.stderr)
        return 1
    data = render(build(text))
    if args.check:
        same = args.output.read_bytes() == data
        print("identical" if same else f"{args.output} differs", file=sys.stderr)
        return 0 if same else 1
    args.output.write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
