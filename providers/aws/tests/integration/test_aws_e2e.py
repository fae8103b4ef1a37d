"""The AWS provider end to end: the controller launches EC2 instances in moto, the registrar
plays their kubelets on KWOK, and pods run; interruption and AMI drift replace nodes.

The moto server runs in the test process (``aws`` fixture, seeded by tests/moto_account.py); the
controller subprocess reaches it through ``AWS_ENDPOINT_URL``. The registrar runs in a test
thread with its own ``AWSCloudProvider``, whose ``list()`` is all it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from karpenter_aws import moto_account
from karpenter_aws.moto_account import AWSEnv
from karpenter_conformance.cluster import crds
from karpenter_conformance.registrar import Registrar, RegistrarThread
from karpenter_conformance.waiting import wait_until
from karpenter_core import rbac
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.operator.kube import KubeClient
from tests.integration import controller_harness as harness

pytestmark = pytest.mark.integration

GROUP, VERSION, PLURAL = "karpenter.k8s.aws", "v1", "ec2nodeclasses"
CRD = "karpenter.k8s.aws_ec2nodeclasses.yaml"
FAST = {
    "DISRUPTION_POLL_PERIOD": "1s",
    "DISRUPTION_VALIDATION_DELAY": "1s",
    "NODECLASS_RESYNC_PERIOD": "2s",
}
CONDITIONS = ("Launched", "Registered", "Initialized", "Ready")


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def aws_cluster(kube_cluster: Any, controller_kubeconfig: Path) -> Path:
    """The EC2NodeClass CRD installed and the controller's identity given the AWS rules."""
    crd = resources.files("karpenter_aws").joinpath("crds", CRD)
    with resources.as_file(crd) as path:
        crds.apply(Path(kube_cluster.kubeconfig), [path])
    kube = KubeClient.from_config(str(kube_cluster.kubeconfig))
    try:
        rbac.apply(kube, rbac.manifests(harness.NAMESPACE, provider="aws"))
    finally:
        kube.close()
    return controller_kubeconfig


def provider_settings(aws: AWSEnv) -> dict[str, str]:
    """The AWS provider's option values for the seeded account."""
    return {
        "cluster-name": aws.cluster_name,
        "region": aws.region,
        "aws-endpoint-url": aws.endpoint_url,
        "interruption-queue": aws.queue_name,
        "isolated-vpc": "true",
        "nodeclass-resync-period": FAST["NODECLASS_RESYNC_PERIOD"],
    }


def controller_env(aws: AWSEnv) -> dict[str, str]:
    """Environment of ``karpenter controller --provider aws`` against the moto server."""
    return {
        **aws.env(),
        **FAST,
        "KARPENTER_TEST_PROVIDER": "aws",
        "CLUSTER_NAME": aws.cluster_name,
        "INTERRUPTION_QUEUE": aws.queue_name,
        "ISOLATED_VPC": "true",
    }


@pytest.fixture
def aws_controller(
    aws: AWSEnv,
    aws_cluster: Path,
    start_controller: Callable[..., harness.Controller],
) -> harness.Controller:
    """``karpenter controller --provider aws`` against the seeded moto account, ready."""
    controller = start_controller(env=controller_env(aws), name="aws-controller")
    controller.wait_ready(timeout=60)
    return controller


@pytest.fixture
def registrar(aws: AWSEnv, kube_client: client.ApiClient) -> Iterator[RegistrarThread]:
    """The registrar in a thread, listing instances through its own AWS provider."""
    from karpenter_aws.cloudprovider import AWSCloudProvider

    provider = AWSCloudProvider.from_context(
        ProviderContext(
            settings=provider_settings(aws),
            kube_client=kube_client,
            clients=aws.clients("ec2", "ssm", "sqs", "iam", "eks"),
        )
    )
    with Registrar(provider, kube_client, interval=0.3).start() as thread:
        yield thread


# -- objects -----------------------------------------------------------------------------


