"""Node requirements algebra: In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte.

A requirement is a set of allowed label values, stored either as the values themselves or as their
complement, plus optional integer bounds. Intersection and compatibility follow upstream Karpenter.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum

from karpenter_core.apis.labels import NORMALIZED_LABELS, WELL_KNOWN_LABELS

__all__ = ["Operator", "Requirement", "RequirementError", "Requirements"]


class Operator(StrEnum):
    """Node selector operators (Gte and Lte are inclusive integer bounds)."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"
    GTE = "Gte"
    LTE = "Lte"


_BOUND_OPERATORS = frozenset({Operator.GT, Operator.LT, Operator.GTE, Operator.LTE})


class RequirementError(ValueError):
    """A requirement cannot be built from what was given."""


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


class Requirement:
    """The set of values one label key may take."""

    __slots__ = ("complement", "greater_than", "key", "less_than", "min_values", "values")

    def __init__(
        self,
        key: str,
        complement: bool,
        values: frozenset[str] = frozenset(),
        greater_than: int | None = None,
        less_than: int | None = None,
        min_values: int | None = None,
    ) -> None:
        self.key = key
        self.complement = complement
        self.values = values
        self.greater_than = greater_than
        self.less_than = less_than
        self.min_values = min_values

    @classmethod
    def new(
        cls,
        key: str,
        operator: str,
        values: Iterable[str] = (),
        min_values: int | None = None,
    ) -> Requirement:
        """Build from a node selector term; raise ``RequirementError`` on a bad operator or value."""
        key = NORMALIZED_LABELS.get(key, key)
        try:
            op = Operator(operator)
        except ValueError:
            allowed = ", ".join(o.value for o in Operator)
            raise RequirementError(
                f"unknown operator {operator!r} for key {key!r} (allowed: {allowed})"
            ) from None
        vals = [str(v) for v in values]
        if op in _BOUND_OPERATORS:
            if len(vals) != 1 or _as_int(vals[0]) is None:
                raise RequirementError(
                    f"operator {op.value} for key {key!r} takes exactly one integer value, "
                    f"got {vals}"
                )
            bound = int(vals[0])
            if op is Operator.GT:
                return cls(key, True, greater_than=bound, min_values=min_values)
            if op is Operator.GTE:
                return cls(key, True, greater_than=bound - 1, min_values=min_values)
            if op is Operator.LT:
                return cls(key, True, less_than=bound, min_values=min_values)
            return cls(key, True, less_than=bound + 1, min_values=min_values)
        if op is Operator.IN:
            if not vals:
                raise RequirementError(f"operator In for key {key!r} needs at least one value")
            return cls(key, False, frozenset(vals), min_values=min_values)
        if op is Operator.NOT_IN:
            return cls(key, True, frozenset(vals), min_values=min_values)
        if vals:
            raise RequirementError(f"operator {op.value} for key {key!r} takes no values")
        return cls(key, op is Operator.EXISTS, min_values=min_values)

    def operator(self) -> Operator:
        """The operator that describes this set (bounded sets report Exists or NotIn)."""
        if self.complement:
            return Operator.NOT_IN if self.values else Operator.EXISTS
        return Operator.IN if self.values else Operator.DOES_NOT_EXIST

    def _within_bounds(self, value: str) -> bool:
        if self.greater_than is None and self.less_than is None:
            return True
        number = _as_int(value)
        if number is None:
            return False
        if self.greater_than is not None and number <= self.greater_than:
            return False
        return self.less_than is None or number < self.less_than

    def has(self, value: str) -> bool:
        """Whether ``value`` is allowed."""
        if self.complement:
            return value not in self.values and self._within_bounds(value)
        return value in self.values and self._within_bounds(value)

    def is_empty(self) -> bool:
        """No value is allowed (DoesNotExist, or an empty intersection)."""
        return not self.complement and not self.values

    def __len__(self) -> int:
        if self.complement:
            return 2**63 - 1 - len(self.values)
        return len(self.values)

    def any(self) -> str | None:
        """A deterministic allowed value, or None when only absence is allowed."""
        if not self.complement:
            return min(self.values) if self.values else None
        low = (self.greater_than + 1) if self.greater_than is not None else 0
        high = self.less_than if self.less_than is not None else low + len(self.values) + 1
        for number in range(low, high):
            if str(number) not in self.values:
                return str(number)
        return None

    def intersection(self, other: Requirement) -> Requirement:
        """Values allowed by both; the larger minValues is kept."""
        greater = _max_optional(self.greater_than, other.greater_than)
        less = _min_optional(self.less_than, other.less_than)
        min_values = _max_optional(self.min_values, other.min_values)
        if greater is not None and less is not None and greater >= less - 1:
            return Requirement(self.key, False, min_values=min_values)
        if self.complement and other.complement:
            values = self.values | other.values
        elif self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        result = Requirement(
            self.key, self.complement and other.complement, values, greater, less, min_values
        )
        if not result.complement and (greater is not None or less is not None):
            result.values = frozenset(v for v in values if result._within_bounds(v))
        return result

    def intersects(self, other: Requirement) -> bool:
        """Whether some value (or absence, for two negative requirements) satisfies both."""
        if not self.intersection(other).is_empty():
            return True
        negative = (Operator.NOT_IN, Operator.DOES_NOT_EXIST)
        return self.operator() in negative and other.operator() in negative

    def node_selector(self) -> dict[str, object]:
        """The requirement as a node selector requirement (bounds as Gt / Lt)."""
        if self.greater_than is not None or self.less_than is not None:
            if self.greater_than is not None:
                return {"key": self.key, "operator": "Gt", "values": [str(self.greater_than)]}
            return {"key": self.key, "operator": "Lt", "values": [str(self.less_than)]}
        out: dict[str, object] = {"key": self.key, "operator": self.operator().value}
        if self.values:
            out["values"] = sorted(self.values)
        if self.min_values is not None:
            out["minValues"] = self.min_values
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirement):
            return NotImplemented
        return (
            self.key == other.key
            and self.complement == other.complement
            and self.values == other.values
            and self.greater_than == other.greater_than
            and self.less_than == other.less_than
        )

    def __hash__(self) -> int:
        return hash((self.key, self.complement, self.values, self.greater_than, self.less_than))

    def __str__(self) -> str:
        op = self.operator()
        parts = [self.key, op.value]
        if self.values:
            shown = sorted(self.values)
            parts.append(
                "["
                + ", ".join(shown[:5])
                + (f" and {len(shown) - 5} others" if len(shown) > 5 else "")
                + "]"
            )
        if self.greater_than is not None:
            parts.append(f">{self.greater_than}")
        if self.less_than is not None:
            parts.append(f"<{self.less_than}")
        return " ".join(parts)

    __repr__ = __str__


