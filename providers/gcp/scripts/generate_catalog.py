"""Regenerate the GCP provider's packaged offline catalog (karpenter_gcp/data/machinetypes.json.gz).

The source is SkyPilot's public GCP catalog (skypilot-org/skypilot-catalog,
``catalogs/v9/gcp/vms.csv``: per machine type and zone the vCPUs, memory and the on-demand and
spot prices), read from a local copy of the pinned commit. The copy is either the whole file
(then the recorded character ranges are cut from it) or those ranges already cut out (see
data/README.md); the sha256 of the ranges is checked either way. The output is deterministic
(sorted keys, compact JSON, gzip with mtime 0), so the same copy gives the same bytes.

    python providers/gcp/scripts/generate_catalog.py --csv path/to/vms.csv

GPU model and count come from ``karpenter_gcp.catalog.family_gpus`` (a table per machine family,
GCE's accelerator type names), since the source leaves the accelerators of a2/a3/g2 types empty;
the architecture from ``karpenter_gcp.catalog.architecture`` (the Arm families).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any

from karpenter_gcp.catalog import architecture, family_gpus

DATA = Path(__file__).resolve().parents[1] / "karpenter_gcp" / "data" / "machinetypes.json.gz"
SOURCE = {
    "repository": "skypilot-org/skypilot-catalog",
    "path": "catalogs/v9/gcp/vms.csv",
    "commit": "2c3d7ea7d76bf84cf80d382e946c1609571485fd",
    "ranges": "characters [0, 15000) and [972388, 1046867) of 2507091",
    "sha256": "69b05f24d5d253c58ad3b8fe40346aa9e6f22eac68ffe6ceef0514a70dbad618",
}
"""Where the rows come from; ``sha256`` is that of the two ranges joined."""
FULL_LENGTH = 2507091
RANGES = ((0, 15000), (972388, 1046867))


def excerpt(text: str) -> str:
    """The recorded ranges of the whole file, or ``text`` itself when it is the excerpt."""
    if len(text) == FULL_LENGTH:
        return "".join(text[start:end] for start, end in RANGES)
    return text


def build(text: str) -> dict[str, Any]:
    """The packaged catalog from the CSV text: types, and per region the offers grouped by
    zones of one price pair (``[type index, zone letters, on-demand, spot]``)."""
    types: dict[str, list[Any]] = {}
    offers: dict[tuple[str, str, float, float | None], list[str]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        name, region, zone = row["InstanceType"], row["Region"], row["AvailabilityZone"]
        vcpus = int(float(row["vCPUs"]))
        gpu_name, gpu_count = family_gpus(name, vcpus)
        if row["AcceleratorName"]:
            gpu_name, gpu_count = row["AcceleratorName"], int(float(row["AcceleratorCount"]))
        memory = round(float(row["MemoryGiB"]) * 1024)
        types[name] = [name, vcpus, memory, architecture(name), gpu_name, gpu_count]
        spot = float(row["SpotPrice"]) if row["SpotPrice"] else None
        key = (region, name, float(row["Price"]), spot)
        offers.setdefault(key, []).append(zone.removeprefix(region + "-"))
    names = sorted(types)
    index = {name: i for i, name in enumerate(names)}
    regions: dict[str, list[list[Any]]] = {}
    for (region, name, price, spot), zones in sorted(offers.items(), key=str):
        regions.setdefault(region, []).append([index[name], ",".join(sorted(zones)), price, spot])
    return {"source": SOURCE, "types": [types[n] for n in names], "regions": regions}


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
    parser.add_argument("--csv", required=True, type=Path, help="copy of vms.csv or its excerpt")
    parser.add_argument("--output", type=Path, default=DATA)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    text = excerpt(args.csv.read_text(encoding="utf-8"))
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
