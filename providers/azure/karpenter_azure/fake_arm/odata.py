"""The part of OData's ``$filter`` that the Retail Prices and Resource SKUs APIs are queried with:
``eq``/``ne``/``gt``/``ge``/``lt``/``le`` comparisons, ``contains``/``startswith``/``endswith``,
``and``, ``or``, ``not`` and parentheses."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Mapping[str, Any]], bool]

_TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>-?\d+(?:\.\d+)?)|(?P<punct>[(),])"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))"
)
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "gt": lambda a, b: a is not None and a > b,
    "ge": lambda a, b: a is not None and a >= b,
    "lt": lambda a, b: a is not None and a < b,
    "le": lambda a, b: a is not None and a <= b,
}
_FUNCTIONS: dict[str, Callable[[str, str], bool]] = {
    "contains": lambda a, b: b in a,
    "startswith": lambda a, b: a.startswith(b),
    "endswith": lambda a, b: a.endswith(b),
}


class FilterError(ValueError):
    """A ``$filter`` this parser does not understand."""


def _tokens(text: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if not match:
            raise FilterError(f"cannot read $filter at {text[position:]!r}")
        position = match.end()
        kind = match.lastgroup or ""
        value: Any = match.group(kind)
        if kind == "string":
            value = value[1:-1].replace("''", "'")
        elif kind == "number":
            value = float(value)
        elif kind == "word" and value in ("true", "false"):
            kind, value = "bool", value == "true"
        tokens.append((kind, value))
    return tokens


class _Parser:
    def __init__(self, text: str, aliases: Mapping[str, str]) -> None:
        self.tokens = _tokens(text)
        self.position = 0
        self.aliases = aliases

    def peek(self) -> tuple[str, Any]:
        return self.tokens[self.position] if self.position < len(self.tokens) else ("end", None)

    def take(self, kind: str, value: Any = None) -> Any:
        token = self.peek()
        if token[0] != kind or (value is not None and token[1] != value):
            raise FilterError(f"expected {value or kind} in $filter, found {token[1]!r}")
        self.position += 1
        return token[1]

    def field(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        key = self.aliases.get(name, name)
        return lambda record: record.get(key)

    def literal(self) -> Any:
        kind, value = self.peek()
        if kind not in ("string", "number", "bool"):
            raise FilterError(f"expected a literal in $filter, found {value!r}")
        self.position += 1
        return value

    def expression(self) -> Predicate:
        left = self.conjunction()
        while self.peek() == ("word", "or"):
            self.position += 1
            right = self.conjunction()
            left = (lambda a, b: lambda r: a(r) or b(r))(left, right)
        return left

    def conjunction(self) -> Predicate:
        left = self.factor()
        while self.peek() == ("word", "and"):
            self.position += 1
            right = self.factor()
            left = (lambda a, b: lambda r: a(r) and b(r))(left, right)
        return left

    def factor(self) -> Predicate:
        kind, value = self.peek()
        if (kind, value) == ("punct", "("):
            self.position += 1
            inner = self.expression()
            self.take("punct", ")")
            return inner
        if (kind, value) == ("word", "not"):
            self.position += 1
            negated = self.factor()
            return lambda r: not negated(r)
        name = self.take("word")
        if name in _FUNCTIONS and self.peek() == ("punct", "("):
            self.position += 1
            getter = self.field(self.take("word"))
            self.take("punct", ",")
            needle = self.literal()
            self.take("punct", ")")
            test = _FUNCTIONS[name]
            return lambda r: isinstance(getter(r), str) and test(getter(r), str(needle))
        operator = self.take("word")
        if operator not in _COMPARISONS:
            raise FilterError(f"unknown operator {operator!r} in $filter")
        getter, literal, compare = self.field(name), self.literal(), _COMPARISONS[operator]
        return lambda r: compare(getter(r), literal)


def parse(text: str, aliases: Mapping[str, str] | None = None) -> Predicate:
    """A predicate over records (dicts) for ``text``; ``aliases`` maps filter field names to
    record keys (the Retail Prices API filters ``priceType`` on the ``type`` field)."""
    if not text.strip():
        return lambda _: True
    parser = _Parser(text, aliases or {})
    predicate = parser.expression()
    if parser.peek()[0] != "end":
        raise FilterError(f"unexpected {parser.peek()[1]!r} in $filter")
    return predicate
