"""Rule 1: in-service seconds fall in exactly one state, by precedence."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.engine.intervals import (
    Interval,
    TimeState,
    intersect,
    normalize,
    partition_states,
    subtract,
    total_seconds,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def iv(a: int, b: int) -> Interval:
    return Interval(at(a), at(b))


def test_normalize_merges_touching_and_overlapping_and_drops_empty():
    assert normalize([iv(5, 10), iv(0, 5), iv(8, 12), iv(20, 20)]) == [iv(0, 12)]


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="naive datetime"):
        normalize([Interval(datetime(2026, 1, 1), datetime(2026, 1, 2))])


def test_intersect_and_subtract():
    assert intersect([iv(0, 10), iv(20, 30)], [iv(5, 25)]) == [iv(5, 10), iv(20, 25)]
    assert subtract([iv(0, 30)], [iv(5, 10), iv(20, 25)]) == [iv(0, 5), iv(10, 20), iv(25, 30)]


def test_precedence_maintenance_over_down_over_up_then_no_data():
    # In service 0–60. Maintenance 10–20; an incident 15–30 (down); telemetry up 0–50.
    parts = partition_states(
        in_service=[iv(0, 60)],
        maintenance=[iv(10, 20)],
        down=[iv(15, 30)],
        up=[iv(0, 50)],
    )
    assert parts.maintenance == [iv(10, 20)]
    assert parts.down == [iv(20, 30)]
    assert parts.up == [iv(0, 10), iv(30, 50)]
    assert parts.no_data == [iv(50, 60)]
    assert parts.availability_denominator_seconds == 50 * 60


def test_seconds_outside_in_service_are_not_counted():
    parts = partition_states(
        in_service=[iv(10, 20)], maintenance=[iv(0, 15)], down=[], up=[iv(0, 100)]
    )
    assert parts.seconds(TimeState.MAINTENANCE) == 5 * 60
    assert parts.seconds(TimeState.UP) == 5 * 60
    assert parts.in_service_seconds == 10 * 60


spans = st.lists(
    st.tuples(st.integers(0, 2000), st.integers(0, 300)).map(lambda t: iv(t[0], t[0] + t[1])),
    max_size=12,
)


@given(in_service=spans, maintenance=spans, down=spans, up=spans)
def test_states_partition_in_service_time_exactly(in_service, maintenance, down, up):
    parts = partition_states(in_service=in_service, maintenance=maintenance, down=down, up=up)
    states = [parts.maintenance, parts.down, parts.up, parts.no_data]
    # Together they cover in-service time exactly…
    assert normalize([i for s in states for i in s]) == normalize(in_service)
    assert sum(total_seconds(s) for s in states) == total_seconds(in_service)
    # …and no two of them share a second.
    for a in range(4):
        for b in range(a + 1, 4):
            assert intersect(states[a], states[b]) == []


@given(
    st.tuples(st.integers(-50, 50), st.integers(-50, 50)),
    st.tuples(st.integers(-50, 50), st.integers(-50, 50)),
)
def test_intersecting_one_interval_with_one_is_the_sweep(a, b):
    # Two one-item lists take a shortcut; tuples take the general sweep.
    x, y = iv(*a), iv(*b)
    assert intersect([x], [y]) == intersect((x,), (y,))


def test_intersecting_one_naive_interval_is_refused_too():
    naive = Interval(datetime(2026, 1, 1), datetime(2026, 1, 2))
    with pytest.raises(ValueError, match="naive datetime"):
        intersect([naive], [iv(0, 10)])
