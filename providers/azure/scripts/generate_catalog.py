"""Regenerate the Azure provider's packaged offline catalog (karpenter_azure/data/skus.json.gz).

The source is SkyPilot's public Azure catalog (skypilot-org/skypilot-catalog,
``catalogs/v6/azure/vms.csv``: per size and region the vCPUs, memory, GPUs, Hyper-V generations
and the on-demand and spot Linux prices), read from a local copy of a pinned commit whose sha256
is checked. The output is deterministic (sorted keys, gzip without a timestamp), so the same
copy regenerates the packaged file byte for byte.

    python providers/azure/scripts/generate_catalog.py --csv path/to/vms.csv \\
        --commit 098741e70562f65d7af1cceb81e33b284f742604 \\
        --sha256 3d6f8920406d3aa805e7d9e2b8eba25e7f3484ec9759b18034a33408c5e51441 \\
        --prices-as-of 2024-08

What the source lacks is derived and named in the file's ``derived`` field (see data/README.md):
the zones of a region, the architecture, accelerated networking and premium storage from the
size name; spot capability from the presence of a spot price.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from karpenter_azure.skus import parse_size

DATA = Path(__file__).resolve().parents[1] / "karpenter_azure" / "data" / "skus.json.gz"
REPOSITORY = "skypilot-org/skypilot-catalog"
PATH = "catalogs/v6/azure/vms.csv"
ZONAL_REGIONS = frozenset(
    {"centralus", "eastus", "eastus2", "southcentralus", "westus2", "westus3"}
)
"""US regions with availability zones 1-3 (Azure's published list); the others are regional."""
DERIVED = {
    "zones": "zones 1-3 in regions with availability zones (ZONAL_REGIONS), none elsewhere; "
    "every size of such a region is taken to be offered in all three",
    "architecture": "arm64 when the size's features contain 'p' (Dpsv5, Epsv5, Bpsv2), else amd64",
    "accelerated_networking": "true except A-series, first-generation B-series below 12 vCPUs "
    "and sizes with fewer than 2 vCPUs",
    "premium_io": "true when the size's features contain 's' or its subfamily ends in 'S' (DS, GS)",
    "spot": "LowPriorityCapable when the source has a spot price for the size in the region",
}


def _float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _accelerated_networking(name: str, vcpus: int) -> bool:
    size = parse_size(name)
    if size is None or vcpus < 2:
        return False
    first_b = size.family == "B" and not size.version and vcpus < 12
    return not (size.family == "A" or first_b)


def _premium_io(name: str) -> bool:
    size = parse_size(name)
    return size is not None and ("s" in size.features or size.subfamily.endswith("S"))


def build(rows: list[dict[str, str]], source: dict[str, str]) -> dict[str, Any]:
    """The packaged catalog from the CSV rows: one entry per size, per region its offers."""
    sizes: dict[str, list[Any]] = {}
    offers: dict[str, list[list[Any]]] = {}
    for row in rows:
        name = row["InstanceType"]
        size = parse_size(name)
        if size is None or size.promo:
            continue
        vcpus = int(float(row["vCPUs"]))
        entry = [
            name,
            vcpus,
            float(row["MemoryGiB"]),
            int(float(row["AcceleratorCount"] or 0)),
            row["Generation"],
            "arm64" if size.arm64 else "amd64",
            _accelerated_networking(name, vcpus),
            _premium_io(name),
        ]
        known = sizes.setdefault(name, entry)
        if known != entry:
            raise SystemExit(f"{name}: the source disagrees with itself: {known} != {entry}")
        offers.setdefault(row["Region"], []).append(
            [name, _float(row["Price"]), _float(row["SpotPrice"])]
        )
    names = sorted(sizes)
    index = {name: i for i, name in enumerate(names)}
    regions = {
        region: {
            "zones": ["1", "2", "3"] if region in ZONAL_REGIONS else [],
            "offers": sorted([index[n], od, sp] for n, od, sp in rows_),
        }
        for region, rows_ in sorted(offers.items())
    }
    return {
        "source": source,
        "derived": DERIVED,
        "fields": {
            "sizes": [
                "name",
                "vcpus",
                "memory_gib",
                "gpus",
                "hyperv_generations",
                "architecture",
                "accelerated_networking",
                "premium_io",
            ],
            "offers": ["size", "on_demand_usd_per_hour", "spot_usd_per_hour"],
        },
        "sizes": [sizes[name] for name in names],
        "regions": regions,
    }


def encode(catalog: dict[str, Any]) -> bytes:
    """Deterministic bytes: sorted keys, compact JSON, gzip with mtime 0."""
    text = json.dumps(catalog, sort_keys=True, separators=(",", ":"))
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def main(argv: list[str] | None = None) -> int:
    """Regenerate the packaged catalog from a local copy of the pinned source."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", required=True, type=Path, help="local copy of vms.csv")
    parser.add_argument("--commit", required=True, help="the source commit the copy is from")
    parser.add_argument("--sha256", required=True, help="the copy's expected sha256")
    parser.add_argument("--prices-as-of", default="", help="the date the source's prices are of")
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args(argv)
    raw = args.csv.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != args.sha256:
        print(f"{args.csv}: sha256 {digest}, expected {args.sha256}", file=sys.stderr)
        return 1
    rows = list(csv.DictReader(raw.decode().splitlines()))
    source = {
        "repository": REPOSITORY,
        "path": PATH,
        "commit": args.commit,
        "sha256": digest,
        "prices_as_of": args.prices_as_of,
    }
    args.output.write_bytes(encode(build(rows, source)))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