def _max_optional(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _min_optional(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


class Requirements(Mapping[str, Requirement]):
    """Requirements keyed by label; adding a key that is present intersects the two."""

    __slots__ = ("_items",)

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        self._items: dict[str, Requirement] = {}
        self.add(*requirements)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """One single-valued In requirement per label."""
        return cls(
            Requirement(NORMALIZED_LABELS.get(k, k), False, frozenset((v,)))
            for k, v in labels.items()
        )

    @classmethod
    def from_node_selector(cls, terms: Iterable[Mapping[str, object]]) -> Requirements:
        """From node selector requirements (``key``, ``operator``, ``values``, ``minValues``)."""
        return cls(
            Requirement.new(
                str(t["key"]),
                str(t["operator"]),
                t.get("values") or (),  # type: ignore[arg-type]
                t.get("minValues"),  # type: ignore[arg-type]
            )
            for t in terms
        )

    def add(self, *requirements: Requirement) -> None:
        """Intersect each requirement into this set."""
        items = self._items
        for requirement in requirements:
            existing = items.get(requirement.key)
            items[requirement.key] = (
                requirement if existing is None else existing.intersection(requirement)
            )

    def copy(self) -> Requirements:
        """A shallow copy (requirements themselves are never mutated)."""
        clone = Requirements()
        clone._items = dict(self._items)
        return clone

    def __getitem__(self, key: str) -> Requirement:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def get_or_exists(self, key: str) -> Requirement:
        """The requirement on ``key``; an absent key allows any value (Exists)."""
        return self._items.get(key) or Requirement(key, True)

    def compatible(
        self, incoming: Requirements, allow_undefined: frozenset[str] = WELL_KNOWN_LABELS
    ) -> str | None:
        """Why ``incoming`` cannot be met here, or None.

        A key ``incoming`` requires must be defined here unless it is in ``allow_undefined`` or is
        only negative (NotIn / DoesNotExist); shared keys must intersect.
        """
        for key, requirement in incoming._items.items():
            if key in self._items or key in allow_undefined:
                continue
            if requirement.operator() in (Operator.NOT_IN, Operator.DOES_NOT_EXIST):
                continue
            return f"label {key!r} does not have known values"
        return self.intersects(incoming)

    def intersects(self, incoming: Requirements) -> str | None:
        """Why a shared key has no common value, or None."""
        mine = self._items
        for key, requirement in incoming._items.items():
            existing = mine.get(key)
            if existing is not None and not existing.intersects(requirement):
                return f"{requirement} conflicts with {existing}"
        return None

    def labels(self) -> dict[str, str]:
        """Labels implied by single-valued In requirements."""
        return {
            key: next(iter(r.values))
            for key, r in self._items.items()
            if not r.complement and len(r.values) == 1
        }

    def node_selector(self) -> list[dict[str, object]]:
        """As node selector requirements, sorted by key."""
        return [self._items[k].node_selector() for k in sorted(self._items)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirements):
            return NotImplemented
        return self._items == other._items

    def __hash__(self) -> int:
        return hash(frozenset(self._items.values()))

    def __repr__(self) -> str:
        return "Requirements(" + "; ".join(str(r) for r in self._items.values()) + ")"
