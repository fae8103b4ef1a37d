"""The GCP provider: the first catalog build, creates against the fake GCE server, and an offline
simulation.

Parts (``--part``, all by default), each run ``--repeat`` times (medians printed):

- ``catalog``: the first ``get_instance_types`` for us-central1, in a fresh process each run,
  the provider's modules (and google-cloud-compute) imported before the clock starts: from the
  packaged data (an offline provider, as ``karpenter simulate`` builds it: the packaged data
  read, then the build) and from the fake GCE server (a live provider: zones and the machine
  types' aggregated list over HTTP, then the build; Billing prices are read in the background).
- ``create``: a live provider against a ``FakeGCE`` whose instance inserts take
  ``--operation`` seconds (default 2): one ``create``, then ``--concurrent`` (default 20)
  creates from as many threads released together. Printed: wall times and the Compute calls
  per create from the fake's request log (the GET of the instance, the insert, the zone
  operation's waits).
- ``simulate``: ``karpenter simulate --provider gcp --region us-central1`` as a subprocess on
  the default scenario (interpreter start and imports included).

Targets: the first catalog build under 300 ms from packaged data; ``--concurrent`` creates
within 2x the time of one.

    .venv/bin/python benchmarks/gcp_provider.py [--repeat 3] [--part catalog|create|simulate]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common

ROOT = Path(__file__).resolve().parent.parent
REGION = "us-central1"
CATALOG_TARGET_MS = 300.0
NODE_CLASS_REF = {"group": "karpenter.k8s.gcp", "kind": "GCENodeClass", "name": "default"}


# -- helpers --------------------------------------------------------------------------------


def live_provider(profile: Any, node_class: Any) -> Any:
    """A live provider for the profile's fake, ``node_class`` (the default GCENodeClass) served
    from memory."""
    from karpenter_core.cloudprovider.plugin import ProviderContext
    from karpenter_gcp.plugin import karpenter_register_providers

    [record] = karpenter_register_providers()
    context = ProviderContext(
        settings=record.settings({k.replace("-", "_"): v for k, v in profile.settings().items()}),
        clients={"credentials": profile.clients().credentials},
        node_classes=lambda kind, name: node_class if name == "default" else None,
    )
    return record.factory(context)


# -- part 1: the first catalog build ----------------------------------------------------------


def first_catalog_packaged() -> dict[str, Any]:
    """``get_instance_types`` of a new offline provider for us-central1 (fresh process; the
    modules are imported before the clock starts, the packaged data is read after)."""
    import karpenter_gcp.cloudprovider  # noqa: F401  (imports are not the build)
    from karpenter_core.cloudprovider.plugin import ProviderContext
    from karpenter_gcp.plugin import karpenter_register_providers

    [record] = karpenter_register_providers()
    pool = common.nodepool([], NODE_CLASS_REF)
    start = time.perf_counter()
    provider = record.factory(ProviderContext(settings=record.settings({"region": REGION})))
    types = provider.get_instance_types(pool)
    elapsed = time.perf_counter() - start
    return {"ms": elapsed * 1000, "types": len(types)}


def first_catalog_fake() -> dict[str, Any]:
    """``get_instance_types`` of a new live provider against a fake GCE server (fresh process;
    the modules and the server are ready before the clock starts)."""
    import google.cloud.compute_v1  # noqa: F401

    import karpenter_gcp.cloudprovider  # noqa: F401
    from karpenter_gcp.conformance import GCPProfile
    from karpenter_gcp.nodeclass import GCENodeClass

    profile = GCPProfile()
    profile.start()
    try:
        fake = profile._server
        node_class = GCENodeClass.model_validate(profile.node_class())
        pool = common.nodepool([], NODE_CLASS_REF)
        fake.requests.clear()
        start = time.perf_counter()
        provider = live_provider(profile, node_class)
        types = provider.get_instance_types(pool)
        elapsed = time.perf_counter() - start
        return {"ms": elapsed * 1000, "types": len(types), "requests": len(fake.requests)}
    finally:
        profile.stop()


# -- part 2: creates against the fake -------------------------------------------------------


def measure_creates(concurrent: str, operation: str) -> dict[str, Any]:
    """One create, then ``concurrent`` (a number) creates at once, against a fake whose inserts
    take ``operation`` seconds."""
    count, delay = int(concurrent), float(operation)
    from karpenter_gcp.conformance import GCPProfile
    from karpenter_gcp.nodeclass import GCENodeClass

    profile = GCPProfile()
    profile.start()
    try:
        fake = profile._server
        fake.state.operation_delay = delay
        node_class = GCENodeClass.model_validate(profile.node_class())
        provider = live_provider(profile, node_class)
        provider.get_instance_types(
            common.nodepool([], NODE_CLASS_REF)
        )  # the catalog is read before the clock starts
        provider.create(common.nodeclaim("warm-up", NODE_CLASS_REF))  # and the node pool's template
        fake.requests.clear()

        start = time.perf_counter()
        provider.create(common.nodeclaim("single", NODE_CLASS_REF))
        single = time.perf_counter() - start
        single_calls = _calls(fake)
        fake.requests.clear()

        barrier = threading.Barrier(count)
        errors: list[str] = []

        def one(index: int) -> None:
            barrier.wait()
            try:
                provider.create(common.nodeclaim(f"burst-{index:02d}", NODE_CLASS_REF))
            except Exception as error:  # reported, not raised: the figures still print
                errors.append(f"{type(error).__name__}: {error}")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        burst = time.perf_counter() - start
        burst_calls = _calls(fake)
        return {
            "operation_s": delay,
            "single_s": single,
            "single_calls": single_calls,
            "burst_s": burst,
            "burst_calls": {k: v / count for k, v in burst_calls.items()},
            "errors": errors,
            "instances": len(fake.instances()),
        }
    finally:
        profile.stop()


def _calls(fake: Any) -> dict[str, int]:
    """Compute requests by kind: the instance GET, the insert, the zone operation's waits."""
    counts: Counter[str] = Counter()
    for record in fake.requests:
        if record.path.endswith("/wait"):
            counts["operation waits"] += 1
        elif record.method == "POST" and record.path.endswith("/instances"):
            counts["inserts"] += 1
        elif record.method == "GET" and "/instances/" in record.path:
            counts["instance GETs"] += 1
        else:
            counts[f"other {record.method} {record.path.rsplit('/', 1)[-1]}"] += 1
    return dict(counts)


