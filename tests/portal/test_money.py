"""Earnings on the overview and the payouts page: exact figures, preliminary vs final, the
disclosure gate, the basis next to every amount, CSV, and nothing of another owner's."""

from __future__ import annotations

import csv
import io
import re
from decimal import Decimal

import pytest
from django.urls import reverse

from accounts import services as accounts
from accounts.models import Membership
from billing.models import RateCard, Statement
from billing.services.periods import period_for_month
from billing.services.revenue import pool_add
from fleet.models import Cluster
from portal.wording import earnings_basis_check
from tests.portal import money_world

pytestmark = pytest.mark.django_db
D = Decimal


@pytest.fixture
def olga(db):
    return accounts.user_create(email="olga@steward.example", password="x" * 20, is_staff=True)


@pytest.fixture
def money(world, oscar, olga, alice_owner, bob_owner):
    return money_world.build(
        world=world, oscar=oscar, olga=olga, alice_owner=alice_owner, bob_owner=bob_owner
    )


def _acknowledged(client, user):
    disclosure = accounts.disclosure_standard_ensure()
    accounts.disclosure_acknowledge(user=user, disclosure=disclosure, ip=None, user_agent="")
    client.force_login(user)
    return client


def _figures(html: str, key_prefix: str) -> list[str]:
    """The values of the first earnings block whose id starts with key_prefix."""
    block = html[html.index(f'id="{key_prefix}') :]
    block = block[: block.index("</dl>")]
    return re.findall(r'<span class="value">([^<]+)</span>', block)


def _labels(html: str, key_prefix: str) -> list[str]:
    block = html[html.index(f'id="{key_prefix}') :]
    block = block[: block.index("</dl>")]
    return re.findall(r"<dt>([^<]+)</dt>", block)


def test_the_overview_shows_preliminary_november_to_date_with_its_basis(client, alice, money):
    """No pool is entered for November yet: gross so far is the rental alone, the pool is
    not yet known, the costs so far are costs, and no net sets them against the rental."""
    page = _acknowledged(client, alice).get(reverse("portal:home"))
    assert page.status_code == 200
    html = page.content.decode()
    assert _figures(html, "earn-0-") == [
        "482.00 EUR",
        "not yet known",
        "166.66 EUR",
        "101.64 EUR",
        "48.20 EUR",
        "not shown yet",
    ]
    assert _labels(html, "earn-0-") == [
        "Gross so far",
        "Pool revenue",
        "Hosting fee so far",
        "Power cost so far",
        "Management fee so far",
        "Net",
    ]
    assert "165.50 EUR" not in html and "−" not in "".join(_figures(html, "earn-0-"))
    assert "Revenue is incomplete: gross so far counts rentals" in html
    assert '<span class="badge badge-preliminary">Preliminary</span>' in html
    assert (
        "Period: November 2026, from 2026-11-01 00:00 UTC to 2026-11-21 12:00 UTC "
        "(month to date)." in html
    )
    assert "net is gross minus the hosting fee, power cost and management fee" in html
    assert "Results are not guaranteed" in html
    check = earnings_basis_check(html)
    assert (check.figures, check.findings) == (4, [])
    # Nothing was written to show it.
    assert Statement.objects.count() == 3


def test_once_every_pool_of_the_month_is_entered_the_preliminary_net_is_shown(
    client, alice, oscar, money
):
    """The operator entered cluster A's November pool (nothing this month: 0.00 EUR), so the
    revenue so far is known in full and the net so far is shown: 482.00 − 166.66 − 101.64 −
    48.20 = 165.50."""
    november = period_for_month(year=2026, month=11)
    pool_add(
        cluster=Cluster.objects.get(code="a"),
        period=november,
        amount=D("0.00"),
        currency="EUR",
        description="no pool revenue this month",
        by=oscar,
    )
    html = _acknowledged(client, alice).get(reverse("portal:home")).content.decode()
    assert _figures(html, "earn-0-") == [
        "482.00 EUR",
        "166.66 EUR",
        "101.64 EUR",
        "48.20 EUR",
        "165.50 EUR",
    ]
    assert _labels(html, "earn-0-")[-1] == "Net"
    assert "Revenue is incomplete" not in html
    check = earnings_basis_check(html)
    assert (check.figures, check.findings) == (5, [])


def test_a_period_with_a_published_statement_shows_final_figures_and_links_it(client, alice, money):
    page = _acknowledged(client, alice).get(reverse("portal:home"), {"period": "2026-10"})
    html = page.content.decode()
    # November (running, no pool entered: four figures, no net) first, then October as
    # published: 120 − 20 − 10 − 12 = 78.
    assert _figures(html, "earn-1-") == [
        "120.00 EUR",
        "20.00 EUR",
        "10.00 EUR",
        "12.00 EUR",
        "78.00 EUR",
    ]
    assert '<span class="badge badge-final">Final</span>' in html
    assert "Final: the figures of the published statement. Period: October 2026" in html
    assert f'href="/statements/{money.alice_october.pk}/"' in html
    check = earnings_basis_check(html)
    assert (check.figures, check.findings) == (9, [])


