"""The console shows billing's history as it shows fleet's: each billing object's page lists
its audit trail (who, what, when, why), and a period's page its billing history."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from accounts.models import AuditEntry
from billing.models import Period, PoolRevenue, RateCard, Statement
from billing.services import closing, publishing, revenue
from billing.services.periods import period_for_month
from tests.accounts.two_factor import console_login
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))


@pytest.fixture
def world(oscar, disclosure) -> dict[str, Any]:
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    s.own(gpu, s.owner("Alice Compute Ltd"), 10_000, s.EPOCH)
    s.windows(gpu, MARCH[0], MARCH[0] + dt.timedelta(hours=2), node=f.node)
    s.rebuild(*MARCH)
    return {"fleet": f, "march": period_for_month(year=2026, month=3)}


def _trail(page: str) -> str:
    """The audit trail section of a page."""
    assert 'id="audit-trail"' in page
    return page.split('id="audit-trail"', 1)[1].split("</section>", 1)[0]


def test_a_rate_card_entered_and_ended_in_the_console_shows_its_trail(world, oscar):
    client = console_login(Client(), oscar)
    response = client.post(
        "/admin/billing/ratecard/add/",
        {
            "cluster": world["fleet"].cluster.pk,
            "currency": "EUR",
            "effective_from_0": "2025-01-01",
            "effective_from_1": "00:00:00",
            "hosting_fee_per_gpu_month": "100",
            "price_per_kwh": "0.2",
            "pue": "1.5",
            "management_fee_pct": "10",
            "reason": "Contract 2025",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    card = RateCard.objects.get()
    client.post(
        "/admin/billing/ratecard/",
        {
            "action": "end_card",
            "_selected_action": [str(card.pk)],
            "apply": "1",
            "at": "2026-04-01 00:00:00",
            "reason": "New contract from April",
        },
    )
    assert RateCard.objects.get().effective_to == MARCH[1]

    trail = _trail(client.get(f"/admin/billing/ratecard/{card.pk}/change/").content.decode())
    rows = trail.split("<tr>")[2:]  # after the header
    assert len(rows) == 2
    assert "billing.rate_card.end" in rows[0] and "New contract from April" in rows[0]
    assert "billing.rate_card.create" in rows[1] and "Contract 2025" in rows[1]
    assert all("oscar@steward.example" in row for row in rows)
    assert "{&#x27;effective_to&#x27;: &#x27;2026-04-01T00:00:00Z&#x27;}" in rows[0]


def test_a_statement_shows_its_publishing_and_a_period_its_billing_history(world, oscar):
    s.card(world["fleet"], oscar)
    revenue.pool_add(
        cluster=world["fleet"].cluster,
        period=world["march"],
        amount=Decimal("12.00"),
        currency="EUR",
        description="",
        by=oscar,
        reason="Marketplace statement",
    )
    closing.period_close(period=world["march"], by=oscar, reason="Month end")
    statement = Statement.objects.get()
    publishing.statement_publish_request(statement=statement, by=oscar, reason="Looks right")
    client = console_login(Client(), oscar)

    trail = _trail(client.get(f"/admin/billing/statement/{statement.pk}/change/").content.decode())
    assert "billing.statement.publish_request" in trail and "Looks right" in trail

    page = client.get(f"/admin/billing/period/{world['march'].pk}/change/").content.decode()
    history = _trail(page)
    assert "Billing history of this period" in history
    actions = [
        a
        for a in AuditEntry.objects.order_by("-at", "-id").values_list("action", flat=True)
        if a in history
    ]
    assert actions == [
        "billing.statement.publish_request",
        "billing.period.compute",
        "billing.period.close_start",
        "billing.pool.add",
        "billing.rate_card.create",  # the card reaches into March
    ]
    assert "Month end" in history and "Marketplace statement" in history
    pool = PoolRevenue.objects.get()
    assert "Marketplace statement" in _trail(
        client.get(f"/admin/billing/poolrevenue/{pool.pk}/change/").content.decode()
    )


def test_another_periods_history_is_not_shown(world, oscar):
    april = period_for_month(year=2026, month=4)
    revenue.pool_add(
        cluster=world["fleet"].cluster,
        period=april,
        amount=Decimal("1.00"),
        currency="EUR",
        description="",
        by=oscar,
        reason="April only",
    )
    client = console_login(Client(), oscar)
    history = _trail(
        client.get(f"/admin/billing/period/{world['march'].pk}/change/").content.decode()
    )
    assert "April only" not in history and "Nothing recorded yet." in history
    assert Period.objects.count() == 2
