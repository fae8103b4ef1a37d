"""The SDK's option parsers and the reader that names the option in every error."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from karpenter_core.sdk.record import ProviderOption
from karpenter_core.sdk.settings import (
    OptionError,
    OptionReader,
    Parser,
    boolean,
    choice,
    duration,
    fraction,
    items,
    matching,
    missing_options,
    port,
    positive_number,
    text,
    url,
    whole_number,
)
from karpenter_core.sdk.types import CloudProviderError

_WORD = re.compile(r"[a-z]+")


@pytest.mark.parametrize(
    ("parse", "given", "expected"),
    [
        (text, "  eu-west-1 ", "eu-west-1"),
        (boolean, " TRUE", True),
        (boolean, "t", True),
        (boolean, "no", False),
        (boolean, "", False),
        (duration, "1m30s", timedelta(seconds=90)),
        (duration, "0", timedelta(0)),
        (whole_number(), "0", 0),
        (whole_number(1), " 7 ", 7),
        (positive_number, "0.5", 0.5),
        (fraction, "0.075", 0.075),
        (fraction, "0", 0.0),
        (port, "0", 0),
        (port, "65535", 65535),
        (choice(("azure", "kubenet")), "azure", "azure"),
        (choice(("debug", "info"), fold=True), " INFO", "info"),
        (matching(_WORD, "a word"), "", ""),
        (matching(_WORD, "a word"), " abc ", "abc"),
        (items(matching(_WORD, "a word")), "a, b,,", ("a", "b")),
        (url("http", "https", example="http://h"), "http://[::1]:5000/", "http://[::1]:5000/"),
        (
            url("https", example="https://h", trailing_slash=False),
            "https://h:443/",
            "https://h:443",
        ),
        (url("https", example="https://h"), "", ""),
    ],
)
def test_parsers_read_good_values(parse: Parser[Any], given: str, expected: object) -> None:
    assert parse(given) == expected


@pytest.mark.parametrize(
    ("parse", "given", "message"),
    [
        (boolean, "maybe", "'maybe' is not a boolean (true or false)"),
        (duration, "soon", "'soon' is not a duration"),
        (duration, "35", "'35' is not a duration: '35' has no unit"),
        (duration, "-1m", "'-1m' is negative"),
        (whole_number(), "1.5", "'1.5' is not a whole number"),
        (whole_number(), "-1", "-1 is negative"),
        (whole_number(1), "0", "0 is below 1"),
        (positive_number, "0", "'0' is not positive"),
        (positive_number, "x", "'x' is not a number"),
        (fraction, "1", "'1' is not a fraction between 0 and 1 (e.g. 0.075)"),
        (fraction, "nan", "'nan' is not a fraction between 0 and 1"),
        (port, "65536", "65536 is not a port (0-65535; 0 picks a free one)"),
        (port, "http", "'http' is not a whole number"),
        (choice(("Respect", "Ignore")), "respect", "'respect' is not one of 'Respect', 'Ignore'"),
        (matching(_WORD, "a word"), "a b", "'a b' is not a word"),
        (items(matching(_WORD, "a word")), "a,1", "'1' is not a word"),
        (url("http", "https", example="http://h:1"), "ftp://h", "is not an http(s) URL (e.g. "),
        (url("http", "https", example="http://h:1"), "http://[::1", "is not an http(s) URL"),
        (url("http", "https", example="http://h:1"), "http://h:99999", "is not an http(s) URL"),
        (url("https", example="https://h"), "http://h", "'http://h' is not an https URL"),
        (url("https", example="https://h"), "https://h:0", "is not an https URL"),
    ],
)
def test_parsers_refuse_bad_values_in_one_line(
    parse: Parser[Any], given: str, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        parse(given)

    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


OPTIONS = (
    ProviderOption("region", "h"),
    ProviderOption("reserved-enis", "h", default="0"),
    ProviderOption("fake-endpoint-url", "h"),
)


def test_the_reader_uses_the_value_then_the_default_then_empty_text() -> None:
    get = OptionReader("fake", OPTIONS, {"region": " eu ", "reserved-enis": None})

    assert get("region", text) == "eu"
    assert get("reserved-enis", whole_number()) == 0
    assert get("fake-endpoint-url", text) == ""


def test_the_reader_names_the_options_prefixed_flag() -> None:
    with pytest.raises(OptionError) as raised:
        OptionReader("fake", OPTIONS, {"reserved-enis": "two"})("reserved-enis", whole_number())
    assert str(raised.value) == "--fake-reserved-enis: 'two' is not a whole number"

    with pytest.raises(OptionError) as raised:
        OptionReader("fake", OPTIONS, {"fake-endpoint-url": "x"})(
            "fake-endpoint-url", url("https", example="https://h")
        )
    assert str(raised.value) == "--fake-endpoint-url: 'x' is not an https URL (e.g. https://h)"


def test_an_option_error_is_a_cloud_provider_error() -> None:
    # the CLI reports CloudProviderError from a provider's factory as one line
    assert issubclass(OptionError, CloudProviderError)


def test_missing_options_name_the_flag_and_both_variables() -> None:
    options = (ProviderOption("region", "h", env="FAKE_REGION"), *OPTIONS[1:])
    values = {"region": "", "reserved-enis": 2, "fake-endpoint-url": None}
    assert missing_options("fake", options, values) == [
        "--fake-region (KARPENTER_FAKE_REGION or FAKE_REGION)",
        "--fake-endpoint-url (KARPENTER_FAKE_ENDPOINT_URL)",
    ]
