"""Regenerate the AWS provider's packaged offline catalog (karpenter_aws/data).

Instance shapes and zone offerings come from the EC2 resources bundled with the installed moto;
on-demand prices from upstream's generated Go table (``zz_generated.pricing_aws.go``) or, with
AWS credentials, from the Price List API. Output is deterministic: sorted keys, gzip without a
timestamp.

    python providers/aws/scripts/generate_catalog.py --go-pricing path/to/zz_generated.pricing_aws.go \
        --source "aws/karpenter-provider-aws@<commit> pkg/providers/pricing/zz_generated.pricing_aws.go"
    python providers/aws/scripts/generate_catalog.py --pricing-api us-east-1
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "karpenter_aws" / "data"
ARCHITECTURES = frozenset({"x86_64", "arm64"})

# The parts of a DescribeInstanceTypes entry the instance-type builder reads. A dict keeps the
# named keys (True: the whole value); a one-element list applies its spec to each list item.
SHAPE_FIELDS: dict[str, Any] = {
    "InstanceType": True,
    "SupportedUsageClasses": True,
    "Hypervisor": True,
    "BareMetal": True,
    "VCpuInfo": {"DefaultVCpus": True},
    "MemoryInfo": {"SizeInMiB": True},
    "ProcessorInfo": {
        "SupportedArchitectures": True,
        "Manufacturer": True,
        "SustainedClockSpeedInGhz": True,
    },
    "NetworkInfo": {
        "DefaultNetworkCardIndex": True,
        "Ipv4AddressesPerInterface": True,
        "EncryptionInTransitSupported": True,
        "NetworkCards": [
            {
                "NetworkCardIndex": True,
                "MaximumNetworkInterfaces": True,
                "BaselineBandwidthInGbps": True,
            }
        ],
        "EfaInfo": {"MaximumEfaInterfaces": True},
    },
    "GpuInfo": {"Gpus": [{"Name": True, "Manufacturer": True, "Count": True, "MemoryInfo": True}]},
    "InferenceAcceleratorInfo": {
        "Accelerators": [{"Name": True, "Manufacturer": True, "Count": True}]
    },
    "NeuronInfo": {"NeuronDevices": [{"Name": True, "Count": True, "CoreInfo": {"Count": True}}]},
    "InstanceStorageInfo": {"TotalSizeInGB": True, "NvmeSupport": True},
    "EbsInfo": {"EbsOptimizedSupport": True, "EbsOptimizedInfo": {"MaximumBandwidthInMbps": True}},
}

_GO_GENERATED_AT = re.compile(r"generated at (\S+) for")
_GO_REGION = re.compile(r'^\s*"([a-z0-9-]+)":\s*\{\s*$')
_GO_PRICE = re.compile(r'"([a-z0-9.-]+)":\s*([0-9.]+)')


def prune(value: Any, spec: Any) -> Any:
    """``value`` reduced to the fields ``spec`` names."""
    if spec is True:
        return value
    if isinstance(spec, list):
        return [prune(item, spec[0]) for item in value]
    return {key: prune(value[key], sub) for key, sub in spec.items() if key in value}


def wanted(info: dict[str, Any]) -> bool:
    """Whether live discovery would return this type (hvm, x86_64 or arm64)."""
    architectures = set(info.get("ProcessorInfo", {}).get("SupportedArchitectures", ()))
    return "hvm" in info.get("SupportedVirtualizationTypes", ()) and bool(
        architectures & ARCHITECTURES
    )


def moto_resources() -> Path:
    """The EC2 resources directory of the installed moto."""
    import moto.ec2

    return Path(moto.ec2.__file__).parent / "resources"


def shapes(resources: Path) -> list[dict[str, Any]]:
    """Pruned instance shapes, sorted by name."""
    with gzip.open(resources / "instance_types.json.gz", "rt") as handle:
        raw: dict[str, dict[str, Any]] = json.load(handle)
    return [prune(raw[name], SHAPE_FIELDS) for name in sorted(raw) if wanted(raw[name])]


def regions(resources: Path, names: set[str]) -> dict[str, Any]:
    """Per region: its zones (name, zone id) and, per instance type, the indices of its zones."""
    from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend

    zone_ids = {z.name: z.zone_id for zs in RegionsAndZonesBackend.zones.values() for z in zs}
    out: dict[str, Any] = {}
    for path in sorted(
        (resources / "instance_type_offerings" / "availability-zone").glob("*.json.gz")
    ):
        region = path.name.removesuffix(".json.gz")
        with gzip.open(path, "rt") as handle:
            rows: list[dict[str, str]] = json.load(handle)
        zones = sorted({row["Location"] for row in rows})
        index = {zone: i for i, zone in enumerate(zones)}
        offered: dict[str, list[int]] = {}
        for row in rows:
            if row["InstanceType"] in names:
                offered.setdefault(row["InstanceType"], []).append(index[row["Location"]])
        out[region] = {
            "zones": [{"name": zone, "id": zone_ids.get(zone, "")} for zone in zones],
            "offerings": {name: sorted(set(offered[name])) for name in sorted(offered)},
        }
    return out


def go_prices(path: Path) -> tuple[str, dict[str, dict[str, float]]]:
    """The generation time and per-region prices of upstream's generated Go pricing table."""
    text = path.read_text()
    stamp = _GO_GENERATED_AT.search(text)
    if stamp is None:
        raise SystemExit(f"{path}: no 'generated at <time> for' line")
    prices: dict[str, dict[str, float]] = {}
    region: str | None = None
    for line in text.splitlines():
        match = _GO_REGION.match(line)
        if match:
            region = match.group(1)
            prices[region] = {}
            continue
        if region is not None:
            for name, price in _GO_PRICE.findall(line):
                prices[region][name] = float(price)
    if not prices:
        raise SystemExit(f"{path}: no region price table found")
    return stamp.group(1), prices


