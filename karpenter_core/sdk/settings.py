"""Parsing option values: typed parsers, and a reader that names the option in every error.

A parser takes the option's text and returns its value, or raises ``ValueError`` with one line
that quotes the bad value (``'soon' is not a duration ...``). ``OptionReader`` reads a
provider's ``ProviderContext.settings`` with them and turns a ``ValueError`` into an
``OptionError`` naming the option's flag: ``--aws-region: 'us east 1' is not an AWS region
name (e.g. us-east-1)``. The core's own settings use the same parsers. ``missing_options`` names
the settings a provider needs for an action (a launch) that are not set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from karpenter_core.apis.duration import parse_duration
from karpenter_core.cloudprovider.plugin import ProviderOption, option_env, option_flag
from karpenter_core.cloudprovider.types import CloudProviderError

__all__ = [
    "OptionError",
    "OptionReader",
    "Parser",
    "boolean",
    "choice",
    "duration",
    "fraction",
    "items",
    "matching",
    "missing_options",
    "port",
    "positive_number",
    "text",
    "url",
    "whole_number",
]

T = TypeVar("T")
Parser = Callable[[str], T]
"""Turns an option's text into its value; raises ``ValueError`` quoting the bad text."""

_TRUE = ("true", "1", "t", "yes")
_FALSE = ("false", "0", "f", "no", "")


class OptionError(CloudProviderError):
    """An option has a value that cannot be used; the message names the option first."""


def text(value: str) -> str:
    """The text without surrounding whitespace."""
    return value.strip()


def boolean(value: str) -> bool:
    """``true``/``1``/``t``/``yes`` or ``false``/``0``/``f``/``no``/empty, in any case."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{value!r} is not a boolean (true or false)")


def duration(value: str) -> timedelta:
    """A Go duration (``35ms``, ``1m30s``), not negative."""
    parsed = parse_duration(value.strip())
    if parsed < timedelta(0):
        raise ValueError(f"{value!r} is negative")
    return parsed


def whole_number(minimum: int = 0) -> Parser[int]:
    """A parser of whole numbers of at least ``minimum``."""

    def parse(value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not a whole number") from None
        if number < minimum:
            raise ValueError(f"{number} is {'negative' if minimum == 0 else f'below {minimum}'}")
        return number

    return parse


def positive_number(value: str) -> float:
    """A number above zero."""
    try:
        number = float(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None
    if not number > 0:
        raise ValueError(f"{value!r} is not positive")
    return number


def fraction(value: str) -> float:
    """A number from 0 up to, not including, 1."""
    try:
        number = float(value.strip())
    except ValueError:
        number = float("nan")
    if not 0 <= number < 1:
        raise ValueError(f"{value!r} is not a fraction between 0 and 1 (e.g. 0.075)")
    return number


def port(value: str) -> int:
    """A TCP port, 0 to 65535 (0 picks a free one)."""
    number = whole_number()(value)
    if number > 65535:
        raise ValueError(f"{number} is not a port (0-65535; 0 picks a free one)")
    return number


def choice(choices: Sequence[str], *, fold: bool = False) -> Parser[str]:
    """A parser accepting one of ``choices`` (``fold``: in any case, given in lower case)."""

    def parse(value: str) -> str:
        word = value.strip().lower() if fold else value.strip()
        if word not in choices:
            shown = ", ".join(repr(c) for c in choices)
            raise ValueError(f"{value!r} is not one of {shown}")
        return word

    return parse


def matching(pattern: re.Pattern[str], what: str) -> Parser[str]:
    """A parser of text that is empty or matches ``pattern`` whole; ``what`` names the kind of
    value in the error (``a subscription ID (GUID)``)."""

    def parse(value: str) -> str:
        word = value.strip()
        if word and pattern.fullmatch(word) is None:
            raise ValueError(f"{value!r} is not {what}")
        return word

    return parse


def items(parse_item: Parser[T], separator: str = ",") -> Parser[tuple[T, ...]]:
    """A parser of a ``separator``-separated list (empty items skipped), each item parsed."""

    def parse(value: str) -> tuple[T, ...]:
        return tuple(parse_item(part) for part in value.split(separator) if part.strip())

    return parse


def url(*schemes: str, example: str, trailing_slash: bool = True) -> Parser[str]:
    """A parser of URLs with one of ``schemes`` and a host (empty allowed); ``example`` shows a
    good one in the error; ``trailing_slash=False`` drops a trailing ``/``."""
    kinds = "http(s)" if set(schemes) == {"http", "https"} else "/".join(schemes)

    def parse(value: str) -> str:
        address = value.strip()
        if not address:
            return address
        try:
            parts = urlsplit(address)
            valid = parts.scheme in schemes and bool(parts.hostname) and parts.port != 0
        except ValueError:  # a malformed IPv6 host or port
            valid = False
        if not valid:
            raise ValueError(f"{value!r} is not an {kinds} URL (e.g. {example})")
        return address if trailing_slash else address.rstrip("/")

    return parse


class OptionReader:
    """Reads the values of one provider's declared options (``ProviderContext.settings``,
    keyed by option name), each with its parser; a missing value is the option's default,
    else empty text. A bad value raises ``OptionError`` naming the option's flag."""

    def __init__(
        self, provider: str, options: Sequence[ProviderOption], values: Mapping[str, Any]
    ) -> None:
        self._provider = provider
        self._options = {option.name: option for option in options}
        self._values = values

    def __call__(self, name: str, parse: Parser[T]) -> T:
        """The value of option ``name`` parsed with ``parse``."""
        option = self._options[name]
        raw = self._values.get(name)
        if raw is None:
            raw = option.default
        try:
            return parse("" if raw is None else str(raw))
        except ValueError as error:
            raise OptionError(f"{option_flag(self._provider, name)}: {error}") from None


def missing_options(
    provider: str, options: Sequence[ProviderOption], values: Mapping[str, object]
) -> list[str]:
    """The options of ``values`` (parsed values by option name) that are empty, in its order,
    each as ``--<provider>-<name> (KARPENTER_<PROVIDER>_<NAME> or <its env>)``: what a provider
    names when settings it needs to launch are missing."""
    declared = {option.name: option for option in options}
    missing = []
    for name, value in values.items():
        if value:
            continue
        former = declared[name].env
        names = option_env(provider, name) + (f" or {former}" if former else "")
        missing.append(f"{option_flag(provider, name)} ({names})")
    return missing
