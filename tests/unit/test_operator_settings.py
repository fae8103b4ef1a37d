"""Operator settings: upstream defaults, environment names, flags over environment, errors."""

import pytest

from karpenter_core.operator.settings import Settings, SettingsError


def test_defaults_are_upstreams() -> None:
    settings = Settings.load({}, {})
    assert settings.batch_idle_duration == 1.0
    assert settings.batch_max_duration == 10.0
    assert settings.launch_timeout == 300.0
    assert settings.registration_timeout == 900.0
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (15, 10, 2)
    assert (settings.metrics_port, settings.health_probe_port) == (8080, 8081)
    assert (settings.kube_client_qps, settings.kube_client_burst) == (200, 300)
    assert settings.feature_gates == {"NodeRepair": False, "SpotToSpotConsolidation": False}
    assert settings.preference_policy == "Respect"
    assert settings.min_values_policy == "Strict"
    assert settings.leader_election_name == "karpenter-leader-election"
    assert settings.disable_leader_election is False


def test_environment_uses_upstream_names() -> None:
    settings = Settings.load(
        {},
        {
            "BATCH_MAX_DURATION": "1m30s",
            "BATCH_IDLE_DURATION": "250ms",
            "FEATURE_GATES": "NodeRepair=true, SpotToSpotConsolidation=false",
            "LOG_LEVEL": "DEBUG",
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": "9000",
            "KUBE_CLIENT_QPS": "50.5",
            "KUBE_CLIENT_BURST": "80",
            "PREFERENCE_POLICY": "Ignore",
            "MIN_VALUES_POLICY": "BestEffort",
        },
    )
    assert settings.batch_max_duration == 90.0
    assert settings.batch_idle_duration == 0.25
    assert settings.feature("NodeRepair") and not settings.feature("SpotToSpotConsolidation")
    assert settings.log_level == "debug"
    assert settings.disable_leader_election is True
    assert settings.metrics_port == 9000
    assert (settings.kube_client_qps, settings.kube_client_burst) == (50.5, 80)
    assert (settings.preference_policy, settings.min_values_policy) == ("Ignore", "BestEffort")


def test_flags_override_environment_and_none_means_unset() -> None:
    settings = Settings.load(
        {"batch-max-duration": "3s", "batch_idle_duration": None, "disable_leader_election": False},
        {"BATCH_MAX_DURATION": "20s", "BATCH_IDLE_DURATION": "2s"},
    )
    assert settings.batch_max_duration == 3.0
    assert settings.batch_idle_duration == 2.0
    assert settings.disable_leader_election is False


@pytest.mark.parametrize(
    ("env", "setting", "message"),
    [
        ({"BATCH_MAX_DURATION": "10"}, "BATCH_MAX_DURATION", "has no unit"),
        ({"BATCH_IDLE_DURATION": "-1s"}, "BATCH_IDLE_DURATION", "negative"),
        ({"FEATURE_GATES": "Bogus=true"}, "FEATURE_GATES", "unknown feature gate 'Bogus'"),
        ({"FEATURE_GATES": "NodeRepair"}, "FEATURE_GATES", "Name=true|false"),
        ({"FEATURE_GATES": "NodeRepair=maybe"}, "FEATURE_GATES", "not a boolean"),
        ({"METRICS_PORT": "70000"}, "METRICS_PORT", "not a port"),
        ({"KUBE_CLIENT_QPS": "0"}, "KUBE_CLIENT_QPS", "not positive"),
        ({"KUBE_CLIENT_BURST": "x"}, "KUBE_CLIENT_BURST", "'x' is not a whole number"),
        ({"PREFERENCE_POLICY": "respect"}, "PREFERENCE_POLICY", "'Respect', 'Ignore'"),
        ({"LOG_LEVEL": "loud"}, "LOG_LEVEL", "not one of"),
        (
            {"LEADER_ELECTION_RENEW_DEADLINE": "20s"},
            "LEADER_ELECTION_RENEW_DEADLINE",
            "shorter than the lease duration",
        ),
        (
            {"LEADER_ELECTION_RETRY_PERIOD": "10s"},
            "LEADER_ELECTION_RETRY_PERIOD",
            "shorter than the renew deadline",
        ),
        ({"BATCH_IDLE_DURATION": "11s"}, "BATCH_IDLE_DURATION", "BATCH_MAX_DURATION"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], setting: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.load({}, env)
    assert caught.value.setting == setting
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{setting}: ")


def test_unknown_flag_is_refused() -> None:
    with pytest.raises(SettingsError, match="unknown setting"):
        Settings.load({"batch_maximum": "1s"}, {})


def test_lease_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SYSTEM_NAMESPACE", raising=False)
    assert Settings().lease_namespace() == "karpenter"
    monkeypatch.setenv("SYSTEM_NAMESPACE", "kube-system")
    assert Settings().lease_namespace() == "kube-system"
    assert Settings(leader_election_namespace="ops").lease_namespace() == "ops"
