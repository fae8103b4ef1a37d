"""The operator: the provider, the cluster state, the controllers, leader election and probes.

Informers, probes and metrics run in every replica; controllers run only in the leader (or always
with ``DISABLE_LEADER_ELECTION``). On SIGTERM/SIGINT the controllers are asked to stop together and
given one grace period in all, then the Lease is released so another replica takes over at once.
Losing the Lease ends the process with status 1 at once (see ``leader``), so it is restarted, as
upstream's controllers are.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from karpenter_core.cloudprovider.plugin import ProviderContext, ProviderRecord
from karpenter_core.operator import metrics
from karpenter_core.operator.events import EventRecorder
from karpenter_core.operator.health import Probes
from karpenter_core.operator.kube import KubeClient
from karpenter_core.operator.leader import LeaderElector, exit_process
from karpenter_core.operator.settings import Settings
from karpenter_core.state.cluster import ClusterPod, ClusterState

__all__ = ["Controller", "Operator"]

log = logging.getLogger("karpenter.operator")
CONTROLLER_STOP_TIMEOUT = 30.0
"""Seconds the controllers get, all together, to stop on shutdown."""


class Controller(Protocol):
    """What the operator runs: a named loop that returns once ``stop`` is set."""

    name: str

    def run(self, stop: threading.Event) -> None:
        """Work until ``stop`` is set."""


ControllerFactory = Callable[["Operator"], Sequence[Controller]]


class Operator:
    """One Karpenter process.

    Controllers read ``settings``, ``kube`` (the ``KubeClient``), ``state`` (``ClusterState``),
    ``provider`` (the instrumented CloudProvider), ``events`` (``EventRecorder``), ``record``
    and ``provider_context``.
    """

    def __init__(
        self,
        settings: Settings,
        record: ProviderRecord,
        kube: KubeClient,
        *,
        controllers: ControllerFactory,
        provider_settings: Mapping[str, Any] | None = None,
        identity: str | None = None,
        watch_timeout: int = 300,
        controller_stop_timeout: float = CONTROLLER_STOP_TIMEOUT,
        terminate: Callable[[int], None] = exit_process,
    ) -> None:
        """``controllers(operator)`` builds the core's controllers (the CLI passes
        ``karpenter_core.controllers.build_controllers``; the operator sits below the controllers
        and does not import them). ``terminate(1)`` ends the process when the Lease is lost (if it returns, as a test's
        may, the controllers stop and ``run`` returns 1)."""
        self.settings = settings
        self.controller_stop_timeout = controller_stop_timeout
        self.record = record
        self.kube = kube
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.events = EventRecorder(kube.with_own_rate_limit())
        self.state = ClusterState(kube, record.node_classes, watch_timeout=watch_timeout)
        self.provider_context = ProviderContext(
            settings=dict(provider_settings or {}),
            kube_client=kube.api_client,
            logger=logging.getLogger(f"karpenter.provider.{record.name}"),
            events=self.events,
            node_classes=self.state.nodeclass,
        )
        self.provider = metrics.instrument(record.factory(self.provider_context))
        self.elector = (
            None
            if settings.disable_leader_election
            else LeaderElector(
                kube.with_own_rate_limit(), settings, self.identity, terminate=terminate
            )
        )
        self.probes: Probes | None = None
        self.stopping = threading.Event()
        """Set when the process should shut down (signal, ``shutdown()`` or a lost Lease)."""
        self._controller_factory = controllers
        self._controllers_stop = threading.Event()
        self._controller_threads: list[threading.Thread] = []
        self._lost_lease = False
        self._lock = threading.Lock()

    # -- probes ---------------------------------------------------------------------------

    def ready(self) -> bool:
        """Ready: every informer has synced and is still watching."""
        return self.state.synced() and self.state.running()

    def healthy(self) -> bool:
        """Alive: the informers run (before sync too) and we are not shutting down."""
        return self.state.running() and not self.stopping.is_set()

    def is_leader(self) -> bool:
        """Whether this replica runs the controllers now."""
        if self.elector is None:
            return bool(self._controller_threads)
        return self.elector.is_leader()

    # -- lifecycle ------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Shut down on SIGTERM and SIGINT (call from the main thread)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.shutdown())

    def shutdown(self) -> None:
        """Ask ``run`` to stop (safe from signal handlers and other threads)."""
        self.stopping.set()

    def run(self) -> int:
        """Run until ``shutdown()``; 0 after a clean stop, 1 if the Lease was lost."""
        self.probes = Probes(
            self.settings.metrics_port, self.settings.health_probe_port, self.ready, self.healthy
        ).start()
        metrics.CLUSTER_STATE_SYNCED.set_function(lambda: float(self.state.synced()))
        self.state.on_pod_running(_record_startup)
        metrics.CLUSTER_STATE_NODE_COUNT.set_function(lambda: len(self.state.nodes_informer.cache))
        self.state.start()
        log.info(
            "operator started",
            extra={
                "provider": self.record.name,
                "identity": self.identity,
                "metrics_port": self.probes.metrics_port,
                "health_port": self.probes.health_port,
            },
        )
        elector_thread = None
        if self.elector is None:
            self._start_controllers()
        else:
            elector_thread = threading.Thread(
                target=self.elector.run,
                args=(self._start_controllers, self._on_lease_lost),
                name="leader election",
                daemon=True,
            )
            elector_thread.start()
        self.stopping.wait()
        self._stop_controllers()
        if self.elector is not None and elector_thread is not None:
            self.elector.stop()
            elector_thread.join(self.settings.retry_period + 2 * self.settings.renew_deadline)
        self.events.close()
        self.state.stop()
        self.probes.stop()
        log.info("operator stopped", extra={"lost_lease": self._lost_lease})
        return 1 if self._lost_lease else 0

    def _start_controllers(self) -> None:
        with self._lock:
            if self.stopping.is_set():
                return
            controllers = list(self._controller_factory(self))
            if self.record.controllers is not None:
                controllers += self.record.controllers(self.provider_context, self.provider)
            for controller in controllers:
                thread = threading.Thread(
                    target=self._run_controller,
                    args=(controller,),
                    name=f"controller {controller.name}",
                    daemon=True,
                )
                self._controller_threads.append(thread)
                thread.start()
        log.info("controllers started", extra={"controllers": [c.name for c in controllers]})

    def _run_controller(self, controller: Controller) -> None:
        try:
            controller.run(self._controllers_stop)
        except Exception:
            log.exception("controller crashed", extra={"controller": controller.name})
            self.shutdown()

    def _on_lease_lost(self) -> None:
        if not self.stopping.is_set():
            self._lost_lease = True
            self.shutdown()

    def _stop_controllers(self) -> None:
        """Signal every controller to stop and wait ``controller_stop_timeout`` for them all."""
        with self._lock:
            self._controllers_stop.set()
            threads, self._controller_threads = self._controller_threads, []
        deadline = time.monotonic() + self.controller_stop_timeout
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        late = [thread.name for thread in threads if thread.is_alive()]
        if late:
            log.warning("controllers did not stop in time", extra={"threads": late})


def _record_startup(pod: ClusterPod) -> None:
    """pods_startup_duration_seconds: from the pod's creation until it is seen Running."""
    if pod.created:
        metrics.PODS_STARTUP_DURATION.observe(max(time.time() - pod.created, 0.0))
