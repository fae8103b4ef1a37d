"""Upstream Karpenter built from its Go module: its KWOK controller and its scheduling benchmark.

The pinned release of ``sigs.k8s.io/karpenter`` comes from the Go module proxy. Its ``kwok``
command (upstream's controller with the KWOK cloud provider) and the test binary of its scheduling
package (built with the ``test_performance`` tag, which holds ``scheduling_benchmark_test.go``) are
built once into ``<cluster cache root>/upstream-karpenter-<version>/bin``, beside the local control
plane's binaries. When the release's ``go.mod`` asks for a newer Go than the local toolchain, the
go command fetches that exact toolchain from the module proxy (``GOTOOLCHAIN=go1.x.y``).

The release's own files give the rest: the CRDs of its KWOK chart and of its KWOKNodeClass, the
RBAC rules of its chart's (Cluster)Roles, and the prices of its KWOK instance-type catalog.
"""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from karpenter_conformance.cluster import build, crds

MODULE = "sigs.k8s.io/karpenter"
VERSION = "v1.15.0"
SCHEDULING_PACKAGE = "pkg/controllers/provisioning/scheduling"
CRD_FILES = (
    "kwok/charts/crds/karpenter.sh_nodepools.yaml",
    "kwok/charts/crds/karpenter.sh_nodeclaims.yaml",
    "kwok/charts/crds/karpenter.sh_nodeoverlays.yaml",
    "kwok/charts/crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
    "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
)
RBAC_TEMPLATES = (
    "kwok/charts/templates/clusterrole.yaml",
    "kwok/charts/templates/clusterrole-kwok.yaml",
    "kwok/charts/templates/role.yaml",
)
CATALOG = "kwok/cloudprovider/instance_types.json"
# The scheduling benchmark's sizes (its BenchmarkScheduling<N> functions).
BENCHMARK_COUNTS = (1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000)
_RESULT = re.compile(r"^BenchmarkScheduling(\d+)\S*\s+(\d+)\s+(\d+) ns/op(.*)$", re.MULTILINE)

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """Where the release's binaries and build logs live."""
    return build.cache_root() / f"upstream-karpenter-{VERSION}"


def is_built() -> bool:
    """Whether the release's controller and scheduling benchmark are in the cache."""
    bin_dir = cache_dir() / "bin"
    return (bin_dir / "kwok").is_file() and (bin_dir / "scheduling.test").is_file()


@dataclass(frozen=True)
class Upstream:
    """The built release: its source tree (read-only, in the module cache) and binaries."""

    source: Path
    controller: Path
    scheduling_test: Path

    def crd_documents(self) -> list[dict[str, Any]]:
        """The CRDs upstream's KWOK controller needs."""
        return crds.load([self.source / name for name in CRD_FILES])

    def rbac_rules(self) -> list[dict[str, Any]]:
        """The rules of every (Cluster)Role of upstream's KWOK chart.

        The chart's templates only template names, namespaces and labels: lines holding a
        template action are dropped, and what is left of each document is plain YAML.
        """
        rules: list[dict[str, Any]] = []
        for name in RBAC_TEMPLATES:
            text = (self.source / name).read_text()
            plain = "\n".join(line for line in text.splitlines() if "{{" not in line)
            for document in yaml.safe_load_all(plain):
                if document and document.get("kind") in ("ClusterRole", "Role"):
                    rules += document.get("rules") or []
        return rules

    def prices(self) -> dict[tuple[str, str, str], float]:
        """Price per hour of each (instance type, zone, capacity type) of upstream's catalog."""
        prices = {}
        for instance_type in json.loads((self.source / CATALOG).read_text()):
            for offering in instance_type["offerings"]:
                values = {r["key"]: r["values"][0] for r in offering["Requirements"]}
                key = (
                    instance_type["name"],
                    values["topology.kubernetes.io/zone"],
                    values["karpenter.sh/capacity-type"],
                )
                prices[key] = float(offering["Price"])
        return prices


