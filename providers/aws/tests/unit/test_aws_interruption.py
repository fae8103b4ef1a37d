"""Interruption handling: message parsing, the actions chosen, and the queue loop against moto.

The apiserver side (NodeClaims deleted, Events published) is covered end to end by the
integration suite; here the controller runs against moto's SQS with an apiserver address that
refuses connections, which messages needing no NodeClaim never touch, or with the apiserver
calls replaced; Events go through a real ``EventRecorder`` whose client records them.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client as k8s

from karpenter_aws import moto_account
from karpenter_aws.clients import AWSClients
from karpenter_aws.interruption import (
    CORDON_AND_DRAIN,
    INSTANCE_STOPPED,
    INSTANCE_TERMINATED,
    NO_ACTION,
    NO_OP,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    InterruptionMessage,
    parse_message,
)
from karpenter_aws.interruption_controller import (
    DeleteNodeClaim,
    InterruptionController,
    MarkUnavailable,
    PublishEvent,
    decide,
)
from karpenter_aws.settings import AWSSettings
from karpenter_aws.unavailable import UnavailableOfferings
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.operator.events import EventRecorder
from karpenter_core.operator.metrics import REGISTRY

INSTANCE = "i-0a1b2c3d4e5f60718"
TIME = "2024-05-01T12:00:00Z"


def event(source: str, detail_type: str, detail: dict[str, Any], **extra: Any) -> str:
    """An EventBridge event as SQS delivers it."""
    return json.dumps(
        {
            "version": "0",
            "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": TIME,
            "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{INSTANCE}"],
            "detail": detail,
            **extra,
        }
    )


def spot_warning(instance_id: str = INSTANCE) -> str:
    return event(
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
        {"instance-id": instance_id, "instance-action": "terminate"},
    )


def rebalance(instance_id: str = INSTANCE) -> str:
    return event("aws.ec2", "EC2 Instance Rebalance Recommendation", {"instance-id": instance_id})


def state_change(state: str, instance_id: str = INSTANCE) -> str:
    return event(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        {"instance-id": instance_id, "state": state},
    )


def health(*instance_ids: str, service: str = "EC2", category: str = "scheduledChange") -> str:
    return event(
        "aws.health",
        "AWS Health Event",
        {
            "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/"
            "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_f9e0a1b2",
            "service": service,
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": category,
            "startTime": "Wed, 08 May 2024 12:00:00 GMT",
            "endTime": "Wed, 08 May 2024 14:00:00 GMT",
            "eventDescription": [
                {"language": "en_US", "latestDescription": "EC2 has detected degradation."}
            ],
            "affectedEntities": [{"entityValue": i} for i in instance_ids],
        },
    )


# -- parsing ---------------------------------------------------------------------------------


def test_spot_interruption_warning() -> None:
    message = parse_message(spot_warning())
    assert message == InterruptionMessage(
        SPOT_INTERRUPTED,
        (INSTANCE,),
        datetime(2024, 5, 1, 12, tzinfo=UTC),
        CORDON_AND_DRAIN,
        "1e5527d7-bb36-4607-3370-4164db56a40e",
    )


def test_rebalance_recommendation_asks_for_no_action() -> None:
    message = parse_message(rebalance())
    assert message is not None
    assert (message.kind, message.instance_ids, message.action) == (
        REBALANCE_RECOMMENDATION,
        (INSTANCE,),
        NO_ACTION,
    )


def test_scheduled_change_names_every_affected_instance() -> None:
    message = parse_message(health(INSTANCE, "i-0fedcba9876543210"))
    assert message is not None
    assert message.kind == SCHEDULED_CHANGE
    assert message.instance_ids == (INSTANCE, "i-0fedcba9876543210")
    assert message.action == CORDON_AND_DRAIN


@pytest.mark.parametrize(
    ("service", "category"),
    [("RDS", "scheduledChange"), ("EC2", "issue"), ("EC2", "accountNotification")],
)
def test_other_health_events_are_no_ops(service: str, category: str) -> None:
    message = parse_message(health(INSTANCE, service=service, category=category))
    assert message is not None
    assert (message.kind, message.instance_ids, message.action) == (NO_OP, (), NO_ACTION)


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        ("stopping", INSTANCE_STOPPED),
        ("stopped", INSTANCE_STOPPED),
        ("shutting-down", INSTANCE_TERMINATED),
        ("terminated", INSTANCE_TERMINATED),
        ("Terminated", INSTANCE_TERMINATED),
    ],
)
def test_state_changes_that_end_the_instance(state: str, kind: str) -> None:
    message = parse_message(state_change(state))
    assert message is not None
    assert (message.kind, message.instance_ids, message.action) == (
        kind,
        (INSTANCE,),
        CORDON_AND_DRAIN,
    )


@pytest.mark.parametrize("state", ["pending", "running", "rebooting"])
def test_other_state_changes_are_no_ops(state: str) -> None:
    message = parse_message(state_change(state))
    assert message is not None
    assert message.kind == NO_OP


def test_capacity_reservation_interruption_drains() -> None:
    body = event(
        "aws.ec2",
        "EC2 Capacity Reservation Instance Interruption Warning",
        {"instance-id": INSTANCE, "instance-action": "terminate"},
    )
    message = parse_message(body)
    assert message is not None
    assert (message.kind, message.action) == ("capacity_reservation_interrupted", CORDON_AND_DRAIN)


def test_unknown_events_are_no_ops() -> None:
    for body in (
        event("aws.ec2", "EC2 AMI State Change", {"ImageId": "ami-0123"}),
        event("aws.autoscaling", "EC2 Instance Launch Successful", {}),
        event("aws.ec2", "EC2 Spot Instance Interruption Warning", {}, version="1"),
    ):
        message = parse_message(body)
        assert message is not None
        assert (message.kind, message.instance_ids) == (NO_OP, ())


def test_time_is_optional() -> None:
    body = json.loads(spot_warning())
    body["time"] = "not a time"
    message = parse_message(json.dumps(body))
    assert message is not None
    assert message.start_time is None
    del body["time"]
    assert parse_message(json.dumps(body).encode()) is not None


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        b"",
        "not json",
        "[1, 2]",
        "null",
        '{"source": "aws.ec2"}',
        json.dumps({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning"}),
        event("aws.ec2", "EC2 Spot Instance Interruption Warning", {"instance-id": 7}),
        event("aws.ec2", "EC2 Spot Instance Interruption Warning", {"instance-id": ""}),
        event("aws.ec2", "EC2 Instance State-change Notification", {"instance-id": INSTANCE}),
        event(
            "aws.health",
            "AWS Health Event",
            {"service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": "i-1"},
        ),
        b"\xff\xfe",
    ],
)
def test_garbage_is_none(body: Any) -> None:
    assert parse_message(body) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(
    source=st.sampled_from(["aws.ec2", "aws.health", "x"]) | st.text(),
    detail_type=st.sampled_from(
        [
            "EC2 Spot Instance Interruption Warning",
            "EC2 Instance Rebalance Recommendation",
            "EC2 Instance State-change Notification",
            "AWS Health Event",
        ]
    ),
    detail=json_values,
    time_value=json_values,
)
def test_parsing_never_raises(source: str, detail_type: str, detail: Any, time_value: Any) -> None:
    body = json.dumps(
        {
            "version": "0",
            "source": source,
            "detail-type": detail_type,
            "detail": detail,
            "time": time_value,
        }
    )
    message = parse_message(body)
    assert message is None or all(isinstance(i, str) and i for i in message.instance_ids)


@given(st.binary() | st.text())
def test_parsing_arbitrary_bodies_never_raises(body: bytes | str) -> None:
    parse_message(body)


# -- decisions -------------------------------------------------------------------------------


def nodeclaim(
    name: str,
    instance_id: str,
    node: str = "",
    deleting: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "labels": {
            "karpenter.sh/nodepool": "default",
            "karpenter.sh/capacity-type": "spot",
            "node.kubernetes.io/instance-type": "m5.large",
            "topology.kubernetes.io/zone": "us-east-1b",
        }
        if labels is None
        else labels,
    }
    if deleting:
        meta["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    status = {"providerID": f"aws:///us-east-1b/{instance_id}"}
    if node:
        status["nodeName"] = node
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta,
        "status": status,
    }


def parsed(body: str) -> InterruptionMessage:
    message = parse_message(body)
    assert message is not None
    return message


def test_spot_interruption_marks_the_offering_and_deletes_the_nodeclaim() -> None:
    claims = [nodeclaim("a", INSTANCE, node="ip-10-0-1-1"), nodeclaim("b", "i-0000000000000000b")]
    assert decide(parsed(spot_warning()), claims) == [
        PublishEvent(
            "NodeClaim",
            "a",
            "uid-a",
            "Warning",
            "SpotInterrupted",
            "Spot interruption warning was triggered",
        ),
        PublishEvent(
            "Node",
            "ip-10-0-1-1",
            "",
            "Warning",
            "SpotInterrupted",
            "Spot interruption warning was triggered",
        ),
        MarkUnavailable("m5.large", "us-east-1b", SPOT_INTERRUPTED),
        DeleteNodeClaim("a", "default", SPOT_INTERRUPTED),
        PublishEvent(
            "NodeClaim",
            "a",
            "uid-a",
            "Warning",
            "TerminatingOnInterruption",
            "Interruption triggered termination for the NodeClaim",
        ),
        PublishEvent(
            "Node",
            "ip-10-0-1-1",
            "",
            "Warning",
            "TerminatingOnInterruption",
            "Interruption triggered termination for the Node",
        ),
    ]


def test_rebalance_recommendation_only_publishes_events() -> None:
    actions = decide(parsed(rebalance()), [nodeclaim("a", INSTANCE, node="n")])
    assert actions == [
        PublishEvent(
            "NodeClaim",
            "a",
            "uid-a",
            "Normal",
            "SpotRebalanceRecommendation",
            "Spot rebalance recommendation was triggered",
        ),
        PublishEvent(
            "Node",
            "n",
            "",
            "Normal",
            "SpotRebalanceRecommendation",
            "Spot rebalance recommendation was triggered",
        ),
    ]


def test_scheduled_change_drains_every_affected_nodeclaim() -> None:
    claims = [nodeclaim("a", INSTANCE), nodeclaim("b", "i-0b"), nodeclaim("c", "i-0c")]
    actions = decide(parsed(health(INSTANCE, "i-0c")), claims)
    assert [a for a in actions if isinstance(a, DeleteNodeClaim)] == [
        DeleteNodeClaim("a", "default", SCHEDULED_CHANGE),
        DeleteNodeClaim("c", "default", SCHEDULED_CHANGE),
    ]
    assert {a.reason for a in actions if isinstance(a, PublishEvent)} == {
        "InstanceUnhealthy",
        "TerminatingOnInterruption",
    }
    assert not [a for a in actions if isinstance(a, MarkUnavailable)]


@pytest.mark.parametrize(
    ("state", "kind", "reason", "text"),
    [
        ("stopping", INSTANCE_STOPPED, "InstanceStopping", "Instance is stopping"),
        ("terminated", INSTANCE_TERMINATED, "InstanceTerminating", "Instance is terminating"),
    ],
)
def test_state_change_drains(state: str, kind: str, reason: str, text: str) -> None:
    actions = decide(parsed(state_change(state)), [nodeclaim("a", INSTANCE)])
    assert actions == [
        PublishEvent("NodeClaim", "a", "uid-a", "Warning", reason, text),
        DeleteNodeClaim("a", "default", kind),
        PublishEvent(
            "NodeClaim",
            "a",
            "uid-a",
            "Warning",
            "TerminatingOnInterruption",
            "Interruption triggered termination for the NodeClaim",
        ),
    ]


def test_a_nodeclaim_being_deleted_is_not_deleted_again() -> None:
    actions = decide(parsed(spot_warning()), [nodeclaim("a", INSTANCE, deleting=True)])
    assert [type(a) for a in actions] == [PublishEvent, MarkUnavailable]


def test_no_offering_is_marked_without_type_and_zone() -> None:
    actions = decide(parsed(spot_warning()), [nodeclaim("a", INSTANCE, labels={})])
    assert not [a for a in actions if isinstance(a, MarkUnavailable)]
    assert DeleteNodeClaim("a", "", SPOT_INTERRUPTED) in actions


def test_instances_no_nodeclaim_owns_call_for_nothing() -> None:
    claims = [
        nodeclaim("a", INSTANCE + "9"),
        {"metadata": {"name": "launching"}, "status": {}},
        {"metadata": {"name": "bare"}},
    ]
    assert decide(parsed(spot_warning()), claims) == []
    assert decide(parsed(state_change("running")), [nodeclaim("a", INSTANCE)]) == []


# -- the controller against moto's SQS -------------------------------------------------------


@dataclass
class Provider:
    """The parts of the AWS provider the interruption controller uses."""

    settings: AWSSettings
    clients: AWSClients
    unavailable: UnavailableOfferings


def refusing_apiserver() -> k8s.ApiClient:
    """A Kubernetes client for an address nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    configuration = k8s.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.retries = 0
    return k8s.ApiClient(configuration)


