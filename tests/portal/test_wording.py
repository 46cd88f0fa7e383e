"""No guaranteed outcomes: every portal page, rendered for a demo owner, keeps the wording rule.

The page test walks every URL pattern of the portal, so pages added later (earnings,
statements) are checked without touching this file; a pattern with an argument this test
cannot fill fails, asking for a sample value.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.urls import URLPattern, URLResolver, resolve, reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from pypdf import PdfReader

from accounts import services as accounts
from accounts.models import ApiKey, Owner, Partner, PartnerGrant, User
from billing.services.ledger import payout_record
from billing.services.periods import period_for_month
from billing.services.revenue import rate_card_create, rental_create
from fleet.models import Cluster, Gpu, IncidentCause, MaintenanceWindow
from fleet.services import operations
from portal import urls as portal_urls
from portal.access import gpus_for_user
from portal.demo import seed_demo
from portal.models import UserSession
from portal.wording import BASIS_NEEDS, earnings_basis_check, forbidden_wording
from telemetry.models import GpuStateTransition, HourlyRollup
from tests.accounts.two_factor import give_authenticator
from tests.billing.reports_world import statement_build
from tests.conftest import PASSWORD
from tests.portal.money_world import published_statement

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "text",
    [
        "Guaranteed returns on every GPU",
        "A risk-free way to own hardware",
        "Risk free!",
        "Earn passive income",
        "Your ROI this year",
        "return on investment",
        "Expected return: 12 %",
        "expected earnings",
        "Projected earnings for 2027",
        "our forecast",
        "Your GPU will earn more next month",
        "We guarantee uptime",
        "estimated income",
        "Our projection: more next year",
        "See the forecast below",
    ],
)
def test_the_checker_finds_promises(text):
    assert forbidden_wording(f"<p>{text}</p>"), text


@pytest.mark.parametrize(
    "text",
    [
        "Results are not guaranteed and can be zero.",
        "Owning hardware does not guarantee any outcome.",
        "There is no guarantee of earnings.",
        "Earnings are never guaranteed.",
        "Availability = up ÷ (in service − maintenance).",
        "Utilization 50.00 %",
        "Steward shows no projection or forecast of earnings.",
    ],
)
def test_the_checker_allows_denials_and_plain_figures(text):
    assert forbidden_wording(f"<p>{text}</p>") == []


def test_the_checker_reads_labels_but_not_scripts():
    assert forbidden_wording('<img alt="risk-free">')
    assert forbidden_wording('<button aria-label="See your ROI">x</button>')
    assert forbidden_wording("<script>var forecast = 1;</script><p>ok</p>") == []


BASIS = (
    "Preliminary. Period: November 2026, from 2026-11-01 00:00 UTC. Gross is your share of "
    "revenue; net is gross minus the hosting fee, power cost and management fee. Results are "
    "not guaranteed and can be zero."
)


def test_the_basis_check_counts_amounts_next_to_a_complete_basis():
    page = (
        f'<dl data-basis="b"><dd>1,234.56 EUR</dd><dd>−3.10 EUR</dd></dl><p id="b">{BASIS}</p>'
        '<div data-basis="b"><table><tr><td>7.00 USD</td></tr></table></div><p>3 GPUs, 97.34 %</p>'
    )
    check = earnings_basis_check(page)
    assert (check.figures, check.findings) == (3, [])


@pytest.mark.parametrize(
    ("page", "rule"),
    [
        ("<p>Net 12.00 EUR</p>", "earnings figure without basis"),
        ('<p data-basis="nope">12.00 EUR</p>', "basis missing"),
        (
            f'<p data-basis="b">12.00 EUR</p><p id="b">{BASIS.replace("not guaranteed", "")}</p>',
            "basis lacks not guaranteed",
        ),
        (
            f'<p data-basis="b">1.00 EUR</p><p id="b">{BASIS.replace("Preliminary", "Draft")}</p>',
            "basis lacks final or preliminary",
        ),
        (
            f'<p data-basis="b">1.00 EUR</p><p id="b">{BASIS.replace("power", "")}</p>',
            "basis lacks costs included",
        ),
        (
            f'<p data-basis="b">1.00 EUR</p><p id="b">'
            f"{BASIS.replace('November 2026', 'this month').replace('2026-11-01', 'today')}</p>",
            "basis lacks period",
        ),
        (
            "<script>var x = '1.00 EUR';</script><div>2.00 EUR</div>",
            "earnings figure without basis",
        ),
    ],
)
def test_the_basis_check_finds_amounts_without_their_basis(page, rule):
    assert [f.rule for f in earnings_basis_check(page).findings] == [rule]


def _patterns(entries, prefix=""):
    for entry in entries:
        if isinstance(entry, URLResolver):
            yield from _patterns(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield entry


@pytest.fixture
def demo(oscar):
    """The demo fleet, with a month of telemetry on one of alice's GPUs and an incident."""
    seed_demo(password=PASSWORD)
    alice = User.objects.get(email="alice@owner.example")
    gpu = gpus_for_user(user=alice).order_by("serial")[0]
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    GpuStateTransition.objects.create(gpu=gpu, state="up", at=now - dt.timedelta(days=31))
    HourlyRollup.objects.bulk_create(
        [
            HourlyRollup(
                gpu=gpu,
                hour=now - dt.timedelta(hours=h),
                windows=60,
                seconds_up=3600,
                seconds_degraded=0,
                seconds_down=0,
                util_gpu_seconds=Decimal(3600 * (40 + h % 50)),
                energy_kwh=Decimal("0.65"),
                temp_max_c=61.5,
                ecc_corrected=0,
                ecc_uncorrected=0,
                xid_events=0,
            )
            for h in range(1, 24 * 30)
        ]
    )
    incident = operations.incident_open(
        scope=gpu,
        title="ECC errors on one card",
        cause=IncidentCause.HARDWARE,
        started_at=now - dt.timedelta(days=2),
        by=oscar,
        notes_for_owners="The card was drained and tested.",
    )
    _money(alice=alice, gpu=gpu, now=now, oscar=oscar)
    # A statement computed by a real close (frozen inputs, days, events), for its pages.
    statement = statement_build(
        owner=Owner.objects.get(legal_name="Alice Compute Ltd"),
        gpu=gpu,
        disclosure=accounts.disclosure_standard_ensure(),
        publish_by=(oscar, User.objects.get(email="olga@steward.example")),
    )
    return alice, gpu, incident, statement


