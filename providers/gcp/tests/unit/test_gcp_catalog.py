"""The packaged GCP catalog, its generator, the live rows from the Compute API, and the catalog's
instance types."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.cloud import compute_v1

from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_gcp import catalog
from karpenter_gcp.catalog import (
    Catalog,
    CatalogError,
    live_machine_types,
    offline_machine_types,
    offline_regions,
    packaged_prices,
    packaged_source,
)
from karpenter_gcp.instancetype import RESOURCE_NVIDIA_GPU, BuildOptions
from karpenter_gcp.pricing import GCPPricing

GENERATOR = Path(__file__).resolve().parents[2] / "scripts" / "generate_catalog.py"
DATA = Path(catalog.__file__).parent / "data" / "machinetypes.json.gz"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_catalog", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_packaged_catalog_covers_its_regions_and_records_its_source():
    assert len(offline_regions()) == 44
    assert {"us-central1", "europe-west4", "asia-southeast1"} <= set(offline_regions())
    source = packaged_source()
    assert source["path"] == "catalogs/v9/gcp/vms.csv"
    assert source["commit"] == "2c3d7ea7d76bf84cf80d382e946c1609571485fd"
    assert source == _generator().SOURCE
    names = {mt.name for mt in offline_machine_types("us-central1")}
    assert {
        "e2-medium",
        "n2-standard-8",
        "a2-highgpu-1g",
        "a3-highgpu-1g",
        "g2-standard-4",
    } <= names
    assert len(names) == 439
    assert not any(name.endswith(("-metal", "-tpu")) for name in names)


def test_rows_carry_zones_gpus_and_per_zone_prices():
    rows = {mt.name: mt for mt in offline_machine_types("us-central1")}
    e2 = rows["e2-standard-4"]
    assert (e2.vcpus, e2.memory_mib, e2.gpu_count) == (4, 16384, 0)
    assert e2.zones == ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")
    a2 = rows["a2-ultragpu-2g"]
    assert (a2.gpu_name, a2.gpu_count, a2.gpu_memory_mib) == ("nvidia-a100-80gb", 2, 81920)
    assert a2.zones == ("us-central1-a", "us-central1-c")
    g2 = rows["g2-standard-48"]
    assert (g2.gpu_name, g2.gpu_count) == ("nvidia-l4", 4)
    prices = packaged_prices("us-central1")
    assert prices["on-demand", "e2-standard-4", "us-central1-f"] == 0.13402
    assert prices["spot", "e2-standard-4", "us-central1-f"] == 0.07735


@pytest.mark.parametrize(
    ("name", "vcpus", "gpus"),
    [
        ("a2-highgpu-8g", 96, ("nvidia-tesla-a100", 8)),
        ("a2-megagpu-16g", 96, ("nvidia-tesla-a100", 16)),
        ("a3-edgegpu-8g-nolssd", 208, ("nvidia-h100-80gb", 8)),
        ("a3-megagpu-8g", 208, ("nvidia-h100-mega-80gb", 8)),
        ("g2-standard-12", 12, ("nvidia-l4", 1)),
        ("g2-standard-96", 96, ("nvidia-l4", 8)),
        ("g2-standard-32", 32, ("nvidia-l4", 1)),
        ("a4-highgpu-8g", 224, ("nvidia-b200", 8)),
        ("g4-standard-96", 96, ("nvidia-rtx-pro-6000", 2)),
        ("g4-standard-12", 12, ("nvidia-rtx-pro-6000", 0)),
        ("n2-standard-8", 8, ("", 0)),
    ],
)
def test_family_gpu_table(name, vcpus, gpus):
    assert _generator().family_gpus(name, vcpus) == gpus


def test_unknown_region_is_a_one_line_error():
    with pytest.raises(CatalogError, match="no offline machine type data for region 'mars-1'"):
        offline_machine_types("mars-1")


CSV = (
    "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,"
    "AvailabilityZone,Price,SpotPrice\n"
    "g2-standard-24,24.0,96.0,,,,us-east1,us-east1-b,0.88075,0.4501\n"
    "g2-standard-24,24.0,96.0,,,,us-east1,us-east1-c,0.88075,0.4501\n"
    "n1-standard-1,1.0,3.75,,,,us-east1,us-east1-d,0.0475,\n"
)


def test_generator_groups_zones_reads_gpus_and_is_deterministic():
    gen = _generator()
    built = gen.build(CSV)
    assert built["types"] == [
        ["g2-standard-24", 24, 98304, "amd64", "nvidia-l4", 2],
        ["n1-standard-1", 1, 3840, "amd64", "", 0],
    ]
    assert built["regions"]["us-east1"] == [[0, "b,c", 0.88075, 0.4501], [1, "d", 0.0475, None]]
    assert gen.render(built) == gen.render(gen.build(CSV))


def test_generator_refuses_a_copy_with_another_sha256(tmp_path, capsys):
    copy = tmp_path / "vms.csv"
    copy.write_text(CSV)
    assert _generator().main(["--csv", str(copy), "--output", str(tmp_path / "out.gz")]) == 1
    assert "expected 172420f5" in capsys.readouterr().err
    assert not (tmp_path / "out.gz").exists()


def test_packaged_file_is_what_the_generator_renders_from_its_content():
    gen = _generator()
    data = json.loads(gzip.decompress(DATA.read_bytes()))
    assert gen.render(data) == DATA.read_bytes()


def _zone(name: str, region: str, status: str = "UP") -> compute_v1.Zone:
    return compute_v1.Zone(name=name, region=f"https://x/regions/{region}", status=status)


class _Listing:
    def __init__(self, items):
        self.items = items

    def list(self, project):
        return iter(self.items)

    def aggregated_list(self, project):
        return iter(self.items)


class _Clients:
    project = "p"

    def __init__(self, zones, scoped):
        self.zones = _Listing(zones)
        self.machine_types = _Listing(scoped)


def _scoped(*types: compute_v1.MachineType) -> compute_v1.MachineTypesScopedList:
    return compute_v1.MachineTypesScopedList(machine_types=list(types))


def test_live_rows_from_the_compute_api_keep_up_zones_of_the_region_and_read_accelerators():
    n2 = compute_v1.MachineType(name="n2-standard-4", guest_cpus=4, memory_mb=16384)
    a100 = compute_v1.Accelerators(
        guest_accelerator_type="nvidia-tesla-a100", guest_accelerator_count=2
    )
    a2 = compute_v1.MachineType(
        name="a2-highgpu-2g", guest_cpus=24, memory_mb=174080, accelerators=[a100]
    )
    old = compute_v1.MachineType(
        name="n1-old", guest_cpus=1, memory_mb=1024,
        deprecated=compute_v1.DeprecationStatus(state="OBSOLETE"),
    )  # fmt: skip
    arm = compute_v1.MachineType(
        name="t2a-standard-1", guest_cpus=1, memory_mb=4096, architecture="ARM64"
    )
    clients = _Clients(
        [
            _zone("r1-a", "r1"),
            _zone("r1-b", "r1"),
            _zone("r1-c", "r1", "DOWN"),
            _zone("r2-a", "r2"),
        ],
        [
            ("zones/r1-a", _scoped(n2, a2, old)),
            ("zones/r1-b", _scoped(n2, arm)),
            ("zones/r1-c", _scoped(n2)),
            ("zones/r2-a", _scoped(n2)),
        ],
    )
    rows = {mt.name: mt for mt in live_machine_types(clients, "r1")}
    assert set(rows) == {"n2-standard-4", "a2-highgpu-2g", "t2a-standard-1"}
    assert rows["n2-standard-4"].zones == ("r1-a", "r1-b")
    assert (rows["a2-highgpu-2g"].gpu_count, rows["a2-highgpu-2g"].gpu_memory_mib) == (2, 40960)
    assert rows["t2a-standard-1"].architecture == "arm64"


def test_live_rows_failures_are_catalog_errors():
    class Broken(_Listing):
        def aggregated_list(self, project):
            raise RuntimeError("503 backend unavailable")

    clients = _Clients([_zone("r1-a", "r1")], [])
    clients.machine_types = Broken([])
    with pytest.raises(CatalogError, match="reading machine types of r1: 503"):
        live_machine_types(clients, "r1")
    with pytest.raises(CatalogError, match="no zone of region 'r9' is up"):
        live_machine_types(_Clients([_zone("r1-a", "r1")], []), "r9")


def test_offline_catalog_instance_types_are_cached_and_gpu_pods_get_gpu_types():
    unavailable = UnavailableOfferings()
    cat = Catalog.offline("us-central1", GCPPricing("us-central1"), unavailable)
    options = BuildOptions("us-central1")
    types = cat.instance_types(options)
    assert cat.instance_types(options) is types
    gpu = {it.name.split("-")[0] for it in types if it.allocatable.get(RESOURCE_NVIDIA_GPU)}
    assert gpu == {"a2", "a3", "a4", "g2", "g4"}
    unavailable.mark("spot", "e2-standard-2", "us-central1-a")
    again = {it.name: it for it in cat.instance_types(options)}
    off = [o for o in again["e2-standard-2"].offerings if not o.available]
    assert [(o.capacity_type, o.zone) for o in off] == [("spot", "us-central1-a")]


def test_first_instance_types_from_packaged_data_load_fast():
    script = (
        "import time; t = time.perf_counter()\n"
        "from karpenter_gcp.catalog import Catalog\n"
        "from karpenter_gcp.instancetype import BuildOptions\n"
        "from karpenter_gcp.pricing import GCPPricing\n"
        "from karpenter_core.sdk.offerings import UnavailableOfferings\n"
        "prices = GCPPricing('us-central1')\n"
        "Catalog.offline('us-central1', prices, UnavailableOfferings())"
        ".instance_types(BuildOptions('us-central1'))\n"
        "print(time.perf_counter() - t)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 0.3


@pytest.mark.slow
def test_live_catalog_through_the_fake_server_matches_the_packaged_rows():
    from karpenter_gcp.clients import GCPClients
    from karpenter_gcp.testing import FakeGCE

    with FakeGCE() as fake:
        clients = GCPClients.create(fake.project, endpoint=fake.endpoint)
        prices = GCPPricing("us-central1", clients.billing)
        cat = Catalog.live(clients, "us-central1", prices, UnavailableOfferings())
        live = {it.name: it for it in cat.instance_types(BuildOptions("us-central1"))}
        offline = {mt.name: mt for mt in offline_machine_types("us-central1")}
        assert set(live) == set(offline)
        a3 = live["a3-highgpu-2g"]
        assert a3.capacity[RESOURCE_NVIDIA_GPU] == 2000
        assert a3.requirements["karpenter.k8s.gcp/instance-gpu-memory"].values == {"81920"}
        zones = a3.requirements["topology.kubernetes.io/zone"].values
        assert zones == set(offline["a3-highgpu-2g"].zones)
