"""A close takes whole days' sums from telemetry's daily rollups (``DaySums``); summed per cell
from the hourly rollups instead, every statement must come out the same to the byte — also
after an hourly rollup is changed behind the derived pass's back."""

import datetime as dt
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


def _drafts(period, disclosure, monkeypatch, *, by_day: bool):
    # DAY_CELLS = 0: every whole day's cell from the daily rollups; beyond the number of
    # cells: none, each cell summed from the hourly rollups in SQL.
    monkeypatch.setattr(usage, "DAY_CELLS", 0 if by_day else 10**9)
    read = []
    original = usage.DaySums.read

    def recorded(days):
        read.append(len(days))
        return original(days)

    monkeypatch.setattr(usage.DaySums, "read", staticmethod(recorded))
    drafts = statements_compute(period=period, disclosure=disclosure)
    assert read == ([30] if by_day else [])  # every day but the transfer's (cut at 12:00:30)
    return {k: (d.sha256, d.frozen_json, d.content["lines_total"]) for k, d in drafts.items()}


def test_statements_from_daily_rollups_equal_those_from_hourly_ones(oscar, disclosure, monkeypatch):
    w = s.worked_example(oscar)
    period = period_for_month(year=2026, month=3)
    assert DailyRollup.objects.filter(gpu=w["gpu"]).count() == 31 + 1  # and Feb 28's last hour
    by_day = _drafts(period, disclosure, monkeypatch, by_day=True)
    assert by_day == _drafts(period, disclosure, monkeypatch, by_day=False)
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
    nets = {k[0]: total for k, (_, _, total) in changed.items()}
    assert nets == {str(w["alice"].pk): "338.73", str(w["bob"].pk): "766.25"}
