"""The preemption controller: a preempted spot instance's NodeClaim is deleted at once and its
offering marked unavailable; against the fake apiserver, with zone operations from a stub (fast)
and from the fake GCE server (slow)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import compute_v1

from karpenter_conformance.fakekube import FakeKube
from karpenter_core.apis import labels as wk
from karpenter_core.sdk.offerings import UnavailableOfferings
from karpenter_core.sdk.record import ProviderContext
from karpenter_gcp.preemption import PREEMPTED, PreemptionController, preemptions

NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
ZONE = "us-central1-a"


def operation(name: str, instance: str, inserted: datetime = NOW, kind: str = PREEMPTED) -> Any:
    base = "https://www.googleapis.com/compute/v1/projects/p/zones/" + ZONE
    return compute_v1.Operation(
        name=name,
        id=abs(hash(name)),
        operation_type=kind,
        target_link=f"{base}/instances/{instance}",
        zone=base,
        insert_time=inserted.isoformat(),
        status=compute_v1.Operation.Status.DONE,
    )


class Operations:
    """The zone operations list, from memory (``zone_operations`` of the clients)."""

    @property
    def zone_operations(self) -> Operations:
        return self

    def __init__(self) -> None:
        self.items: list[Any] = []

    def list(self, request: dict[str, str], retry: object = None) -> list[Any]:
        return [op for op in self.items if request["zone"] == ZONE]


def nodeclaim(name: str, instance: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                wk.NODEPOOL: "default",
                wk.INSTANCE_TYPE: "e2-standard-4",
                wk.TOPOLOGY_ZONE: ZONE,
                wk.CAPACITY_TYPE: "spot",
            },
        },
        "status": {"providerID": f"gce://p/{ZONE}/{instance}"},
    }


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = FakeKube()
    yield fake
    fake.stop()


def test_preemptions_are_read_from_zone_operations() -> None:
    ops = [
        {"operationType": PREEMPTED, "id": "1", "zone": f"z/{ZONE}", "targetLink": "i/x"},
        {"operationType": "compute.instances.insert", "id": "2", "targetLink": "i/y"},
    ]
    (found,) = preemptions("p", ops).items()
    assert found == ("1", (f"gce://p/{ZONE}/x", None))


def test_a_preemption_deletes_the_nodeclaim_and_marks_the_offering(kube: FakeKube) -> None:
    kube.put(NODECLAIMS, nodeclaim("default-a", "karpenter-default-a"))
    kube.put(NODECLAIMS, nodeclaim("default-b", "karpenter-default-b"))
    operations = Operations()
    unavailable = UnavailableOfferings(clock=lambda: NOW)
    context = ProviderContext(kube_client=kube.api_client(), clock=lambda: NOW)
    controller = PreemptionController(
        context, operations, "p", [ZONE, "us-central1-b"], unavailable
    )
    operations.items.append(operation("stale", "karpenter-default-b", NOW - timedelta(hours=1)))
    assert controller.poll() == 1
    assert [c["metadata"]["name"] for c in kube.items(NODECLAIMS)] == ["default-a"]
    assert unavailable.seq == 0, "an old preemption marks nothing"
    operations.items.append(operation("new", "karpenter-default-a"))
    assert controller.poll() == 1
    assert kube.items(NODECLAIMS) == []
    assert unavailable.is_unavailable("spot", "e2-standard-4", ZONE)
    assert not unavailable.is_unavailable("on-demand", "e2-standard-4", ZONE)
    assert controller.poll() == 0


@pytest.mark.slow
def test_a_preempted_instance_of_the_fake_deletes_its_nodeclaim(kube: FakeKube) -> None:
    from karpenter_gcp.clients import GCPClients
    from karpenter_gcp.testing import FakeGCE

    with FakeGCE() as fake:
        clients = GCPClients.create("test-project", endpoint=fake.endpoint)
        unavailable = UnavailableOfferings()
        context = ProviderContext(kube_client=kube.api_client())
        controller = PreemptionController(context, clients, "test-project", [ZONE], unavailable)
        assert controller.poll() == 0
        body = {
            "name": "karpenter-default-a",
            "machineType": f"zones/{ZONE}/machineTypes/e2-standard-4",
            "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"},
        }
        clients.instances.insert_unary(
            project="test-project",
            zone=ZONE,
            instance_resource=compute_v1.Instance.from_json(json.dumps(body)),
        )
        claim = nodeclaim("default-a", "karpenter-default-a")
        claim["status"]["providerID"] = f"gce://test-project/{ZONE}/karpenter-default-a"
        kube.put(NODECLAIMS, claim)
        fake.preempt("karpenter-default-a")
        assert controller.poll() == 1
    assert kube.items(NODECLAIMS) == []
    assert unavailable.is_unavailable("spot", "e2-standard-4", ZONE)
