"""The Azure provider: the first catalog build, creates against the fake ARM server, and an
offline simulation.

Parts (``--part``, all by default), each run ``--repeat`` times (medians printed):

- ``catalog``: the first ``get_instance_types`` for eastus, in a fresh process each run, the
  provider's modules imported before the clock starts: from the packaged data (an offline
  provider, as ``karpenter simulate`` builds it: the packaged data read, then the build) and
  from the fake ARM server (a live provider: Resource SKUs and the Retail Prices API over HTTPS,
  then the build). Both are a build, never a cache hit: each run's provider is new.
- ``create``: a live provider against a ``FakeARM`` with its default latency (a VM's create
  operation takes 2 s and says so with Retry-After): one ``create``, then ``--concurrent``
  (default 20) creates from as many threads released together. Printed: wall times, the ARM
  calls per create the provider makes (GET VM, PUT NIC, PUT VM), the closing GET of each
  long-running operation and the status polls, and the requests that came before the
  Retry-After of the answer they follow (the fake's request log).
- ``simulate``: ``karpenter simulate --provider azure --region eastus`` as a subprocess on the
  default scenario (interpreter start and imports included).

Targets: the first catalog build under 300 ms from packaged data; no more than 4 ARM calls per
create apart from polling; ``--concurrent`` creates within 2x the fake's single-operation
latency.

    .venv/bin/python benchmarks/azure_provider.py [--repeat 3] [--part catalog|create|simulate]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common

ROOT = Path(__file__).resolve().parent.parent
REGION = "eastus"
CATALOG_TARGET_MS = 300.0
CALLS_TARGET = 4
NODE_CLASS_REF = {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"}


# -- helpers --------------------------------------------------------------------------------


def live_provider(profile: Any, credential: Any, node_class: Any) -> Any:
    """A live provider for the profile's fake, ``node_class`` (the default AKSNodeClass) served
    from memory."""
    from karpenter_azure.plugin import karpenter_register_providers
    from karpenter_core.cloudprovider.plugin import ProviderContext

    [record] = karpenter_register_providers()
    context = ProviderContext(
        settings=record.settings({k.replace("-", "_"): v for k, v in profile.settings().items()}),
        clients={"credential": credential},
        node_classes=lambda kind, name: node_class if name == "default" else None,
    )
    return record.factory(context)


# -- part 1: the first catalog build ----------------------------------------------------------


def first_catalog_packaged() -> dict[str, Any]:
    """``get_instance_types`` of a new offline provider for eastus (fresh process; the modules
    are imported before the clock starts, the packaged data is read after)."""
    import karpenter_azure.cloudprovider  # noqa: F401  (imports are not the build)
    from karpenter_azure.plugin import karpenter_register_providers
    from karpenter_core.cloudprovider.plugin import ProviderContext

    [record] = karpenter_register_providers()
    pool = common.nodepool([], NODE_CLASS_REF)
    start = time.perf_counter()
    provider = record.factory(ProviderContext(settings=record.settings({"region": REGION})))
    types = provider.get_instance_types(pool)
    elapsed = time.perf_counter() - start
    return {"ms": elapsed * 1000, "types": len(types)}


def first_catalog_fake() -> dict[str, Any]:
    """``get_instance_types`` of a new live provider against a fake ARM server (fresh
    process; the modules, the server and the token are ready before the clock starts)."""
    import azure.mgmt.compute
    import azure.mgmt.network  # noqa: F401

    import karpenter_azure.cloudprovider  # noqa: F401
    from karpenter_azure.conformance import AzureProfile
    from karpenter_azure.nodeclass import AKSNodeClass

    profile = AzureProfile()
    profile.start()
    try:
        fake = profile._server
        credential = fake.credential()
        credential.get_token("https://management.azure.com/.default")
        node_class = AKSNodeClass.model_validate(profile.node_class())
        pool = common.nodepool([], NODE_CLASS_REF)
        fake.requests.clear()
        start = time.perf_counter()
        provider = live_provider(profile, credential, node_class)
        types = provider.get_instance_types(pool)
        elapsed = time.perf_counter() - start
        return {"ms": elapsed * 1000, "types": len(types), "requests": len(fake.requests)}
    finally:
        profile.stop()


# -- part 2: creates against the fake -------------------------------------------------------


def measure_creates(concurrent: str) -> dict[str, Any]:
    """One create, then ``concurrent`` (a number) creates at once, against a fake with default
    latency."""
    count = int(concurrent)
    from karpenter_azure.conformance import AzureProfile
    from karpenter_azure.fake_arm import Latency
    from karpenter_azure.nodeclass import AKSNodeClass

    profile = AzureProfile()
    profile.start()
    try:
        fake = profile._server
        latency = Latency()
        fake.set_latency(latency)
        node_class = AKSNodeClass.model_validate(profile.node_class())
        provider = live_provider(profile, fake.credential(), node_class)
        provider.get_instance_types(
            common.nodepool([], NODE_CLASS_REF)
        )  # the catalog is read before the clock starts
        provider.create(common.nodeclaim("warm-up", NODE_CLASS_REF))
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
        violations = fake.requests.retry_after_violations()
        return {
            "operation_s": latency.vm_create,
            "single_s": single,
            "single_calls": single_calls,
            "burst_s": burst,
            "burst_calls": {k: v / count for k, v in burst_calls.items()},
            "errors": errors,
            "retry_after_violations": len(violations),
            "vms": len(fake.vms()),
        }
    finally:
        profile.stop()


def _calls(fake: Any) -> dict[str, int]:
    """ARM requests by kind: the provider's own calls, LRO closing GETs, status polls."""
    counts: Counter[str] = Counter()
    pending_final: set[str] = set()
    for record in fake.requests:
        if "/providers/" not in record.path:
            continue  # the token endpoint
        if record.is_poll:
            counts["status polls"] += 1
        elif record.method == "GET" and record.path in pending_final:
            counts["closing GETs"] += 1
            pending_final.discard(record.path)
        else:
            counts["provider calls"] += 1
            if record.method == "PUT":
                pending_final.add(record.path)
    return dict(counts)


