"""The fake Kubernetes API's HTTP server: a client hanging up is not a server error."""

from __future__ import annotations

import socket
import struct
import time
import urllib.request
from urllib.parse import urlsplit

import pytest

from karpenter_conformance.fakekube import FakeKube


def test_a_client_hanging_up_prints_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeKube()
    try:
        address = urlsplit(fake.url)
        client = socket.create_connection((address.hostname, address.port), timeout=5)
        client.sendall(b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\n")  # headers not finished
        # Close with a reset (linger 0), as a client that gave up may.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        time.sleep(0.5)
        with urllib.request.urlopen(f"{fake.url}/api/v1/namespaces", timeout=5) as response:
            assert response.status == 200, "the fake still serves"
    finally:
        fake.stop()
    assert "Traceback" not in capsys.readouterr().err
