"""Settings of the AWS provider: flags ``--aws-<name>`` or variables ``KARPENTER_AWS_<NAME>``
(with the AWS provider alone, also ``--<name>`` and the variable each option names)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from karpenter_core.sdk.record import ProviderOption
from karpenter_core.sdk.settings import (
    OptionError,
    OptionReader,
    boolean,
    duration,
    fraction,
    matching,
    text,
    url,
    whole_number,
)

__all__ = [
    "FALLBACK_REGION",
    "OPTIONS",
    "PROVIDER",
    "AWSSettings",
    "SettingsError",
    "configured_region",
]

OPTIONS = (
    ProviderOption(
        "cluster-name",
        "Name of the EKS cluster; tags every resource Karpenter creates (required to launch)",
        env="CLUSTER_NAME",
        simulate=False,
    ),
    ProviderOption(
        "region",
        "AWS region (default: the SDK's: AWS_REGION, AWS_DEFAULT_REGION or the AWS config "
        "profile; offline, us-east-1 when none is set)",
        env="AWS_REGION",
    ),
    ProviderOption(
        "cluster-endpoint",
        "Kubernetes API endpoint nodes join (default: eks:DescribeCluster)",
        env="CLUSTER_ENDPOINT",
        simulate=False,
    ),
    ProviderOption(
        "cluster-ca-bundle",
        "Base64 CA bundle of the API server (default: eks:DescribeCluster)",
        env="CLUSTER_CA_BUNDLE",
        simulate=False,
    ),
    ProviderOption(
        "service-cidr",
        "Service CIDR of the cluster, for the nodes' cluster DNS (default: eks:DescribeCluster)",
        env="SERVICE_CIDR",
        simulate=False,
    ),
    ProviderOption(
        "interruption-queue",
        "SQS queue (name or URL) receiving EC2 interruption events from EventBridge",
        env="INTERRUPTION_QUEUE",
        simulate=False,
    ),
    ProviderOption(
        "aws-endpoint-url",
        "One endpoint URL for every AWS service (testing against a local emulator)",
        env="AWS_ENDPOINT_URL",
        simulate=False,
    ),
    ProviderOption(
        "vm-memory-overhead-percent",
        "Fraction of an instance's memory the hypervisor keeps",
        default="0.075",
        env="VM_MEMORY_OVERHEAD_PERCENT",
    ),
    ProviderOption(
        "reserved-enis",
        "Network interfaces kept out of the ENI-limited max-pods count",
        default="0",
        env="RESERVED_ENIS",
    ),
    ProviderOption(
        "isolated-vpc",
        "No access to the public pricing API: use the packaged on-demand prices",
        default="false",
        env="ISOLATED_VPC",
        simulate=False,
    ),
    ProviderOption(
        "nodeclass-resync-period",
        "How often EC2NodeClasses are resolved again (subnets, security groups, AMIs)",
        default="1m",
        env="NODECLASS_RESYNC_PERIOD",
        simulate=False,
    ),
    ProviderOption(
        "fleet-batch-idle-duration",
        "Batching of concurrent creates (instance lookups, CreateFleet): send once no "
        "identical request came for this long",
        default="35ms",
        env="FLEET_BATCH_IDLE_DURATION",
        simulate=False,
    ),
    ProviderOption(
        "fleet-batch-max-duration",
        "Batching of concurrent creates (instance lookups, CreateFleet): send at the latest "
        "this long after the first request",
        default="1s",
        env="FLEET_BATCH_MAX_DURATION",
        simulate=False,
    ),
)


FALLBACK_REGION = "us-east-1"
"""The region an offline simulation uses when none is configured."""
PROVIDER = "aws"
"""The provider's name, which prefixes its options."""

_REGION = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
"""What botocore accepts as a region name, lower case."""
_EXAMPLE_URL = "http://localhost:5000"

SettingsError = OptionError
"""A provider setting has a value that cannot be used."""


@dataclass(frozen=True, slots=True)
class AWSSettings:
    """The AWS provider's settings, parsed."""

    cluster_name: str = ""
    region: str = ""
    cluster_endpoint: str = ""
    cluster_ca_bundle: str = ""
    service_cidr: str = ""
    interruption_queue: str = ""
    endpoint_url: str = ""
    vm_memory_overhead_percent: float = 0.075
    reserved_enis: int = 0
    isolated_vpc: bool = False
    nodeclass_resync: timedelta = timedelta(minutes=1)
    batch_idle: timedelta = timedelta(milliseconds=35)
    batch_max: timedelta = timedelta(seconds=1)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> AWSSettings:
        """Parse option values keyed by option name (missing or None: the default)."""
        get = OptionReader(PROVIDER, OPTIONS, values)
        return cls(
            cluster_name=get("cluster-name", text),
            region=get("region", matching(_REGION, "an AWS region name (e.g. us-east-1)")),
            cluster_endpoint=get("cluster-endpoint", text),
            cluster_ca_bundle=get("cluster-ca-bundle", text),
            service_cidr=get("service-cidr", text),
            interruption_queue=get("interruption-queue", text),
            endpoint_url=get("aws-endpoint-url", url("http", "https", example=_EXAMPLE_URL)),
            vm_memory_overhead_percent=get("vm-memory-overhead-percent", fraction),
            reserved_enis=get("reserved-enis", whole_number()),
            isolated_vpc=get("isolated-vpc", boolean),
            nodeclass_resync=get("nodeclass-resync-period", duration),
            batch_idle=get("fleet-batch-idle-duration", duration),
            batch_max=get("fleet-batch-max-duration", duration),
        )


def configured_region() -> str:
    """The region the AWS SDK is configured with (AWS_DEFAULT_REGION or the AWS config profile;
    AWS_REGION arrives as the ``region`` option), "" when none; no network call."""
    from botocore.exceptions import BotoCoreError
    from botocore.session import Session

    try:
        return str(Session().get_config_variable("region") or "")
    except BotoCoreError as error:  # e.g. AWS_PROFILE names no profile
        raise SettingsError(f"cannot read the AWS configuration: {error}") from None