class RecordingKube:
    """The part of ``KubeClient`` an ``EventRecorder`` sends through; keeps what it is sent."""

    def __init__(self) -> None:
        self.events: list[tuple[dict[str, Any], str, str, str]] = []

    def create_event(
        self,
        involved: dict[str, Any],
        event_type: str,
        reason: str,
        message: str,
        component: str = "karpenter",
    ) -> dict[str, Any]:
        self.events.append((involved, event_type, reason, message))
        return {}


class FakeCluster:
    """The controller's apiserver calls, answered from memory."""

    def __init__(self, nodeclaims: list[dict[str, Any]], node_uids: dict[str, str]) -> None:
        self._nodeclaims = nodeclaims
        self._node_uids = node_uids
        self.deleted: list[str] = []

    def nodeclaims(self) -> list[dict[str, Any]]:
        return self._nodeclaims

    def node_uid(self, name: str) -> str | None:
        return self._node_uids.get(name)

    def delete_nodeclaim(self, name: str) -> bool:
        self.deleted.append(name)
        return True


def controller(
    aws: moto_account.AWSEnv,
    queue: str,
    wait_seconds: int = 1,
    events: EventRecorder | None = None,
) -> tuple[InterruptionController, Provider]:
    settings = AWSSettings(region=aws.region, interruption_queue=queue)
    provider = Provider(
        settings, AWSClients(settings, {"sqs": aws.client("sqs")}), UnavailableOfferings()
    )
    context = ProviderContext(
        kube_client=refusing_apiserver(),
        events=events or EventRecorder(RecordingKube()),  # type: ignore[arg-type]
    )
    return InterruptionController(context, provider, wait_seconds=wait_seconds), provider


