"""Run the fake GCE server as a process: ``python -m karpenter_gcp.testing``.

It prints one JSON line with its endpoint, project, region and the provider's environment
(``env``), then serves until interrupted or terminated.
"""

from __future__ import annotations

import argparse
import json
import sys

from karpenter_core.sdk.fakehttp import serve_until_signalled
from karpenter_gcp.testing.server import FakeGCE


def main(argv: list[str] | None = None) -> int:
    """Start the server, announce it, serve until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m karpenter_gcp.testing",
        description="A fake Compute Engine REST server on 127.0.0.1 (plain HTTP), for tests.",
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    parser.add_argument("--project", default="test-project")
    parser.add_argument("--region", default="us-central1")
    parser.add_argument(
        "--operation-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds an instance insert or delete runs (default 0)",
    )
    args = parser.parse_args(argv)
    fake = FakeGCE(args.project, args.region, operation_delay=args.operation_delay, port=args.port)
    print(
        json.dumps(
            {
                "endpoint": fake.endpoint,
                "project": fake.project,
                "region": fake.region,
                "env": fake.env(),
            }
        ),
        flush=True,
    )

    serve_until_signalled(fake)
    return 0


if __name__ == "__main__":
    sys.exit(main())
