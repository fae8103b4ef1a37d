"""Kubernetes resource quantities, parsed exactly.

The official client's parser pulls in the whole Kubernetes client (about 1.5 s of imports), and the
scheduling code must stay free of I/O libraries, so quantities are parsed here into ``Fraction``s:
no float drift, and every value the apiserver accepts round-trips.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["QuantityError", "format_quantity", "parse_quantity", "to_milli"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exp>[+-]?[0-9]+))?$"
)


class QuantityError(ValueError):
    """A value is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float | Fraction) -> Fraction:
    """Parse ``"100m"``, ``"1.5"``, ``"2Gi"``, ``"1e3"`` (or a number) into an exact ``Fraction``."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, Fraction | int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(
            f"{value!r} is not a quantity (expected a number with an optional suffix such as "
            "100m, 1.5, 2Gi, 1e3)"
        )
    number = Fraction(match["num"])
    if match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > 30:
            raise QuantityError(f"{value!r} is out of range")
        number *= Fraction(10) ** exponent
    else:
        suffix = match["suffix"] or ""
        number *= _BINARY.get(suffix) or _DECIMAL[suffix]
    return -number if match["sign"] == "-" else number


def to_milli(value: Fraction) -> int:
    """Whole thousandths, rounded up as Kubernetes rounds requests (``0.0001`` CPU is ``1m``)."""
    return math.ceil(value * 1000)


def format_quantity(value: Fraction, binary: bool = False) -> str:
    """Shortest exact rendering: ``1500m``, ``2``, ``2Gi`` (``binary``) or ``1500M``."""
    if value < 0:
        return "-" + format_quantity(-value, binary)
    if value.denominator != 1:
        milli = value * 1000
        if milli.denominator == 1:
            return f"{milli.numerator}m"
        return f"{to_milli(value)}m"
    whole = value.numerator
    if whole == 0:
        return "0"
    if binary:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if whole % _BINARY[suffix] == 0:
                return f"{whole // _BINARY[suffix]}{suffix}"
        return str(whole)
    for suffix in ("E", "P", "T", "G", "M", "k"):
        factor = _DECIMAL[suffix].numerator
        if whole % factor == 0:
            return f"{whole // factor}{suffix}"
    return str(whole)