# -- part 3: offline simulate -----------------------------------------------------------------


def measure_simulate() -> dict[str, Any]:
    """``karpenter simulate --provider azure --region eastus`` (default scenario) as a
    subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARM_", "AZURE_"))}
    start = time.perf_counter()
    done = subprocess.run(
        [
            str(ROOT / ".venv/bin/karpenter"),
            "simulate",
            "--provider",
            "azure",
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
    parser.add_argument("--part", action="append", choices=("catalog", "create", "simulate"))
    args = parser.parse_args()
    parts = args.part or ["catalog", "create", "simulate"]

    if "catalog" in parts:
        packaged = _repeat(
            args.repeat, lambda: common.in_fresh_process("azure_provider", "first_catalog_packaged")
        )
        fake = _repeat(
            args.repeat, lambda: common.in_fresh_process("azure_provider", "first_catalog_fake")
        )
        ms = _median(packaged, "ms")
        mark = "ok" if ms < CATALOG_TARGET_MS else "MISSED"
        print(
            f"first get_instance_types, eastus, packaged data: {ms:.1f} ms median "
            f"({packaged[0]['types']} types; target < {CATALOG_TARGET_MS:.0f} ms: {mark})"
        )
        print(
            f"first get_instance_types, eastus, fake ARM server: {_median(fake, 'ms'):.1f} ms "
            f"median ({fake[0]['types']} types, {fake[0]['requests']} requests)"
        )

    if "create" in parts:
        runs = _repeat(
            args.repeat,
            lambda: common.in_fresh_process(
                "azure_provider", "measure_creates", str(args.concurrent)
            ),
        )
        operation = runs[0]["operation_s"]
        single = _median(runs, "single_s")
        burst = _median(runs, "burst_s")
        calls = runs[0]["single_calls"].get("provider calls", 0)
        print(
            f"one create: {single:.2f} s median; ARM calls: {runs[0]['single_calls']} "
            f"(provider calls target <= {CALLS_TARGET}: "
            f"{'ok' if calls <= CALLS_TARGET else 'MISSED'})"
        )
        print(
            f"{args.concurrent} concurrent creates: {burst:.2f} s median, per create "
            f"{runs[0]['burst_calls']}; fake's VM create takes {operation:g} s (target "
            f"< {2 * operation:g} s: {'ok' if burst < 2 * operation else 'MISSED'})"
        )
        violations = sum(r["retry_after_violations"] for r in runs)
        errors = [e for r in runs for e in r["errors"]]
        print(
            f"requests before their Retry-After ran out: {violations}; create errors: "
            f"{len(errors)}{' ' + errors[0] if errors else ''}"
        )

    if "simulate" in parts:
        runs = _repeat(args.repeat, measure_simulate)
        print(
            f"karpenter simulate --provider azure --region eastus: {_median(runs, 's'):.2f} s "
            f"median wall time ({runs[0]['nodes']} nodes)"
        )


if __name__ == "__main__":
    main()
