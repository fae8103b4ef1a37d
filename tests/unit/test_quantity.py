from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpenter_core.apis.quantity import QuantityError, format_quantity, parse_quantity, to_milli


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        ("2Gi", 2 * 2**30),
        ("1e3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("0.1", Fraction(1, 10)),
        ("128974848", 128974848),
        ("129e6", 129_000_000),
        ("123Mi", 123 * 2**20),
        ("1k", 1000),
        ("1M", 10**6),
        ("1E", 10**18),
        (".5", Fraction(1, 2)),
        ("+2", 2),
        ("-1", -1),
        ("250u", Fraction(250, 10**6)),
    ],
)
def test_parses_kubernetes_forms_exactly(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "1.2.3", "1Gb", "1 Gi", "Gi", "--1", "1e", "0x10"])
def test_rejects_what_the_apiserver_rejects(text):
    with pytest.raises(QuantityError, match="not a quantity"):
        parse_quantity(text)


def test_no_float_drift_when_summing():
    assert sum(parse_quantity("0.1") for _ in range(10)) == 1
    assert to_milli(parse_quantity("0.1")) * 3 == to_milli(parse_quantity("0.3"))


def test_to_milli_rounds_up_like_kubernetes():
    assert to_milli(parse_quantity("0.0001")) == 1
    assert to_milli(parse_quantity("1500m")) == 1500


@given(st.decimals(min_value=0, max_value=10**9, places=3, allow_nan=False, allow_infinity=False))
def test_decimal_strings_parse_exactly(value: Decimal):
    assert parse_quantity(str(value)) == Fraction(value)


@given(st.integers(min_value=0, max_value=2**50), st.sampled_from(["Ki", "Mi", "Gi", "Ti"]))
def test_binary_suffixes(n: int, suffix: str):
    factor = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[suffix]
    assert parse_quantity(f"{n}{suffix}") == n * factor


@given(st.integers(min_value=-(10**15), max_value=10**15), st.booleans())
def test_format_round_trips_milli_values(milli: int, binary: bool):
    value = Fraction(milli, 1000)
    assert parse_quantity(format_quantity(value, binary)) == value
