"""Periods close in calendar order with no month left out: a month without a period row, or
closed after a later one, would never reach the balances carried forward after it."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from billing.models import Period, Statement
from billing.services.closing import period_close, period_close_finish, period_close_start
from billing.services.periods import period_for_month
from tests.billing import scenario as s

D = Decimal
UTC = dt.UTC
JANUARY_START = dt.datetime(2026, 1, 1, tzinfo=UTC)
APRIL_START = dt.datetime(2026, 4, 1, tzinfo=UTC)

pytestmark = pytest.mark.django_db


def _close_and_publish(period, requester, approver):
    period_close(period=period, by=requester)
    s.publish_all(period, requester, approver)
    period_close_finish(period=period, by=requester)
    return Statement.objects.get(period=period)


@pytest.fixture
def alice_all_quarter(oscar, disclosure):
    """SN-1, wholly Alice's, up every minute of January to March 2026; no revenue. Each month's
    net is its hosting fee (100.00) and power (0.01 kWh a minute × 1.5 × 0.20 EUR)."""
    s.alice_up_all_month(oscar, JANUARY_START, APRIL_START)


def test_a_month_without_a_period_must_be_closed_before_the_next(alice_all_quarter, oscar, olga):
    january = _close_and_publish(period_for_month(year=2026, month=1), oscar, olga)
    # 31 days: 100.00 hosting, 446.4 kWh × 0.30 = 133.92 power.
    assert january.closing_balance == D("-233.92")
    march = period_for_month(year=2026, month=3)  # February was never opened

    with pytest.raises(ValidationError, match=r"Close February 2026 first: it has no period yet"):
        period_close_start(period=march, by=oscar)
    assert Period.objects.get(pk=march.pk).status == Period.Status.OPEN
    assert not Statement.objects.filter(period=march).exists()

    february = _close_and_publish(period_for_month(year=2026, month=2), oscar, olga)
    # 28 days: 100.00 hosting, 403.2 kWh × 0.30 = 120.96 power.
    assert (february.opening_balance, february.lines_total) == (D("-233.92"), D("-220.96"))
    march_statement = _close_and_publish(march, oscar, olga)
    assert march_statement.opening_balance == D("-454.88")  # January's and February's nets
    assert march_statement.closing_balance == D("-688.80")


@pytest.mark.parametrize("later_status", ["closing", "closed"])
def test_a_period_after_a_later_one_started_closing_is_refused(
    alice_all_quarter, oscar, olga, later_status
):
    # March is the first period there is, so it may close; February's row comes afterwards.
    march = period_for_month(year=2026, month=3)
    if later_status == "closing":
        period_close(period=march, by=oscar)
    else:
        _close_and_publish(march, oscar, olga)
    february = period_for_month(year=2026, month=2)

    with pytest.raises(ValidationError) as refused:
        period_close_start(period=february, by=oscar)
    assert refused.value.message_dict == {
        "period": [
            f"March 2026 is already {later_status}: periods close in order, as balances carry "
            "forward, so February 2026 cannot be closed after it."
        ]
    }
    assert Period.objects.get(pk=february.pk).status == Period.Status.OPEN
    assert not Statement.objects.filter(period=february).exists()


def test_an_earlier_period_not_closed_is_named_as_a_month(oscar, disclosure):
    period_for_month(year=2026, month=1)
    february = period_for_month(year=2026, month=2)
    with pytest.raises(ValidationError, match=r"Close January 2026 first: balances carry"):
        period_close_start(period=february, by=oscar)


def test_a_gap_between_periods_that_are_not_months_is_named_by_its_bounds(oscar, disclosure):
    Period.objects.create(
        start=dt.datetime(2026, 2, 1, tzinfo=UTC),
        end=dt.datetime(2026, 2, 15, tzinfo=UTC),
        status=Period.Status.CLOSED,
    )
    late_february = Period.objects.create(
        start=dt.datetime(2026, 2, 20, tzinfo=UTC), end=dt.datetime(2026, 3, 1, tzinfo=UTC)
    )
    with pytest.raises(ValidationError) as refused:
        period_close_start(period=late_february, by=oscar)
    assert refused.value.message_dict == {
        "period": [
            "Close 2026-02-15 00:00 to 2026-02-20 00:00 UTC first: it has no period yet, and "
            "balances carry forward in order. Create the period for 2026-02-15 00:00 to "
            "2026-02-20 00:00 UTC, close it and publish its statements."
        ]
    }
