"""The GCP provider's settings: parsing, defaults, errors naming the flag, and what a launch
needs."""

from __future__ import annotations

import pytest

from karpenter_gcp.settings import OPTIONS, GCPSettings, SettingsError


def test_defaults() -> None:
    settings = GCPSettings.from_mapping({})
    assert settings.node_pool == "default-pool"
    assert settings.interruption is True
    assert settings.api_endpoint == ""
    assert settings.cluster_location == ""


def test_upstreams_variables_are_read_when_the_provider_runs_alone() -> None:
    env = {option.name: option.env for option in OPTIONS}
    assert env["project-id"] == "PROJECT_ID"
    assert env["region"] == "CLUSTER_LOCATION"
    assert env["cluster-location"] == "NODE_LOCATION"
    assert env["cluster-name"] == "CLUSTER_NAME"


def test_values_are_parsed() -> None:
    settings = GCPSettings.from_mapping(
        {
            "project-id": "my-project-123",
            "region": " europe-west4 ",
            "cluster-name": "prod",
            "node-pool": "pool-1",
            "service-account": "nodes@my-project-123.iam.gserviceaccount.com",
            "interruption": "false",
            "api-endpoint": "http://127.0.0.1:8089",
        }
    )
    assert settings.region == "europe-west4"
    assert settings.cluster_location == "europe-west4"  # the region unless given
    assert settings.interruption is False
    assert settings.api_endpoint == "http://127.0.0.1:8089"
    assert settings.launch_problems() == []


def test_a_zonal_cluster_has_its_own_location() -> None:
    settings = GCPSettings.from_mapping(
        {"region": "us-central1", "cluster-location": "us-central1-c"}
    )
    assert settings.cluster_location == "us-central1-c"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("project-id", "My Project", "not a project ID"),
        ("region", "us-central1-a", "not a Google Cloud region"),
        ("region", "eastus", "not a Google Cloud region"),
        ("cluster-location", "central", "not a region or zone"),
        ("cluster-name", "Prod_Cluster", "not a GKE cluster name"),
        ("node-pool", "-pool", "not a GKE node pool name"),
        ("service-account", "nodes", "not a service account e-mail"),
        ("interruption", "maybe", "not a boolean"),
        ("api-endpoint", "127.0.0.1:8089", "not an http\\(s\\) URL"),
    ],
)
def test_a_bad_value_names_the_flag(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=f"^--gcp-{name}: .*{message}"):
        GCPSettings.from_mapping({name: value})


def test_launch_problems_name_flag_and_variable() -> None:
    problems = GCPSettings.from_mapping({"region": "us-central1"}).launch_problems()
    assert problems == [
        "--gcp-project-id (KARPENTER_GCP_PROJECT_ID or PROJECT_ID)",
        "--gcp-cluster-name (KARPENTER_GCP_CLUSTER_NAME or CLUSTER_NAME)",
    ]
