"""The earnings page in a browser, with a published month by day: at 1280 px (a laptop) and
390 px (a phone) it never scrolls sideways, the daily chart and its table show, every money
column of the daily table is on screen at 1280 px, and axe-core finds no serious or critical
problem. Screenshots land in var/screenshots/earnings-<width>-<name>.png."""

from __future__ import annotations

from typing import Any

import pytest

from accounts import services as accounts
from accounts.models import Owner, User
from tests.billing import reports_world as rw
from tests.billing import scenario as s
from tests.conftest import PASSWORD
from tests.e2e.test_portal_browser import axe_check
from tests.e2e.test_portal_layouts import WIDTHS, _overflowing, _sideways

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
MONEY = ("Gross", "Hosting fee", "Power cost", "Management fee", "Net")


def test_the_earnings_page_by_day_holds_at_1280_and_390_px(
    page, screenshot, oscar: User, alice_owner: Owner, alice: User
):
    olga = accounts.user_create(email="olga@steward.example", password=PASSWORD, is_staff=True)
    gpu = s.gpu(s.fleet(), "SN-1", slot=0)
    rw.statement_build(  # February 2026, published: three days by day
        owner=alice_owner,
        gpu=gpu,
        disclosure=accounts.disclosure_standard_ensure(),
        publish_by=(oscar, olga),
    )
    page.goto("/login/")
    page.get_by_label("Email").fill(alice.email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Fleet overview").wait_for()
    page.goto("/disclosure/?next=/")
    page.get_by_label("I have read this disclosure").check()
    page.get_by_role("button", name="Acknowledge").click()
    page.get_by_role("heading", name="Fleet overview").wait_for()

    pages = {"by-day": "/earnings/?month=2026-02", "this-month": "/earnings/"}
    wide: list[str] = []
    for width, height in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        for name, url in pages.items():
            page.goto(url)
            page.get_by_role("heading", name="Earnings", exact=True).wait_for()
            scroll_width, viewport = _sideways(page)
            if scroll_width > viewport:
                wide.append(
                    f"{name} at {width} px: {scroll_width} > {viewport} {_overflowing(page)}"
                )
            screenshot(page, f"earnings-{width}-{name}")
            axe_check(page, f"earnings {name} at {width} px")
    assert wide == []

    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(pages["by-day"])
    page.get_by_role("heading", name="By day, February 2026").wait_for()
    chart = page.locator("svg[aria-labelledby='money-day-0-title money-day-0-desc']")
    assert chart.is_visible()
    assert "Gross, costs and net by day, February 2026" in chart.inner_html()
    table = page.locator("table", has=page.locator("caption", has_text="Earnings by day"))
    assert table.locator("tbody tr").count() == 3
    edges = _money_edges(page, "Earnings by day")
    assert all(0 < right <= 1280 for right in edges.values()), edges
    page.set_viewport_size({"width": 390, "height": 844})
    assert chart.is_visible()
    assert page.problems == []


def _money_edges(page: Any, caption: str) -> dict[str, float]:
    """The right edge of each money column of the table with this caption."""
    edges: dict[str, float] = page.evaluate(
        """([caption, labels]) => {
          const table = [...document.querySelectorAll('table')].find(
            t => t.caption && t.caption.textContent.includes(caption));
          const heads = [...table.querySelectorAll('thead th')];
          const out = {};
          for (const label of labels) {
            const index = heads.findIndex(th => th.textContent.trim().startsWith(label));
            if (index < 0) { out[label] = -1; continue; }
            let right = heads[index].getBoundingClientRect().right;
            for (const row of table.querySelectorAll('tbody tr')) {
              right = Math.max(right, row.children[index].getBoundingClientRect().right);
            }
            out[label] = right;
          }
          return out;
        }""",
        [caption, list(MONEY)],
    )
    return edges
