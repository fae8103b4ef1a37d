"""The instance-type catalog (offline from packaged data, live against moto) and the ICE cache."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from click.testing import CliRunner

from karpenter_aws import catalog as catalog_module
from karpenter_aws import labels, moto_account
from karpenter_aws.catalog import (
    OFFLINE_SPOT_ESTIMATE,
    REFRESH_INTERVAL,
    CatalogError,
    InstanceTypeCatalog,
    offline_regions,
)
from karpenter_aws.nodeclass import EC2NodeClass
from karpenter_aws.pricing import PriceBook
from karpenter_aws.settings import AWSSettings
from karpenter_aws.unavailable import UnavailableOfferings
from karpenter_core.apis import labels as wk
from karpenter_core.cli.main import cli
from karpenter_core.cloudprovider.types import InstanceType

GIB = 2**30
US_EAST_1_ZONES = {
    "us-east-1a": "use1-az6",
    "us-east-1b": "use1-az1",
    "us-east-1c": "use1-az2",
    "us-east-1d": "use1-az4",
    "us-east-1e": "use1-az3",
    "us-east-1f": "use1-az5",
}


class Clock:
    """A settable clock."""

    def __init__(self) -> None:
        self.now = datetime(2026, 8, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


def _node_class(
    subnets: list[dict[str, str]], alias: str = "al2023@latest", **spec: Any
) -> EC2NodeClass:
    return EC2NodeClass.model_validate(
        {
            "metadata": {"name": "default"},
            "spec": {
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                "amiSelectorTerms": [{"alias": alias}],
                "role": "KarpenterNodeRole",
                **spec,
            },
            "status": {"subnets": subnets},
        }
    )


def _named(types: list[InstanceType], name: str) -> InstanceType:
    return next(t for t in types if t.name == name)


def _offerings(it: InstanceType) -> dict[tuple[str, str], Any]:
    return {(o.capacity_type, o.zone): o for o in it.offerings}


# Offline


@pytest.fixture(scope="module")
def offline() -> InstanceTypeCatalog:
    return InstanceTypeCatalog.offline(AWSSettings(region="us-east-1"))


def test_offline_us_east_1_zones_prices_and_estimated_spot(offline: InstanceTypeCatalog) -> None:
    assert offline.zones() == US_EAST_1_ZONES
    assert not offline.is_live
    types = offline.instance_types(None)
    assert len(types) > 1000
    m5 = _named(types, "m5.large")
    assert m5.requirements[wk.TOPOLOGY_ZONE].values == frozenset(US_EAST_1_ZONES) - {"us-east-1e"}
    offerings = _offerings(m5)
    assert len(offerings) == 10
    on_demand = offerings[("on-demand", "us-east-1a")]
    assert on_demand.price == pytest.approx(0.096)
    assert on_demand.available and not on_demand.estimated
    spot = offerings[("spot", "us-east-1b")]
    assert spot.price == pytest.approx(0.096 * OFFLINE_SPOT_ESTIMATE)
    assert spot.available and spot.estimated
    assert spot.requirements[labels.LABEL_TOPOLOGY_ZONE_ID].values == frozenset({"use1-az1"})
    assert _named(types, "c6g.xlarge").cheapest_offering().price == pytest.approx(
        0.136 * OFFLINE_SPOT_ESTIMATE
    )


def test_offline_types_without_a_known_price_are_unavailable(
    offline: InstanceTypeCatalog,
) -> None:
    unpriced = _named(offline.instance_types(None), "r9g.large")
    assert unpriced.offerings
    assert not any(o.available for o in unpriced.offerings)
    assert unpriced.cheapest_offering() is None


def test_offline_other_region_uses_the_us_east_1_table() -> None:
    assert "eu-west-1" in offline_regions()
    catalog = InstanceTypeCatalog.offline(AWSSettings(region="eu-west-1"))
    assert all(zone.startswith("eu-west-1") for zone in catalog.zones())
    m5 = _named(catalog.instance_types(None), "m5.large")
    assert m5.requirements[wk.TOPOLOGY_REGION].values == frozenset({"eu-west-1"})
    assert _offerings(m5)[("on-demand", "eu-west-1a")].price == pytest.approx(0.096)


def test_offline_unknown_region_is_a_clear_error() -> None:
    with pytest.raises(CatalogError) as error:
        InstanceTypeCatalog.offline(AWSSettings(region="mars-1"))
    assert str(error.value) == (
        "no offline instance type data for region 'mars-1'; "
        f"available: {', '.join(offline_regions())}"
    )


def test_node_class_zones_kubelet_and_root_volume() -> None:
    catalog = InstanceTypeCatalog.offline(AWSSettings(region="us-east-1"))
    node_class = _node_class(
        [
            {"id": "subnet-a", "zone": "us-east-1a", "zoneID": "use1-az6"},
            {"id": "subnet-a2", "zone": "us-east-1a", "zoneID": "use1-az6"},
            {"id": "subnet-e", "zone": "us-east-1e"},
        ],
        alias="bottlerocket@latest",
        kubelet={"maxPods": 20, "evictionHard": {"memory.available": "500Mi"}},
        blockDeviceMappings=[{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi"}}],
    )
    types = catalog.instance_types(node_class)
    m5 = _named(types, "m5.large")
    # m5.large is not offered in us-east-1e
    assert m5.requirements[wk.TOPOLOGY_ZONE].values == frozenset({"us-east-1a"})
    assert m5.requirements[labels.LABEL_TOPOLOGY_ZONE_ID].values == frozenset({"use1-az6"})
    assert set(_offerings(m5)) == {("on-demand", "us-east-1a"), ("spot", "us-east-1a")}
    assert m5.capacity["pods"] == 20_000
    assert m5.capacity["ephemeral-storage"] == 100 * GIB * 1000
    assert m5.overhead.eviction_threshold["memory"] == 500 * 2**20 * 1000
    # a zone-id missing from the subnet status comes from the region's zones
    c4 = _named(types, "c4.large")
    assert "us-east-1e" in c4.requirements[wk.TOPOLOGY_ZONE].values
    assert _offerings(c4)[("spot", "us-east-1e")].requirements[
        labels.LABEL_TOPOLOGY_ZONE_ID
    ].values == frozenset({"use1-az3"})


def test_offline_node_class_without_subnets_gets_every_zone() -> None:
    """Offline nothing resolves the subnets: the EC2NodeClass's own settings still apply."""
    catalog = InstanceTypeCatalog.offline(AWSSettings(region="us-east-1"))
    types = catalog.instance_types(_node_class([], kubelet={"maxPods": 8}))
    m5 = _named(types, "m5.large")
    every = _named(catalog.instance_types(None), "m5.large")
    assert m5.requirements[wk.TOPOLOGY_ZONE] == every.requirements[wk.TOPOLOGY_ZONE]
    assert (
        m5.requirements[labels.LABEL_TOPOLOGY_ZONE_ID]
        == every.requirements[labels.LABEL_TOPOLOGY_ZONE_ID]
    )
    assert set(_offerings(m5)) == set(_offerings(every))
    assert m5.capacity["pods"] == 8_000
    assert _named(types, "c6a.xlarge").capacity["pods"] == 8_000


