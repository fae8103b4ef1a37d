"""A throw-away certificate authority and a serving certificate for the fake ARM server."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from karpenter_core.sdk.testing import LOOPBACK_IPS, LOOPBACK_NAMES, TestAuthority, subject

VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True, slots=True)
class ServingFiles:
    """PEM files: the CA clients trust, and the server's certificate and key."""

    ca: Path
    cert: Path
    key: Path


def generate(directory: Path) -> ServingFiles:
    """Write a fresh CA (``ca.crt``) and a certificate for 127.0.0.1 and localhost signed by it
    (``server.crt``, ``server.key``) into ``directory``."""
    authority = TestAuthority(directory, "fake-arm-ca", VALIDITY, path_length=0)
    server = authority.issue(
        "server", subject("fake-arm"), server_names=LOOPBACK_NAMES, server_ips=LOOPBACK_IPS
    )
    return ServingFiles(authority.pair.cert, server.cert, server.key)
