"""A throw-away PKI for the local control plane, issued by the SDK's test authority."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from karpenter_core.sdk.testing import (
    LOOPBACK_IPS,
    LOOPBACK_NAMES,
    KeyPair,
    TestAuthority,
    key_pem,
    new_key,
    subject,
)

__all__ = ["KeyPair", "Pki", "generate"]

VALIDITY = datetime.timedelta(days=365)
# Names the in-cluster "kubernetes" Service answers to; 10.0.0.1 is the first address
# of the service range given to kube-apiserver.
APISERVER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")
APISERVER_IPS = ("10.0.0.1",)


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


def generate(directory: Path) -> Pki:
    """Write a fresh CA, serving and client certificates and a service-account key."""
    ca = TestAuthority(directory, "karpenter-local-ca", VALIDITY)
    loopback = {"server_names": LOOPBACK_NAMES, "server_ips": LOOPBACK_IPS}
    sa_key = new_key()
    sa_key_path = directory / "service-account.key"
    sa_pub_path = directory / "service-account.pub"
    sa_key_path.write_bytes(key_pem(sa_key))
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
            subject("kube-apiserver"),
            server_names=LOOPBACK_NAMES + APISERVER_NAMES,
            server_ips=LOOPBACK_IPS + APISERVER_IPS,
        ),
        scheduler_serving=ca.issue("scheduler-serving", subject("kube-scheduler"), **loopback),
        controller_manager_serving=ca.issue(
            "controller-manager-serving", subject("kube-controller-manager"), **loopback
        ),
        admin=ca.issue("admin", subject("admin", "system:masters")),
        scheduler=ca.issue("scheduler", subject("system:kube-scheduler")),
        controller_manager=ca.issue(
            "controller-manager", subject("system:kube-controller-manager")
        ),
        kwok=ca.issue("kwok", subject("kwok-controller", "system:masters")),
        service_account_key=sa_key_path,
        service_account_pub=sa_pub_path,
    )