def api_prices(region: str) -> tuple[str, dict[str, dict[str, float]]]:
    """On-demand prices for ``region`` from the Price List API (needs AWS credentials)."""
    import boto3

    sys.path.insert(0, str(DATA.parents[1]))
    from karpenter_aws.pricing import PriceBook, pricing_api_region

    client = boto3.client("pricing", region_name=pricing_api_region(region))
    book = PriceBook(region, {})
    if not book.refresh_on_demand(client):
        raise SystemExit(f"could not read on-demand prices for {region} from the Price List API")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return now, {region: book.on_demand_prices()}


def write(name: str, document: Any) -> None:
    """Write ``document`` as deterministic gzip JSON into the data directory."""
    body = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    (DATA / name).write_bytes(gzip.compress(body, compresslevel=9, mtime=0))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--go-pricing", type=Path, help="path to upstream's zz_generated.pricing_aws.go"
    )
    group.add_argument(
        "--pricing-api", metavar="REGION", help="read prices from the Price List API"
    )
    parser.add_argument(
        "--source", help="where the Go pricing file came from (recorded in the data)"
    )
    args = parser.parse_args(argv)

    resources = moto_resources()
    import moto

    shape_list = shapes(resources)
    names = {shape["InstanceType"] for shape in shape_list}
    source = (
        f"moto {moto.__version__} EC2 resources (instance_types.json.gz, instance_type_offerings)"
    )
    write("instance_types.json.gz", {"source": source, "instance_types": shape_list})
    write("regions.json.gz", {"source": source, "regions": regions(resources, names)})

    if args.go_pricing is not None:
        as_of, prices = go_prices(args.go_pricing)
        price_source = args.source or str(args.go_pricing.name)
        price_source += " (generated by upstream from the AWS Price List API)"
    else:
        as_of, prices = api_prices(args.pricing_api)
        price_source = (
            "AWS Price List API GetProducts (AmazonEC2, Linux, shared tenancy, on-demand)"
        )
    write(
        "prices.json.gz",
        {"source": price_source, "as_of": as_of, "currency": "USD", "on_demand": prices},
    )
    print(f"{len(shape_list)} instance types, prices for {sorted(prices)} as of {as_of}")


if __name__ == "__main__":
    main()
