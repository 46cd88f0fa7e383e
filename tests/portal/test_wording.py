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
from accounts.models import Owner, User
from fleet.models import IncidentCause, MaintenanceWindow
from fleet.services import operations
from portal import urls as portal_urls
from portal.access import gpus_for_user
from portal.demo import seed_demo
from portal.models import UserSession
from portal.wording import BASIS_PARTS, earnings_without_basis, forbidden_wording
from telemetry.models import GpuStateTransition, HourlyRollup
from tests.accounts.two_factor import give_authenticator
from tests.billing.reports_world import statement_build
from tests.conftest import PASSWORD

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
    # A published statement, and the disclosure acknowledged, so the earnings pages render.
    olga = accounts.user_create(email="olga@steward.example", password=PASSWORD, is_staff=True)
    disclosure = accounts.disclosure_standard_ensure()
    accounts.disclosure_acknowledge(user=alice, disclosure=disclosure, ip=None, user_agent="t")
    owner = Owner.objects.get(legal_name="Alice Compute Ltd")
    statement = statement_build(
        owner=owner, gpu=gpu, disclosure=disclosure, publish_by=(oscar, olga)
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
    return [name for name, rule in BASIS_PARTS if not re.search(rule, text, re.IGNORECASE)]


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
    }
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
                    findings = forbidden_wording(text) + earnings_without_basis(text)
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
    }
