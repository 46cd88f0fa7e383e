"""The guided close in a real browser, at 1280 px and on a 390 px phone: an operator
reaches it from the period's page, reads each step's state, starts the close with a reason,
and sees the drafts and the change per owner; nothing scrolls sideways and axe-core finds no
serious or critical problem. Screenshots land in var/screenshots/."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from accounts import services as accounts
from accounts.models import AuditEntry, User
from billing.models import Period
from billing.services import revenue
from billing.services.periods import period_for_month
from tests.billing import scenario as s
from tests.e2e.test_console_browser import WIDE, console_login, no_sideways_scroll
from tests.e2e.test_portal_browser import axe_check
from tests.telemetry.conftest import _windows_emptied

__all__ = ["_windows_emptied"]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
MARCH = (dt.datetime(2026, 3, 1, tzinfo=dt.UTC), dt.datetime(2026, 4, 1, tzinfo=dt.UTC))


def close_world(oscar: User) -> Period:
    accounts.disclosure_standard_ensure()
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    s.own(gpu, s.owner("Alice Compute Ltd"), 10_000, s.EPOCH)
    s.card(f, oscar)
    s.windows(gpu, MARCH[0], MARCH[0] + dt.timedelta(hours=2), node=f.node)
    s.rebuild(*MARCH)
    march = period_for_month(year=2026, month=3)
    revenue.pool_add(
        cluster=f.cluster,
        period=march,
        amount=Decimal("30.00"),
        currency="EUR",
        description="Marketplace, March",
        by=oscar,
    )
    return march


@pytest.mark.parametrize("width", [1280, 390])
def test_an_operator_walks_the_close(page, screenshot, oscar, width):
    march = close_world(oscar)
    page.route("**/favicon.ico", lambda route: route.fulfill(status=204))
    page.set_viewport_size({"width": width, "height": 900})
    console_login(page, oscar)
    page.goto(f"/admin/billing/period/{march.pk}/change/")
    page.get_by_role("link", name="Guided close").click()
    page.get_by_role("heading", name="1. Telemetry complete to the period's end").wait_for()
    assert page.get_by_role("heading", name="Done 2. Rate cards cover the period").is_visible()
    assert page.get_by_role("heading", name="To do 4. Start the close").is_visible()
    assert no_sideways_scroll(page), page.evaluate(WIDE)
    screenshot(page, f"console-close-open-{width}")
    axe_check(page, f"guided close, open period, {width} px")

    page.get_by_label("Reason (optional, kept in the audit trail)").fill("Month end")
    page.get_by_role("button", name="Start the close: compute the drafts").click()
    page.get_by_text("The close started: 1 draft(s) computed.").wait_for()
    assert page.get_by_role("heading", name="Done 5. Drafts computed").is_visible()
    table = page.get_by_role("table", name="Net per owner: 2026-03 against no earlier period")
    assert table.get_by_role("rowheader", name="Alice Compute Ltd").is_visible()
    assert page.get_by_role("button", name="Request publishing of 1 draft(s)").is_visible()
    assert no_sideways_scroll(page), page.evaluate(WIDE)
    screenshot(page, f"console-close-closing-{width}")
    axe_check(page, f"guided close, closing period, {width} px")
    entry = AuditEntry.objects.get(action="billing.period.close_start")
    assert (entry.actor, entry.reason) == (oscar, "Month end")

    # One owner's drafts, from the table of changes.
    table.get_by_role("button", name="Recompute the drafts of Alice Compute Ltd").click()
    page.get_by_text(
        "Recomputed the drafts of Alice Compute Ltd: 0 written, 1 unchanged."
    ).wait_for()
    assert AuditEntry.objects.filter(action="billing.owner.recompute").count() == 1
    assert page.problems == [], page.problems