def nodeclass(name: str, aws: AWSEnv, ami_terms: list[dict[str, str]], **spec: Any) -> dict:
    """An EC2NodeClass discovering the seeded subnets and security group by their tag."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": aws.node_role,
            "amiSelectorTerms": ami_terms,
            "subnetSelectorTerms": [{"tags": {moto_account.DISCOVERY_TAG: aws.cluster_name}}],
            "securityGroupSelectorTerms": [
                {"tags": {moto_account.DISCOVERY_TAG: aws.cluster_name}}
            ],
            **spec,
        },
    }


def nodepool(
    name: str,
    capacity_types: list[str],
    instance_types: list[str] | None = None,
    budget: str | None = None,
) -> dict[str, Any]:
    """A NodePool of the EC2NodeClass ``name``; its nodes carry ``test-pool=<name>``."""
    requirements: list[dict[str, Any]] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    ]
    if instance_types:
        requirements.append(
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": instance_types}
        )
    else:
        requirements += [
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
            {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
        ]
    disruption: dict[str, Any] = {"consolidateAfter": "Never"}
    if budget is not None:
        disruption["budgets"] = [{"nodes": budget}]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"test-pool": name}},
                "spec": {
                    "requirements": requirements,
                    "nodeClassRef": {"group": GROUP, "kind": "EC2NodeClass", "name": name},
                },
            },
            "disruption": disruption,
        },
    }


def create(api: client.ApiClient, nodeclass_body: dict, nodepool_body: dict) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, nodeclass_body)
    harness.create_nodepool(api, nodepool_body)


def cleanup(api: client.ApiClient, pool: str, deployment: str, namespace: str) -> None:
    """Delete the workload, the NodePool's NodeClaims and Nodes, then the EC2NodeClass (its
    finalizer needs the controller running)."""
    try:
        client.AppsV1Api(api).delete_namespaced_deployment(deployment, namespace)
    except client.ApiException as error:
        if error.status != 404:
            raise
    harness.cleanup_pool(api, pool, timeout=90)
    custom = client.CustomObjectsApi(api)
    try:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, pool)
    except client.ApiException as error:
        if error.status != 404:
            raise

    def gone() -> bool:
        try:
            custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, pool)
        except client.ApiException as error:
            if error.status == 404:
                return True
            raise
        return False

    wait_until(gone, f"EC2NodeClass {pool} deleted", timeout=30)


def nodeclass_ready(api: client.ApiClient, name: str) -> dict | None:
    found = client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    conditions = (found.get("status") or {}).get("conditions") or ()
    return (
        found if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None
    )


def all_ready(api: client.ApiClient, pool: str, count: int) -> list[dict] | None:
    """The NodePool's NodeClaims once there are ``count``, each with every lifecycle condition."""
    found = harness.nodeclaims(api, pool)
    if len(found) != count:
        return None
    for claim in found:
        if claim["metadata"].get("deletionTimestamp"):
            return None
        status = {
            c["type"]: c["status"] for c in (claim.get("status") or {}).get("conditions") or ()
        }
        if any(status.get(kind) != "True" for kind in CONDITIONS):
            return None
    return found


def instance_id(claim: Mapping[str, Any]) -> str:
    return str(claim["status"]["providerID"]).rsplit("/", 1)[-1]


def live_instances(aws: AWSEnv) -> dict[str, dict[str, Any]]:
    """Instances not terminated, by id."""
    states = ("pending", "running", "stopping", "stopped", "shutting-down")
    return {i["InstanceId"]: i for i in moto_account.instances(aws, states)}


def drift_decisions(controller: harness.Controller) -> float:
    """How many drift replacements the controller decided."""
    return harness.metric_value(
        controller.metrics(), "karpenter_voluntary_disruption_decisions_total", reason="drifted"
    )


