"""The usage sources agree to the last digit: rollups + windows (cells), windows only (cells),
and the reference ``GpuTimeline`` built from every raw minute."""

import datetime as dt
import itertools
import random
import uuid
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.engine.intervals import Interval
from billing.selectors import usage
from billing.selectors.availability import (
    cluster_availability,
    gpu_availability,
    owner_availability,
)
from billing.selectors.facts import gpu_facts
from billing.selectors.usage import cells_load, timeline_load
from fleet.models import (
    Gpu,
    Incident,
    IncidentCause,
    LifecycleState,
    LifecycleTransition,
    MaintenanceWindow,
)
from telemetry.services.derived import rollups_rebuild
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
MARCH = Interval(dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))


def at(day: int, hour: int = 0, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime(2026, 3, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def messy():
    """One GPU with everything that can go wrong in March, and a quiet second GPU."""
    f = s.fleet()
    a = s.gpu(f, "SN-A", slot=0)
    b = s.gpu(f, "SN-B", slot=1)
    alice, bob = s.owner("Alice Compute Ltd"), s.owner("Bob Chen")
    transfer = at(10, 12, 0, 30)
    s.own(a, alice, 10_000, s.EPOCH, transfer)
    s.own(a, bob, 6_000, transfer)
    s.own(b, alice, 2_500, s.EPOCH)

    # Agent stops and starts around the silences, and windows that observed only part of
    # their minute throughout (up, degraded and down ones, the transfer's minute among them).
    stops = {at(3, 4, 16), at(20, 2, 59)}
    starts = {at(3, 4, 18), at(20, 9)}

    def change(t, v):
        minute_of_day = t.hour * 60 + t.minute
        v["util"] = [41.666666666666664, 99.9, 0.1, 73.3][minute_of_day % 4]
        if t in stops or minute_of_day % 11 == 5:  # 12:00 on the 10th: the transfer at :30
            v["observed"] = (0, 35)
        elif t in starts or minute_of_day % 7 == 3:
            v["observed"] = (20, 60)
        elif minute_of_day % 13 == 0:
            v["observed"] = (7, 53)
        elif minute_of_day % 17 == 16:
            v["observed"] = (59, 60)
        elif minute_of_day % 19 == 1:
            v["observed"] = (0, 1)
        if at(7, 2) <= t < at(7, 4, 30):
            v["state"] = "down"
        if at(8, 9) <= t < at(8, 9, 45):
            v["state"] = "degraded"
        if at(15, 6, 20) <= t:  # the driver reloaded: the counter restarts from zero
            v["energy_mj"] -= 9_000_000_000_000
        # The counter unreadable now and then (a run of four at the top of some hours, one of
        # them an hour's last minutes), and across the end of the long silence below.
        if minute_of_day % 29 == 14 or (t.hour % 5 == 0 and t.minute < 4) or t.minute >= 58:
            v["energy_mj"] = None
        if at(28, 13) <= t < at(28, 13, 3):
            v["energy_mj"] = None
        return v

    s.windows(
        a,
        MARCH.start - dt.timedelta(hours=2),
        MARCH.end + dt.timedelta(hours=1),
        node=f.node,
        energy_start=9_000_000_000_000,
        energy_per_minute=611_111_111,
        # Silences: a minute, six hours, and two and a half days (longer than the 2 days a
        # delta once reached back: its energy goes to the first reading after it).
        skip=[(at(20, 3), at(20, 9)), (at(3, 4, 17), at(3, 4, 18)), (at(26, 1), at(28, 13))],
        change=change,
    )
    s.windows(b, MARCH.start, MARCH.end, node=f.node, util=12.5)
    s.rebuild(MARCH.start, MARCH.end)
    MaintenanceWindow.objects.create(
        node=f.node,
        title="BIOS",
        announced_at=at(1),
        starts_at=at(5, 10),
        ends_at=at(5, 12),
    )
    Incident.objects.create(
        gpu=a,
        title="XID 79",
        cause=IncidentCause.HARDWARE,
        started_at=at(5, 11),
        ended_at=at(5, 14, 0, 17),
    )
    Incident.objects.create(
        gpu=a,
        title="asked",
        cause=IncidentCause.OWNER_REQUESTED,
        started_at=at(25, 1),
        ended_at=at(25, 2),
    )
    LifecycleTransition.objects.create(gpu=a, state=LifecycleState.RMA, at=at(22, 3, 17, 11))
    LifecycleTransition.objects.create(gpu=a, state=LifecycleState.IN_SERVICE, at=at(23, 5))
    return {"fleet": f, "a": a, "b": b, "alice": alice, "bob": bob, "transfer": transfer}


def _ranges():
    rng = random.Random(6)
    fixed = [
        MARCH,
        Interval(at(5, 9, 59, 59), at(5, 14, 1)),
        Interval(at(15, 6), at(15, 7)),  # the hour with the counter reset
        Interval(at(10, 12), at(10, 13)),  # the hour of the transfer
        Interval(at(20), at(21)),  # the silent day
        Interval(at(22), at(24)),  # RMA
        Interval(at(28, 12), at(28, 14)),  # the end of the long silence
    ]
    span = int((MARCH.end - MARCH.start).total_seconds())
    for _ in range(6):
        a, b = sorted(rng.sample(range(span), 2))
        fixed.append(
            Interval(MARCH.start + dt.timedelta(seconds=a), MARCH.start + dt.timedelta(seconds=b))
        )
    return fixed


@pytest.mark.parametrize("window", _ranges(), ids=lambda w: f"{w.start:%d%H%M%S}-{w.end:%d%H%M%S}")
@pytest.mark.parametrize("few_rows", [usage.FEW_ROWS, 0], ids=["arrays", "temp-tables"])
def test_cells_from_rollups_equal_cells_from_windows_equal_the_reference(
    messy, window, monkeypatch, few_rows
):
    # A few cells and ranges go to the queries as arrays; more, through temp tables.
    monkeypatch.setattr(usage, "FEW_ROWS", few_rows)
    gpu_ids = [messy["a"].pk, messy["b"].pk]
    facts = gpu_facts(gpu_ids=gpu_ids, start=window.start, end=window.end)
    fast = cells_load(facts=facts)
    slow = cells_load(facts=facts, use_rollups=False)
    reference = timeline_load(facts=facts)
    for g in gpu_ids:
        expected = reference[g].measure(window)
        assert fast[g].measure(window) == expected
        assert slow[g].measure(window) == expected


def test_every_sub_interval_a_statement_asks_for_agrees(messy):
    # Cut March at the transfer and at odd seconds, as ownership runs and rentals do.
    cuts = [messy["transfer"], at(3, 4, 17, 30), at(15, 6, 20, 10), at(18, 0, 0, 1)]
    # Inside partly observed minutes: after an agent stopped, before one started.
    cuts += [at(3, 4, 16, 40), at(3, 4, 18, 10), at(20, 9, 0, 25), at(20, 2, 59, 34)]
    facts = gpu_facts(gpu_ids=[messy["a"].pk], start=MARCH.start, end=MARCH.end)
    fast = cells_load(facts=facts, extra_cuts={messy["a"].pk: set(cuts)})[messy["a"].pk]
    reference = timeline_load(facts=facts)[messy["a"].pk]
    bounds = sorted({MARCH.start, MARCH.end, *cuts})
    for i, start in enumerate(bounds):
        for end in bounds[i + 1 :]:
            assert fast.measure(Interval(start, end)) == reference.measure(Interval(start, end))


@pytest.mark.parametrize("few_cells", [usage.FEW_CELLS, 0], ids=["probe-per-cell", "one-join"])
@pytest.mark.parametrize("few_rows", [usage.FEW_ROWS, 0], ids=["arrays", "temp-tables"])
def test_both_rollup_query_shapes_agree_with_the_reference(messy, monkeypatch, few_cells, few_rows):
    # A day cut at every hour (an hourly series): with few cells each probes the rollup index,
    # with many they are joined once; both must give the reference's figures, whether the
    # cells go to the queries as arrays or through temp tables.
    monkeypatch.setattr(usage, "FEW_CELLS", few_cells)
    monkeypatch.setattr(usage, "FEW_ROWS", few_rows)
    day = Interval(at(10), at(11))
    cuts = {day.start + dt.timedelta(hours=h) for h in range(1, 24)}
    gpu_ids = [messy["a"].pk, messy["b"].pk]
    facts = gpu_facts(gpu_ids=gpu_ids, start=day.start, end=day.end)
    fast = cells_load(facts=facts, extra_cuts=dict.fromkeys(gpu_ids, cuts))
    reference = timeline_load(facts=facts)
    for g in gpu_ids:
        for h in range(24):
            hour = Interval(
                day.start + dt.timedelta(hours=h), day.start + dt.timedelta(hours=h + 1)
            )
            assert fast[g].measure(hour) == reference[g].measure(hour)


def test_gpu_figures_by_hand(messy):
    # SN-B: up all March at 12.5 %, 0.01 kWh a minute (the first minute has no previous
    # window, so no delta): 31 days = 2,678,400 s.
    m = gpu_availability(gpu=messy["b"], start=MARCH.start, end=MARCH.end)
    assert (m.in_service_s, m.up_s, m.down_s, m.maintenance_s, m.no_data_s) == (
        2_678_400,
        2_678_400 - 7200,  # the node's maintenance, 2 h
        0,
        7200,
        0,
    )
    assert m.availability == 1
    assert m.utilization == Fraction(1, 8)
    assert m.busy_gpu_hours == Decimal("92.75")  # 742 h × 0.125
    assert m.energy_kwh == Decimal("446.39")  # 44,640 minutes − 1 without a delta, × 0.01


def test_owner_figures_are_time_sliced_and_weighted_by_share(messy):
    result = owner_availability(owner=messy["alice"], start=MARCH.start, end=MARCH.end)
    assert [(r.serial, r.share_bps) for r in result.runs] == [("SN-A", 10_000), ("SN-B", 2_500)]
    (run_a, run_b) = result.runs
    assert run_a.interval == Interval(MARCH.start, messy["transfer"])
    # Alice: all of SN-A until the transfer (9 d 12 h 30 s = 820,830 s), a quarter of SN-B.
    assert result.total.in_service_s == 820_830 + Fraction(2_678_400, 4)
    assert result.total.up_s == run_a.measure.up_s + Fraction(run_b.measure.up_s, 4)
    whole = cluster_availability(cluster=messy["fleet"].cluster, start=MARCH.start, end=MARCH.end)
    assert len(whole.gpus) == 2
    assert whole.total.maintenance_s == 2 * 7200


@pytest.mark.parametrize("day_cells", [usage.DAY_CELLS, 0], ids=["cells-joined", "sums-by-day"])
def test_cells_cut_at_every_midnight_agree_with_the_reference(messy, monkeypatch, day_cells):
    # As a close cuts them: every whole day's hours summed per GPU and day (one aggregate per
    # day), the cells that cut a day (the transfer, the maintenance, the RMA) as before.
    monkeypatch.setattr(usage, "DAY_CELLS", day_cells)
    midnights = {MARCH.start + dt.timedelta(days=d) for d in range(1, 31)}
    gpu_ids = [messy["a"].pk, messy["b"].pk]
    facts = gpu_facts(gpu_ids=gpu_ids, start=MARCH.start, end=MARCH.end)
    fast = cells_load(facts=facts, extra_cuts=dict.fromkeys(gpu_ids, midnights))
    reference = timeline_load(facts=facts)
    for g in gpu_ids:
        assert fast[g].measure(MARCH) == reference[g].measure(MARCH)
        bounds = sorted({MARCH.start, MARCH.end, *midnights})
        for start, end in itertools.pairwise(bounds):
            day = Interval(start, end)
            assert fast[g].measure(day) == reference[g].measure(day), day


@pytest.mark.parametrize("day_cells", [usage.DAY_CELLS, 0], ids=["cells-joined", "sums-by-day"])
def test_a_day_of_hours_with_partial_hours_at_its_ends_agrees(messy, monkeypatch, day_cells):
    # Cells from 23:30 to 00:30 the day after next: one whole UTC day of rollups inside, with
    # a partial hour from the windows at each end (and the 23-hour cells between).
    monkeypatch.setattr(usage, "DAY_CELLS", day_cells)
    cuts = set()
    for day in range(2, 28, 3):
        cuts |= {at(day, 23, 30), at(day + 2, 0, 30)}
    gpu_ids = [messy["a"].pk, messy["b"].pk]
    facts = gpu_facts(gpu_ids=gpu_ids, start=MARCH.start, end=MARCH.end)
    fast = cells_load(facts=facts, extra_cuts=dict.fromkeys(gpu_ids, cuts))
    reference = timeline_load(facts=facts)
    bounds = sorted({MARCH.start, MARCH.end, *cuts})
    for g in gpu_ids:
        for start, end in itertools.pairwise(bounds):
            assert fast[g].measure(Interval(start, end)) == reference[g].measure(
                Interval(start, end)
            ), (start, end)


@pytest.fixture
def restarts():
    """SN-R on 3 March, 10:00–10:07: an agent starts at 10:00:20 (50 %), reads 30 % for the
    whole of 10:01, stops at 10:02:35 (80 %); nothing for 10:03–10:04; a new agent starts at
    10:05:20 and finds the GPU down, then up at 10 % for 10:06. The counter rises 36 kJ a
    minute from 09:59 (a whole window, so 10:00 has a previous counter)."""
    f = s.fleet()
    g = s.gpu(f, "SN-R", slot=0)
    minutes: dict[dt.datetime, s.Minute] = {
        at(3, 10, 0): {"observed": (20, 60), "util": 50.0},
        at(3, 10, 1): {"util": 30.0},
        at(3, 10, 2): {"observed": (0, 35), "util": 80.0},
        at(3, 10, 5): {"observed": (20, 60), "util": None, "state": "down"},
        at(3, 10, 6): {"util": 10.0},
    }
    s.windows(
        g,
        at(3, 9, 59),
        at(3, 10, 7),
        node=f.node,
        skip=[(at(3, 10, 3), at(3, 10, 5))],
        change=lambda t, v: {**v, **minutes.get(t, {})},
    )
    s.rebuild(at(3), at(4))
    return g


@pytest.mark.parametrize(
    ("start", "end", "figures"),
    [
        # The whole hour (from its rollup): up 40 + 60 + 35 + 60, down 40 of 10:05, the rest
        # no_data; busy 50 × 40 + 30 × 60 + 80 × 35 + 10 × 60 = 7,200 %·s = 72 s; energy
        # 36 kJ for each of 10:00, 10:01, 10:02, 10:06, and 108 kJ for 10:05 (its counter
        # rose over the silent minutes too): 252 kJ = 0.07 kWh.
        (at(3, 10), at(3, 11), (3600, 195, 40, 3365, Decimal(72), Decimal("0.07"))),
        # Cut inside partly observed minutes (from the windows): 10:00:30–10:01 up 30 s,
        # 10:01 up 60 s, 10:02:00–10:02:10 up 10 s; busy (50 × 30 + 30 × 60 + 80 × 10) / 100
        # = 41 s; energy spread over each whole minute: (30 + 60 + 10) / 60 × 36 kJ = 60 kJ =
        # 0.0166… kWh, rounded once for the hour to 9 places.
        (at(3, 10, 0, 30), at(3, 10, 2, 10), (100, 100, 0, 0, Decimal(41), Decimal("0.016666667"))),
        # 10:02:10–10:02:35 up 25 s; 10:02:35–10:05:20 no_data (25 + 120 + 20 s);
        # 10:05:20–10:05:30 down 10 s. Busy 80 × 25 / 100 = 20 s. Energy 50/60 × 36 kJ
        # + 30/60 × 108 kJ = 84 kJ = 0.0233… kWh.
        (
            at(3, 10, 2, 10),
            at(3, 10, 5, 30),
            (200, 25, 10, 165, Decimal(20), Decimal("0.023333333")),
        ),
        # Only the unobserved start of a minute: no_data, but its share of the minute's energy.
        (at(3, 10, 0, 5), at(3, 10, 0, 20), (15, 0, 0, 15, Decimal(0), Decimal("0.0025"))),
    ],
    ids=["hour", "cut-in-starts-and-stops", "stop-gap-start-down", "unobserved-seconds"],
)
def test_partly_observed_minutes_by_hand(restarts, start, end, figures):
    m = gpu_availability(gpu=restarts, start=start, end=end)
    assert (m.in_service_s, m.up_s, m.down_s, m.no_data_s, m.busy_s, m.energy_kwh) == figures
    assert m.maintenance_s == 0
    # The windows alone and the reference timeline say exactly the same.
    window = Interval(start, end)
    facts = gpu_facts(gpu_ids=[restarts.pk], start=start, end=end)
    slow = cells_load(facts=facts, use_rollups=False)[restarts.pk].measure(window)
    assert slow == timeline_load(facts=facts)[restarts.pk].measure(window) == m


def test_the_rollup_of_a_partly_observed_hour_counts_observed_seconds(restarts):
    # The cells above read the whole hour from this row: B's rollup, as the contract has it.
    from telemetry.models import HourlyRollup

    rollup = HourlyRollup.objects.get(gpu=restarts, hour=at(3, 10))
    assert (rollup.seconds_up, rollup.seconds_degraded, rollup.seconds_down) == (195, 0, 40)
    assert rollup.util_gpu_seconds == Decimal("7200.000")
    assert rollup.energy_kwh == Decimal("0.070000000")


# Property: whatever part of its minute each window observed, the three sources agree on any
# cut, and up/down seconds are exactly the observed seconds of up/down windows in the range.
SPAN = Interval(at(12, 22, 30), at(13, 1, 30))  # three hours over a midnight
SPAN_S = int((SPAN.end - SPAN.start).total_seconds())
_minute = st.tuples(
    st.integers(0, SPAN_S // 60 - 1),  # which minute of the span
    st.sampled_from(["up", "degraded", "down"]),
    st.one_of(st.none(), st.integers(0, 100_000).map(lambda m: m / 1000)),  # util, 3 places
    st.integers(0, 59).flatmap(lambda a: st.tuples(st.just(a), st.integers(a + 1, 60))),
    st.integers(0, 90_000_000),  # the counter's rise over the minute, mJ
)


@pytest.fixture
def one_fleet(db):
    return s.fleet()


@given(
    minutes=st.lists(_minute, max_size=120, unique_by=lambda m: m[0]),
    cuts=st.lists(st.integers(1, SPAN_S - 1), max_size=4, unique=True),
)
@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_observed_spans_property(one_fleet, minutes, cuts):
    # A fresh GPU per example (examples share the test's transaction), in a slot of its own.
    slot = Gpu.objects.filter(serial__startswith="SN-P").count()
    g = s.gpu(one_fleet, f"SN-P{uuid.uuid4().hex[:8]}", slot=slot)
    rows = []
    counter = 10**12
    for index, state, util, observed, rise in sorted(minutes):
        counter += rise
        start = SPAN.start + dt.timedelta(minutes=index)
        rows.append((g.pk, start, one_fleet.node.pk, 0, 12, 12, state, util, counter, *observed))
    s.write_rows(rows)
    rollups_rebuild(start=SPAN.start - dt.timedelta(hours=1), end=SPAN.end, gpu_ids=[g.pk])

    bounds = sorted({0, SPAN_S, *cuts})
    instants = [SPAN.start + dt.timedelta(seconds=b) for b in bounds]
    facts = gpu_facts(gpu_ids=[g.pk], start=SPAN.start, end=SPAN.end)
    extra = {g.pk: set(instants[1:-1])}
    fast = cells_load(facts=facts, extra_cuts=extra)[g.pk]
    slow = cells_load(facts=facts, extra_cuts=extra, use_rollups=False)[g.pk]
    reference = timeline_load(facts=facts)[g.pk]
    for lo, hi in itertools.combinations(instants, 2):
        window = Interval(lo, hi)
        expected = reference.measure(window)
        assert fast.measure(window) == expected
        assert slow.measure(window) == expected
        # Independently: each window's observed seconds inside the range, by its state.
        seen = {"up": 0, "down": 0}
        for _, start, *_, state, _, _, seen_from, seen_to in rows:
            a = max(start + dt.timedelta(seconds=seen_from), lo)
            b = min(start + dt.timedelta(seconds=seen_to), hi)
            if a < b:
                seen["down" if state == "down" else "up"] += int((b - a).total_seconds())
        assert (expected.up_s, expected.down_s) == (seen["up"], seen["down"])
        assert expected.no_data_s == int((hi - lo).total_seconds()) - seen["up"] - seen["down"]
