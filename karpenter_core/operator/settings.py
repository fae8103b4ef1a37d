"""Operator settings: upstream's names and defaults, from flags and environment variables.

Every timer the controllers use is a setting, so tests can shorten them. Durations are Go
durations (``"10s"``, ``"1m30s"``) and are held as float seconds. Flags override the environment.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from karpenter_core.operator.crashpoints import CRASH_AFTER_LAUNCH, parse_crash_point
from karpenter_core.sdk.settings import (
    boolean,
    choice,
    duration,
    port,
    positive_number,
    text,
    whole_number,
)

__all__ = [
    "FEATURE_GATES",
    "MIN_VALUES_POLICIES",
    "PREFERENCE_POLICIES",
    "Settings",
    "SettingsError",
    "parse_feature_gates",
]

FEATURE_GATES = MappingProxyType({"NodeRepair": False, "SpotToSpotConsolidation": False})
"""The feature gates this core knows, with their defaults."""
PREFERENCE_POLICIES = ("Respect", "Ignore")
MIN_VALUES_POLICIES = ("Strict", "BestEffort")
LOG_LEVELS = ("debug", "info", "warn", "error")
DEFAULT_NAMESPACE = "karpenter"
_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class SettingsError(ValueError):
    """A setting has a value that cannot be used; ``setting`` is its environment name."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


def _seconds(value: str) -> float:
    return duration(value).total_seconds()


_POSITIVE_INT = whole_number(1)


def parse_feature_gates(value: str) -> Mapping[str, bool]:
    """``NodeRepair=true,SpotToSpotConsolidation=false`` over the defaults."""
    gates = dict(FEATURE_GATES)
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, state = item.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"{item!r} is not Name=true|false")
        if name not in FEATURE_GATES:
            raise ValueError(f"unknown feature gate {name!r} (known: {', '.join(FEATURE_GATES)})")
        gates[name] = boolean(state)
    return MappingProxyType(gates)


