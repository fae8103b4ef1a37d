"""Go duration strings (``"720h"``, ``"30s"``, ``"1h30m"``, ``"1.5h"``) as ``timedelta``.

The syntax is Go's ``time.ParseDuration``: an optional sign, then one or more decimal numbers each
followed by a unit (``ns``, ``us``/``µs``, ``ms``, ``s``, ``m``, ``h``); ``"0"`` alone is allowed.
``timedelta`` keeps microseconds, so nanoseconds below a microsecond are dropped.
"""

from __future__ import annotations

import re
from datetime import timedelta
from fractions import Fraction

__all__ = ["NEVER", "DurationError", "parse_duration", "parse_nillable_duration"]

NEVER = "Never"
"""The value that disables a nillable duration (``expireAfter``, ``consolidateAfter``)."""

_NANOSECONDS = {
    "ns": 1,
    "us": 10**3,
    "\u00b5s": 10**3,  # micro sign
    "\u03bcs": 10**3,  # Greek small letter mu
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_MAX_NANOSECONDS = 2**63 - 1  # Go's time.Duration is an int64 of nanoseconds
_TERM = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([^0-9.]*)")
_UNITS = "ns, us, ms, s, m or h"


class DurationError(ValueError):
    """A string is not a Go duration."""


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration such as ``"1h30m"`` into a ``timedelta``."""
    if not isinstance(text, str):
        raise DurationError(f"{text!r} is not a duration: expected a string such as '1h30m'")
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return timedelta(0)
    if not body:
        raise DurationError(f"{text!r} is not a duration: expected a number and a unit, e.g. '30s'")
    total = Fraction(0)
    position = 0
    while position < len(body):
        match = _TERM.match(body, position)
        if match is None:
            raise DurationError(
                f"{text!r} is not a duration: expected a number at {body[position:]!r}"
            )
        number, unit = match.groups()
        if not unit:
            raise DurationError(f"{text!r} is not a duration: {number!r} has no unit ({_UNITS})")
        if unit not in _NANOSECONDS:
            raise DurationError(f"{text!r} is not a duration: unknown unit {unit!r} ({_UNITS})")
        total += Fraction(number) * _NANOSECONDS[unit]
        position = match.end()
    nanoseconds = int(total)
    if nanoseconds > _MAX_NANOSECONDS:
        raise DurationError(f"{text!r} is out of range (at most about 2,562,047 hours)")
    sign = -1 if text.startswith("-") else 1
    return timedelta(microseconds=sign * (nanoseconds // 1000))


def parse_nillable_duration(text: str) -> timedelta | None:
    """Like ``parse_duration``, but ``"Never"`` gives ``None`` (the duration is disabled)."""
    if text == NEVER:
        return None
    return parse_duration(text)