def _readable(response: Any) -> str:
    """What the owner reads: a PDF's text, else the body."""
    body: bytes = response.content
    if response["Content-Type"] == "application/pdf":
        return "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(body)).pages)
    return body.decode()


def _report_findings(text: str) -> list[str]:
    """A report format (PDF text, CSV, JSON) states every part of the basis."""
    return [
        name for name, rule in BASIS_NEEDS if not re.search(rule, text, re.IGNORECASE | re.DOTALL)
    ]


def _money(*, alice: User, gpu: Gpu, now: dt.datetime, oscar: User) -> None:
    """Earnings to show: rate cards on every demo cluster, the GPU rented since last month
    (only alice ever held it), last month's statement published, a payout; and a partner
    grant and a personal key for the settings pages."""
    owner = Owner.objects.get(legal_name="Alice Compute Ltd")
    olga = User.objects.get(email="olga@steward.example")
    start = now.replace(day=1, hour=0) - dt.timedelta(days=1)
    last_month = period_for_month(year=start.year, month=start.month)
    for cluster in Cluster.objects.all():
        for currency in ("EUR", "USD"):
            rate_card_create(
                cluster=cluster,
                currency=currency,
                effective_from=last_month.start - dt.timedelta(days=400),
                effective_to=None,
                hosting_fee_per_gpu_month=Decimal("90.00"),
                price_per_kwh=Decimal("0.21"),
                pue=Decimal("1.3"),
                management_fee_pct=Decimal("12"),
                waive_hosting_in_operator_incidents=False,
                by=oscar,
            )
    rental_create(
        cluster=gpu.placements.order_by("-valid_from")[0].node.cluster,
        gpus=[gpu],
        starts_at=last_month.start,
        ends_at=now + dt.timedelta(days=40),
        rate_per_gpu_hour=Decimal("1.85"),
        currency="EUR",
        customer_reference="R-1",
        by=oscar,
    )
    published_statement(
        owner=owner,
        period=last_month,
        opening="0.00",
        lines=[(gpu, "1200.00", "90.00", "150.00", "144.00")],
        requested_by=oscar,
        approved_by=olga,
    )
    payout_record(
        owner=owner,
        currency="EUR",
        amount=Decimal("500.00"),
        paid_on=now.date(),
        reference="P-1",
        by=oscar,
    )
    partner = Partner.objects.get(name="Carol Marketplace")
    accounts.partner_grant_create(owner=owner, partner=partner, scopes=["fleet:read"], by=alice)
    accounts.api_key_create(
        name="books",
        scopes=["statements:read"],
        expires_at=now + dt.timedelta(days=30),
        by=alice,
        owner=owner,
    )
    accounts.disclosure_acknowledge(
        user=alice, disclosure=accounts.disclosure_standard_ensure(), ip=None, user_agent=""
    )


