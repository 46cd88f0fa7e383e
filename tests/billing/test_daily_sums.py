"""A close takes whole days' sums from telemetry's daily rollups (``DaySums``); summed per cell
from the hourly rollups instead, every statement must come out the same to the byte — also
after an hourly rollup is changed behind the derived pass's back."""

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.db.models import F

from billing.selectors import usage
from billing.services.computing import statements_compute
from billing.services.periods import period_for_month
from telemetry.models import DailyRollup, HourlyRollup
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC


def _drafts(period, disclosure, monkeypatch, *, by_day: bool, every_gpu: bool = True):
    # by_day: every whole day's cell from the daily rollups — of every GPU (DAY_CELLS = 0) or
    # of the GPUs cut (beyond the number of cells); else (MAX_DAYS = 0) none, each cell
    # summed from the hourly rollups in SQL.
    monkeypatch.setattr(usage, "DAY_CELLS", 0 if every_gpu else 10**9)
    monkeypatch.setattr(usage, "MAX_DAYS", 62 if by_day else 0)
    read = []
    original = usage.DaySums.read

    def recorded(days, gpus=None):
        read.append((len(days), gpus is None))
        return original(days, gpus)

    monkeypatch.setattr(usage.DaySums, "read", staticmethod(recorded))
    drafts = statements_compute(period=period, disclosure=disclosure)
    # Every day but the transfer's (cut at 12:00:30).
    assert read == ([(30, every_gpu)] if by_day else [])
    return {k: (d.sha256, d.frozen_json, d.content["lines_total"]) for k, d in drafts.items()}


def test_statements_from_daily_rollups_equal_those_from_hourly_ones(oscar, disclosure, monkeypatch):
    w = s.worked_example(oscar)
    period = period_for_month(year=2026, month=3)
    assert DailyRollup.objects.filter(gpu=w["gpu"]).count() == 31 + 1  # and Feb 28's last hour
    by_day = _drafts(period, disclosure, monkeypatch, by_day=True)
    assert by_day == _drafts(period, disclosure, monkeypatch, by_day=False)
    assert by_day == _drafts(period, disclosure, monkeypatch, by_day=True, every_gpu=False)
    nets = {k[0]: total for k, (_, _, total) in by_day.items()}
    assert nets == {str(w["alice"].pk): "338.73", str(w["bob"].pk): "766.55"}

    # One hour of Bob's time gets 1 kWh more, written as no derived pass would: the day's
    # sums follow, and Bob's power cost rises by 1 kWh × 1.5 × 0.20 = 0.30.
    hour = dt.datetime(2026, 3, 20, 5, tzinfo=UTC)
    HourlyRollup.objects.filter(gpu=w["gpu"], hour=hour).update(energy_kwh=F("energy_kwh") + 1)
    assert DailyRollup.objects.get(gpu=w["gpu"], day=hour.date()).energy_kwh == Decimal(
        "15.400000000"
    )  # 24 h × 0.6 kWh + 1
    changed = _drafts(period, disclosure, monkeypatch, by_day=True)
    assert changed == _drafts(period, disclosure, monkeypatch, by_day=False)
    assert changed == _drafts(period, disclosure, monkeypatch, by_day=True, every_gpu=False)
    nets = {k[0]: total for k, (_, _, total) in changed.items()}
    assert nets == {str(w["alice"].pk): "338.73", str(w["bob"].pk): "766.25"}


