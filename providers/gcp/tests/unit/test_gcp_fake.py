"""The fake GCE server driven by the real clients: google-cloud-compute's REST clients and
google-cloud-billing's CloudCatalogClient, unmodified, over plain HTTP with anonymous
credentials (through GCPClients)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from karpenter_gcp.clients import GCPClients
from karpenter_gcp.pricing import COMPUTE_SERVICE
from karpenter_gcp.testing import FakeGCE
from karpenter_gcp.testing.fixtures import CLUSTER, NODE_POOL, TEMPLATE

# every test talks to a server thread through the Google client libraries
pytestmark = pytest.mark.slow

ZONE = "us-central1-a"
DONE = compute_v1.Operation.Status.DONE


@pytest.fixture(scope="module")
def server() -> Iterator[FakeGCE]:
    with FakeGCE() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeGCE) -> FakeGCE:
    server.reset()
    server.state.operation_delay = 0.0
    return server


@pytest.fixture(scope="module")
def clients(server: FakeGCE) -> GCPClients:
    return GCPClients.create(server.project, endpoint=server.endpoint)


def body(name: str = "node-1", machine_type: str = "n2-standard-2", **extra: Any) -> dict:
    return {
        "name": name,
        "machineType": f"zones/{ZONE}/machineTypes/{machine_type}",
        "labels": {"goog-k8s-cluster-name": CLUSTER, "karpenter-sh-nodepool": "default"},
        "disks": [{"boot": True, "autoDelete": True, "initializeParams": {"diskSizeGb": "50"}}],
        "networkInterfaces": [{"subnetwork": "regions/us-central1/subnetworks/default"}],
        **extra,
    }


def insert(clients: GCPClients, instance: dict, zone: str = ZONE, **request: Any) -> Any:
    return clients.instances.insert_unary(
        request={
            "project": "test-project",
            "zone": zone,
            "instance_resource": compute_v1.Instance.from_json(json.dumps(instance)),
            **request,
        },
        retry=None,
    )


def wait(clients: GCPClients, operation: Any, zone: str = ZONE) -> Any:
    return clients.zone_operations.wait(project="test-project", zone=zone, operation=operation.name)


def test_zones_and_machine_types_page_through_the_aggregated_list(
    fake: FakeGCE, clients: GCPClients
) -> None:
    zones = [z.name for z in clients.zones.list(project=fake.project)]
    assert zones == [f"us-central1-{z}" for z in "abcf"]
    pages = clients.machine_types.aggregated_list(
        request={"project": fake.project, "max_results": 5}
    )
    seen = {(key, t.name) for key, scoped in pages for t in scoped.machine_types}
    expected = {(f"zones/{z}", t) for z, types in fake.state.machine_types.items() for t in types}
    assert seen == expected
    assert sum(r.path.endswith("aggregated/machineTypes") for r in fake.requests) > 1
    one = clients.machine_types.get(project=fake.project, zone=ZONE, machine_type="n2-standard-2")
    assert (one.guest_cpus, one.memory_mb) == (2, 8192)
    with pytest.raises(exceptions.NotFound, match="machineTypes/n9-huge"):
        clients.machine_types.get(project=fake.project, zone=ZONE, machine_type="n9-huge")
    with pytest.raises(exceptions.NotFound, match="zones/mars-1a"):
        clients.zones.get(project=fake.project, zone="mars-1a")
    with pytest.raises(exceptions.Forbidden):
        list(clients.zones.list(project="someone-else"))


def test_images_list_with_a_name_filter_and_family_skips_deprecated(
    fake: FakeGCE, clients: GCPClients
) -> None:
    listed = list(
        clients.images.list(request={"project": "gke-node-images", "filter": "name=gke-1341-*"})
    )
    names = {i.name for i in listed}
    assert "gke-1341-gke1829001-cos-121-18867-199-38-c-pre" in names
    assert "gke-1341-gke1829001-cos-arm64-121-18867-199-38-c-pre" in names
    assert all(n.startswith("gke-1341-") for n in names)
    assert {i.deprecated.state for i in listed if i.name.endswith("90-4-c-pre")} == {"DEPRECATED"}
    family = clients.images.get_from_family(
        project="ubuntu-os-gke-cloud", family="ubuntu-gke-2404-1-34-arm64"
    )
    assert family.name == "ubuntu-gke-2404-1-34-arm64-v20260416"
    assert family.architecture == "ARM64"
    fake.publish_node_images("v1.36.2")
    published = clients.images.list(
        request={"project": "gke-node-images", "filter": "name=gke-1362-gke1000000-*"}
    )
    assert len(list(published)) == 6  # amd64, arm64 and GPU; the current and an older build


def test_insert_get_list_delete_with_operations(fake: FakeGCE, clients: GCPClients) -> None:
    fake.state.operation_delay = 0.3
    spot = {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"}
    started = time.monotonic()
    operation = insert(clients, body(scheduling=spot), request_id="r-1")
    assert operation.status != DONE
    assert clients.instances.get(project=fake.project, zone=ZONE, instance="node-1").status == (
        "PROVISIONING"
    )
    assert insert(clients, body(scheduling=spot), request_id="r-1").name == operation.name
    done = wait(clients, operation)
    assert done.status == DONE and not done.error.errors
    assert time.monotonic() - started >= 0.25
    got = clients.instances.get(project=fake.project, zone=ZONE, instance="node-1")
    assert got.status == "RUNNING" and got.creation_timestamp and got.id
    assert got.scheduling.provisioning_model == "SPOT"
    assert got.disks[0].boot and got.disks[0].auto_delete
    assert got.self_link.endswith(f"/projects/test-project/zones/{ZONE}/instances/node-1")
    query = f"labels.goog-k8s-cluster-name={CLUSTER} AND labels.karpenter-sh-nodepool:*"
    listed = clients.instances.list(
        request={"project": fake.project, "zone": ZONE, "filter": query}
    )
    assert [i.name for i in listed] == ["node-1"]
    other = clients.instances.list(
        request={"project": fake.project, "zone": ZONE, "filter": "labels.goog-k8s-cluster-name=x"}
    )
    assert list(other) == []
    assert len(fake.disks()) == 1
    deleting = clients.instances.delete_unary(project=fake.project, zone=ZONE, instance="node-1")
    assert wait(clients, deleting).status == DONE
    assert fake.instances() == [] and fake.disks() == []
    with pytest.raises(exceptions.NotFound, match="node-1"):
        clients.instances.get(project=fake.project, zone=ZONE, instance="node-1")


@pytest.mark.parametrize(
    ("instance", "message"),
    [
        (body(machine_type="n9-huge"), "Machine type with name 'n9-huge' does not exist"),
        (body(name="Node_1"), "resource.name"),
        (body(labels={"Bad": "x"}), "resource.labels"),
    ],
)
def test_bad_inserts_are_refused(
    fake: FakeGCE, clients: GCPClients, instance: dict, message: str
) -> None:
    with pytest.raises(exceptions.BadRequest, match=message):
        insert(clients, instance)


def test_a_filter_it_cannot_read_is_refused(fake: FakeGCE, clients: GCPClients) -> None:
    request = {"project": fake.project, "zone": ZONE, "filter": "labels.a OR labels.b"}
    with pytest.raises(exceptions.BadRequest, match="Invalid list filter expression"):
        list(clients.instances.list(request=request))


def test_a_second_insert_of_a_name_conflicts(fake: FakeGCE, clients: GCPClients) -> None:
    insert(clients, body())
    with pytest.raises(exceptions.Conflict, match="already exists"):
        insert(clients, body())


def test_stockout_and_quota_end_the_operation_with_gce_error_codes(
    fake: FakeGCE, clients: GCPClients
) -> None:
    fake.faults.stockout("n2-standard-2", ZONE, times=1)
    fake.faults.quota("e2-standard-4", spot=True)
    stocked_out = wait(clients, insert(clients, body()))
    assert [e.code for e in stocked_out.error.errors] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    assert stocked_out.http_error_status_code == 503
    assert fake.instances() == []
    assert wait(clients, insert(clients, body())).error.errors == []  # the fault lapsed
    spot = {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"}
    over = wait(clients, insert(clients, body("node-2", "e2-standard-4", scheduling=spot)))
    assert over.error.errors[0].code == "QUOTA_EXCEEDED"
    assert "PREEMPTIBLE_CPUS" in over.error.errors[0].message
    assert wait(clients, insert(clients, body("node-3", "e2-standard-4"))).error.errors == []


def test_an_immediate_quota_error_is_a_403(fake: FakeGCE, clients: GCPClients) -> None:
    fake.faults.quota(immediate=True, times=1)
    with pytest.raises(exceptions.Forbidden, match="Quota 'CPUS' exceeded") as raised:
        insert(clients, body())
    assert raised.value.errors[0]["reason"] == "quotaExceeded"


def test_throttling_and_unavailability_answer_the_next_calls(
    fake: FakeGCE, clients: GCPClients
) -> None:
    fake.faults.throttle(2, path="/zones/")
    fake.faults.unavailable(1)
    for error in (exceptions.TooManyRequests, exceptions.TooManyRequests):
        with pytest.raises(error) as raised:
            clients.zones.get(project=fake.project, zone=ZONE, retry=None)
        assert raised.value.errors[0]["reason"] == "rateLimitExceeded"
    with pytest.raises(exceptions.ServiceUnavailable):
        clients.zones.get(project=fake.project, zone=ZONE, retry=None)
    assert clients.zones.get(project=fake.project, zone=ZONE, retry=None).name == ZONE
    assert [r.status for r in fake.requests] == [429, 429, 503, 200]


def test_preempt_emits_a_zone_operation_and_deletes_the_spot_instance(
    fake: FakeGCE, clients: GCPClients
) -> None:
    spot = {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"}
    wait(clients, insert(clients, body(scheduling=spot)))
    wait(clients, insert(clients, body("node-2", scheduling={"provisioningModel": "SPOT"})))
    fake.preempt("node-1")
    fake.preempt("node-2")
    found = clients.zone_operations.list(
        request={
            "project": fake.project,
            "zone": ZONE,
            "filter": 'operationType="compute.instances.preempted"',
        }
    )
    assert sorted(op.target_link.rsplit("/", 1)[-1] for op in found) == ["node-1", "node-2"]
    assert [(i["name"], i["status"]) for i in fake.instances()] == [("node-2", "TERMINATED")]


def test_gke_node_pool_template_and_subnetwork(fake: FakeGCE, clients: GCPClients) -> None:
    pool = clients.node_pool("us-central1", CLUSTER, NODE_POOL)
    assert pool["instanceGroupUrls"][0].endswith(f"/instanceGroupManagers/{TEMPLATE}-grp")
    template = clients.instance_templates.get(project=fake.project, instance_template=TEMPLATE)
    metadata = {i.key: i.value for i in template.properties.metadata.items}
    assert {"kube-env", "kube-labels", "cluster-name", "user-data"} <= set(metadata)
    assert template.properties.labels["goog-k8s-node-pool-name"] == NODE_POOL
    assert template.properties.service_accounts[0].scopes
    with pytest.raises(exceptions.NotFound):
        clients.node_pool("us-central1", CLUSTER, "missing")
    subnet = clients.subnetworks.get(
        project=fake.project, region="us-central1", subnetwork="default"
    )
    assert subnet.ip_cidr_range == "10.128.0.0/20"


def test_billing_catalog_pages_through_the_skus(fake: FakeGCE, clients: GCPClients) -> None:
    services = list(clients.billing.list_services())
    assert [s.name for s in services] == [COMPUTE_SERVICE]
    skus = list(clients.billing.list_skus(request={"parent": services[0].name, "page_size": 3}))
    assert len(skus) == len(fake.skus) > 3
    assert skus[0].pricing_info[0].pricing_expression.tiered_rates[0].unit_price.nanos > 0


def test_python_dash_m_announces_its_endpoint() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "karpenter_gcp.testing", "--operation-delay", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        announced = json.loads(process.stdout.readline())
        clients = GCPClients.create(announced["project"], endpoint=announced["endpoint"])
        assert len(list(clients.zones.list(project=announced["project"]))) == 4
        assert announced["env"]["KARPENTER_GCP_API_ENDPOINT"] == announced["endpoint"]
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
