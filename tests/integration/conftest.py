"""Fixtures for the controller's end-to-end tests: its identity and a running controller."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration import controller_harness as harness


@pytest.fixture(scope="session")
def controller_kubeconfig(kube_cluster: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig for the controller's ServiceAccount, bound to the shipped RBAC only."""
    out = tmp_path_factory.mktemp("karpenter-identity") / "kubeconfig"
    return harness.controller_kubeconfig(Path(kube_cluster.kubeconfig), out)  # type: ignore[attr-defined]


@pytest.fixture
def start_controller(
    controller_kubeconfig: Path, tmp_path: Path
) -> Iterator[Callable[..., harness.Controller]]:
    """Start controllers (``start_controller(env={...})``); all are stopped after the test."""
    started: list[harness.Controller] = []

    def start(**kwargs: object) -> harness.Controller:
        controller = harness.Controller(controller_kubeconfig, tmp_path, **kwargs)  # type: ignore[arg-type]
        started.append(controller)
        return controller

    yield start
    for controller in started:
        controller.stop()


@pytest.fixture
def pool(kube_client: client.ApiClient) -> Iterator[str]:
    """A name for the test's NodePool and KWOKNodeClass; both are cleaned up afterwards
    (the test must leave a controller running for the NodeClaims' finalizers)."""
    name = harness.unique("pool")
    harness.create_nodeclass(kube_client, name)
    yield name
    client.CustomObjectsApi(kube_client).delete_cluster_custom_object(
        harness.KWOK_GROUP, harness.KWOK_VERSION, harness.KWOK_PLURAL, name
    )
