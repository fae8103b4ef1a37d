"""The boto3 clients the provider uses, built once per process (or handed in by the caller)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from karpenter_aws.pricing import pricing_api_region
from karpenter_aws.settings import AWSSettings, SettingsError
from karpenter_core.sdk.clients import CloudClients

__all__ = ["SERVICES", "AWSClients"]

SERVICES = ("ec2", "ssm", "sqs", "iam", "eks", "pricing")
"""Client names a caller may hand in through ``ProviderContext.clients``."""


class AWSClients:
    """One boto3 client per service, created on first use; given clients are used as they are."""

    def __init__(self, settings: AWSSettings, given: Mapping[str, Any] | None = None) -> None:
        self._settings = settings
        self._clients = CloudClients("AWS", SERVICES, given, self._build)
        self._session: Any = None
        self._region: str | None = None

    @property
    def region(self) -> str:
        """The region the clients talk to: the setting, else the SDK's configuration, else the
        instance metadata service of the node (as a pod without AWS_REGION finds it)."""
        if self._settings.region:
            return self._settings.region
        if self._region is None:
            from botocore.exceptions import BotoCoreError
            from botocore.utils import InstanceMetadataRegionFetcher

            try:
                region = self._boto_session().region_name
            except BotoCoreError as error:  # e.g. AWS_PROFILE names no profile
                raise SettingsError(f"cannot read the AWS configuration: {error}") from None
            if not region:
                endpoint = os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
                fetcher = InstanceMetadataRegionFetcher(
                    timeout=1,
                    num_attempts=1,
                    config={"ec2_metadata_service_endpoint": endpoint} if endpoint else None,
                )
                region = fetcher.retrieve_region()
            self._region = region or ""
        return self._region

    @property
    def ec2(self) -> Any:
        return self._clients.get("ec2")

    @property
    def ssm(self) -> Any:
        return self._clients.get("ssm")

    @property
    def sqs(self) -> Any:
        return self._clients.get("sqs")

    @property
    def iam(self) -> Any:
        return self._clients.get("iam")

    @property
    def eks(self) -> Any:
        return self._clients.get("eks")

    @property
    def pricing(self) -> Any:
        return self._clients.get("pricing")

    def _boto_session(self) -> Any:
        if self._session is None:
            import boto3

            self._session = boto3.session.Session()
        return self._session

    def _build(self, service: str) -> Any:
        region = self.region
        if not region:
            raise SettingsError(
                "no AWS region: set --region or AWS_REGION (or a region in the AWS config)"
            )
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        config = Config(
            retries={"mode": "standard", "max_attempts": 3},
            max_pool_connections=32,
            user_agent_extra="karpenter-python",
        )
        try:
            return self._boto_session().client(
                service,
                region_name=pricing_api_region(region) if service == "pricing" else region,
                endpoint_url=self._settings.endpoint_url or None,
                config=config,
            )
        except (ValueError, BotoCoreError) as error:  # a bad region, endpoint or profile
            raise SettingsError(f"cannot build the AWS {service} client: {error}") from None