def test_pending_pods_run_on_launched_instances_that_are_terminated_after(
    aws: AWSEnv,
    kube_client: client.ApiClient,
    namespace: str,
    aws_controller: harness.Controller,
    registrar: RegistrarThread,
) -> None:
    pool = harness.unique("aws")
    create(
        kube_client,
        nodeclass(pool, aws, [{"alias": "al2023@latest"}]),
        nodepool(pool, ["on-demand"]),
    )
    try:
        resolved = wait_until(
            lambda: nodeclass_ready(kube_client, pool), f"EC2NodeClass {pool} Ready", timeout=30
        )
        status = resolved["status"]
        assert {s["id"] for s in status["subnets"]} == set(aws.subnet_ids.values())
        assert [g["id"] for g in status["securityGroups"]] == [aws.security_group_id]
        assert aws.images["al2023/x86_64/standard"] in {a["id"] for a in status["amis"]}
        assert status["instanceProfile"]

        harness.apply_deployment(kube_client, namespace, harness.deployment("web", pool, 4, "2"))
        harness.wait_running(
            aws_controller, kube_client, namespace, pool, 4, "4 pods Running", timeout=90
        )
        claims = wait_until(
            lambda: all_ready(kube_client, pool, len(harness.nodeclaims(kube_client, pool))),
            "NodeClaims Launched, Registered, Initialized, Ready",
            timeout=30,
        )
        live = live_instances(aws)
        for claim in claims:
            ec2_instance = live[instance_id(claim)]
            tags = {t["Key"]: t["Value"] for t in ec2_instance.get("Tags") or ()}
            assert tags["karpenter.sh/nodepool"] == pool
            assert tags["karpenter.sh/nodeclaim"] == claim["metadata"]["name"]
            assert tags[f"kubernetes.io/cluster/{aws.cluster_name}"] == "owned"
            assert (
                ec2_instance["InstanceType"]
                == claim["metadata"]["labels"]["node.kubernetes.io/instance-type"]
            )
            assert ec2_instance["SubnetId"] in aws.subnet_ids.values()
            assert claim["metadata"]["labels"]["karpenter.sh/capacity-type"] == "on-demand"
        nodes = client.CoreV1Api(kube_client).list_node(
            label_selector=f"karpenter.sh/nodepool={pool}"
        )
        assert {n.spec.provider_id for n in nodes.items} == {
            c["status"]["providerID"] for c in claims
        }
        launched = {instance_id(c) for c in claims}
        assert drift_decisions(aws_controller) == 0
    finally:
        cleanup(kube_client, pool, "web", namespace)
    wait_until(
        lambda: not (launched & set(live_instances(aws))),
        "the launched instances terminated",
        timeout=30,
    )