def test_a_gpu_cut_into_whole_days_takes_them_as_one_slice(oscar, disclosure, monkeypatch):
    """A GPU in service all month with nothing else cutting it (most GPUs of a close) has
    only whole-day cells, which the close builds from one slice of its days' sums
    (``_day_run``): the same statements as from the hourly rollups, a day with no telemetry
    (no daily rollup) and days unlike each other included."""
    march = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    s.own(gpu, s.owner("Alice Compute Ltd"), 10_000, s.EPOCH)
    s.card(f, oscar)

    def by_day_of_month(t, values):
        util = float(t.day * 3 % 100)
        state = "down" if t.day == 7 and t.hour < 2 else "up"
        if t.day == 20:  # the counter stands still all day: no energy, a rollup of zeros
            values = {**values, "energy_mj": 0}
        return {**values, "util": util, "state": state}

    s.windows(gpu, march[0] - dt.timedelta(minutes=1), march[1], node=f.node,
              skip=[(dt.datetime(2026, 3, 12, tzinfo=UTC), dt.datetime(2026, 3, 13, tzinfo=UTC))],
              change=by_day_of_month)  # fmt: skip
    s.rebuild(*march)
    assert not DailyRollup.objects.filter(gpu=gpu, day=dt.date(2026, 3, 12)).exists()
    runs = []
    original = usage._day_run

    def recorded(shape, position):
        runs.append(original(shape, position))
        return runs[-1]

    monkeypatch.setattr(usage, "_day_run", recorded)
    period = period_for_month(year=2026, month=3)
    by_day = {k: (d.sha256, d.frozen_json) for k, d in statements_compute(
        period=period, disclosure=disclosure).items()}  # fmt: skip
    assert runs == [slice(0, 31)]
    monkeypatch.setattr(usage, "MAX_DAYS", 0)  # every cell summed from the hourly rollups
    by_hour = {k: (d.sha256, d.frozen_json) for k, d in statements_compute(
        period=period, disclosure=disclosure).items()}  # fmt: skip
    assert by_day == by_hour
    ((_, frozen),) = by_day.values()
    (cells,) = [g["cells"] for g in json.loads(frozen)["gpus"]]
    assert len(cells) == 31
    assert cells[11][:2] == ["2026-03-12T00:00:00Z", "2026-03-13T00:00:00Z"]
    assert cells[11][6:10] == [0, 0, "0", "0"]  # nothing observed that day
    assert cells[6][7] == 7200 and cells[5][8] != cells[6][8]  # two hours down; days differ
    assert cells[19][9] == "0E-9"  # March 20: energy summed to zero at scale 9


def test_energy_text_from_the_database_is_pythons_str_of_the_decimal():
    """The day sums hand energy (scale 9) over as text that must be ``str()`` of the Decimal
    the cells would otherwise hold — the frozen inputs' text is made from it — and busy
    (scale 3) as PostgreSQL's own text (``::text`` in the day sums' query, so the second half
    pins that assumption about PostgreSQL): the two differ only below 10⁻⁶ (scientific
    notation), which ``_decimal_text_9`` writes as Python does."""
    import random

    from django.db import connection

    rng = random.Random(22)
    nines = [
        "0", "0.000000001", "0.000000010", "0.000000100", "0.000000123", "0.000000999",
        "0.000001000", "0.000009999", "0.5", "1", "13.680000000", "123456789.123456789",
        "9999999999999.999999999", "-0.000000001", "-0.000000120", "-2.5", "-0.000001",
    ]  # fmt: skip
    nines += [f"{rng.randrange(10**13)}.{rng.randrange(10**9):09d}" for _ in range(100)]
    nines += [f"0.{rng.randrange(10**4):09d}" for _ in range(100)]  # below 10⁻⁵
    threes = ["0", "0.001", "0.100", "-0.001", "2505600.000", "1234567890123456789.999"]
    threes += [f"{rng.randrange(10**9)}.{rng.randrange(1000):03d}" for _ in range(100)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT v, {usage._decimal_text_9('v')} FROM unnest(%s::numeric(22, 9)[]) v",  # noqa: S608
            [nines],
        )
        for value, text in cursor.fetchall():
            assert text == str(value), value
        cursor.execute("SELECT v, v::text FROM unnest(%s::numeric(22, 3)[]) v", [threes])
        for value, text in cursor.fetchall():
            assert text == str(value), value