def test_repeated_calls_are_cached_per_inputs() -> None:
    catalog = InstanceTypeCatalog.offline(AWSSettings(region="us-east-1"))
    first = catalog.instance_types(None)
    assert catalog.instance_types(None) is first
    subnets = [{"id": "subnet-a", "zone": "us-east-1a", "zoneID": "use1-az6"}]
    one = catalog.instance_types(_node_class(subnets))
    assert catalog.instance_types(_node_class(subnets)) is one
    other = catalog.instance_types(_node_class(subnets, kubelet={"maxPods": 10}))
    assert other is not one
    assert _named(other, "m5.large").capacity["pods"] == 10_000
    assert catalog.instance_types(None) is first


def test_marks_make_offerings_unavailable_until_they_expire() -> None:
    clock = Clock()
    catalog = InstanceTypeCatalog.offline(
        AWSSettings(region="us-east-1"), UnavailableOfferings(clock=clock)
    )
    before = catalog.instance_types(None)
    catalog.unavailable.mark("spot", "m5.large", "us-east-1a", "InsufficientInstanceCapacity")
    marked = catalog.instance_types(None)
    assert marked is not before
    offerings = _offerings(_named(marked, "m5.large"))
    assert not offerings[("spot", "us-east-1a")].available
    assert offerings[("spot", "us-east-1b")].available
    assert offerings[("on-demand", "us-east-1a")].available
    # only the marked type is rebuilt
    assert _named(marked, "c5.large") is _named(before, "c5.large")
    assert catalog.instance_types(None) is marked
    clock.advance(timedelta(minutes=3))
    again = catalog.instance_types(None)
    assert _offerings(_named(again, "m5.large"))[("spot", "us-east-1a")].available


