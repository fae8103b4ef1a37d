"""Go duration parsing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpenter_core.apis.duration import (
    NEVER,
    DurationError,
    parse_duration,
    parse_nillable_duration,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("720h", timedelta(hours=720)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("30s", timedelta(seconds=30)),
        ("0s", timedelta(0)),
        ("0", timedelta(0)),
        ("-0", timedelta(0)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        (".5s", timedelta(milliseconds=500)),
        ("1.s", timedelta(seconds=1)),
        ("-1h", timedelta(hours=-1)),
        ("+5m", timedelta(minutes=5)),
        ("2h45m30.5s", timedelta(hours=2, minutes=45, seconds=30.5)),
        ("300ms", timedelta(milliseconds=300)),
        ("10us", timedelta(microseconds=10)),
        ("10\u00b5s", timedelta(microseconds=10)),
        ("10\u03bcs", timedelta(microseconds=10)),
        ("1500ns", timedelta(microseconds=1)),  # below a microsecond is dropped
        ("1h1h", timedelta(hours=2)),  # Go adds repeated units up
        ("2562047h", timedelta(hours=2562047)),
    ],
)
def test_parses_go_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a number and a unit"),
        ("-", "expected a number and a unit"),
        ("30", "has no unit"),
        ("5d", "unknown unit 'd'"),
        ("1h-2m", "unknown unit 'h-'"),
        ("h", "expected a number"),
        (".s", "expected a number"),
        ("1.2.3s", "has no unit"),
        ("Never", "expected a number"),
        ("2562048h", "out of range"),
    ],
)
def test_rejects_what_go_rejects(text: str, message: str) -> None:
    with pytest.raises(DurationError, match=message) as raised:
        parse_duration(text)
    assert repr(text) in str(raised.value)


def test_rejects_non_strings() -> None:
    with pytest.raises(DurationError, match="expected a string"):
        parse_duration(30)  # type: ignore[arg-type]


def test_duration_error_is_a_value_error() -> None:
    assert issubclass(DurationError, ValueError)


def test_never_disables_a_nillable_duration() -> None:
    assert NEVER == "Never"
    assert parse_nillable_duration("Never") is None
    assert parse_nillable_duration("720h") == timedelta(days=30)
    with pytest.raises(DurationError):
        parse_nillable_duration("never")


@given(
    hours=st.integers(0, 100_000),
    minutes=st.integers(0, 10_000),
    seconds=st.integers(0, 10_000),
)
def test_whole_units_add_up(hours: int, minutes: int, seconds: int) -> None:
    parsed = parse_duration(f"{hours}h{minutes}m{seconds}s")
    assert parsed == timedelta(hours=hours, minutes=minutes, seconds=seconds)
