"""Settings of the AWS provider: CLI flags ``--<name>`` or environment variables."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from karpenter_core.apis.duration import DurationError, parse_duration
from karpenter_core.sdk.record import ProviderOption
from karpenter_core.sdk.types import CloudProviderError

__all__ = ["FALLBACK_REGION", "OPTIONS", "AWSSettings", "SettingsError", "configured_region"]

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

_REGION = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
"""What botocore accepts as a region name, lower case."""


class SettingsError(CloudProviderError):
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
        defaults = {option.name: option.default for option in OPTIONS}

        def get(name: str, parse: Callable[[str], Any]) -> Any:
            raw = values.get(name)
            if raw is None:
                raw = defaults[name]
            if raw is None:
                return ""
            try:
                return parse(str(raw))
            except (ValueError, DurationError) as error:
                raise SettingsError(f"--{name}: {error}") from None

        return cls(
            cluster_name=get("cluster-name", str.strip),
            region=get("region", _region),
            cluster_endpoint=get("cluster-endpoint", str.strip),
            cluster_ca_bundle=get("cluster-ca-bundle", str.strip),
            service_cidr=get("service-cidr", str.strip),
            interruption_queue=get("interruption-queue", str.strip),
            endpoint_url=get("aws-endpoint-url", _endpoint_url),
            vm_memory_overhead_percent=get("vm-memory-overhead-percent", _fraction),
            reserved_enis=get("reserved-enis", _non_negative_int),
            isolated_vpc=get("isolated-vpc", _bool),
            nodeclass_resync=get("nodeclass-resync-period", _duration),
            batch_idle=get("fleet-batch-idle-duration", _duration),
            batch_max=get("fleet-batch-max-duration", _duration),
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


def _region(text: str) -> str:
    region = text.strip()
    if region and _REGION.fullmatch(region) is None:
        raise ValueError(f"{text!r} is not an AWS region name (e.g. us-east-1)")
    return region


def _endpoint_url(text: str) -> str:
    url = text.strip()
    if url and not _is_http_url(url):
        raise ValueError(f"{text!r} is not an http(s) URL (e.g. http://localhost:5000)")
    return url


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and (parts.port is None or parts.port > 0)
        )
    except ValueError:  # a malformed IPv6 host or port
        return False


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1:
        raise ValueError(f"{text!r} is not a fraction between 0 and 1 (e.g. 0.075)")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise ValueError(f"{value} is negative")
    return value


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def _duration(text: str) -> timedelta:
    value = parse_duration(text)
    if value < timedelta(0):
        raise ValueError(f"{text!r} is negative")
    return value
