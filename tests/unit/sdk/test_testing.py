"""The SDK's test support: the test CA and the loopback HTTP(S) servers."""

from __future__ import annotations

import datetime
import json
import ssl
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel

from karpenter_core.sdk.record import NodeClassInfo
from karpenter_core.sdk.testing import (
    LOOPBACK_IPS,
    LOOPBACK_NAMES,
    LoopbackServer,
    NodeClassStore,
    TestAuthority,
    TLSLoopbackServer,
    TLSRequestHandler,
    node_class_manifest,
    pruned,
    serve_in_background,
    subject,
)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_authority_issues_serving_and_client_certificates(tmp_path: Path) -> None:
    ca = TestAuthority(tmp_path / "pki", "test-ca", datetime.timedelta(days=1), path_length=0)
    assert ca.pair.cert == tmp_path / "pki" / "ca.crt"
    assert (ca.pair.key.stat().st_mode & 0o777) == 0o600
    root = _cert(ca.pair.cert)
    constraints = root.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    serving = ca.issue("server", subject("srv"), server_names=("localhost",), server_ips=("::1",))
    leaf = _cert(serving.cert)
    assert leaf.issuer == root.subject
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    client = _cert(ca.issue("admin", subject("admin", "system:masters")).cert)
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert "O=system:masters" in client.subject.rfc4514_string()


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _TLSHello(TLSRequestHandler, _Hello):
    pass


def test_a_loopback_server_serves_in_the_background() -> None:
    server = LoopbackServer(("127.0.0.1", 0), _Hello)
    thread = serve_in_background(server, "test server")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/") as response:
            assert response.read() == b"hello"
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()
    assert not thread.is_alive()


def test_a_tls_loopback_server_is_trusted_through_the_test_ca(tmp_path: Path) -> None:
    ca = TestAuthority(tmp_path, "test-ca", datetime.timedelta(days=1))
    pair = ca.issue("server", subject("srv"), server_names=LOOPBACK_NAMES, server_ips=LOOPBACK_IPS)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    server = TLSLoopbackServer(("127.0.0.1", 0), _TLSHello, context)
    thread = serve_in_background(server, "test tls server")
    url = f"https://127.0.0.1:{server.server_port}/"
    try:
        trusting = ssl.create_default_context(cafile=str(ca.pair.cert))
        with urllib.request.urlopen(url, context=trusting) as response:
            assert response.read() == b"hello"
        untrusting = ssl.create_default_context()
        try:
            urllib.request.urlopen(url, context=untrusting)
        except urllib.error.URLError as error:
            assert isinstance(error.reason, ssl.SSLCertVerificationError)
        else:
            raise AssertionError("a client without the test CA trusted the server")
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()


class _FakeCustomObjects:
    """The CustomObjectsApi calls a NodeClassStore makes, against a dict."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def create_cluster_custom_object(
        self, group: str, version: str, plural: str, body: dict[str, Any], dry_run: str = ""
    ) -> dict[str, Any]:
        assert (group, version, plural) == (INFO.group, INFO.version, INFO.plural)
        if body["spec"].get("bad"):
            error = ApiException(status=422, reason="Invalid")
            error.body = json.dumps({"message": "spec.bad: Forbidden"})
            raise error
        if not dry_run:
            self.objects[body["metadata"]["name"]] = body
        return body

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str
    ) -> dict[str, Any]:
        return self.objects[name]

    def delete_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str
    ) -> None:
        del self.objects[name]


INFO = NodeClassInfo(BaseModel, "karpenter.example.com", "v1", "ExampleNodeClass", "examples")


def test_a_node_class_store_creates_refuses_and_cleans_up() -> None:
    api = _FakeCustomObjects()
    store = NodeClassStore(api, INFO, lambda spec: node_class_manifest(INFO, spec, "ex"))
    assert store.dry_run({"size": 1})["apiVersion"] == "karpenter.example.com/v1"
    assert api.objects == {}
    stored = store.create({"size": 2})
    assert stored["metadata"]["name"].startswith("ex-") and list(api.objects) == store.created
    assert store.rejection({"bad": True}) == "spec.bad: Forbidden"
    with pytest.raises(AssertionError, match="accepted ExampleNodeClass"):
        store.rejection({"size": 3})
    store.delete_created()
    assert api.objects == {} and store.created == []


def test_pruned_drops_empty_collections_at_every_depth() -> None:
    assert pruned({"a": {}, "b": [{"c": []}], "d": 0}) == {"b": [{}], "d": 0}
