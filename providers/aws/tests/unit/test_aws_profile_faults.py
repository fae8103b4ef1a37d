"""The AWS conformance profile's cloud faults, injected in its moto server: chosen EC2 actions
answer ``RequestLimitExceeded`` until ``clear_faults``, which keeps the account's resources."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from karpenter_aws import moto_account
from karpenter_aws.conformance import AWSProfile

pytestmark = pytest.mark.slow  # starts moto's server


@pytest.fixture(scope="module")
def profile() -> Iterator[AWSProfile]:
    started = AWSProfile()
    started.start()
    yield started
    started.stop()


def test_cloud_errors_throttle_the_chosen_actions_until_cleared(profile: AWSProfile) -> None:
    import boto3

    # one attempt, so each call shows the server's answer
    ec2 = boto3.client(
        "ec2",
        endpoint_url=profile.endpoint_url,
        region_name=moto_account.REGION,
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )
    vpcs_before = ec2.describe_vpcs()["Vpcs"]
    profile.cloud_errors(["DescribeVpcs", "TerminateInstances"])
    try:
        with pytest.raises(ClientError) as raised:
            ec2.describe_vpcs()
        error = raised.value.response
        assert error["Error"]["Code"] == "RequestLimitExceeded"
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 503
        # an action not chosen still answers
        assert ec2.describe_subnets()["Subnets"]
    finally:
        profile.clear_faults()
    assert ec2.describe_vpcs()["Vpcs"] == vpcs_before
