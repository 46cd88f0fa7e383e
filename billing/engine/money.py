"""Money: ``Decimal`` only, rounded once to the cent (half-even), split by largest remainder.

Rule 7 of the accounting contract. ``money_context()`` traps every float that touches a
``Decimal`` (construction from a float, comparison, arithmetic), so a float that sneaks into
statement code fails loudly instead of rounding silently.
"""

from __future__ import annotations

import contextlib
import decimal
import math
from collections.abc import Hashable, Iterator, Sequence
from decimal import ROUND_HALF_EVEN, Decimal

CENT = Decimal("0.01")


@contextlib.contextmanager
def money_context() -> Iterator[decimal.Context]:
    """A decimal context with ample precision in which any float use raises FloatOperation."""
    with decimal.localcontext() as context:
        context.prec = 38
        context.traps[decimal.FloatOperation] = True
        context.traps[decimal.InvalidOperation] = True
        context.traps[decimal.DivisionByZero] = True
        yield context


def half_even_div(numerator: int, denominator: int) -> int:
    """numerator ÷ denominator (denominator > 0) rounded to an integer, half to even, the
    same way for either sign (as ``Decimal.quantize`` with ``ROUND_HALF_EVEN``): for exact
    rounding of ratios in integers, without a Decimal division."""
    q, r = divmod(abs(numerator), denominator)
    if 2 * r > denominator or (2 * r == denominator and q & 1):
        q += 1
    return -q if numerator < 0 else q


def round_cents(amount: Decimal) -> Decimal:
    """Exact value → cents, half to even. Applied once, at line level."""
    if not isinstance(amount, Decimal):
        raise TypeError(f"money must be Decimal, got {type(amount).__name__}")
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)


def split_largest_remainder[K: Hashable](
    total: Decimal,
    weights: Sequence[tuple[K, Decimal | int]],
    *,
    quantum: Decimal = CENT,
) -> dict[K, Decimal]:
    """Splits ``total`` (a multiple of ``quantum``) over parties in proportion to weights.

    Each party first gets its exact share rounded toward zero to the quantum; the quanta left
    over go one each to the parties with the largest remainders. Tie-break (fixed, so results
    are reproducible): larger remainder first, then larger weight, then the order in which
    the parties were given. The parts always add up to ``total`` exactly.
    """
    if not isinstance(total, Decimal):
        raise TypeError(f"total must be Decimal, got {type(total).__name__}")
    if total % quantum != 0:
        raise ValueError(f"{total} is not a whole number of {quantum}")
    keys = [key for key, _ in weights]
    if len(set(keys)) != len(keys):
        raise ValueError("each party may appear once")
    amounts = [Decimal(w) if isinstance(w, int) else w for _, w in weights]
    if any(not isinstance(w, Decimal) for w in amounts):
        raise TypeError("weights must be Decimal or int")
    if any(w < 0 for w in amounts):
        raise ValueError("weights must not be negative")
    weight_sum = sum(amounts, Decimal(0))
    if total == 0:
        return dict.fromkeys(keys, Decimal("0.00").quantize(quantum))
    if weight_sum == 0:
        raise ValueError("cannot split a non-zero amount over parties whose weights are all 0")

    sign = 1 if total > 0 else -1
    units = int(abs(total) / quantum)  # whole quanta to hand out
    # Exact shares in integers: the weights scaled to whole numbers keep their ratios and
    # their order, so with S their sum, party i gets floor(units × wᵢ / S) quanta and a
    # remainder rᵢ / S — all remainders over one denominator compare as integers. (Decimal
    # division would round at its precision: a share of 2.999… rounded up to 3 would hand out
    # more quanta than there are.)
    scaled = _integer_weights(amounts)
    weight_total = sum(scaled)
    floors: list[int] = []
    remainders: list[int] = []
    for w in scaled:
        floor, remainder = divmod(units * w, weight_total)
        floors.append(floor)
        remainders.append(remainder)
    leftover = units - sum(floors)
    order = sorted(range(len(keys)), key=lambda i: (-remainders[i], -scaled[i], i))
    for i in order[:leftover]:
        floors[i] += 1
    return {key: (sign * floors[i]) * quantum for i, key in enumerate(keys)}


def _integer_weights(weights: Sequence[Decimal]) -> list[int]:
    """Non-negative finite Decimals × one common denominator, as exact integers (same
    ratios, same order). ``as_integer_ratio`` is exact and done in C; the denominators
    are powers of 2 and 5, so their least common multiple stays small."""
    ratios = [w.as_integer_ratio() for w in weights]
    common = math.lcm(*(d for _, d in ratios))
    return [n * (common // d) for n, d in ratios]