def test_spot_interruption_replaces_the_node_away_from_the_interrupted_offering(
    aws: AWSEnv,
    kube_client: client.ApiClient,
    namespace: str,
    aws_controller: harness.Controller,
    registrar: RegistrarThread,
) -> None:
    pool = harness.unique("spot")
    create(
        kube_client,
        nodeclass(pool, aws, [{"alias": "al2023@latest"}]),
        nodepool(pool, ["spot"], instance_types=["m5.large", "m5.xlarge", "c5.xlarge"]),
    )
    try:
        wait_until(lambda: nodeclass_ready(kube_client, pool), f"EC2NodeClass {pool} Ready")
        harness.apply_deployment(kube_client, namespace, harness.deployment("job", pool, 1, "1"))
        harness.wait_running(
            aws_controller, kube_client, namespace, pool, 1, "1 pod Running", timeout=90
        )
        [old] = wait_until(lambda: all_ready(kube_client, pool, 1), "the NodeClaim ready")
        old_id = instance_id(old)
        old_labels = old["metadata"]["labels"]
        offering = (
            old_labels["node.kubernetes.io/instance-type"],
            old_labels["topology.kubernetes.io/zone"],
        )
        assert old_labels["karpenter.sh/capacity-type"] == "spot"
        assert live_instances(aws)[old_id].get("InstanceLifecycle") == "spot"

        sqs = aws.client("sqs")
        sqs.send_message(
            QueueUrl=aws.queue_url, MessageBody=moto_account.spot_interruption_body(old_id)
        )

        def replaced() -> dict | None:
            aws_controller.alive()
            claims = all_ready(kube_client, pool, 1)
            if not claims or claims[0]["metadata"]["name"] == old["metadata"]["name"]:
                return None
            if len(harness.running_on_pool(kube_client, namespace, pool)) != 1:
                return None
            return claims[0]

        new = wait_until(replaced, "the interrupted node replaced", timeout=90)
        labels = new["metadata"]["labels"]
        assert (
            labels["node.kubernetes.io/instance-type"],
            labels["topology.kubernetes.io/zone"],
        ) != offering
        assert labels["karpenter.sh/capacity-type"] == "spot"
        wait_until(
            lambda: old_id not in live_instances(aws), f"instance {old_id} terminated", timeout=30
        )
        attributes = sqs.get_queue_attributes(
            QueueUrl=aws.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        assert attributes == {
            "ApproximateNumberOfMessages": "0",
            "ApproximateNumberOfMessagesNotVisible": "0",
        }
        assert any(
            e.involved_object.name == old["metadata"]["name"]
            for e in harness.events(kube_client, "default", "SpotInterrupted")
        )
        text = aws_controller.metrics()
        assert (
            harness.metric_value(
                text,
                "karpenter_interruption_received_messages_total",
                message_type="spot_interrupted",
            )
            == 1
        )
        for action in ("CordonAndDrain", "MarkUnavailable", "PublishEvent"):
            assert (
                harness.metric_value(
                    text, "karpenter_interruption_actions_performed_total", action_type=action
                )
                >= 1
            ), action
    finally:
        cleanup(kube_client, pool, "job", namespace)


def test_ami_selection_change_drifts_nodes_replaced_one_at_a_time(
    aws: AWSEnv,
    kube_client: client.ApiClient,
    namespace: str,
    aws_controller: harness.Controller,
    registrar: RegistrarThread,
) -> None:
    pool = harness.unique("drift")
    first = aws.images["al2023/x86_64/standard"]
    second = aws.register_image("amazon-eks-node-al2023-x86_64-standard-1.36-v20250701")
    create(
        kube_client,
        nodeclass(pool, aws, [{"id": first}], amiFamily="AL2023"),
        nodepool(pool, ["on-demand"], budget="1"),
    )

    def one_at_a_time() -> str | None:
        nodes = client.CoreV1Api(kube_client).list_node(
            label_selector=f"karpenter.sh/nodepool={pool}"
        )
        disrupted = [
            n.metadata.name
            for n in nodes.items
            if any(t.key == "karpenter.sh/disrupted" for t in n.spec.taints or ())
        ]
        if len(disrupted) > 1:
            return f"{len(disrupted)} nodes disrupted at once: {disrupted}"
        return None

    watch = harness.Watch(one_at_a_time)
    try:
        wait_until(lambda: nodeclass_ready(kube_client, pool), f"EC2NodeClass {pool} Ready")
        harness.apply_deployment(
            kube_client, namespace, harness.spread_deployment("spread", pool, 3)
        )
        harness.wait_running(
            aws_controller, kube_client, namespace, pool, 3, "3 pods on 3 nodes", timeout=90
        )
        claims = wait_until(lambda: all_ready(kube_client, pool, 3), "3 NodeClaims ready")
        old = {c["metadata"]["name"] for c in claims}
        assert {live_instances(aws)[instance_id(c)]["ImageId"] for c in claims} == {first}
        watch.start()
        client.CustomObjectsApi(kube_client).patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, pool, {"spec": {"amiSelectorTerms": [{"id": second}]}}
        )

        def replaced() -> list[dict] | None:
            aws_controller.alive()
            found = all_ready(kube_client, pool, 3)
            if not found or {c["metadata"]["name"] for c in found} & old:
                return None
            if len(harness.running_on_pool(kube_client, namespace, pool)) != 3:
                return None
            return found

        new = wait_until(replaced, "every node replaced on the new AMI", timeout=180)
        watch.stop()
        assert watch.samples > 10
        assert not watch.errors, watch.errors[:5]
        live = live_instances(aws)
        assert {live[instance_id(c)]["ImageId"] for c in new} == {second}
        assert drift_decisions(aws_controller) == 3
    finally:
        watch.stop()
        cleanup(kube_client, pool, "spread", namespace)
