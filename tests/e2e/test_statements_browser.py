"""An owner reads a statement in a real browser: logs in with a TOTP code, is asked to
acknowledge the risk disclosure before any figure, opens a GPU page, opens the statement and
downloads its PDF, whose text states the figures with their basis. axe-core finds no serious
or critical problem on the statements pages; screenshots land in var/screenshots/."""

from __future__ import annotations

import datetime as dt
import io
import re

import pytest
from pypdf import PdfReader

from accounts import services as accounts
from accounts.models import Owner, User
from tests.accounts.two_factor import current_code, give_authenticator
from tests.billing import reports_world as rw
from tests.conftest import PASSWORD
from tests.e2e.test_portal_browser import axe_check
from tests.portal import world as worlds

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_owner_acknowledges_the_disclosure_and_downloads_a_statement_pdf(
    page, screenshot, oscar: User, alice_owner: Owner, bob_owner: Owner, alice: User, bob: User
):
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    world = worlds.build(oscar=oscar, alice_owner=alice_owner, bob_owner=bob_owner, now=now)
    olga = accounts.user_create(email="olga@steward.example", password=PASSWORD, is_staff=True)
    disclosure = accounts.disclosure_standard_ensure()
    statement = rw.statement_build(
        owner=alice_owner, gpu=world.a1, disclosure=disclosure, publish_by=(oscar, olga)
    )

    device = give_authenticator(alice)
    page.goto("/login/")
    page.get_by_label("Email").fill(alice.email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/login/verify/")
    page.get_by_label("Authentication code").fill(current_code(device))
    page.get_by_role("button", name="Verify").click()
    page.get_by_role("heading", name="Fleet overview").wait_for()

    # Statements show earnings: the disclosure comes first, then the page asked for.
    page.get_by_role("link", name="Statements", exact=True).click()
    page.get_by_role("heading", name="Risk disclosure").wait_for()
    assert "57.68" not in page.content()
    screenshot(page, "disclosure")
    axe_check(page, "disclosure")
    page.get_by_label(re.compile("I have read this disclosure")).check()
    page.get_by_role("button", name="Acknowledge and continue").click()
    page.get_by_role("heading", name="Statements", exact=True).wait_for()
    screenshot(page, "statements")
    axe_check(page, "statements")

    page.get_by_role("link", name="GPUs", exact=True).click()
    page.get_by_role("link", name="A1", exact=True).click()
    page.get_by_role("heading", name="GPU A1").wait_for()

    page.get_by_role("link", name="Statements", exact=True).click()
    page.get_by_role("link", name="2026-02-01 00:00 to 2026-02-04 00:00", exact=True).click()
    page.get_by_role(
        "heading", name="Statement for 2026-02-01 00:00 to 2026-02-04 00:00"
    ).wait_for()
    assert page.get_by_role("img", name=re.compile("^Availability by day")).is_visible()
    assert page.locator("svg.chart.bars").count() == 2
    assert statement.content_sha256 in page.content()
    screenshot(page, "statement")
    axe_check(page, "statement")

    with page.expect_download() as downloading:
        page.get_by_role("link", name=re.compile("^PDF")).click()
    download = downloading.value
    assert download.suggested_filename == f"statement-2026-02-EUR-{statement.pk}.pdf"
    with open(download.path(), "rb") as pdf:
        data = pdf.read()
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(data)).pages)
    assert "Statement for 2026-02-01 00:00 to 2026-02-04 00:00" in text
    assert "Balance carried forward (total) 82.68 EUR" in text
    assert "Results are not guaranteed" in text
    assert f"Statement content SHA-256: {statement.content_sha256}" in text
    assert page.problems == []