def _download(env: dict[str, str]) -> dict[str, Any]:
    """``go mod download -json`` of the release (its Error field set if the go command refused)."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=cache_dir(),
    )
    try:
        info: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        raise build.BuildError(
            f"cannot download {MODULE}@{VERSION}: {done.stderr.strip()}"
        ) from None
    return info


def _toolchain_env() -> tuple[dict[str, str], Path]:
    """The module build environment, with the toolchain the release's go.mod asks for, and the
    release's source directory in the module cache."""
    env = build.go_env()
    info = _download(env)
    go_mod = Path(info.get("GoMod", ""))
    match = re.search(
        r"^go (\d+\.\d+\.\d+)\s*$", go_mod.read_text() if go_mod.is_file() else "", re.M
    )
    if "Error" in info and match:
        env["GOTOOLCHAIN"] = f"go{match.group(1)}"
        info = _download(env)
    if "Error" in info or "Dir" not in info:
        raise build.BuildError(f"cannot download {MODULE}@{VERSION}: {info.get('Error')}")
    return env, Path(info["Dir"])


def _run(
    name: str, args: list[str], cwd: Path, env: dict[str, str], log_file: Path, log: Log
) -> None:
    job = build.GoJob(name, args, cwd, env, log_file)
    try:
        log(f"[upstream] {name} built in {job.wait():.0f}s")
    finally:
        job.stop()


def prepare(benchmark: bool = True, log: Log = _stderr) -> Upstream:
    """Build whatever is missing (the scheduling benchmark only with ``benchmark``) and return
    the release."""
    root = cache_dir()
    bin_dir = root / "bin"
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    with (root / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env, source = _toolchain_env()
        upstream = Upstream(source, bin_dir / "kwok", bin_dir / "scheduling.test")
        # One after the other, with the same -trimpath: the test binary reuses most of the
        # controller's compiled packages.
        if not upstream.controller.is_file():
            log(f"[upstream] building {MODULE}/kwok@{VERSION} ({env.get('GOTOOLCHAIN')})")
            _run(
                "upstream kwok controller",
                ["install", "-trimpath", "-ldflags=-s -w", f"{MODULE}/kwok@{VERSION}"],
                root,
                {**env, "GOBIN": str(bin_dir)},
                logs / "kwok.log",
                log,
            )
        if benchmark and not upstream.scheduling_test.is_file():
            log(f"[upstream] building the test binary of {SCHEDULING_PACKAGE}")
            _run(
                "upstream scheduling benchmark",
                [
                    "test",
                    "-c",
                    "-trimpath",
                    "-tags",
                    "test_performance",
                    "-o",
                    str(upstream.scheduling_test),
                    f"./{SCHEDULING_PACKAGE}",
                ],
                source,
                env,
                logs / "scheduling.log",
                log,
            )
    return upstream


def run_scheduling_benchmark(upstream: Upstream, pods: int) -> dict[str, float]:
    """One ``BenchmarkScheduling<pods>`` in a fresh process, one iteration (the scheduler's
    random source is a package global, so each run starts from the same seed)."""
    if pods not in BENCHMARK_COUNTS:
        raise ValueError(f"upstream's benchmark has no {pods}-pod case; one of {BENCHMARK_COUNTS}")
    done = subprocess.run(
        [
            str(upstream.scheduling_test),
            "-test.run",
            "^$",
            "-test.bench",
            f"^BenchmarkScheduling{pods}$",
            "-test.benchtime",
            "1x",
        ],
        cwd=upstream.source / SCHEDULING_PACKAGE,
        capture_output=True,
        text=True,
        check=False,
    )
    found = _RESULT.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(
            f"upstream's BenchmarkScheduling{pods} failed (exit {done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    metrics = {unit: float(value) for value, unit in re.findall(r"([\d.e+]+) (\S+)", found[4])}
    return {
        "pods": pods,
        "seconds": int(found[3]) / 1e9,
        "pods_per_second": metrics["pods/sec"],
        "nodes": metrics.get("nodes", 0.0),
    }


if __name__ == "__main__":
    prepare()
