"""The earnings page: final money per period (chart and table), per GPU for one period with
realised revenue per GPU-hour, sortable, CSV; behind the disclosure, the basis next to every
amount, nothing of another owner's. Figures on ``tests.portal.money_world``: Alice's
September (A1: hosting 10.00, net −10.00) and October (A1: gross 120.00, hosting 20.00,
power 10.00, management 12.00, net 78.00); Bob's October is in USD."""

from __future__ import annotations

import csv
import io
import re
from decimal import Decimal

import pytest
from django.urls import reverse

from accounts import services as accounts
from billing.models import Statement, StatementLine
from billing.services.periods import period_for_month
from portal import charts
from portal.wording import earnings_basis_check, forbidden_wording
from tests.portal import money_world

pytestmark = pytest.mark.django_db
D = Decimal


@pytest.fixture
def olga(db):
    return accounts.user_create(email="olga@steward.example", password="x" * 20, is_staff=True)


@pytest.fixture
def money(world, oscar, olga, alice_owner, bob_owner):
    made = money_world.build(
        world=world, oscar=oscar, olga=olga, alice_owner=alice_owner, bob_owner=bob_owner
    )
    # August: A1 in service all 744 hours of the month, held whole (lines are written before
    # the statement is published: a published statement's lines cannot change).
    august = period_for_month(year=2026, month=8)
    statement = Statement.objects.create(
        owner=alice_owner,
        period=august,
        currency="EUR",
        opening_balance=D("0.00"),
        lines_total=D("78.00"),
        adjustments_total=D("0.00"),
        payouts_total=D("0.00"),
        closing_balance=D("78.00"),
        frozen_inputs={},
        content_sha256="1" * 64,
        disclosure_version=made.alice_october.disclosure_version,
        disclosure_sha256=made.alice_october.disclosure_sha256,
        computed_at=august.end,
    )
    StatementLine.objects.create(
        statement=statement,
        position=1,
        kind=StatementLine.Kind.GPU,
        gpu=world.a1,
        starts_at=august.start,
        ends_at=august.end,
        share_bps=10_000,
        in_service_s=744 * 3600,
        gross=D("120.00"),
        hosting_fee=D("20.00"),
        power_cost=D("10.00"),
        management_fee=D("12.00"),
        net=D("78.00"),
    )
    Statement.objects.filter(pk=statement.pk).update(
        status=Statement.Status.PUBLISHED,
        requested_by=oscar,
        requested_at=august.end,
        approved_by=olga,
        published_at=august.end,
    )
    return made


def _acknowledged(client, user):
    disclosure = accounts.disclosure_standard_ensure()
    accounts.disclosure_acknowledge(user=user, disclosure=disclosure, ip=None, user_agent="")
    client.force_login(user)
    return client


def _csv(response) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_the_page_waits_for_the_disclosure(client, alice, money):
    client.force_login(alice)
    page = client.get(reverse("portal:earnings"))
    assert page.status_code == 302
    assert page["Location"].startswith(reverse("portal:disclosure"))


def test_per_period_the_published_figures_with_a_chart_and_their_basis(client, alice, money):
    page = _acknowledged(client, alice).get(reverse("portal:earnings"))
    assert page.status_code == 200
    html = page.content.decode()
    rows = _csv(client.get(reverse("portal:earnings"), {"export": "periods"}))
    assert [
        (r["period"], r["currency"], r["gross"], r["hosting_fee"], r["net"], r["status"])
        for r in rows
    ] == [
        ("2026-08", "EUR", "120.00", "20.00", "78.00", "final"),
        ("2026-09", "EUR", "0.00", "10.00", "-10.00", "final"),
        ("2026-10", "EUR", "120.00", "20.00", "78.00", "final"),
    ]
    # The table beside the chart, and the chart: a title, axes in EUR, three bars a period.
    assert "120.00 EUR" in html and "−10.00 EUR" in html
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert 'role="img"' in svg and "Gross, costs and net per period" in svg
    assert "Aug 2026" in svg and "Sep 2026" in svg and "Oct 2026" in svg and " EUR</text>" in svg
    assert "Oct 2026, Net: 78.00 EUR" in svg and "Sep 2026, Net: -10.00 EUR" in svg
    assert "USD" not in html  # Bob's October is not Alice's
    check = earnings_basis_check(html)
    assert check.findings == [] and check.figures >= 8
    assert forbidden_wording(html) == []
    assert "August 2026, September 2026, October 2026" in html and "not guaranteed" in html


