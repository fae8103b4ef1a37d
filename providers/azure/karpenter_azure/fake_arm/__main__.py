"""Run the fake ARM server as a process: ``python -m karpenter_azure.fake_arm``.

It prints one JSON line with where it listens and how to authenticate (and writes the same to
``--endpoint-file``), then serves until interrupted or terminated.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from karpenter_azure.fake_arm.server import ADMIN_PREFIX, FakeARM
from karpenter_azure.fake_arm.state import Latency
from karpenter_core.sdk.fakehttp import serve_until_signalled


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m karpenter_azure.fake_arm",
        description="A fake Azure Resource Manager on 127.0.0.1 over HTTPS, for tests.",
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    parser.add_argument(
        "--tls-dir",
        type=Path,
        help="directory for ca.crt, server.crt and server.key (default: a temporary one)",
    )
    parser.add_argument("--endpoint-file", type=Path, help="also write the JSON line here")
    what = {
        "vm_create": "a VM create takes",
        "vm_delete": "a VM delete takes",
        "nic_create": "a NIC create takes",
        "nic_delete": "a NIC delete takes",
        "request": "added to every ARM answer",
    }
    for name, value in asdict(Latency()).items():
        parser.add_argument(
            f"--{name.replace('_', '-')}-latency",
            dest=name,
            type=float,
            default=value,
            metavar="SECONDS",
            help=f"seconds {what[name]} (default {value:g})",
        )
    parser.add_argument(
        "--no-latency", action="store_true", help="every operation completes at once"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Start the server, announce it, serve until SIGINT or SIGTERM."""
    args = _parser().parse_args(argv)
    if args.no_latency:
        latency = Latency.none()
    else:
        latency = Latency(**{name: getattr(args, name) for name in asdict(Latency())})
    fake = FakeARM(latency=latency, port=args.port, tls_dir=args.tls_dir)
    endpoint = {
        "url": fake.url,
        "admin_url": fake.url + ADMIN_PREFIX,
        "prices_url": fake.prices_url,
        "authority": fake.authority,
        "ca_file": fake.ca_file,
        "tenant_id": fake.tenant_id,
        "client_id": fake.client_id,
        "client_secret": fake.client_secret,
        "subscription_id": fake.subscription_id,
        "latency": asdict(latency),
    }
    line = json.dumps(endpoint)
    if args.endpoint_file:
        args.endpoint_file.write_text(line + "\n")
    print(line, flush=True)

    serve_until_signalled(fake)
    return 0


if __name__ == "__main__":
    sys.exit(main())
