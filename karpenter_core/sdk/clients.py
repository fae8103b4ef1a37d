"""A provider's cloud clients by name: those the caller hands in (``ProviderContext.clients``)
used as they are, the others built on first use, once per process."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from karpenter_core.sdk.settings import OptionError

__all__ = ["CloudClients"]


class CloudClients:
    """The clients of ``cloud`` (``"AWS"``) named in ``known``; ``build(name)`` makes one that
    was not handed in. A client is built once, under a lock that ``build`` may take again (to
    get the credential it needs, say). Handing in a name not ``known`` raises ``OptionError``."""

    __slots__ = ("_build", "_clients", "_lock")

    def __init__(
        self,
        cloud: str,
        known: Sequence[str],
        given: Mapping[str, Any] | None,
        build: Callable[[str], Any],
    ) -> None:
        unknown = set(given or ()) - set(known)
        if unknown:
            raise OptionError(
                f"unknown {cloud} clients {sorted(unknown)}; known: {', '.join(known)}"
            )
        self._clients: dict[str, Any] = dict(given or {})
        self._build = build
        self._lock = threading.RLock()

    def get(self, name: str) -> Any:
        """The client ``name``: the one handed in or built before, else built now."""
        with self._lock:
            client = self._clients.get(name)
            if client is None:
                client = self._clients[name] = self._build(name)
            return client
