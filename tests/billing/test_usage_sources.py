"""The usage sources agree to the last digit: rollups + windows (cells), windows only (cells),
and the reference ``GpuTimeline`` built from every raw minute."""

import datetime as dt
import itertools
import random
from decimal import Decimal
from fractions import Fraction

import pytest

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
    Incident,
    IncidentCause,
    LifecycleState,
    LifecycleTransition,
    MaintenanceWindow,
)
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

    def change(t, v):
        minute_of_day = t.hour * 60 + t.minute
        v["util"] = [41.666666666666664, 99.9, 0.1, 73.3][minute_of_day % 4]
        if at(7, 2) <= t < at(7, 4, 30):
            v["state"] = "down"
        if at(8, 9) <= t < at(8, 9, 45):
            v["state"] = "degraded"
        if at(15, 6, 20) <= t:  # the driver reloaded: the counter restarts from zero
            v["energy_mj"] -= 9_000_000_000_000
        return v

    s.windows(
        a,
        MARCH.start - dt.timedelta(hours=2),
        MARCH.end + dt.timedelta(hours=1),
        node=f.node,
        energy_start=9_000_000_000_000,
        energy_per_minute=611_111_111,
        skip=[(at(20, 3), at(20, 9)), (at(3, 4, 17), at(3, 4, 18))],
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
    ]
    span = int((MARCH.end - MARCH.start).total_seconds())
    for _ in range(6):
        a, b = sorted(rng.sample(range(span), 2))
        fixed.append(
            Interval(MARCH.start + dt.timedelta(seconds=a), MARCH.start + dt.timedelta(seconds=b))
        )
    return fixed


@pytest.mark.parametrize("window", _ranges(), ids=lambda w: f"{w.start:%d%H%M%S}-{w.end:%d%H%M%S}")
def test_cells_from_rollups_equal_cells_from_windows_equal_the_reference(messy, window):
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
    facts = gpu_facts(gpu_ids=[messy["a"].pk], start=MARCH.start, end=MARCH.end)
    fast = cells_load(facts=facts, extra_cuts={messy["a"].pk: set(cuts)})[messy["a"].pk]
    reference = timeline_load(facts=facts)[messy["a"].pk]
    bounds = sorted({MARCH.start, MARCH.end, *cuts})
    for i, start in enumerate(bounds):
        for end in bounds[i + 1 :]:
            assert fast.measure(Interval(start, end)) == reference.measure(Interval(start, end))


@pytest.mark.parametrize("few_cells", [usage.FEW_CELLS, 0], ids=["probe-per-cell", "one-join"])
def test_both_rollup_query_shapes_agree_with_the_reference(messy, monkeypatch, few_cells):
    # A day cut at every hour (an hourly series): with few cells each probes the rollup index,
    # with many they are joined once; both must give the reference's figures.
    monkeypatch.setattr(usage, "FEW_CELLS", few_cells)
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