def test_every_portal_page_keeps_the_wording_rule(demo):
    alice, gpu, incident, statement = demo
    owner = Client()
    owner.post("/login/", {"username": alice.email, "password": PASSWORD})
    samples = {
        "gpu_id": gpu.pk,
        "incident_id": incident.pk,
        "window_id": MaintenanceWindow.objects.order_by("pk")[0].pk,
        "session_id": UserSession.objects.get(user=alice).pk,
        "statement_id": statement.pk,
        "uidb64": urlsafe_base64_encode(force_bytes(alice.pk)),
        "token": default_token_generator.make_token(alice),
        "grant_id": PartnerGrant.objects.get(owner__memberships__user=alice).pk,
        "key_id": ApiKey.objects.get(created_by=alice).pk,
    }
    # Every amount of money an owner page shows must sit next to its basis; pages that show
    # earnings must be found showing some, so the check cannot pass by missing them.
    figures: dict[str, int] = {}
    # Someone between password and code, so the second step renders too.
    bob = User.objects.get(email="bob@owner.example")
    give_authenticator(bob)
    halfway = Client()
    halfway.post("/login/", {"username": bob.email, "password": PASSWORD})
    rendered: dict[str, int] = {}
    downloads: set[str] = set()
    patterns = list(_patterns(portal_urls.urlpatterns))
    assert len(patterns) >= 20
    for pattern in patterns:
        names = list(pattern.pattern.converters) or [
            name for name in ("uidb64", "token") if f"<{name}>" in str(pattern.pattern)
        ]
        missing = [name for name in names if name not in samples]
        assert not missing, f"{pattern.name}: add a sample value for {missing} to this test"
        url = reverse(f"portal:{pattern.name}", kwargs={n: samples[n] for n in names})
        for who, client in (("owner", owner), ("anonymous", Client()), ("halfway", halfway)):
            response = client.get(url, follow=True)
            assert response.status_code in (200, 405), (who, url, response.status_code)
            if response.status_code == 200:
                if resolve(response.request["PATH_INFO"]).url_name == pattern.name:
                    rendered[pattern.name] = rendered.get(pattern.name, 0) + 1
                text = _readable(response)
                if response["Content-Type"].startswith("text/html"):
                    basis = earnings_basis_check(text)
                    findings = forbidden_wording(text) + basis.findings
                    if who == "owner":
                        figures[pattern.name] = figures.get(pattern.name, 0) + basis.figures
                else:  # a statement download: PDF, CSV or JSON
                    findings = forbidden_wording(text, markup=False)
                    assert _report_findings(text) == [], (url, _report_findings(text))
                    downloads.add(response["Content-Type"].split(";")[0])
                assert findings == [], f"{who} {url}: {[str(f) for f in findings]}"
            # The CSV exports carry the same words as the tables.
            if who == "owner" and response.status_code == 200 and b"export=" in response.content:
                export = client.get(url, {"export": "gpus"})
                if export.status_code == 200 and hasattr(export, "streaming_content"):
                    body = b"".join(export.streaming_content).decode()
                    assert forbidden_wording(body, markup=False) == [], url
    assert downloads == {"application/pdf", "text/csv", "application/json"}
    assert {"statements", "statement"} <= set(rendered)
    post_only = {p.name for p in patterns} - set(rendered)
    assert post_only == {
        "logout",
        "2fa-disable",
        "recovery-codes",
        "session-revoke",
        "sessions-revoke-others",
        "partner-revoke",
        "api-key-revoke",
    }
    # The overview: this month so far, four figures for alice's one account (no pool is
    # entered for November yet, so no net); the payouts
    # page: the balance (3 amounts), the payout, last month's statement and the February
    # one the statement pages show (5 each).
    assert figures["home"] == 4
    assert figures["payouts"] == 3 + 1 + 5 + 5
    assert figures["statements"] > 0
    assert figures["statement"] > 0
