"""Provider option names: ``--<provider>-<name>`` and ``KARPENTER_<PROVIDER>_<NAME>``, today's
unprefixed names as aliases when one provider runs, and refusal when several make one ambiguous."""

from __future__ import annotations

from typing import Any

import pytest

from karpenter_core.cli.providers import as_json
from karpenter_core.cloudprovider.plugin import OptionConflict, option_key, provider_settings
from karpenter_core.cloudprovider.registry import Registry
from karpenter_core.sdk.record import (
    API_VERSION,
    ProviderOption,
    ProviderRecord,
    option_env,
    option_flag,
)


def _record(name: str, *options: ProviderOption) -> ProviderRecord:
    return ProviderRecord(
        name=name, factory=lambda context: None, options=options, api_version=API_VERSION
    )  # type: ignore[arg-type,return-value]


AWS = _record(
    "aws",
    ProviderOption("region", "h", env="AWS_REGION"),
    ProviderOption("cluster-name", "h", env="CLUSTER_NAME"),
    ProviderOption("aws-endpoint-url", "h", env="AWS_ENDPOINT_URL"),
    ProviderOption("reserved-enis", "h", default="0", env="RESERVED_ENIS"),
)
AZURE = _record(
    "azure",
    ProviderOption("region", "h", env="LOCATION"),
    ProviderOption("cluster-name", "h", env="CLUSTER_NAME"),
    ProviderOption("subscription-id", "h", env="ARM_SUBSCRIPTION_ID"),
)


@pytest.mark.parametrize(
    ("provider", "name", "flag", "env", "key"),
    [
        ("aws", "region", "--aws-region", "KARPENTER_AWS_REGION", "aws_region"),
        ("azure", "region", "--azure-region", "KARPENTER_AZURE_REGION", "azure_region"),
        ("gcp", "region", "--gcp-region", "KARPENTER_GCP_REGION", "gcp_region"),
        (
            "aws",
            "aws-endpoint-url",
            "--aws-endpoint-url",
            "KARPENTER_AWS_ENDPOINT_URL",
            "aws_endpoint_url",
        ),
        ("my-cloud", "zone", "--my-cloud-zone", "KARPENTER_MY_CLOUD_ZONE", "my_cloud_zone"),
    ],
)
def test_names_carry_the_providers_prefix(
    provider: str, name: str, flag: str, env: str, key: str
) -> None:
    assert option_flag(provider, name) == flag
    assert option_env(provider, name) == env
    assert option_key(provider, name) == key


def test_one_provider_reads_prefixed_names_first_then_todays_names() -> None:
    values: dict[str, Any] = {"aws_region": "eu-west-1", "region": "us-east-1", "cluster_name": "c"}
    environ = {
        "KARPENTER_AWS_RESERVED_ENIS": "2",
        "RESERVED_ENIS": "9",
        "AWS_ENDPOINT_URL": "http://moto",
    }

    settings = provider_settings([AWS], values, environ)["aws"]

    assert settings == {
        "region": "eu-west-1",  # the prefixed flag wins over --region
        "cluster-name": "c",  # --cluster-name, today's flag
        "aws-endpoint-url": "http://moto",  # AWS_ENDPOINT_URL, today's variable
        "reserved-enis": "2",  # the prefixed variable wins over today's
    }


def test_the_default_when_nothing_is_given() -> None:
    assert provider_settings([AWS], {}, {})["aws"] == {
        "region": None,
        "cluster-name": None,
        "aws-endpoint-url": None,
        "reserved-enis": "0",
    }


def test_several_providers_refuse_an_unprefixed_flag_they_share() -> None:
    with pytest.raises(OptionConflict) as raised:
        provider_settings([AWS, AZURE], {"region": "eu-west-1"}, {})

    assert str(raised.value) == (
        "--region is an option of 2 of the providers that run (aws, azure): use --aws-region "
        "or --azure-region"
    )


def test_several_providers_read_prefixed_names_and_unshared_aliases() -> None:
    values = {"aws_region": "eu-west-1", "azure_region": "westeurope", "subscription_id": "s"}
    environ = {"CLUSTER_NAME": "shared", "KARPENTER_AZURE_CLUSTER_NAME": "c", "LOCATION": "x"}

    settings = provider_settings([AWS, AZURE], values, environ)

    assert settings["aws"]["region"] == "eu-west-1"
    assert settings["aws"]["cluster-name"] is None  # CLUSTER_NAME: declared by both, not read
    assert settings["azure"] == {
        "region": "westeurope",
        "cluster-name": "c",
        "subscription-id": "s",  # --subscription-id: only azure declares it
    }


def test_karpenter_providers_lists_each_options_names() -> None:
    registry = Registry(
        records={"aws": AWS}, distributions={"aws": ("karpenter-aws", "0")}, failures=[]
    )

    (listed,) = as_json(registry)["providers"]

    assert listed["options"][0] == {
        "name": "region",
        "flag": "--aws-region",
        "env": "KARPENTER_AWS_REGION",
        "formerEnv": "AWS_REGION",
        "default": None,
        "help": "h",
    }