def test_price_changes_rebuild_the_offerings() -> None:
    catalog = InstanceTypeCatalog.offline(AWSSettings(region="us-east-1"))
    before = catalog.instance_types(None)

    class SpotHistory:
        def get_paginator(self, _: str) -> Any:
            return self

        def paginate(self, **_: Any) -> list[dict[str, Any]]:
            record = {
                "InstanceType": "m5.large",
                "AvailabilityZone": "us-east-1a",
                "SpotPrice": "0.03",
                "Timestamp": datetime(2026, 7, 1, tzinfo=UTC),
            }
            return [{"SpotPriceHistory": [record]}]

    assert catalog.prices.refresh_spot(SpotHistory())
    after = catalog.instance_types(None)
    assert after is not before
    assert len(after) == len(before)


# Live, against moto


def _ec2_calls(client: Any, operation: str) -> list[int]:
    calls: list[int] = []
    client.meta.events.register(
        f"before-call.ec2.{operation}", lambda **_: calls.append(1) and None
    )
    return calls


def _failing(client: Any, operation: str, when: list[bool]) -> None:
    def fail(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not when[0]:
            return None
        error = {"Code": "UnauthorizedOperation", "Message": "not allowed"}
        return AWSResponse("https://ec2", 403, {}, None), {"Error": error}

    client.meta.events.register(f"before-call.ec2.{operation}", fail)


def test_live_catalog_reads_ec2_and_refreshes_when_stale(aws: moto_account.AWSEnv) -> None:
    clock = Clock()
    ec2 = aws.client("ec2")
    described = _ec2_calls(ec2, "DescribeInstanceTypes")
    fail = [False]
    _failing(ec2, "DescribeInstanceTypes", fail)
    catalog = InstanceTypeCatalog.live(
        AWSSettings(region=aws.region),
        ec2,
        PriceBook(aws.region),
        UnavailableOfferings(clock=clock),
        clock,
    )
    assert catalog.is_live
    subnets = aws.client("ec2").describe_subnets(SubnetIds=aws.subnet_list)["Subnets"]
    node_class = _node_class(
        [
            {"id": s["SubnetId"], "zone": s["AvailabilityZone"], "zoneID": s["AvailabilityZoneId"]}
            for s in subnets
        ]
    )
    types = catalog.instance_types(node_class)
    assert described  # read lazily on first use
    assert catalog.zones()["us-east-1a"] == "use1-az6"
    assert len(types) > 1000
    m5 = _named(types, "m5.large")
    assert m5.requirements[wk.TOPOLOGY_ZONE].values == frozenset(moto_account.ZONES)
    assert m5.requirements[labels.LABEL_TOPOLOGY_ZONE_ID].values == frozenset(
        s["AvailabilityZoneId"] for s in subnets
    )
    assert _offerings(m5)[("on-demand", "us-east-1a")].price == pytest.approx(0.096)
    assert all(o.available for o in m5.offerings)
    assert all(o.estimated for o in m5.offerings if o.capacity_type == "spot")
    assert not any(t.name.startswith("mac") for t in types)
    assert catalog.instance_types(node_class) is types
    # live, an EC2NodeClass whose subnets are not resolved yet can launch nothing
    assert not any(t.offerings for t in catalog.instance_types(_node_class([])))
    calls = len(described)

    # stale: refreshed on the next call; a failure keeps what was read before
    clock.advance(REFRESH_INTERVAL)
    fail[0] = True
    assert catalog.instance_types(node_class) is types
    assert len(described) == calls + 1
    with pytest.raises(CatalogError, match="UnauthorizedOperation"):
        catalog.refresh()


def test_a_slow_refresh_does_not_hold_up_callers_with_data(aws: moto_account.AWSEnv) -> None:
    clock = Clock()
    ec2 = aws.client("ec2")
    catalog = InstanceTypeCatalog.live(
        AWSSettings(region=aws.region), ec2, PriceBook(aws.region), UnavailableOfferings(), clock
    )
    types = catalog.instance_types(None)
    entered, release = threading.Event(), threading.Event()

    def block(**_: Any) -> None:
        entered.set()
        release.wait(30)

    described = _ec2_calls(ec2, "DescribeInstanceTypes")
    ec2.meta.events.register("before-call.ec2.DescribeInstanceTypes", block)
    clock.advance(REFRESH_INTERVAL)
    refresher = threading.Thread(target=catalog.instance_types)
    refresher.start()
    try:
        assert entered.wait(10)
        started = time.monotonic()
        # stale, but another caller is refreshing: the data read before is served at once
        assert catalog.instance_types(None) is types
        assert catalog.zones()["us-east-1a"] == "use1-az6"
        assert time.monotonic() - started < 5
        assert len(described) == 1
    finally:
        release.set()
        refresher.join(30)
    assert not refresher.is_alive()
    assert catalog.instance_types(None) is types  # same EC2 data, same instance types


def test_cached_instance_types_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_module, "_CACHE_SIZE", 2)
    catalog = InstanceTypeCatalog.offline(AWSSettings(region="us-east-1"))
    subnets = [{"id": "subnet-a", "zone": "us-east-1a", "zoneID": "use1-az6"}]
    first = catalog.instance_types(_node_class(subnets, kubelet={"maxPods": 10}))
    catalog.instance_types(_node_class(subnets, kubelet={"maxPods": 20}))
    # using the first again makes the second the least recently used
    assert catalog.instance_types(_node_class(subnets, kubelet={"maxPods": 10})) is first
    catalog.instance_types(_node_class(subnets, kubelet={"maxPods": 30}))
    assert len(catalog._cache) == 2
    assert catalog.instance_types(_node_class(subnets, kubelet={"maxPods": 10})) is first


