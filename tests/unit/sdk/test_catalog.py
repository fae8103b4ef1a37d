"""The SDK's catalog machinery: data refreshed on a TTL, and instance types cached per inputs."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.sdk.catalog import InstanceTypeCache, RefreshedData, packaged_json
from karpenter_core.sdk.offerings import Marks, UnavailableOfferings
from karpenter_core.sdk.types import CloudProviderError, InstanceType, Offering

HOUR = timedelta(hours=1)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Source:
    """A cloud answering ``value``, or failing while ``failing``."""

    def __init__(self) -> None:
        self.value = ["a"]
        self.failing = False
        self.reads = 0

    def __call__(self) -> list[str]:
        self.reads += 1
        if self.failing:
            raise CloudProviderError("reading things: throttled")
        return list(self.value)


def refreshed(source: Source, clock: Clock, **kwargs: object) -> RefreshedData[list[str]]:
    return RefreshedData(
        source, what="things", interval=HOUR, retry=timedelta(minutes=1), clock=clock, **kwargs
    )


def test_read_on_first_use_and_again_once_stale() -> None:
    source, clock = Source(), Clock()
    data = refreshed(source, clock)
    assert data.live and data.version == 0 and source.reads == 0
    assert data.current() == ["a"] and data.version == 1
    assert data.current() == ["a"] and source.reads == 1
    clock.now += HOUR
    source.value = ["a", "b"]
    assert data.current() == ["a", "b"] and data.version == 2 and source.reads == 2


def test_the_same_answer_keeps_the_version_and_the_object() -> None:
    source, clock = Source(), Clock()
    changes: list[list[str]] = []
    data = refreshed(source, clock, on_change=changes.append)
    first = data.current()
    clock.now += HOUR
    assert data.current() is first and data.version == 1
    assert changes == [["a"]]


def test_a_failed_read_keeps_the_data_and_is_retried_after_the_retry_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, clock = Source(), Clock()
    data = refreshed(source, clock)
    data.current()
    clock.now += HOUR
    source.failing = True
    assert data.current() == ["a"]
    assert "throttled; keeping the things read before" in caplog.text
    assert data.current() == ["a"] and source.reads == 2  # not retried at once
    clock.now += timedelta(minutes=1)
    source.failing = False
    source.value = ["c"]
    assert data.current() == ["c"] and source.reads == 3
    source.failing = True
    with pytest.raises(CloudProviderError, match="throttled"):
        data.refresh()
    assert data.current() == ["c"]


def test_without_data_a_failed_read_raises() -> None:
    source, clock = Source(), Clock()
    source.failing = True
    with pytest.raises(CloudProviderError, match="throttled"):
        refreshed(source, clock).current()


def test_offline_data_is_never_read() -> None:
    data: RefreshedData[list[str]] = RefreshedData(
        None, what="things", interval=HOUR, retry=HOUR, initial=["packaged"]
    )
    assert not data.live and data.version == 1
    data.refresh()
    assert data.current() == ["packaged"]


def test_one_read_at_a_time_and_callers_with_data_are_not_held_up() -> None:
    clock = Clock()
    entered, release = threading.Event(), threading.Event()
    reads: list[int] = []

    def slow() -> list[str]:
        reads.append(1)
        if len(reads) > 1:
            entered.set()
            release.wait(10)
        return ["new"]

    data: RefreshedData[list[str]] = RefreshedData(
        slow, what="things", interval=HOUR, retry=HOUR, clock=clock
    )
    data.current()
    clock.now += HOUR
    refresher = threading.Thread(target=data.current)
    refresher.start()
    try:
        assert entered.wait(10)
        assert data.current() == ["new"] and len(reads) == 2  # the stale data, no second read
    finally:
        release.set()
        refresher.join(10)


def test_a_background_refresh_runs_when_due_and_callers_keep_the_data_meanwhile() -> None:
    clock = Clock()
    entered, release = threading.Event(), threading.Event()
    reads: list[int] = []

    def slow() -> list[str]:
        reads.append(1)
        entered.set()
        release.wait(10)
        return [f"read {len(reads)}"]

    data: RefreshedData[list[str]] = RefreshedData(
        slow, what="prices", interval=HOUR, retry=HOUR, initial=["packaged"], clock=clock
    )
    thread = data.refresh_in_background()
    assert thread is not None and thread.daemon
    try:
        assert entered.wait(10)
        assert data.latest == ["packaged"] and data.current() == ["packaged"]
        assert data.refresh_in_background() is None  # one read at a time
    finally:
        release.set()
        thread.join(10)
    assert data.latest == ["read 1"] and data.version == 2
    assert data.refresh_in_background() is None  # not due yet
    clock.now += HOUR
    again = data.refresh_in_background()
    assert again is not None
    again.join(10)
    assert data.latest == ["read 2"] and len(reads) == 2


def test_a_failed_background_read_keeps_the_data_is_retried_later_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, clock = Source(), Clock()
    source.failing = True
    data = refreshed(source, clock, initial=["packaged"])
    for _ in range(2):
        thread = data.refresh_in_background()
        assert thread is not None
        thread.join(10)
        assert data.latest == ["packaged"] and data.version == 1
        assert data.refresh_in_background() is None  # retried after the retry interval only
        clock.now += timedelta(minutes=1)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert [r.getMessage() for r in warnings] == [
        "reading things: throttled; keeping the things read before"
    ]
    source.failing = False
    thread = data.refresh_in_background()
    assert thread is not None
    thread.join(10)
    assert data.latest == ["a"] and source.reads == 3


def test_try_refresh_reads_now_and_logs_a_failure_instead_of_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, clock = Source(), Clock()
    data = refreshed(source, clock, initial=["packaged"])
    assert data.try_refresh() and data.latest == ["a"] and data.version == 2
    assert data.try_refresh() and source.reads == 2  # read though not stale
    source.failing = True
    assert not data.try_refresh() and not data.try_refresh()
    assert data.latest == ["a"] and data.version == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["reading things: throttled; keeping the things read before"]
    assert data.refresh_in_background() is None  # retried after the retry interval only
    assert not RefreshedData(None, what="things", initial=["packaged"]).try_refresh()


def test_latest_never_reads() -> None:
    source, clock = Source(), Clock()
    data = refreshed(source, clock)
    assert data.latest is None and source.reads == 0
    assert data.current() == ["a"] and data.latest == ["a"] and source.reads == 1


def test_packaged_json_reads_a_gzipped_file_of_a_package() -> None:
    source = packaged_json("karpenter_aws", "data/regions.json.gz")
    assert "us-east-1" in source["regions"]
    assert packaged_json("karpenter_aws", "data/regions.json.gz") is source


def _type(name: str, marks: Marks) -> InstanceType:
    offerings = [
        Offering(
            Requirements.from_labels({wk.CAPACITY_TYPE: ct, wk.TOPOLOGY_ZONE: "z"}),
            1.0,
            not marks.excludes(ct, name, "z"),
        )
        for ct in ("spot", "on-demand")
    ]
    return InstanceType(name, Requirements([]), offerings, {"cpu": 1000})


def test_instance_types_are_cached_and_only_changed_marks_rebuilt() -> None:
    unavailable = UnavailableOfferings()
    cache: InstanceTypeCache[str] = InstanceTypeCache(unavailable, 2)
    built: list[str] = []

    def build_all(marks: Marks) -> list[InstanceType]:
        built.append("all")
        return [_type(name, marks) for name in ("a", "b")]

    def rebuild(name: str, marks: Marks) -> InstanceType | None:
        built.append(name)
        return None if name == "gone" else _type(name, marks)

    first = cache.get("k", (1, 1), build_all, rebuild)
    assert cache.get("k", (1, 1), build_all, rebuild) is first and built == ["all"]
    unavailable.mark("spot", "b", "z")
    second = cache.get("k", (1, 1), build_all, rebuild)
    assert built == ["all", "b"]
    assert second[0] is first[0] and not second[1].offerings[0].available
    cache.get("k", (2, 1), build_all, rebuild)  # new data: everything rebuilt
    assert built == ["all", "b", "all"]
    unavailable.mark_capacity_type("spot", "quota")
    cache.get("k", (2, 1), build_all, rebuild)  # a whole capacity type: everything rebuilt
    assert built[-1] == "all"


def test_the_least_recently_used_inputs_go_first() -> None:
    cache: InstanceTypeCache[str] = InstanceTypeCache(UnavailableOfferings(), 2)
    built: list[int] = []

    def build_all(marks: Marks) -> list[InstanceType]:
        built.append(1)
        return [_type("a", marks)]

    def rebuild(name: str, marks: Marks) -> InstanceType | None:
        return None

    one = cache.get("one", (1,), build_all, rebuild)
    two = cache.get("two", (1,), build_all, rebuild)
    assert cache.get("one", (1,), build_all, rebuild) is one
    cache.get("three", (1,), build_all, rebuild)
    assert len(cache) == 2 and len(built) == 3
    assert cache.get("one", (1,), build_all, rebuild) is one
    assert cache.get("two", (1,), build_all, rebuild) is not two  # it went, and is built again
    assert len(built) == 4