# -- part 3: offline simulate -----------------------------------------------------------------


def measure_simulate() -> dict[str, Any]:
    """``karpenter simulate --provider gcp --region us-central1`` (default scenario) as a
    subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KARPENTER_GCP_", "GOOGLE_"))}
    start = time.perf_counter()
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "karpenter"),
            "simulate",
            "--provider",
            "gcp",
            "--region",
            REGION,
            "-o",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    elapsed = time.perf_counter() - start
    summary = json.loads(done.stdout)
    return {"s": elapsed, "nodes": len(summary["nodeclaims"])}


# -- main -----------------------------------------------------------------------------------


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def _repeat(times: int, measure: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    return [measure() for _ in range(times)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--operation", type=float, default=2.0)
    parser.add_argument("--part", action="append", choices=("catalog", "create", "simulate"))
    args = parser.parse_args()
    parts = args.part or ["catalog", "create", "simulate"]

    if "catalog" in parts:
        packaged = _repeat(
            args.repeat, lambda: common.in_fresh_process("gcp_provider", "first_catalog_packaged")
        )
        fake = _repeat(
            args.repeat, lambda: common.in_fresh_process("gcp_provider", "first_catalog_fake")
        )
        ms = _median(packaged, "ms")
        mark = "ok" if ms < CATALOG_TARGET_MS else "MISSED"
        print(
            f"first get_instance_types, {REGION}, packaged data: {ms:.1f} ms median "
            f"({packaged[0]['types']} types; target < {CATALOG_TARGET_MS:.0f} ms: {mark})"
        )
        print(
            f"first get_instance_types, {REGION}, fake GCE server: {_median(fake, 'ms'):.1f} ms "
            f"median ({fake[0]['types']} types, {fake[0]['requests']} requests)"
        )

    if "create" in parts:
        runs = _repeat(
            args.repeat,
            lambda: common.in_fresh_process(
                "gcp_provider", "measure_creates", str(args.concurrent), str(args.operation)
            ),
        )
        single = _median(runs, "single_s")
        burst = _median(runs, "burst_s")
        print(
            f"one create: {single:.2f} s median (the fake's insert takes {args.operation:g} s); "
            f"Compute calls: {runs[0]['single_calls']}"
        )
        print(
            f"{args.concurrent} concurrent creates: {burst:.2f} s median, per create "
            f"{runs[0]['burst_calls']} (target < 2x one create, {2 * single:.2f} s: "
            f"{'ok' if burst < 2 * single else 'MISSED'})"
        )
        errors = [e for r in runs for e in r["errors"]]
        print(f"create errors: {len(errors)}{' ' + errors[0] if errors else ''}")

    if "simulate" in parts:
        runs = _repeat(args.repeat, measure_simulate)
        print(
            f"karpenter simulate --provider gcp --region {REGION}: {_median(runs, 's'):.2f} s "
            f"median wall time ({runs[0]['nodes']} nodes)"
        )


if __name__ == "__main__":
    main()
