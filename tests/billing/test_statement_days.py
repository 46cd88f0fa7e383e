"""A published statement's money by UTC day: derived by the statements' engine from the
frozen inputs, adding up to the statement's sums to the cent."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
import time_machine

from billing.models import Period, Statement
from billing.selectors.earnings import statement_days
from billing.services.closing import period_close
from billing.services.revenue import pool_add
from tests.billing import reports_world as rw
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
PUBLISHED_AT = dt.datetime(2026, 2, 5, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def statement(oscar, olga, disclosure) -> Statement:
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    owner = s.owner("Alice Compute Ltd")
    with time_machine.travel(PUBLISHED_AT, tick=False):
        return rw.statement_build(
            owner=owner, gpu=gpu, disclosure=disclosure, publish_by=(oscar, olga)
        )


def test_each_day_earns_what_its_up_time_earned_and_the_days_add_up(statement):
    days = statement_days(statement=statement)
    assert days is not None
    # Rented at 2.00 per GPU-hour: up 24 h, 18 h (maintenance until 06:00), 12 h (then
    # silent). Hosting 30.00 for the three days, by in-service seconds; management 10 %.
    assert [(d.day.day, d.gross, d.hosting_fee, d.management_fee) for d in days] == [
        (1, Decimal("48.00"), Decimal("10.00"), Decimal("4.80")),
        (2, Decimal("36.00"), Decimal("10.00"), Decimal("3.60")),
        (3, Decimal("24.00"), Decimal("10.00"), Decimal("2.40")),
    ]
    # The statement: gross 108.00, hosting 30.00, power 9.52, management 10.80, net 57.68.
    assert sum(d.gross for d in days) == Decimal("108.00")
    assert sum(d.power_cost for d in days) == Decimal("9.52")
    assert sum(d.net for d in days) == Decimal("57.68")
    assert [d.net for d in days] == [d.gross - d.costs for d in days]


def test_a_statement_without_cells_has_no_days(statement):
    frozen = {**statement.frozen_inputs}
    frozen["gpus"] = [{**g, "cells": []} for g in frozen["gpus"]]
    statement.frozen_inputs = frozen  # in memory only: a published statement is immutable
    assert statement_days(statement=statement) is None


def test_a_sale_mid_day_splits_that_day_between_the_two_owners(oscar, disclosure):
    """A real close: a pool of 48.00 over two days, split by up seconds; Alice sells to Bob at
    noon on the second day. Each owner's days add up to their statement; Alice earns nothing
    after noon, Bob nothing before."""
    start, end = dt.datetime(2026, 2, 1, tzinfo=dt.UTC), dt.datetime(2026, 2, 3, tzinfo=dt.UTC)
    sale = dt.datetime(2026, 2, 2, 12, tzinfo=dt.UTC)
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    alice, bob = s.owner("Alice Compute Ltd"), s.owner("Bob Hosting Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH, sale)
    s.own(gpu, bob, 10_000, sale)
    s.card(f, oscar)
    s.windows(gpu, start - dt.timedelta(minutes=1), end, node=f.node)
    s.rebuild(start, end)
    period = Period.objects.create(start=start, end=end)
    pool_add(
        cluster=f.cluster,
        period=period,
        amount=Decimal("48.00"),
        currency="EUR",
        description="",
        by=oscar,
    )
    with time_machine.travel(dt.datetime(2026, 2, 4, tzinfo=dt.UTC), tick=False):
        period_close(period=period, by=oscar)
    figures = {}
    for owner in (alice, bob):
        statement = Statement.objects.get(owner=owner, period=period)
        days = statement_days(statement=statement)
        assert days is not None
        lines = statement.lines.filter(kind="gpu")
        for name in ("gross", "hosting_fee", "power_cost", "management_fee", "net"):
            assert sum(getattr(d, name) for d in days) == sum(getattr(x, name) for x in lines)
        figures[owner.legal_name] = [d.gross for d in days]
    # Up all the time: the pool by up seconds is 24.00 a day; Alice held 1.5 days, Bob 0.5.
    assert figures == {
        "Alice Compute Ltd": [Decimal("24.00"), Decimal("12.00")],
        "Bob Hosting Ltd": [Decimal("0.00"), Decimal("12.00")],
    }
