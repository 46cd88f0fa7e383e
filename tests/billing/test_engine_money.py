"""Rule 7: Decimal only, half-even at line level, splits that add up to the cent."""

import decimal
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.engine.money import money_context, round_cents, split_largest_remainder


@pytest.mark.parametrize(
    ("exact", "cents"),
    [
        ("0.125", "0.12"),  # half to even: down
        ("0.135", "0.14"),  # half to even: up
        ("-0.125", "-0.12"),
        ("2.675", "2.68"),  # exact Decimal, not the float 2.67499…
        ("10", "10.00"),
    ],
)
def test_round_cents_half_even(exact, cents):
    assert round_cents(Decimal(exact)) == Decimal(cents)


def test_round_cents_refuses_floats():
    with pytest.raises(TypeError, match="money must be Decimal, got float"):
        round_cents(2.675)  # type: ignore[arg-type]


def test_money_context_traps_any_float():
    with money_context(), pytest.raises(decimal.FloatOperation):
        Decimal("1.00") * Decimal(0.1)  # noqa: RUF032 - the float is the point
    with money_context(), pytest.raises(decimal.FloatOperation):
        _ = Decimal("1.00") < 0.5


def test_split_hands_leftover_cents_to_largest_remainders():
    # 100.00 over three equal parties: 33.33 each, one cent left, tie → first given.
    assert split_largest_remainder(Decimal("100.00"), [("a", 1), ("b", 1), ("c", 1)]) == {
        "a": Decimal("33.34"),
        "b": Decimal("33.33"),
        "c": Decimal("33.33"),
    }


def test_split_tie_break_prefers_larger_weight_then_given_order():
    # 5 cents over weights 3:2:3:2 → exact shares 1.5, 1.0, 1.5, 1.0 cents; floors hand out 4,
    # the last cent goes to the largest remainder: "a" and "c" tie (0.5, same weight) → "a".
    assert split_largest_remainder(Decimal("0.05"), [("a", 3), ("b", 2), ("c", 3), ("d", 2)]) == {
        "a": Decimal("0.02"),
        "b": Decimal("0.01"),
        "c": Decimal("0.01"),
        "d": Decimal("0.01"),
    }


def test_split_by_basis_points_with_operator_remainder():
    # A GPU earned 10.01; alice owns 3,333 bps, bob 3,333, the operator the other 3,334.
    parts = split_largest_remainder(
        Decimal("10.01"), [("alice", 3333), ("bob", 3333), ("operator", 3334)]
    )
    assert parts == {"alice": Decimal("3.34"), "bob": Decimal("3.33"), "operator": Decimal("3.34")}


def test_split_negative_amounts_mirror_positive_ones():
    positive = split_largest_remainder(Decimal("1.00"), [("a", 1), ("b", 2)])
    negative = split_largest_remainder(Decimal("-1.00"), [("a", 1), ("b", 2)])
    assert negative == {k: -v for k, v in positive.items()}


@pytest.mark.parametrize(
    ("total", "weights", "error", "message"),
    [
        (Decimal("1.001"), [("a", 1)], ValueError, "not a whole number of 0.01"),
        (Decimal("1.00"), [("a", 0), ("b", 0)], ValueError, "weights are all 0"),
        (Decimal("1.00"), [("a", -1)], ValueError, "must not be negative"),
        (Decimal("1.00"), [("a", 1), ("a", 2)], ValueError, "each party may appear once"),
        (Decimal("1.00"), [("a", 0.5)], TypeError, "weights must be Decimal or int"),
    ],
)
def test_split_rejects_bad_input(total, weights, error, message):
    with pytest.raises(error, match=message):
        split_largest_remainder(total, weights)


def test_split_of_zero_is_zero_for_everyone():
    assert split_largest_remainder(Decimal("0.00"), [("a", 0), ("b", 5)]) == {
        "a": Decimal("0.00"),
        "b": Decimal("0.00"),
    }


cents = st.integers(min_value=-(10**9), max_value=10**9).map(lambda c: Decimal(c) / 100)
weight = st.one_of(
    st.integers(min_value=0, max_value=10_000),
    st.decimals(min_value=0, max_value=10**6, places=6, allow_nan=False, allow_infinity=False),
)


@given(total=cents, weights=st.lists(weight, min_size=1, max_size=40))
def test_split_always_sums_to_the_whole_to_the_cent(total, weights):
    named = [(i, w) for i, w in enumerate(weights)]
    if sum(Decimal(w) for w in weights) == 0 and total != 0:
        return
    parts = split_largest_remainder(total, named)
    assert sum(parts.values(), Decimal(0)) == total
    assert all(p == p.quantize(Decimal("0.01")) for p in parts.values())
    # No party is more than one cent away from its exact share.
    weight_sum = sum(Decimal(w) for w in weights)
    if weight_sum:
        with decimal.localcontext() as ctx:
            ctx.prec = 60
            for i, w in named:
                assert abs(parts[i] - total * Decimal(w) / weight_sum) < Decimal("0.01")


def _split_by_fractions(total, weights):
    """The split as first written, with exact rationals: the reference for the integer one."""
    import math
    from fractions import Fraction

    amounts = [Decimal(w) for _, w in weights]
    weight_sum = sum(amounts, Decimal(0))
    if total == 0:
        return {key: Decimal("0.00") for key, _ in weights}
    sign = 1 if total > 0 else -1
    units = int(abs(total) / Decimal("0.01"))
    exact = [Fraction(units) * Fraction(w) / Fraction(weight_sum) for w in amounts]
    floors = [math.floor(share) for share in exact]
    remainders = [share - floor for share, floor in zip(exact, floors, strict=True)]
    order = sorted(range(len(weights)), key=lambda i: (-remainders[i], -amounts[i], i))
    for i in order[: units - sum(floors)]:
        floors[i] += 1
    return {key: (sign * floors[i]) * Decimal("0.01") for i, (key, _) in enumerate(weights)}


long_weight = st.one_of(
    weight,
    # What the engine passes: exact rationals as Decimals of 38 significant digits.
    st.fractions(min_value=0, max_value=10**6, max_denominator=10**9).map(
        lambda f: Decimal(f.numerator) / Decimal(f.denominator)
    ),
    st.integers(min_value=0, max_value=9).map(lambda n: Decimal(n).scaleb(3)),
)


@given(total=cents, weights=st.lists(long_weight, min_size=1, max_size=40))
def test_integer_split_equals_the_split_by_exact_rationals(total, weights):
    named = [(i, w) for i, w in enumerate(weights)]
    if sum(Decimal(w) for w in weights) == 0 and total != 0:
        return
    with money_context():
        parts = split_largest_remainder(total, named)
    expected = _split_by_fractions(total, named)
    assert [str(parts[k]) for k, _ in named] == [str(expected[k]) for k, _ in named]
