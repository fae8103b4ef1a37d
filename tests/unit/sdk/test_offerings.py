"""The SDK's unavailable-offerings cache."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from karpenter_core.apis.requirements import Requirement, Requirements
from karpenter_core.sdk.offerings import Marks, UnavailableOfferings, without_unavailable
from karpenter_core.sdk.types import InstanceType, Offering


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def test_marks_expire_after_the_ttl_and_expiry_changes_seq() -> None:
    clock = Clock()
    cache = UnavailableOfferings(clock=clock)
    assert cache.seq == 0
    assert cache.snapshot() == {}
    cache.mark("spot", "m5.large", "us-east-1a", "InsufficientInstanceCapacity")
    assert cache.seq == 1
    assert cache.snapshot() == {"m5.large": frozenset({("spot", "us-east-1a")})}
    clock.advance(timedelta(minutes=2, seconds=59))
    assert cache.snapshot() == {"m5.large": frozenset({("spot", "us-east-1a")})}
    assert cache.seq == 1
    clock.advance(timedelta(seconds=1))
    assert cache.seq == 2
    assert cache.snapshot() == {}


def test_a_mark_renews_and_a_shorter_mark_keeps_the_longer_one() -> None:
    clock = Clock()
    cache = UnavailableOfferings(clock=clock, ttl=timedelta(seconds=10))
    cache.mark("on-demand", "c5.large", "us-east-1c")
    clock.advance(timedelta(seconds=8))
    cache.mark("on-demand", "c5.large", "us-east-1c")
    clock.advance(timedelta(seconds=8))
    assert cache.is_unavailable("on-demand", "c5.large", "us-east-1c")
    assert cache.seq == 2
    cache.mark("spot", "c5.large", "z", ttl=timedelta(hours=1))
    cache.mark("spot", "c5.large", "z", ttl=timedelta(seconds=1))
    assert cache.seq == 3  # the shorter mark changed nothing
    clock.advance(timedelta(minutes=30))
    assert cache.is_unavailable("spot", "c5.large", "z")
    assert not cache.is_unavailable("on-demand", "c5.large", "us-east-1c")


def test_a_whole_capacity_type_can_be_kept_out() -> None:
    clock = Clock()
    cache = UnavailableOfferings(clock=clock)
    cache.mark_capacity_type("spot", "quota", timedelta(hours=1))
    marks = cache.snapshot()
    assert marks == {} and marks.capacity_types == frozenset({"spot"})
    assert cache.is_unavailable("spot", "any.type", "any-zone")
    assert not cache.is_unavailable("on-demand", "any.type", "any-zone")
    clock.advance(timedelta(hours=1))
    assert not cache.is_unavailable("spot", "any.type", "any-zone")


def test_the_snapshot_is_shared_until_seq_changes() -> None:
    cache = UnavailableOfferings()
    cache.mark("spot", "a", "z")
    first = cache.snapshot()
    assert cache.snapshot() is first
    cache.mark("spot", "b", "z")
    assert cache.snapshot() is not first


def test_marks_are_thread_safe() -> None:
    cache = UnavailableOfferings()

    def mark(worker: int) -> None:
        for i in range(500):
            cache.mark("spot", f"type{worker}.{i}", "us-east-1a")
            if i % 100 == 0:
                assert ("spot", "us-east-1a") in cache.snapshot()[f"type{worker}.{i}"]

    threads = [threading.Thread(target=mark, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.seq == 4000
    assert sum(len(pairs) for pairs in cache.snapshot().values()) == 4000


def _offering(capacity_type: str, zone: str) -> Offering:
    return Offering(
        Requirements(
            [
                Requirement("karpenter.sh/capacity-type", False, frozenset({capacity_type})),
                Requirement("topology.kubernetes.io/zone", False, frozenset({zone})),
            ]
        ),
        1.0,
        True,
    )


def test_without_unavailable_marks_only_the_excluded_offerings() -> None:
    it = InstanceType(
        "m5.large",
        Requirements([]),
        [_offering("spot", "a"), _offering("on-demand", "a")],
        {"cpu": 2000},
    )
    assert without_unavailable(it, Marks()) is it
    marked = without_unavailable(it, Marks([("m5.large", frozenset({("spot", "a")}))]))
    assert [(o.capacity_type, o.available) for o in marked.offerings] == [
        ("spot", False),
        ("on-demand", True),
    ]
    whole = without_unavailable(it, Marks(capacity_types=frozenset({"on-demand"})))
    assert [o.available for o in whole.offerings] == [True, False]
