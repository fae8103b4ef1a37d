"""The ``kube_api`` fixture: one Kubernetes API, the in-process fake or the real apiserver.

Every test that takes ``kube_api`` runs twice: against ``FakeKube`` in the fast tier, and
against the local cluster's kube-apiserver in the integration tier, so the fake is held to the
real thing.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from karpenter_conformance.fakekube import FakeKube
from karpenter_core.operator.kube import KubeClient, NotFound


class KubeAPI:
    """A Kubernetes API for one test: its client, fresh namespaces, and history expiry."""

    def __init__(self, backend: str, client: KubeClient, fake: FakeKube | None, cluster: Any):
        self.backend = backend
        self.client = client
        self.fake = fake
        self._cluster = cluster
        self._namespaces: list[str] = []

    def namespace(self) -> str:
        """A new namespace, deleted after the test."""
        created = self.client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "kubeapi-"}},
        )
        name = str(created["metadata"]["name"])
        self._namespaces.append(name)
        return name

    def expire_history(self) -> None:
        """Make every resourceVersion handed out so far too old to watch from (410 Gone)."""
        if self.fake is not None:
            self.fake.compact()
        else:
            self._cluster.restart_apiserver()  # a fresh watch cache, without the old history
            self._cluster.compact_etcd()

    def close(self) -> None:
        """Delete the test's namespaces and close the client."""
        for name in self._namespaces:
            with contextlib.suppress(NotFound):
                self.client.delete(f"/api/v1/namespaces/{name}")
        self.client.close()


def unique(prefix: str) -> str:
    """A name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.integration)])
def kube_api(request: pytest.FixtureRequest) -> Iterator[KubeAPI]:
    """The fake API (fast tier) or the local cluster's apiserver (integration tier)."""
    fake: FakeKube | None = None
    cluster: Any = None
    if request.param == "fake":
        fake = FakeKube()
        client = KubeClient(fake.api_client())
    else:
        cluster = request.getfixturevalue("kube_cluster")
        client = KubeClient.from_config(str(cluster.kubeconfig))
    api = KubeAPI(request.param, client, fake, cluster)
    try:
        yield api
    finally:
        api.close()
        if fake is not None:
            fake.stop()