def test_live_catalog_without_data_raises(aws: moto_account.AWSEnv) -> None:
    ec2 = aws.client("ec2")
    _failing(ec2, "DescribeInstanceTypes", [True])
    catalog = InstanceTypeCatalog.live(
        AWSSettings(region=aws.region), ec2, PriceBook(aws.region), UnavailableOfferings()
    )
    with pytest.raises(CatalogError, match="reading EC2 instance types in us-east-1"):
        catalog.instance_types(None)


# Simulation


GPU_SCENARIO = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-gpu-count, operator: Exists}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
---
apiVersion: v1
kind: Pod
metadata: {name: small, namespace: default}
spec:
  containers:
    - name: c
      image: busybox
      resources: {requests: {cpu: 100m}}
"""


def test_simulate_a_node_pool_requiring_gpus_picks_a_gpu_type(tmp_path: Path) -> None:
    scenario = tmp_path / "gpu.yaml"
    scenario.write_text(GPU_SCENARIO)
    args = ["simulate", "--provider", "aws", "--region", "us-east-1", "-o", "json"]
    result = CliRunner().invoke(cli, [*args, "-f", str(scenario)])
    assert result.exit_code == 0, result.output
    (claim,) = json.loads(result.stdout)["nodeclaims"]
    catalog = InstanceTypeCatalog.offline(AWSSettings(region="us-east-1"))
    chosen = _named(catalog.instance_types(None), claim["instance_type"])
    # the cheapest may be a fractional GPU (g6f: a GPU count of 0, as EC2 reports it)
    assert chosen.requirements[labels.LABEL_INSTANCE_GPU_COUNT].values
    assert chosen.requirements[labels.LABEL_INSTANCE_GPU_NAME].values


def test_offline_prices_of_another_region_are_marked_estimated() -> None:
    home = InstanceTypeCatalog.offline(AWSSettings(region="us-east-1")).instance_types(None)
    away = InstanceTypeCatalog.offline(AWSSettings(region="eu-west-1")).instance_types(None)
    for types, on_demand_estimated in ((home, False), (away, True)):
        offerings = [o for t in types for o in t.offerings]
        assert {o.estimated for o in offerings if o.capacity_type == "spot"} == {True}
        assert {o.estimated for o in offerings if o.capacity_type == "on-demand"} == {
            on_demand_estimated
        }