def test_per_gpu_realised_revenue_per_gpu_hour_sortable_and_as_csv(client, alice, money):
    client = _acknowledged(client, alice)
    page = client.get(reverse("portal:earnings"))
    html = page.content.decode()
    assert "Earnings per GPU, October 2026 (final)" in html  # the latest period first
    assert "—" in html  # no in-service hours recorded on October's line: no rate, not 0
    august = client.get(reverse("portal:earnings"), {"period": "2026-08", "sort": "-per_hour"})
    html = august.content.decode()
    assert "Earnings per GPU, August 2026 (final)" in html
    # 120.00 ÷ 744 h = 0.16129… per GPU-hour.
    assert "0.1613 EUR/h" in html and "744.0 h" in html
    assert re.search(r"Revenue per GPU-hour \(descending\)", html)
    assert earnings_basis_check(html).findings == []
    rows = _csv(client.get(reverse("portal:earnings"), {"export": "gpus", "period": "2026-08"}))
    assert [
        (r["gpu"], r["gross"], r["costs"], r["net"], r["owned_hours"], r["revenue_per_gpu_hour"])
        for r in rows
    ] == [("A1", "120.00", "42.00", "78.00", "744.00", "0.1613")]


def test_another_owners_period_is_not_offered(client, bob, money):
    page = _acknowledged(client, bob).get(reverse("portal:earnings"), {"period": "2026-09"})
    html = page.content.decode()
    # Bob has only October (USD): September is not his, so October is shown.
    assert "Earnings per GPU, October 2026 (final)" in html
    assert "EUR" not in html


def test_the_money_chart_is_pure_and_draws_a_negative_net_below_zero():
    bars = [
        charts.PeriodMoney("Sep 2026", D("0.00"), D("10.00"), D("-10.00")),
        charts.PeriodMoney("Oct 2026", D("120.00"), D("42.00"), D("78.00")),
    ]
    svg = charts.period_money_svg(bars, title="T", desc="D", currency="EUR", id_prefix="m")
    assert svg == charts.period_money_svg(bars, title="T", desc="D", currency="EUR", id_prefix="m")
    assert svg.count("<rect") == 2 * 3 + 3 + 1  # bars, legend keys, frame
    # The axis runs from −10 to 200 EUR (a nice ceiling of 120; the net's −10 below zero).
    assert ">-10 EUR</text>" in svg and ">200 EUR</text>" in svg
    assert 'aria-labelledby="m-title m-desc"' in svg


def test_occupancy_rented_against_idle_up_hours_per_gpu_per_day_and_for_the_fleet(
    client, alice, money
):
    """November to date: A1 is rented all month and up 482 h (money_world), so all of its
    up time is rented; A2 and X send no telemetry (no up time, so no occupancy, not 0 %)."""
    client = _acknowledged(client, alice)
    html = client.get(reverse("portal:earnings")).content.decode()
    assert "Occupancy, November 2026, month to date" in html
    assert 'id="occupancy-title"' in html and "in %" in html
    gpus = {
        r["gpu"]: r
        for r in _csv(client.get(reverse("portal:earnings"), {"export": "occupancy_gpus"}))
    }
    a1 = gpus["A1"]
    assert (a1["up_s"], a1["rented_s"], a1["idle_s"], a1["occupancy"]) == (
        str(482 * 3600),
        str(482 * 3600),
        "0",
        "1.000000",
    )
    assert gpus["A2"]["up_s"] == "0" and gpus["A2"]["occupancy"] == ""
    assert (gpus["X"]["up_s"], gpus["X"]["occupancy"]) == ("0", "")
    days = _csv(client.get(reverse("portal:earnings"), {"export": "occupancy_days"}))
    assert [d["day_utc"] for d in days][:2] == ["2026-11-01", "2026-11-02"] and len(days) == 21
    assert sum(int(d["up_s"]) for d in days) == sum(int(r["up_s"]) for r in gpus.values())
    assert sum(int(d["rented_s"]) for d in days) == 482 * 3600
    assert "Fleet: 482.0 h rented of 482.0 h up, 0.0 h idle; occupancy 100.00 %." in html
