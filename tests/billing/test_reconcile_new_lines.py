"""Reconciling lines that no published statement had: a sale or transfer dated inside a
closed, published period and recorded after it."""

import datetime as dt
import re
from decimal import Decimal

import pytest

from billing.models import Adjustment, Period, Statement
from billing.services.closing import period_close, period_close_finish
from billing.services.periods import period_for_month
from billing.services.reconciliation import period_reconcile
from fleet.services.ownership import ShareTo, ownership_sell, ownership_transfer
from tests.billing import scenario as s

D = Decimal
UTC = dt.UTC
FEB = (dt.datetime(2026, 2, 1, tzinfo=UTC), dt.datetime(2026, 3, 1, tzinfo=UTC))

pytestmark = pytest.mark.django_db


def test_a_late_ownership_change_reconciles_into_the_next_open_period_once(oscar, olga, disclosure):
    f = s.fleet()
    sn1, sn2 = s.gpu(f, "SN-1", slot=0), s.gpu(f, "SN-2", slot=1)
    alice, bob = s.owner("Alice Compute Ltd"), s.owner("Bob Chen")
    s.own(sn1, alice, 10_000, s.EPOCH)  # SN-2 is unsold all February: no line for anyone
    s.card(f, oscar)
    for gpu in (sn1, sn2):
        s.windows(gpu, FEB[0] - dt.timedelta(minutes=1), FEB[1], node=f.node)
    s.rebuild(*FEB)
    february = period_for_month(year=2026, month=2)
    period_close(period=february, by=oscar)
    s.publish_all(february, oscar, olga)
    period_close_finish(period=february, by=oscar)
    alice_feb = Statement.objects.get(period=february)
    (sn1_line,) = alice_feb.lines.all()
    # No revenue, 28 days: 100.00 hosting and 403.2 kWh × 1.5 × 0.20 = 120.96 power.
    assert sn1_line.net == D("-220.96")

    # Recorded in March, dated in February: SN-2 sold to Bob on the 10th, and Alice's SN-1
    # transferred to Bob on the 15th.
    ownership_sell(
        gpus=[sn2],
        owner=bob,
        share_bps=10_000,
        at=dt.datetime(2026, 2, 10, tzinfo=UTC),
        reason="Sale signed on the 10th, entered late",
        by=oscar,
    )
    ownership_transfer(
        gpus=[sn1],
        from_owner=alice,
        to=[ShareTo(owner=bob, share_bps=10_000)],
        at=dt.datetime(2026, 2, 15, tzinfo=UTC),
        reason="Transfer entered late",
        by=oscar,
    )

    result = period_reconcile(period=february, by=oscar)

    march = Period.objects.get(start=FEB[1])
    assert (result.into, march.status) == (march, Period.Status.OPEN)
    added = [
        (str(a.owner_id) == str(alice.pk), a.corrects_statement_id, a.corrects_line_id, a.amount)
        for a in result.added
    ]
    added.sort(key=lambda row: (row[0], row[3]))
    # Alice's month-long line goes (+220.96); she keeps 1st–15th: 14 days, 50.00 hosting and
    # 60.48 power. Bob has SN-1 15th–end (the same) and SN-2 10th–end: 19 days, 67.86 hosting
    # (67.857…) and 273.6 kWh × 0.30 = 82.08 power. Bob had no February statement.
    assert added == [
        (False, None, None, D("-149.94")),
        (False, None, None, D("-110.48")),
        (True, alice_feb.pk, None, D("-110.48")),
        (True, alice_feb.pk, sn1_line.pk, D("220.96")),
    ]
    assert all(a.period == march for a in result.added)
    assert all(a.source == Adjustment.Source.RECONCILIATION for a in result.added)
    keys = sorted(a.idempotency_key or "" for a in result.added)
    assert keys[0] == f"reconcile:{february.pk}:line:{sn1_line.pk}:1"
    new_line_key = re.compile(rf"reconcile:{february.pk}:new:[0-9a-f]{{64}}:1")
    assert all(new_line_key.fullmatch(key) for key in keys[1:])
    assert len(set(keys)) == 4

    # Nothing new: running again adds nothing.
    assert period_reconcile(period=february, by=oscar).added == []
    assert Adjustment.objects.count() == 4
