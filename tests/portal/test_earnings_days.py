"""The earnings page by day: a published month's gross, costs and net per UTC day, as a
chart (title, axes, units) and a table with its CSV, adding up to the statement."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from accounts import services as accounts
from portal.wording import earnings_basis_check
from tests.billing import reports_world as rw
from tests.billing import scenario as s
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
LATER = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def published(oscar, alice_owner):
    olga = accounts.user_create(
        email="olga@steward.example", password=PASSWORD, full_name="Olga", is_staff=True
    )
    disclosure = accounts.disclosure_standard_ensure()
    gpu = s.gpu(s.fleet(), "SN-1", slot=0)
    with time_machine.travel(dt.datetime(2026, 2, 5, 9, tzinfo=dt.UTC), tick=False):
        return rw.statement_build(
            owner=alice_owner, gpu=gpu, disclosure=disclosure, publish_by=(oscar, olga)
        )


@pytest.fixture
def signed_in(client, alice):
    disclosure = accounts.disclosure_standard_ensure()
    accounts.disclosure_acknowledge(user=alice, disclosure=disclosure, ip=None, user_agent="")
    client.force_login(alice)
    return client


def test_a_published_month_by_day_as_chart_table_and_csv(signed_in, published):
    with time_machine.travel(LATER, tick=False):
        page = signed_in.get(reverse("portal:earnings"), {"month": "2026-02"})
        rows = list(
            csv.DictReader(
                io.StringIO(
                    b"".join(
                        signed_in.get(
                            reverse("portal:earnings"), {"month": "2026-02", "export": "money_days"}
                        ).streaming_content
                    ).decode()
                )
            )
        )
    assert page.status_code == 200
    html = page.content.decode()
    # The statement (gross 108.00, hosting 30.00, power 9.52, management 10.80, net 57.68)
    # by day: rented at 2.00 per GPU-hour, up 24 h, 18 h and 12 h.
    assert [(r["day_utc"], r["gross"], r["hosting_fee"], r["net"]) for r in rows] == [
        ("2026-02-01", "48.00", "10.00", rows[0]["net"]),
        ("2026-02-02", "36.00", "10.00", rows[1]["net"]),
        ("2026-02-03", "24.00", "10.00", rows[2]["net"]),
    ]
    assert sum(Decimal(r["net"]) for r in rows) == Decimal("57.68")
    assert {r["currency"] for r in rows} == {"EUR"}
    svg = html[html.index('aria-labelledby="money-day-0-title money-day-0-desc"') :]
    svg = svg[: svg.index("</svg>")]
    assert "Gross, costs and net by day, February 2026, Alice Compute Ltd, EUR (final)" in svg
    assert "Day of February 2026 (UTC)" in svg  # the x axis
    assert " EUR</text>" in svg  # the amount axis, in the currency
    assert "01, Gross: 48.00 EUR" in svg and "03, Net:" in svg
    check = earnings_basis_check(html)
    assert check.findings == []


def test_a_month_without_a_published_statement_says_so(signed_in, published):
    with time_machine.travel(LATER, tick=False):
        html = signed_in.get(reverse("portal:earnings"), {"month": "2026-01"}).content.decode()
        running = signed_in.get(reverse("portal:earnings")).content.decode()
    assert "No published statement for January 2026: daily figures come from a published" in html
    assert "No published statement for March 2026: the month is still running" in running


def test_a_published_statements_days_are_worked_out_once(signed_in, published, monkeypatch):
    """They never change (frozen inputs are immutable), so they are kept by the statement
    and its content hash: the second page view reruns no GPU's lines."""
    from billing.selectors import earnings as selectors

    worked: list[object] = []

    def counted(*, statement):
        worked.append(statement.pk)
        return real(statement=statement)

    real = selectors.statement_days
    monkeypatch.setattr(selectors, "statement_days", counted)
    with time_machine.travel(LATER, tick=False):
        first = signed_in.get(reverse("portal:earnings"), {"month": "2026-02"})
        second = signed_in.get(reverse("portal:earnings"), {"month": "2026-02"})
    assert worked == [published.pk]

    def by_day(page) -> str:
        text: str = page.content.decode()
        return text[text.index('id="by-day-h"') :].split("</table>", 1)[0]

    assert by_day(first) == by_day(second)