def queue_depth(aws: moto_account.AWSEnv) -> tuple[int, int]:
    """(visible, in flight) messages of the seeded queue."""
    attributes = aws.client("sqs").get_queue_attributes(
        QueueUrl=aws.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return (
        int(attributes["ApproximateNumberOfMessages"]),
        int(attributes["ApproximateNumberOfMessagesNotVisible"]),
    )


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def running(ctl: InterruptionController) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    thread.start()
    return thread, stop


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def stopped(thread: threading.Thread, stop: threading.Event, within: float = 3.0) -> float:
    start = time.monotonic()
    stop.set()
    thread.join(within)
    assert not thread.is_alive()
    return time.monotonic() - start


def test_messages_needing_no_nodeclaim_are_deleted(aws: moto_account.AWSEnv) -> None:
    sqs = aws.client("sqs")
    bodies = [
        "not json",
        json.dumps({"hello": "world"}),
        state_change("running"),
        health(INSTANCE, service="RDS"),
        event("aws.ec2", "EC2 AMI State Change", {}),
    ]
    for body in bodies:
        sqs.send_message(QueueUrl=aws.queue_url, MessageBody=body)
    received = sample("karpenter_interruption_received_messages_total", message_type=NO_OP)
    deleted = sample("karpenter_interruption_deleted_messages_total")
    ctl, _ = controller(aws, aws.queue_name)
    thread, stop = running(ctl)
    wait_for(lambda: queue_depth(aws) == (0, 0))
    stopped(thread, stop)
    assert (
        sample("karpenter_interruption_received_messages_total", message_type=NO_OP) == received + 3
    )
    assert sample("karpenter_interruption_deleted_messages_total") == deleted + 5


def test_a_rebalance_recommendation_hands_its_events_to_the_recorder(
    aws: moto_account.AWSEnv,
) -> None:
    """Events about the NodeClaim and its Node (with the Node's uid), nothing else; the same
    message again within the recorder's window publishes nothing new."""
    kube = RecordingKube()
    events = EventRecorder(kube)  # type: ignore[arg-type]
    ctl, provider = controller(aws, aws.queue_name, events=events)
    cluster = FakeCluster([nodeclaim("a", INSTANCE, node="ip-10-0-1-1")], {"ip-10-0-1-1": "n-1"})
    ctl._cluster = cluster  # type: ignore[assignment]
    published = sample("karpenter_interruption_actions_performed_total", action_type="PublishEvent")
    sqs = aws.client("sqs")
    thread, stop = running(ctl)
    try:
        for _ in range(2):
            sqs.send_message(QueueUrl=aws.queue_url, MessageBody=rebalance())
            wait_for(lambda: queue_depth(aws) == (0, 0))
    finally:
        stopped(thread, stop)
        events.close()
    text = "Spot rebalance recommendation was triggered"
    assert kube.events == [
        (
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": "a", "uid": "uid-a"},
            },
            "Normal",
            "SpotRebalanceRecommendation",
            text,
        ),
        (
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-1-1", "uid": "n-1"}},
            "Normal",
            "SpotRebalanceRecommendation",
            text,
        ),
    ]
    assert (
        sample("karpenter_interruption_actions_performed_total", action_type="PublishEvent")
        == published + 2
    )
    assert cluster.deleted == []
    assert provider.unavailable.seq == 0


