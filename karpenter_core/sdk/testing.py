"""Test support for providers and their fakes: a throw-away certificate authority, loopback
HTTP(S) servers for fake cloud and Kubernetes APIs, and NodeClasses on a real apiserver.

Only tests and fakes import this module (an import-linter contract keeps the runtime modules of
the core and the providers from it); it needs ``cryptography``, which the running controller
does not.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes.client.exceptions import ApiException

from karpenter_core.cloudprovider.plugin import NodeClassInfo

__all__ = [
    "LOOPBACK_IPS",
    "LOOPBACK_NAMES",
    "SHUTDOWN_POLL",
    "KeyPair",
    "LoopbackServer",
    "NodeClassStore",
    "TLSLoopbackServer",
    "TLSRequestHandler",
    "TestAuthority",
    "key_pem",
    "new_key",
    "serve_in_background",
    "subject",
]

LOOPBACK_NAMES = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1",)
SHUTDOWN_POLL = 0.05
"""Seconds between a server loop's checks for ``shutdown``: how long stopping a fake takes."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key on disk (PEM)."""

    cert: Path
    key: Path


def new_key() -> ec.EllipticCurvePrivateKey:
    """A fresh P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """``key`` as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def subject(common_name: str, organization: str | None = None) -> x509.Name:
    """A certificate subject: CN, and O when given (Kubernetes reads O as the group)."""
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


class TestAuthority:
    """A self-signed CA, written to ``directory/ca.crt`` and ``ca.key``, that issues leaf
    certificates into the same directory, each valid for ``validity`` from five minutes ago.
    ``path_length`` limits the CAs below it (None: no limit)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        directory: Path,
        common_name: str,
        validity: datetime.timedelta,
        *,
        path_length: int | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.validity = validity
        self.key = new_key()
        name = subject(common_name)
        usage = x509.KeyUsage(
            digital_signature=True,
            key_cert_sign=True,
            crl_sign=True,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
        )
        self.cert = (
            self._builder(name, name, self.key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
            .add_extension(usage, critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pair = self._write("ca", self.cert, self.key)

    def issue(
        self,
        stem: str,
        name: x509.Name,
        *,
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
    ) -> KeyPair:
        """Issue ``stem.crt`` and ``stem.key``: a serving certificate for those names and
        addresses when any is given, else a client certificate."""
        key = new_key()
        serving = bool(server_names or server_ips)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if serving else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            self._builder(name, self.cert.subject, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if serving:
            alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
            alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return self._write(stem, builder.sign(self.key, hashes.SHA256()), key)

    def _builder(
        self, name: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
    ) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + self.validity)
        )

    def _write(self, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(key_pem(key))
        pair.key.chmod(0o600)
        return pair


class LoopbackServer(ThreadingHTTPServer):
    """A threaded HTTP server whose listen backlog takes a burst of concurrent clients (the
    standard library's default of 5 resets connections beyond it)."""

    request_queue_size = 128
    daemon_threads = True
    quiet_errors: tuple[type[BaseException], ...] = (ConnectionError,)
    """Errors of a client that hung up (a watch closed mid-stream): no error of the server's."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log what went wrong serving a request, unless it is one of ``quiet_errors``."""
        if not isinstance(sys.exc_info()[1], self.quiet_errors):
            super().handle_error(request, client_address)


class TLSLoopbackServer(LoopbackServer):
    """A ``LoopbackServer`` speaking HTTPS with ``context``; the TLS handshake runs on the
    request's thread (see ``TLSRequestHandler``), so a slow client does not hold up the accept
    loop."""

    quiet_errors = (ssl.SSLError, ConnectionError, TimeoutError)

    def __init__(self, address: tuple[str, int], handler: type, context: ssl.SSLContext) -> None:
        self.context = context
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        """Accept a connection and wrap it in TLS, the handshake left to the handler."""
        raw, address = self.socket.accept()
        return self.context.wrap_socket(
            raw, server_side=True, do_handshake_on_connect=False
        ), address


class TLSRequestHandler(BaseHTTPRequestHandler):
    """The request handler of a ``TLSLoopbackServer``: shakes hands first, and ends the
    connection quietly when the client breaks it off."""

    def setup(self) -> None:
        """Complete the TLS handshake on this thread, then set up as usual."""
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError):
            self.request.close()
            raise
        super().setup()

    def handle(self) -> None:
        """Serve requests until the client hangs up or the TLS session breaks."""
        try:
            super().handle()
        except (ssl.SSLError, ConnectionError):
            self.close_connection = True


def serve_in_background(server: ThreadingHTTPServer, name: str) -> threading.Thread:
    """Start ``server`` on a daemon thread called ``name`` (``server.shutdown()`` stops it)."""
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": SHUTDOWN_POLL},
        name=name,
        daemon=True,
    )
    thread.start()
    return thread


def node_class_manifest(
    info: NodeClassInfo, spec: Mapping[str, Any], prefix: str
) -> dict[str, Any]:
    """A NodeClass of kind ``info`` with ``spec``, named ``<prefix>-<8 random hex digits>``."""
    return {
        "apiVersion": f"{info.group}/{info.version}",
        "kind": info.kind,
        "metadata": {"name": f"{prefix}-{uuid.uuid4().hex[:8]}"},
        "spec": spec,
    }


def pruned(value: Any) -> Any:
    """``value`` without empty maps and lists (a model's unset collections), at every depth."""
    if isinstance(value, dict):
        kept = {key: pruned(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in ({}, [])}
    if isinstance(value, list):
        return [pruned(item) for item in value]
    return value


class NodeClassStore:
    """NodeClasses of kind ``info`` on an apiserver, through a ``CustomObjectsApi``: dry-run
    creates, and real ones (``manifest(spec)`` each) that ``delete_created`` removes."""

    def __init__(
        self,
        api: Any,
        info: NodeClassInfo,
        manifest: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        self.api = api
        self.info = info
        self.manifest = manifest
        self.created: list[str] = []

    def dry_run(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The object the apiserver would store (validated and defaulted), not stored."""
        info = self.info
        stored: dict[str, Any] = self.api.create_cluster_custom_object(
            info.group, info.version, info.plural, self.manifest(spec), dry_run="All"
        )
        return stored

    def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Store a NodeClass of ``spec``; the object as stored."""
        info = self.info
        body = self.manifest(spec)
        self.api.create_cluster_custom_object(info.group, info.version, info.plural, body)
        self.created.append(body["metadata"]["name"])
        stored: dict[str, Any] = self.api.get_cluster_custom_object(
            info.group, info.version, info.plural, body["metadata"]["name"]
        )
        return stored

    def rejection(self, spec: dict[str, Any]) -> str:
        """The apiserver's message when it refuses ``spec`` as invalid (422)."""
        try:
            self.dry_run(spec)
        except ApiException as error:
            if error.status != 422:
                raise AssertionError(
                    f"expected 422 Invalid, got {error.status}: {error.body}"
                ) from error
            message: str = json.loads(error.body)["message"]
            return message
        raise AssertionError(f"the apiserver accepted {self.info.kind} spec {spec!r}")

    def delete_created(self) -> None:
        """Delete every NodeClass ``create`` stored."""
        info = self.info
        for name in self.created:
            self.api.delete_cluster_custom_object(info.group, info.version, info.plural, name)
        self.created.clear()
