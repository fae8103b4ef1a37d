"""A throw-away PKI for the local control plane, made with ``cryptography``."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1",)
# Names the in-cluster "kubernetes" Service answers to; 10.0.0.1 is the first address
# of the service range given to kube-apiserver.
APISERVER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")
APISERVER_IPS = ("10.0.0.1",)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key on disk."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Every credential the control plane needs."""

    ca: KeyPair
    apiserver: KeyPair
    scheduler_serving: KeyPair
    controller_manager_serving: KeyPair
    admin: KeyPair
    scheduler: KeyPair
    controller_manager: KeyPair
    kwok: KeyPair
    service_account_key: Path
    service_account_pub: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


class _Authority:
    """A self-signed CA that issues leaf certificates into a directory."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        subject = _name("karpenter-local-ca")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pair = self._write("ca", self.cert, self.key)

    def _write(self, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(_key_pem(key))
        pair.key.chmod(0o600)
        return pair

    def issue(
        self,
        stem: str,
        subject: x509.Name,
        *,
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
    ) -> KeyPair:
        """Issue a serving certificate (when names are given) or a client certificate."""
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        serving = bool(server_names or server_ips)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if serving else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
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


def generate(directory: Path) -> Pki:
    """Write a fresh CA, serving and client certificates and a service-account key."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Authority(directory)
    loopback = {"server_names": LOOPBACK_NAMES, "server_ips": LOOPBACK_IPS}
    sa_key = _new_key()
    sa_key_path = directory / "service-account.key"
    sa_pub_path = directory / "service-account.pub"
    sa_key_path.write_bytes(_key_pem(sa_key))
    sa_key_path.chmod(0o600)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        ca=ca.pair,
        apiserver=ca.issue(
            "apiserver",
            _name("kube-apiserver"),
            server_names=LOOPBACK_NAMES + APISERVER_NAMES,
            server_ips=LOOPBACK_IPS + APISERVER_IPS,
        ),
        scheduler_serving=ca.issue("scheduler-serving", _name("kube-scheduler"), **loopback),
        controller_manager_serving=ca.issue(
            "controller-manager-serving", _name("kube-controller-manager"), **loopback
        ),
        admin=ca.issue("admin", _name("admin", "system:masters")),
        scheduler=ca.issue("scheduler", _name("system:kube-scheduler")),
        controller_manager=ca.issue("controller-manager", _name("system:kube-controller-manager")),
        kwok=ca.issue("kwok", _name("kwok-controller", "system:masters")),
        service_account_key=sa_key_path,
        service_account_pub=sa_pub_path,
    )
