"""Statements in the portal: who sees which, the disclosure gate before any figure, the page
and its downloads (the same report), table exports, and the email when one is published."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re

import pytest
import time_machine
from django.core import mail
from django.urls import reverse

from accounts import services as accounts
from accounts.models import Membership
from billing.reports import render_csv, render_json, render_pdf, statement_report
from portal.models import Notice, NoticeKind, NotificationPreference
from portal.services.notifications import notices_send, notifications_scan
from portal.wording import earnings_basis_check, forbidden_wording
from tests.billing import reports_world as rw
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
MONEY = re.compile(r"-?\d[\d,]*\.\d{2} [A-Z]{3}")


@pytest.fixture
def olga(db):
    return accounts.user_create(
        email="olga@steward.example", password=PASSWORD, full_name="Olga", is_staff=True
    )


@pytest.fixture
def statements(world, oscar, olga, alice_owner, bob_owner):
    disclosure = accounts.disclosure_standard_ensure()
    a = rw.statement_build(
        owner=alice_owner, gpu=world.a1, disclosure=disclosure, publish_by=(oscar, olga)
    )
    b = rw.statement_build(
        owner=bob_owner, gpu=world.b1, disclosure=disclosure, publish_by=(oscar, olga)
    )
    return a, b, disclosure


def acknowledged(user, disclosure):
    accounts.disclosure_acknowledge(user=user, disclosure=disclosure, ip=None, user_agent="t")
    return user


def urls(statement):
    return [
        reverse(name, args=[statement.pk])
        for name in (
            "portal:statement",
            "portal:statement-pdf",
            "portal:statement-csv",
            "portal:statement-json",
        )
    ]


def test_an_owner_sees_its_statements_and_never_another_owners(client, statements, alice):
    a, b, disclosure = statements
    client.force_login(acknowledged(alice, disclosure))
    listing = client.get(reverse("portal:statements"))
    assert listing.status_code == 200
    page = listing.content.decode()
    assert reverse("portal:statement", args=[a.pk]) in page
    assert str(b.pk) not in page
    assert "57.68 EUR" in page and "82.68 EUR" in page
    for url in urls(a):
        assert client.get(url).status_code == 200, url
    for url in urls(b):
        assert client.get(url).status_code == 404, url


def test_nobody_gets_a_figure_before_acknowledging_the_disclosure(client, statements, alice):
    a, _, _ = statements
    client.force_login(alice)
    for url in [reverse("portal:statements"), *urls(a)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"] == f"/disclosure/?next={url.replace('/', '%2F')}"
    anonymous = client.__class__()
    assert anonymous.get(urls(a)[1])["Location"].startswith("/login/")


def test_drafts_are_not_shown(client, world, oscar, alice_owner, alice):
    disclosure = accounts.disclosure_standard_ensure()
    draft = rw.statement_build(owner=alice_owner, gpu=world.a1, disclosure=disclosure)
    client.force_login(acknowledged(alice, disclosure))
    assert str(draft.pk) not in client.get(reverse("portal:statements")).content.decode()
    for url in urls(draft):
        assert client.get(url).status_code == 404


def test_the_page_and_its_downloads_are_one_report(client, statements, alice):
    a, _, disclosure = statements
    client.force_login(acknowledged(alice, disclosure))
    report = statement_report(a)
    page = client.get(reverse("portal:statement", args=[a.pk])).content.decode()
    for needle in (
        "Statement for 2026-02-01 00:00 to 2026-02-04 00:00",
        "Final statement for 2026-02-01 00:00 to 2026-02-04 00:00, published",
        "108.00 EUR",
        "Balance carried forward (total)",
        "Cooling service",
        "Availability by day",
        a.content_sha256,
        disclosure.text_sha256,
        "Results are not guaranteed",
    ):
        assert needle in page, needle
    check = earnings_basis_check(page)
    assert check.findings == []
    assert check.figures > 0
    assert forbidden_wording(page) == []
    pdf = client.get(reverse("portal:statement-pdf", args=[a.pk]))
    assert pdf["Content-Type"] == "application/pdf"
    assert pdf["Content-Disposition"] == (
        f'attachment; filename="statement-2026-02-EUR-{a.pk}.pdf"'
    )
    assert pdf.content == render_pdf(report)
    assert client.get(reverse("portal:statement-csv", args=[a.pk])).content.decode() == (
        render_csv(report)
    )
    body = client.get(reverse("portal:statement-json", args=[a.pk])).content
    assert body == render_json(report)
    assert json.loads(body)["totals"]["closing_balance"] == "82.68"


def test_every_table_of_the_page_exports_as_csv(client, statements, alice):
    a, _, disclosure = statements
    client.force_login(acknowledged(alice, disclosure))
    url = reverse("portal:statement", args=[a.pk])
    lines = client.get(url, {"export": "lines"})
    rows = list(csv.reader(io.StringIO(b"".join(lines.streaming_content).decode())))
    assert rows[0][:2] == ["gpu", "from"]
    assert dict(zip(rows[0], rows[1], strict=True))["net"] == "57.68"
    days = client.get(url, {"export": "days"})
    rows = list(csv.reader(io.StringIO(b"".join(days.streaming_content).decode())))
    assert [r[0] for r in rows[1:]] == ["2026-02-01", "2026-02-02", "2026-02-03"]
    listing = client.get(reverse("portal:statements"), {"export": "statements"})
    rows = list(csv.reader(io.StringIO(b"".join(listing.streaming_content).decode())))
    assert len(rows) == 2 and "82.68" in rows[1]


def test_publishing_is_emailed_once_to_members_who_want_it(
    world, oscar, olga, alice_owner, alice, now
):
    carl = accounts.user_create(email="carl@owner.example", password=PASSWORD, full_name="Carl")
    accounts.membership_grant(user=carl, owner=alice_owner, role=Membership.Role.VIEWER)
    NotificationPreference.objects.create(user=carl, statement_published=False)
    disclosure = accounts.disclosure_standard_ensure()
    notifications_scan(now=dt.datetime.now(dt.UTC))  # places the cursors
    with time_machine.travel(rw.END + dt.timedelta(days=1), tick=False):
        statement = rw.statement_build(
            owner=alice_owner, gpu=world.a1, disclosure=disclosure, publish_by=(oscar, olga)
        )
    notifications_scan(now=dt.datetime.now(dt.UTC))
    notifications_scan(now=dt.datetime.now(dt.UTC))
    notice = Notice.objects.get(kind=NoticeKind.STATEMENT_PUBLISHED)
    assert (notice.user, notice.key) == (alice, f"statement:{statement.pk}")
    assert notices_send(now=dt.datetime.now(dt.UTC)) == 1
    [message] = mail.outbox
    assert message.to == ["alice@owner.example"]
    assert message.subject == (
        "[Steward] Statement published: 2026-02-01 00:00 to 2026-02-04 00:00, EUR"
    )
    assert f"http://localhost:8000/statements/{statement.pk}/" in message.body
    assert "Results are not guaranteed: they depend on utilization" in message.body
    assert "It is final" in message.body
    assert MONEY.search(str(message.body)) is None  # no figure, so none without its basis
    assert forbidden_wording(message.subject + "\n" + message.body, markup=False) == []


def test_statements_published_before_the_scan_began_are_not_announced(
    world, oscar, olga, alice_owner, now
):
    disclosure = accounts.disclosure_standard_ensure()
    rw.statement_build(
        owner=alice_owner, gpu=world.a1, disclosure=disclosure, publish_by=(oscar, olga)
    )
    notifications_scan(now=dt.datetime.now(dt.UTC))
    notifications_scan(now=dt.datetime.now(dt.UTC))
    assert not Notice.objects.filter(kind=NoticeKind.STATEMENT_PUBLISHED).exists()