def test_without_the_acknowledged_disclosure_the_overview_hides_earnings_only(client, alice, money):
    accounts.disclosure_standard_ensure()
    client.force_login(alice)
    page = client.get(reverse("portal:home"))
    html = page.content.decode()
    assert page.status_code == 200
    assert "Hours with no data" in html  # the rest of the overview is there
    assert "Read the risk disclosure" in html
    assert 'href="/disclosure/?next=/"' in html
    assert "EUR" not in html and "Preliminary" not in html
    assert earnings_basis_check(html).figures == 0


def test_a_period_without_billing_data_says_so_and_shows_no_figure(client, alice, money):
    RateCard.objects.filter(currency="EUR").delete()
    html = _acknowledged(client, alice).get(reverse("portal:home")).content.decode()
    assert "No earnings figure can be worked out for this period yet" in html
    assert "Bob" not in html.split("Earnings", 1)[1].split("</section>", 1)[0]
    assert earnings_basis_check(html).figures == 0


def test_payouts_show_balances_from_the_ledger_with_their_basis(client, alice, money):
    page = _acknowledged(client, alice).get(reverse("portal:payouts"))
    assert page.status_code == 200
    html = page.content.decode()
    # October closed at −10.00 + 78.00 = 68.00; 50.00 paid on Nov 5: 18.00.
    row = html[html.index("Balance by owner account") :]
    row = row[: row.index("</tr>", row.index("<tbody>"))]
    assert "68.00 EUR" in row and "50.00 EUR" in row and "18.00 EUR" in row
    assert "P-ALICE-1" in html
    assert "−10.00 EUR" in html  # the negative September carried into October
    assert "P-BOB-1" not in html and "500.00 USD" not in html
    assert f'href="/statements/{money.alice_october.pk}/"' in html
    check = earnings_basis_check(html)
    assert check.findings == []
    assert check.figures == 3 + 1 + 2 * 5  # balances row, payout, two statements


def test_payouts_export_every_table_as_csv(client, alice, money):
    client = _acknowledged(client, alice)
    rows = {}
    for name in ("balances", "payouts", "statements"):
        response = client.get(reverse("portal:payouts"), {"export": name})
        assert response["Content-Type"] == "text/csv"
        body = b"".join(response.streaming_content).decode()
        rows[name] = list(csv.reader(io.StringIO(body)))
    assert rows["balances"] == [
        [
            "owner_account",
            "currency",
            "last_published_statement",
            "closing_balance",
            "paid_since",
            "balance",
            "status",
        ],
        ["Alice Compute Ltd", "EUR", "October 2026", "68.00", "50.00", "18.00", "final"],
    ]
    assert rows["payouts"] == [
        ["paid_on", "owner_account", "amount", "currency", "reference"],
        ["2026-11-05", "Alice Compute Ltd", "50.00", "EUR", "P-ALICE-1"],
    ]
    assert [r[:8] for r in rows["statements"][1:]] == [
        ["2026-10", "Alice Compute Ltd", "EUR", "-10.00", "78.00", "0.00", "0.00", "68.00"],
        ["2026-09", "Alice Compute Ltd", "EUR", "0.00", "-10.00", "0.00", "0.00", "-10.00"],
    ]


def test_bob_sees_only_his_own_balance(client, bob, money):
    html = _acknowledged(client, bob).get(reverse("portal:payouts")).content.decode()
    assert "P-BOB-1" in html and "400.00 USD" in html
    assert "P-ALICE-1" not in html and "Alice" not in html


@pytest.mark.parametrize("name", ["portal:payouts"])
def test_earnings_pages_are_behind_the_disclosure(client, alice, money, name):
    accounts.disclosure_standard_ensure()
    client.force_login(alice)
    response = client.get(reverse(name), {"export": "payouts"})
    assert response.status_code == 302
    assert response["Location"].startswith("/disclosure/?next=")
    assert client.get(reverse(name)).status_code == 302
    anonymous = client.__class__().get(reverse(name))
    assert anonymous["Location"].startswith("/login/")


def test_a_viewer_member_sees_the_same_money_pages(client, money, alice_owner):
    viewer = accounts.user_create(email="vic@owner.example", password="x" * 20)
    accounts.membership_grant(user=viewer, owner=alice_owner, role=Membership.Role.VIEWER)
    html = _acknowledged(client, viewer).get(reverse("portal:payouts")).content.decode()
    assert "P-ALICE-1" in html and "18.00 EUR" in html
