"""A GPU whose cells are all plain (in service, no maintenance or incident, no partial hour) is
measured by sums taken in C (``CellUsage.of_sorted(plain_seconds=…)``): the same figures as the
general loop to the last digit and exponent, over every window of whole cells."""

import contextlib
import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal, localcontext

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.engine.cells import (
    Cell,
    CellUsage,
    DayRunUsage,
    cells_json_template,
    cells_json_text,
)
from billing.engine.intervals import Interval
from billing.engine.money import money_context

MARCH = datetime(2026, 3, 1, tzinfo=UTC)
# As the database hands sums over, odd exponents included (a sum's exponent is part of it).
DECIMALS = st.one_of(
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=0, max_value=10**9),
    st.decimals(allow_nan=False, allow_infinity=False, places=9, min_value=0, max_value=10**3),
    st.sampled_from([Decimal("0E-9"), Decimal("1E+2"), Decimal("0"), Decimal("0.000")]),
)


@st.composite
def plain_cells(draw) -> list[Cell]:
    # Cut at midnights, and now and then at an odd instant (a sub-second one too).
    cuts = {MARCH + timedelta(days=d) for d in range(draw(st.integers(1, 8)) + 1)}
    cuts |= {
        MARCH + timedelta(microseconds=draw(st.integers(1, 86_400 * 10**6)))
        for _ in range(draw(st.integers(0, 3)))
    }
    cells = []
    for start, end in itertools.pairwise(sorted(cuts)):
        seconds = int((end - start) // timedelta(seconds=1))
        up = draw(st.integers(0, seconds))
        cells.append(
            Cell(
                Interval(start, end),
                in_service=True,
                maintenance=False,
                incident=False,
                operator_incident=False,
                telemetry_up_s=up,
                telemetry_down_s=draw(st.integers(0, seconds - up)),
                whole_busy_pct_s=draw(DECIMALS),
                whole_energy_kwh=draw(DECIMALS),
            )
        )
    return cells


@settings(max_examples=200, deadline=None)
@given(plain_cells(), st.booleans())
def test_plain_cells_measure_as_the_loop_does(cells, in_money_context):
    seconds = list(itertools.accumulate((c.interval.seconds for c in cells), initial=0))
    fast = CellUsage.of_sorted(cells, plain_seconds=seconds)
    loop = CellUsage(cells)
    assert fast.cells == loop.cells
    with money_context() if in_money_context else contextlib.nullcontext():
        for i, j in itertools.combinations(range(len(cells) + 1), 2):
            window = Interval(cells[i].interval.start, cells[j - 1].interval.end)
            # repr: Decimal's equality ignores the exponent, its text does not.
            assert repr(fast.measure(window)) == repr(loop.measure(window)), window


@settings(max_examples=200, deadline=None)
@given(plain_cells())
def test_a_day_run_is_the_cells_it_stands_for(cells):
    """``DayRunUsage`` keeps a GPU's days as the day sums hand them over (figures as text,
    and their sums as the database adds them: exactly) and makes no cell unless asked: its
    measure over the span, its JSON, its cells and every other measure are those of the
    cells themselves."""
    heads = [cell[:5] for cell in cells]
    days = [(cell[5], cell[6], str(cell[7]), str(cell[8])) for cell in cells]
    with localcontext(prec=80):
        sums = (
            sum(c.telemetry_up_s for c in cells),
            sum(c.telemetry_down_s for c in cells),
            sum((c.whole_busy_pct_s for c in cells), Decimal(0)),
            sum((c.whole_energy_kwh for c in cells), Decimal(0)),
        )
    seconds = list(itertools.accumulate((c.interval.seconds for c in cells), initial=0))
    run = DayRunUsage.of_days(
        heads, days, sums=sums, plain_seconds=seconds, json_template=cells_json_template(heads)
    )
    fast = CellUsage.of_sorted(cells, plain_seconds=seconds)
    span = Interval(cells[0].interval.start, cells[-1].interval.end)
    assert repr(run.measure(span)) == repr(fast.measure(span))
    assert run.cells_json() == cells_json_text(cells)
    assert run._made is None  # neither made a cell
    assert run.span == span
    assert run.cells == cells
    for i, j in itertools.combinations(range(len(cells) + 1), 2):
        window = Interval(cells[i].interval.start, cells[j - 1].interval.end)
        assert repr(run.measure(window)) == repr(fast.measure(window)), window
