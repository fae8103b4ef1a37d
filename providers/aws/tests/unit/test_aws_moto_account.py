"""The moto-backed AWS fixture: what it seeds is readable through boto3 over HTTP."""

from __future__ import annotations

import json

import boto3
import pytest

from karpenter_aws import moto_account
from karpenter_aws.moto_account import AWSEnv


def test_subnets_and_security_group_are_found_by_discovery_tag(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    tag = [{"Name": f"tag:{moto_account.DISCOVERY_TAG}", "Values": [aws.cluster_name]}]
    subnets = ec2.describe_subnets(Filters=tag)["Subnets"]
    assert {s["AvailabilityZone"]: s["SubnetId"] for s in subnets} == aws.subnet_ids
    assert set(aws.subnet_ids) == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert {s["VpcId"] for s in subnets} == {aws.vpc_id}
    groups = ec2.describe_security_groups(Filters=tag)["SecurityGroups"]
    assert [(g["GroupId"], g["GroupName"]) for g in groups] == [
        (aws.security_group_id, aws.security_group_name)
    ]


@pytest.mark.parametrize("image", moto_account.IMAGES, ids=lambda image: image.key)
def test_ssm_parameters_name_registered_images(aws: AWSEnv, image: moto_account.Image) -> None:
    parameter = aws.client("ssm").get_parameter(Name=image.ssm_parameter)["Parameter"]
    assert parameter["Value"] == aws.images[image.key]
    [described] = aws.client("ec2").describe_images(ImageIds=[parameter["Value"]])["Images"]
    assert (described["Name"], described["Architecture"], described["State"]) == (
        image.name,
        image.architecture,
        "available",
    )
    assert described["ImageOwnerAlias"] == "amazon"


def test_alias_parameter_paths_follow_upstream_layout(aws: AWSEnv) -> None:
    ssm = aws.client("ssm")
    al2023 = (
        "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/arm64/nvidia/recommended/image_id"
    )
    bottlerocket = "/aws/service/bottlerocket/aws-k8s-1.36-nvidia/x86_64/latest/image_id"
    assert ssm.get_parameter(Name=al2023)["Parameter"]["Value"] == aws.images["al2023/arm64/nvidia"]
    assert (
        ssm.get_parameter(Name=bottlerocket)["Parameter"]["Value"]
        == aws.images["bottlerocket/x86_64/nvidia"]
    )


def test_service_parameter_update_adds_a_version(aws: AWSEnv) -> None:
    name = moto_account.IMAGES[0].ssm_parameter
    newer = aws.register_image("amazon-eks-node-al2023-x86_64-standard-1.36-v20250701")
    aws.put_service_parameter(name, newer)
    parameter = aws.client("ssm").get_parameter(Name=name)["Parameter"]
    assert (parameter["Value"], parameter["Version"]) == (newer, 2)


def test_registered_image_carries_tags_and_owner(aws: AWSEnv) -> None:
    image_id = aws.register_image(
        "custom-node", "arm64", tags={"team": "nodes"}, owner_id=aws.account_id
    )
    [image] = (
        aws.client("ec2")
        .describe_images(Owners=["self"], Filters=[{"Name": "tag:team", "Values": ["nodes"]}])
        .get("Images")
    )
    assert (image["ImageId"], image["Architecture"], image["OwnerId"]) == (
        image_id,
        "arm64",
        aws.account_id,
    )


def test_node_role_exists(aws: AWSEnv) -> None:
    role = aws.client("iam").get_role(RoleName=aws.node_role)["Role"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "ec2.amazonaws.com"
    }


def test_cluster_and_interruption_queue_exist(aws: AWSEnv) -> None:
    cluster = aws.client("eks").describe_cluster(name=aws.cluster_name)["cluster"]
    assert cluster["version"] == aws.kubernetes_version
    assert cluster["endpoint"] == aws.cluster_endpoint
    assert set(cluster["resourcesVpcConfig"]["subnetIds"]) == set(aws.subnet_ids.values())
    sqs = aws.client("sqs")
    assert sqs.get_queue_url(QueueName=aws.queue_name)["QueueUrl"] == aws.queue_url
    sqs.send_message(QueueUrl=aws.queue_url, MessageBody=moto_account.spot_interruption_body("i-1"))
    [message] = sqs.receive_message(QueueUrl=aws.queue_url)["Messages"]
    body = json.loads(message["Body"])
    assert (body["source"], body["detail-type"], body["detail"]["instance-id"]) == (
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
        "i-1",
    )


def test_default_boto3_clients_reach_only_the_server(aws: AWSEnv) -> None:
    queues = boto3.client("sqs").list_queues()["QueueUrls"]
    assert queues == [aws.queue_url]
    assert aws.env()["AWS_ENDPOINT_URL"] == aws.endpoint_url


def test_each_test_starts_from_a_reset_account(aws: AWSEnv) -> None:
    ec2 = aws.client("ec2")
    ec2.run_instances(ImageId=aws.images["al2023/x86_64/standard"], MinCount=1, MaxCount=1)
    assert len(list(moto_account.instances(aws))) == 1
    fresh = moto_account.seed(aws.endpoint_url)
    assert list(moto_account.instances(fresh)) == []
    assert fresh.subnet_ids != aws.subnet_ids


@pytest.mark.parametrize("capacity_type", ["spot", "on-demand"])
@pytest.mark.parametrize("placement", ["SecurityGroupIds", "NetworkInterfaces"])
def test_fleet_instances_get_their_launch_template_security_groups(
    aws: AWSEnv, capacity_type: str, placement: str
) -> None:
    ec2 = aws.client("ec2")
    data: dict = {"ImageId": next(iter(aws.images.values()))}
    if placement == "SecurityGroupIds":
        data["SecurityGroupIds"] = [aws.security_group_id]
    else:
        data["NetworkInterfaces"] = [{"DeviceIndex": 0, "Groups": [aws.security_group_id]}]
    ec2.create_launch_template(LaunchTemplateName="groups-test", LaunchTemplateData=data)
    fleet = ec2.create_fleet(
        Type="instant",
        TargetCapacitySpecification={
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": capacity_type,
        },
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": "groups-test",
                    "Version": "$Latest",
                },
                "Overrides": [{"InstanceType": "m5.large", "SubnetId": aws.subnet_list[0]}],
            }
        ],
    )
    (instance_id,) = fleet["Instances"][0]["InstanceIds"]
    described = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"]
    assert [g["GroupId"] for g in described[0]["SecurityGroups"]] == [aws.security_group_id]
