"""The SDK's cloud clients by name: handed in, or built once on first use."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from karpenter_core.sdk.clients import CloudClients
from karpenter_core.sdk.settings import OptionError


def test_a_handed_in_client_is_used_and_the_others_built_once() -> None:
    built: list[str] = []

    def build(name: str) -> Any:
        built.append(name)
        return f"{name}-client"

    given = object()
    clients = CloudClients("Acme", ("compute", "network"), {"compute": given}, build)
    assert clients.get("compute") is given
    assert clients.get("network") == "network-client"
    assert clients.get("network") == "network-client"
    assert built == ["network"]


def test_a_build_may_get_another_client() -> None:
    def build(name: str) -> Any:
        return ("client of", clients.get("credential")) if name == "compute" else "token"

    clients = CloudClients("Acme", ("credential", "compute"), None, build)
    assert clients.get("compute") == ("client of", "token")


def test_concurrent_first_uses_build_one_client() -> None:
    built: list[str] = []
    start = threading.Barrier(4)

    def build(name: str) -> Any:
        built.append(name)
        return object()

    clients = CloudClients("Acme", ("compute",), None, build)
    got: list[Any] = []

    def use() -> None:
        start.wait()
        got.append(clients.get("compute"))

    threads = [threading.Thread(target=use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == ["compute"] and len({id(client) for client in got}) == 1


def test_an_unknown_client_handed_in_is_refused_by_name() -> None:
    with pytest.raises(OptionError, match=r"unknown Acme clients \['s3'\]; known: compute"):
        CloudClients("Acme", ("compute",), {"s3": object()}, lambda name: None)
