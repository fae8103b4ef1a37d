import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpenter_core.apis.requirements import (
    Operator,
    Requirement,
    RequirementError,
    Requirements,
)

VALUES = ["1", "2", "3", "5", "8", "a", "b"]
values = st.lists(st.sampled_from(VALUES), min_size=1, max_size=4, unique=True)


@st.composite
def requirements(draw, key="k"):
    operator = draw(st.sampled_from(list(Operator)))
    if operator in (Operator.IN, Operator.NOT_IN):
        return Requirement.new(key, operator, draw(values))
    if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        return Requirement.new(key, operator)
    return Requirement.new(key, operator, [str(draw(st.integers(min_value=-1, max_value=9)))])


probe = st.sampled_from([*VALUES, "0", "4", "9", "10", "-1", "z"])


@given(requirements(), requirements(), probe)
def test_intersection_allows_exactly_what_both_allow(a, b, value):
    assert a.intersection(b).has(value) == (a.has(value) and b.has(value))


@given(requirements(), requirements())
def test_intersects_is_symmetric(a, b):
    assert a.intersects(b) == b.intersects(a)


@given(requirements(), requirements(), requirements(), probe)
def test_intersection_is_associative(a, b, c, value):
    left = a.intersection(b).intersection(c)
    right = a.intersection(b.intersection(c))
    assert left.has(value) == right.has(value)


@given(st.integers(min_value=-5, max_value=20), probe)
def test_inclusive_bounds_match_strict_ones(n, value):
    assert Requirement.new("k", "Gte", [str(n)]).has(value) == Requirement.new(
        "k", "Gt", [str(n - 1)]
    ).has(value)
    assert Requirement.new("k", "Lte", [str(n)]).has(value) == Requirement.new(
        "k", "Lt", [str(n + 1)]
    ).has(value)


@given(requirements(), probe)
def test_any_returns_an_allowed_value(a, _value):
    chosen = a.any()
    if chosen is not None:
        assert a.has(chosen)


def test_operators_as_upstream():
    assert Requirement.new("k", "In", ["a"]).operator() is Operator.IN
    assert Requirement.new("k", "NotIn", ["a"]).operator() is Operator.NOT_IN
    assert Requirement.new("k", "Exists").operator() is Operator.EXISTS
    assert Requirement.new("k", "DoesNotExist").operator() is Operator.DOES_NOT_EXIST
    gt = Requirement.new("k", "Gt", ["4"])
    assert gt.has("5") and not gt.has("4") and not gt.has("x")


@pytest.mark.parametrize(
    ("operator", "vals", "message"),
    [
        ("Matches", ["a"], "unknown operator 'Matches'"),
        ("In", [], "needs at least one value"),
        ("Exists", ["a"], "takes no values"),
        ("Gt", ["a"], "exactly one integer"),
        ("Lt", ["1", "2"], "exactly one integer"),
    ],
)
def test_bad_requirements_are_refused(operator, vals, message):
    with pytest.raises(RequirementError, match=message):
        Requirement.new("k", operator, vals)


def test_beta_labels_are_normalised():
    req = Requirement.new("failure-domain.beta.kubernetes.io/zone", "In", ["z"])
    assert req.key == "topology.kubernetes.io/zone"


def test_undefined_custom_label_is_incompatible_but_well_known_is_allowed():
    nodepool = Requirements([Requirement.new("karpenter.sh/capacity-type", "In", ["spot"])])
    custom = Requirements([Requirement.new("team", "In", ["a"])])
    zone = Requirements([Requirement.new("topology.kubernetes.io/zone", "In", ["z"])])
    assert "does not have known values" in nodepool.compatible(custom)
    assert nodepool.compatible(zone) is None
    negative = Requirements([Requirement.new("team", "NotIn", ["a"])])
    assert nodepool.compatible(negative) is None


def test_two_negative_requirements_are_compatible_even_when_disjoint():
    a = Requirements([Requirement.new("k", "DoesNotExist")])
    b = Requirements([Requirement.new("k", "NotIn", ["x"])])
    assert a.compatible(b) is None
    c = Requirements([Requirement.new("k", "In", ["x"])])
    assert a.compatible(c) is not None


def test_adding_intersects_and_keeps_largest_min_values():
    reqs = Requirements([Requirement.new("k", "In", ["a", "b", "c"], min_values=2)])
    reqs.add(Requirement.new("k", "NotIn", ["a"], min_values=1))
    assert reqs["k"].values == frozenset({"b", "c"})
    assert reqs["k"].min_values == 2


def test_labels_come_from_single_valued_in():
    reqs = Requirements.from_node_selector(
        [
            {"key": "a", "operator": "In", "values": ["x"]},
            {"key": "b", "operator": "In", "values": ["x", "y"]},
            {"key": "c", "operator": "Exists"},
        ]
    )
    assert reqs.labels() == {"a": "x"}
