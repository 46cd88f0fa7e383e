"""The single-run path (one owner holding all of a GPU over the whole period, no rental, one
rate card) computes without rationals; it must give the exact engine's lines digit for digit,
and decline every other GPU."""

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.engine import statement
from billing.engine.cells import Cell, CellUsage
from billing.engine.intervals import Interval
from billing.engine.money import money_context
from billing.engine.statement import GpuInputs, OwnershipSlice, PoolBasis, RateTerms, Rental

MARCH = Interval(datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))
SPAN = int((MARCH.end - MARCH.start).total_seconds())
FOREVER = Interval(datetime(2020, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))


def _at(second: int) -> datetime:
    return MARCH.start + timedelta(seconds=second)


def _decimal(places: int, top: int) -> st.SearchStrategy[Decimal]:
    return st.decimals(min_value=0, max_value=top, places=places, allow_nan=False)


@st.composite
def cells(draw: Any, window: Interval) -> list[Cell]:
    span = int((window.end - window.start).total_seconds())
    cuts = sorted(set(draw(st.lists(st.integers(1, span - 1), max_size=3))))
    bounds = [0, *cuts, span]
    out = []
    for a, b in itertools.pairwise(bounds):
        seconds = b - a
        up = draw(st.integers(0, seconds))
        out.append(
            Cell(
                interval=Interval(
                    window.start + timedelta(seconds=a), window.start + timedelta(seconds=b)
                ),
                in_service=draw(st.sampled_from([True, True, True, False])),
                maintenance=draw(st.sampled_from([False, False, False, True])),
                incident=draw(st.sampled_from([False, False, False, True])),
                operator_incident=draw(st.booleans()),
                telemetry_up_s=up,
                telemetry_down_s=draw(st.integers(0, seconds - up)),
                whole_busy_pct_s=draw(_decimal(3, 100 * seconds)),
                whole_energy_kwh=draw(_decimal(9, 10_000)),
            )
        )
    return out


@st.composite
def gpus(draw: Any) -> dict[str, Any]:
    """Mostly the common GPU; often one detail that takes it off the single-run path."""
    preliminary = draw(st.booleans())
    window = Interval(MARCH.start, _at(draw(st.integers(3600, SPAN)))) if preliminary else MARCH
    timeline = draw(cells(window))
    starts = [c.interval.start for c in timeline[1:]]
    variant = draw(
        st.sampled_from(["common"] * 6 + ["share", "owners", "sold", "rental", "cards", "pool"])
    )
    shares: dict[str, int] = {"alice": 10_000}
    ownership = [OwnershipSlice(FOREVER, shares)]
    if variant == "share":
        ownership = [OwnershipSlice(FOREVER, {"alice": draw(st.integers(1, 9_999))})]
    elif variant == "owners":
        ownership = [OwnershipSlice(FOREVER, {"alice": 2_500, "bob": 7_500})]
    elif variant == "sold" and starts:
        cut = draw(st.sampled_from(starts))
        ownership = [
            OwnershipSlice(Interval(FOREVER.start, cut), {"alice": 10_000}),
            OwnershipSlice(Interval(cut, FOREVER.end), {"bob": 10_000}),
        ]
    rentals = []
    if variant == "rental":
        rentals = [Rental(window, draw(_decimal(2, 50)))]

    def card(interval: Interval) -> RateTerms:
        return RateTerms(
            interval=interval,
            hosting_fee_per_gpu_month=draw(_decimal(2, 100_000)),
            price_per_kwh=draw(_decimal(4, 2)),
            pue=draw(_decimal(2, 3)),
            management_fee_pct=draw(_decimal(2, 100)),
            waive_hosting_in_operator_incidents=draw(st.booleans()),
        )

    rates = [card(FOREVER)]
    if variant == "cards" and starts:
        cut = draw(st.sampled_from(starts))
        rates = [card(Interval(FOREVER.start, cut)), card(Interval(cut, FOREVER.end))]
    pool = st.integers(0, 10**8)
    if variant == "pool":
        pool = st.integers(-(10**6), 0)
    return {
        "period": window,
        "gpu": GpuInputs(
            key="SN-1", timeline=CellUsage(timeline), ownership=ownership, rentals=rentals
        ),
        "pool_cents": Decimal(draw(pool)) / 100,
        "pool_basis": draw(st.sampled_from(list(PoolBasis))),
        "rates": rates,
        "period_seconds": SPAN if preliminary else None,
    }


def _figures(result: statement.ClusterResult) -> list[Any]:
    return [
        *(
            (
                line.owner,
                line.gpu,
                line.interval,
                line.share_bps,
                line.measure,
                *(
                    str(v)
                    for v in (line.gross, line.hosting_fee, line.power_cost, line.management_fee)
                ),
            )
            for line in result.lines
        ),
        *((r.gpu, str(r.pool), str(r.rentals), str(r.operator_part)) for r in result.revenue),
    ]


@settings(max_examples=400, deadline=None)
@given(case=gpus())
def test_the_single_run_path_equals_the_exact_engine(case):
    whole = case["gpu"].timeline.measure(case["period"])
    args = (
        case["period"],
        case["gpu"],
        case["pool_cents"],
        case["pool_basis"],
        case["rates"],
        whole,
        case["period_seconds"],
    )
    with money_context():
        try:
            expected = _figures(statement._gpu_lines_exact(*args))
        except ValueError as exc:  # e.g. every weight zero: both must refuse alike
            with pytest.raises(ValueError, match=str(exc)):
                statement._gpu_lines(*args)
            return
        assert _figures(statement._gpu_lines(*args)) == expected


def test_the_common_gpu_takes_the_single_run_path():
    # The property above only means something if the path is taken: a GPU held whole by one
    # owner all month under one card, with a pool part, is computed there (to the cent:
    # hosting 120.00 × 2,678,400 / 2,678,400; power 100 kWh × 1.35 × 0.21 = 28.35;
    # management 12.5 % of 250.00 = 31.25).
    day = timedelta(days=1)
    timeline = CellUsage(
        [
            Cell(
                Interval(MARCH.start + i * day, MARCH.start + (i + 1) * day),
                True,
                False,
                False,
                False,
                86_400,
                0,
                Decimal("4320000.000"),
                Decimal("3.225806452") if i < 30 else Decimal("3.225806440"),
            )
            for i in range(31)
        ]
    )
    gpu = GpuInputs(
        key="SN-1", timeline=timeline, ownership=[OwnershipSlice(FOREVER, {"alice": 10_000})]
    )
    card = RateTerms(FOREVER, Decimal("120.00"), Decimal("0.21"), Decimal("1.35"), Decimal("12.5"))
    whole = timeline.measure(MARCH)
    with money_context():
        run = statement._owner_runs(gpu.ownership, MARCH)[0]
        fast = statement._single_run_lines(
            MARCH, gpu, run, Decimal("250.00"), PoolBasis.UP_SECONDS, [card], whole, None
        )
    assert fast is not None
    (line,) = fast.lines
    assert (line.gross, line.hosting_fee, line.power_cost, line.management_fee) == (
        Decimal("250.00"),
        Decimal("120.00"),
        Decimal("28.35"),
        Decimal("31.25"),
    )