def test_a_queue_url_is_used_as_given(aws: moto_account.AWSEnv) -> None:
    aws.client("sqs").send_message(QueueUrl=aws.queue_url, MessageBody=state_change("pending"))
    ctl, _ = controller(aws, aws.queue_url)
    thread, stop = running(ctl)
    wait_for(lambda: queue_depth(aws) == (0, 0))
    stopped(thread, stop)


def test_a_message_that_cannot_be_handled_stays_queued(
    aws: moto_account.AWSEnv, caplog: pytest.LogCaptureFixture
) -> None:
    """The apiserver is down: the spot warning is received but not deleted, so the queue
    hands it out again once the visibility timeout ends."""
    aws.client("sqs").send_message(QueueUrl=aws.queue_url, MessageBody=spot_warning())
    ctl, provider = controller(aws, aws.queue_name)
    with caplog.at_level(logging.ERROR):
        thread, stop = running(ctl)
        wait_for(lambda: "polling" in caplog.text)
        assert queue_depth(aws) == (0, 1)
        stopped(thread, stop)
    assert provider.unavailable.seq == 0


def test_a_missing_queue_is_retried_not_fatal(
    aws: moto_account.AWSEnv, caplog: pytest.LogCaptureFixture
) -> None:
    ctl, _ = controller(aws, "no-such-queue")
    with caplog.at_level(logging.ERROR):
        thread, stop = running(ctl)
        wait_for(lambda: "no-such-queue" in caplog.text)
        assert thread.is_alive()
        stopped(thread, stop)


