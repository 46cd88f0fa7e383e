"""Frozen inputs are written as text built directly (``gpu_frozen_json``, ``cells_json_text``);
the text must be exactly what ``json.dumps`` makes of the frozen dicts as first written
(``gpu_frozen`` and ``Cell.to_json``), so stored statements do not change by a byte. The same
for a line's ratios, now rounded in integers instead of through a 60-digit Decimal."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.engine.cells import Cell, CellUsage, PartialHour, cells_json_template, cells_json_text
from billing.engine.document import (
    _availability,
    _utilization,
    gpu_frozen,
    gpu_frozen_json,
    ratio,
    ratio_of,
)
from billing.engine.intervals import Interval
from billing.engine.statement import PoolBasis
from billing.engine.usage import Measure
from tests.billing.test_engine_single_run import gpus

MARCH = datetime(2026, 3, 1, tzinfo=UTC)

# Decimals as the database and the engine hand them over, odd exponents included
# (str() writes some of them in scientific notation: the text must follow).
DECIMALS = st.one_of(
    st.decimals(allow_nan=False, allow_infinity=False, places=6, min_value=-(10**9)),
    st.sampled_from(
        [Decimal("0E-10"), Decimal("1E+2"), Decimal("-0.000"), Decimal("0"), Decimal("3.0")]
    ),
)


@st.composite
def cell(draw: Any) -> Cell:
    start = MARCH + timedelta(seconds=draw(st.integers(0, 30 * 86_400)))
    end = start + timedelta(seconds=draw(st.integers(1, 86_400)))
    partial = tuple(
        PartialHour(
            start.replace(minute=0, second=0) + timedelta(hours=i),
            draw(DECIMALS),
            draw(st.integers(-(10**12), 10**12)),
        )
        for i in range(draw(st.integers(0, 2)))
    )
    return Cell(
        Interval(start, end),
        in_service=draw(st.booleans()),
        maintenance=draw(st.booleans()),
        incident=draw(st.booleans()),
        operator_incident=draw(st.booleans()),
        telemetry_up_s=draw(st.integers(0, 86_400)),
        telemetry_down_s=draw(st.integers(0, 86_400)),
        whole_busy_pct_s=draw(DECIMALS),
        whole_energy_kwh=draw(DECIMALS),
        partial=partial,
    )


@settings(max_examples=300, deadline=None)
@given(cells=st.lists(cell(), max_size=40))
def test_cells_text_is_json_dumps_of_their_lists(cells):
    assert cells_json_text(cells) == json.dumps([c.to_json() for c in cells])


@settings(max_examples=300, deadline=None)
@given(cells=st.lists(cell().map(lambda c: c._replace(partial=())), max_size=40))
def test_cells_filled_into_their_template_are_their_text(cells):
    """A close fills one template per shape of cut (``cells_json_template`` of the cells'
    bounds and flags) with each GPU's figures: the same text, Decimals in scientific
    notation included."""
    heads = [c[:5] for c in cells]
    usage = CellUsage.of_sorted(cells, json_template=cells_json_template(heads))
    assert usage.cells_json() == cells_json_text(cells) == json.dumps([c.to_json() for c in cells])


TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12
) | st.sampled_from(['SN "1"', "Zürich\\7", "ГПУ\n"])


@settings(max_examples=300, deadline=None)
@given(
    case=gpus(),
    serial=TEXT,
    extra_cells=st.lists(cell(), max_size=3),
    events=st.lists(
        st.tuples(TEXT, st.integers(1, 10**6), TEXT, st.none() | TEXT).map(list), max_size=2
    ),
)
def test_a_gpus_frozen_text_is_json_dumps_of_its_dict(case, serial, extra_cells, events):
    gpu = case["gpu"]
    gpu.key = serial
    gpu.timeline.cells = [*gpu.timeline.cells, *extra_cells]
    args = {
        "gpu_id": "8f0b6c1e-0000-4000-8000-000000000001",
        "gpu": gpu,
        "cluster_id": "c-1",
        "pool_basis": case["pool_basis"],
        "pool_cents": case["pool_cents"],
        "rates": case["rates"],
    }
    expected = json.dumps({**gpu_frozen(**args), "events": events})
    assert gpu_frozen_json(**args, events=events) == expected
    assert isinstance(case["pool_basis"], PoolBasis)


@settings(max_examples=500, deadline=None)
@given(
    numerator=st.integers(0, 10**15) | st.sampled_from([0, 1, 5, 15, 25, 2_500_005]),
    denominator=st.integers(1, 10**12) | st.sampled_from([1, 2, 4, 8, 10**7, 2 * 10**7]),
)
def test_a_lines_ratio_in_integers_is_the_rational_one(numerator, denominator):
    # Ties at the 7th place (e.g. 25 / 10**7 + …) must round half-even like the rational.
    expected = ratio(Fraction(numerator, denominator))
    assert ratio_of(numerator, denominator) == expected


@settings(max_examples=300, deadline=None)
@given(
    in_service=st.integers(0, 3_000_000),
    maintenance=st.integers(0, 3_000_000),
    up=st.integers(-5, 3_000_000),
    busy=st.decimals(min_value=0, max_value=10**9, places=3, allow_nan=False),
)
def test_a_lines_availability_and_utilization_text_is_as_before(in_service, maintenance, up, busy):
    m = Measure(
        in_service_s=in_service,
        maintenance_s=maintenance,
        down_s=0,
        up_s=up,
        no_data_s=0,
        busy_s=busy / 100,
        energy_kwh=Decimal("1.5"),
        operator_incident_s=0,
    )
    assert _availability(m) == ratio(m.availability)
    assert _utilization(m) == ratio(m.utilization)