def _setting(default: Any, env: str, parse: Callable[[str], Any], help: str) -> Any:
    metadata = {"env": env, "parse": parse, "help": help}
    if isinstance(default, Mapping):
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True)
class Settings:
    """The operator's configuration; durations in seconds."""

    cluster_name: str = _setting("", "CLUSTER_NAME", text, "name of the cluster (for providers)")
    batch_idle_duration: float = _setting(
        1.0, "BATCH_IDLE_DURATION", _seconds, "end a batch of pending pods after this idle time"
    )
    batch_max_duration: float = _setting(
        10.0, "BATCH_MAX_DURATION", _seconds, "end a batch of pending pods after this long"
    )
    launch_timeout: float = _setting(
        300.0, "LAUNCH_TIMEOUT", _seconds, "delete a NodeClaim not launched within this"
    )
    registration_timeout: float = _setting(
        900.0, "REGISTRATION_TIMEOUT", _seconds, "delete a NodeClaim whose node has not registered"
    )
    lease_duration: float = _setting(
        15.0, "LEADER_ELECTION_LEASE_DURATION", _seconds, "how long a leader's lease is valid"
    )
    renew_deadline: float = _setting(
        10.0, "LEADER_ELECTION_RENEW_DEADLINE", _seconds, "leadership is lost if not renewed"
    )
    retry_period: float = _setting(
        2.0, "LEADER_ELECTION_RETRY_PERIOD", _seconds, "how often the lease is tried or renewed"
    )
    disruption_poll_period: float = _setting(
        10.0, "DISRUPTION_POLL_PERIOD", _seconds, "how often disruption looks for candidates"
    )
    disruption_validation_delay: float = _setting(
        15.0, "DISRUPTION_VALIDATION_DELAY", _seconds, "wait before a consolidation is rechecked"
    )
    multi_node_consolidation_max: int = _setting(
        100,
        "MULTI_NODE_CONSOLIDATION_MAX",
        _POSITIVE_INT,
        "nodes one multi-node consolidation command removes at most",
    )
    nodeclaim_requeue: float = _setting(
        5.0, "NODECLAIM_REQUEUE", _seconds, "recheck period of an unfinished NodeClaim"
    )
    metrics_port: int = _setting(8080, "METRICS_PORT", port, "port of /metrics")
    health_probe_port: int = _setting(8081, "HEALTH_PROBE_PORT", port, "port of /healthz /readyz")
    kube_client_qps: float = _setting(
        200.0, "KUBE_CLIENT_QPS", positive_number, "apiserver requests per second"
    )
    kube_client_burst: int = _setting(
        300, "KUBE_CLIENT_BURST", _POSITIVE_INT, "apiserver request burst"
    )
    log_level: str = _setting(
        "info", "LOG_LEVEL", choice(LOG_LEVELS, fold=True), "debug, info, warn or error"
    )
    disable_leader_election: bool = _setting(
        False, "DISABLE_LEADER_ELECTION", boolean, "run the controllers without a Lease"
    )
    leader_election_namespace: str = _setting(
        "", "LEADER_ELECTION_NAMESPACE", text, "namespace of the Lease (default: the pod's)"
    )
    leader_election_name: str = _setting(
        "karpenter-leader-election", "LEADER_ELECTION_NAME", text, "name of the Lease"
    )
    feature_gates: Mapping[str, bool] = _setting(
        FEATURE_GATES, "FEATURE_GATES", parse_feature_gates, "e.g. NodeRepair=true"
    )
    preference_policy: str = _setting(
        "Respect", "PREFERENCE_POLICY", choice(PREFERENCE_POLICIES), "Respect or Ignore"
    )
    min_values_policy: str = _setting(
        "Strict", "MIN_VALUES_POLICY", choice(MIN_VALUES_POLICIES), "Strict or BestEffort"
    )
    test_crash_point: str = _setting(
        "",
        "KARPENTER_TEST_CRASH_POINT",
        parse_crash_point,
        f"tests only: {CRASH_AFTER_LAUNCH} kills the process after a launch, before its status",
    )

    def feature(self, name: str) -> bool:
        """Whether the feature gate ``name`` is on."""
        if name not in FEATURE_GATES:
            raise KeyError(f"unknown feature gate {name!r}")
        return self.feature_gates.get(name, False)

    def lease_namespace(self) -> str:
        """The Lease's namespace: the setting, else the pod's (SYSTEM_NAMESPACE or the
        service-account mount), else ``karpenter``."""
        if self.leader_election_namespace:
            return self.leader_election_namespace
        if namespace := os.environ.get("SYSTEM_NAMESPACE"):
            return namespace
        try:
            return _SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or DEFAULT_NAMESPACE
        except OSError:
            return DEFAULT_NAMESPACE

    def replace(self, **changes: Any) -> Settings:
        """A copy with some settings changed (values already parsed)."""
        return dataclasses.replace(self, **changes)

    @staticmethod
    def options() -> list[tuple[str, str, str]]:
        """(field name, environment variable, help) of every setting, for the CLI."""
        return [
            (f.name, f.metadata["env"], f.metadata["help"]) for f in dataclasses.fields(Settings)
        ]

    @classmethod
    def load(
        cls, flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
    ) -> Settings:
        """Read the environment (upstream's variable names), then flags, which win.

        ``flags`` are keyed by field name (``batch_max_duration``, or ``batch-max-duration``);
        a value of None means "not given". Raise ``SettingsError`` naming the bad setting.
        """
        env = os.environ if env is None else env
        given = {key.replace("-", "_"): value for key, value in (flags or {}).items()}
        unknown = set(given) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise SettingsError(", ".join(sorted(unknown)), "unknown setting")
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name, parse = f.metadata["env"], f.metadata["parse"]
            raw = given.get(f.name)
            if raw is None:
                raw = env.get(name)
            if raw is None:
                continue
            try:
                values[f.name] = parse(raw if isinstance(raw, str) else str(raw))
            except ValueError as error:
                raise SettingsError(name, str(error)) from None
        settings = cls(**values)
        if settings.renew_deadline >= settings.lease_duration:
            raise SettingsError(
                "LEADER_ELECTION_RENEW_DEADLINE", "must be shorter than the lease duration"
            )
        if settings.retry_period >= settings.renew_deadline:
            raise SettingsError(
                "LEADER_ELECTION_RETRY_PERIOD", "must be shorter than the renew deadline"
            )
        if settings.batch_idle_duration > settings.batch_max_duration:
            raise SettingsError("BATCH_IDLE_DURATION", "must not exceed BATCH_MAX_DURATION")
        return settings