def receiving(before: set[threading.Thread]) -> bool:
    """Whether a ReceiveMessage long poll started since ``before`` is in flight (polls that
    earlier tests abandoned may still be running)."""
    return any(t.name == "interruption-receive" and t not in before for t in threading.enumerate())


def test_stop_ends_a_production_long_poll_promptly(aws: moto_account.AWSEnv) -> None:
    """With upstream's 20 s wait on an empty queue, stop ends run without waiting for the
    poll; the abandoned poll's thread is a daemon, so it cannot keep the process alive."""
    ctl, _ = controller(aws, aws.queue_name, wait_seconds=20)
    before = set(threading.enumerate())
    thread, stop = running(ctl)
    wait_for(lambda: receiving(before))
    time.sleep(0.3)
    assert stopped(thread, stop) < 2.0
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("interruption"))


def test_a_message_ends_a_production_long_poll(aws: moto_account.AWSEnv) -> None:
    """A message sent while a 20 s poll waits is handled and deleted at once."""
    ctl, _ = controller(aws, aws.queue_name, wait_seconds=20)
    before = set(threading.enumerate())
    thread, stop = running(ctl)
    wait_for(lambda: receiving(before))
    time.sleep(0.3)
    aws.client("sqs").send_message(QueueUrl=aws.queue_url, MessageBody=state_change("running"))
    wait_for(lambda: queue_depth(aws) == (0, 0), timeout=5.0)
    stopped(thread, stop)


def test_without_a_queue_run_returns_at_once(aws: moto_account.AWSEnv) -> None:
    ctl, _ = controller(aws, "")
    thread, stop = running(ctl)
    thread.join(1)
    assert not thread.is_alive()
    assert not stop.is_set()


def test_the_controller_needs_a_cluster_and_an_event_recorder(aws: moto_account.AWSEnv) -> None:
    settings = AWSSettings(region=aws.region, interruption_queue=aws.queue_name)
    provider = Provider(settings, AWSClients(settings, {}), UnavailableOfferings())
    with pytest.raises(CloudProviderError, match="Kubernetes cluster"):
        InterruptionController(ProviderContext(), provider)
    with pytest.raises(CloudProviderError, match="event recorder"):
        InterruptionController(ProviderContext(kube_client=refusing_apiserver()), provider)


def test_metric_names_match_upstream() -> None:
    names = {metric.name for metric in REGISTRY.collect()}
    assert {
        "karpenter_interruption_received_messages",
        "karpenter_interruption_deleted_messages",
        "karpenter_interruption_message_queue_duration_seconds",
        "karpenter_nodeclaims_disrupted",
    } <= names
