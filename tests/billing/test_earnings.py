"""An owner's earnings of a period: preliminary (computed by the statements' own code, up to
now, writing nothing) until the period's statement is published, final (as stored) after."""

import datetime as dt
from decimal import Decimal

import pytest

from billing.models import Period, Statement
from billing.selectors.earnings import owner_earnings
from billing.services.closing import period_close
from billing.services.periods import month_bounds, period_for_month
from billing.services.publishing import statement_publish_approve, statement_publish_request
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
D = Decimal
UTC = dt.UTC
MARCH = month_bounds(year=2026, month=3)
APRIL_2 = dt.datetime(2026, 4, 2, tzinfo=UTC)


@pytest.fixture
def march(oscar, disclosure):
    """The worked example of docs/accounting.md (``scenario.worked_example``); no period
    row exists yet."""
    return {**s.worked_example(oscar), "disclosure": disclosure}


def _figures(e):
    return (e.gross, e.hosting_fee, e.power_cost, e.management_fee, e.net)


def test_a_whole_period_preliminary_equals_the_statement_the_close_writes(march, oscar):
    alice, bob = march["alice"], march["bob"]
    (a, b) = sorted(
        owner_earnings(
            owner_ids=[alice.pk, bob.pk],
            start=MARCH[0],
            end=MARCH[1],
            now=APRIL_2,
            disclosure=march["disclosure"],
        ),
        key=lambda e: e.net,
    )
    assert (a.owner_id, a.final, a.statement_id, a.currency) == (alice.pk, False, None, "EUR")
    assert (a.start, a.end, a.period_end, a.to_date, a.lines) == (*MARCH, MARCH[1], False, 1)
    assert _figures(a) == (D("456.02"), D("30.65"), D("41.04"), D("45.60"), D("338.73"))
    assert _figures(b) == (D("1031.98"), D("69.35"), D("92.88"), D("103.20"), D("766.55"))
    assert not Period.objects.exists()  # nothing written, not even the period
    assert not Statement.objects.exists()

    period_close(period=period_for_month(year=2026, month=3), by=oscar)
    statement = Statement.objects.get(owner=alice)
    (line,) = statement.lines.all()
    assert (line.gross, line.hosting_fee, line.power_cost, line.management_fee, line.net) == (
        _figures(a)
    )


def test_the_running_month_counts_up_to_now_and_prorates_hosting_over_the_month(march):
    alice, bob = march["alice"], march["bob"]
    now = dt.datetime(2026, 3, 6, tzinfo=UTC)
    (a,) = owner_earnings(
        owner_ids=[alice.pk, bob.pk],
        start=MARCH[0],
        end=MARCH[1],
        now=now,
        disclosure=march["disclosure"],
    )
    # Five days up: 120 h × 2.00 = 240.00; hosting 100 × 432,000 / 2,678,400 = 16.129…;
    # 7,200 min × 0.01 kWh = 72 kWh × 1.5 × 0.20 = 21.60; management 10 % = 24.00.
    assert (a.owner_id, a.end, a.to_date, a.final) == (alice.pk, now, True, False)
    assert _figures(a) == (D("240.00"), D("16.13"), D("21.60"), D("24.00"), D("178.27"))
    # Bob holds nothing yet in March: no line, no figure.


def test_a_published_statement_makes_the_figures_final(march, oscar, olga):
    alice, bob = march["alice"], march["bob"]
    period = period_for_month(year=2026, month=3)
    period_close(period=period, by=oscar)
    statement = Statement.objects.get(owner=alice)
    statement_publish_request(statement=statement, by=oscar)
    statement_publish_approve(statement=statement, by=olga)
    (a, b) = sorted(
        owner_earnings(
            owner_ids=[alice.pk, bob.pk],
            start=MARCH[0],
            end=MARCH[1],
            now=APRIL_2,
            disclosure=march["disclosure"],
        ),
        key=lambda e: e.net,
    )
    assert (a.final, a.statement_id, a.lines) == (True, statement.pk, 1)
    assert _figures(a) == (D("456.02"), D("30.65"), D("41.04"), D("45.60"), D("338.73"))
    # Bob's statement is still a draft: his figures stay preliminary.
    assert (b.final, b.statement_id) == (False, None)
    assert b.net == D("766.55")


def test_only_the_owners_asked_for_are_computed(march):
    (b,) = owner_earnings(
        owner_ids=[march["bob"].pk],
        start=MARCH[0],
        end=MARCH[1],
        now=APRIL_2,
        disclosure=march["disclosure"],
    )
    assert (b.owner_id, b.net) == (march["bob"].pk, D("766.55"))
