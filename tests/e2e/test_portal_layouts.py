"""Every portal page holds its layout at 1280 px (a laptop) and 390 px (a phone): the page
never scrolls sideways, a statement's money columns are on screen, the menu collapses behind a
"Menu" button on the phone (a <details>, no script), and axe-core finds no serious or critical
problem at either width. Screenshots land in var/screenshots/layout-<width>-<page>.png."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.urls import reverse

from accounts import services as accounts
from accounts.models import Owner, User
from portal.models import NoticeKind, PortalNotice
from tests.billing import reports_world as rw
from tests.conftest import PASSWORD
from tests.e2e.test_portal_browser import axe_check, build_world
from tests.portal import money_world

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDTHS = {1280: 900, 390: 844}
MONEY = ("Gross", "Hosting fee", "Power cost", "Management fee", "Net")


def _sideways(page: Any) -> tuple[int, int]:
    scroll_width, viewport = page.evaluate(
        "() => [document.scrollingElement.scrollWidth, window.innerWidth]"
    )
    return int(scroll_width), int(viewport)


def _overflowing(page: Any) -> list[str]:
    """For the failure message: the elements whose hiding narrows the page (the innermost
    last), boxes that scroll on their own counted whole."""
    found: list[str] = page.evaluate(
        """() => {
          const out = [];
          const width = () => document.scrollingElement.scrollWidth;
          const base = width();
          for (const e of document.querySelectorAll('body *')) {
            if (e.closest('.table-wrap') && !e.matches('.table-wrap')) continue;
            const before = e.style.display;
            e.style.display = 'none';
            const w = width();
            e.style.display = before;
            if (w < base) out.push(`${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`
                                   + ` "${e.textContent.trim().slice(0, 25)}" ${w}`);
          }
          return out.slice(-5);
        }"""
    )
    return found


def _money_right_edges(page: Any) -> dict[str, float]:
    """The right edge of each money column of the per-GPU table (header and every cell)."""
    edges: dict[str, float] = page.evaluate(
        """(labels) => {
          const table = document.querySelector('table.lines');
          const heads = [...table.querySelectorAll('thead th')];
          const out = {};
          for (const label of labels) {
            const index = heads.findIndex(th => th.textContent.trim() === label);
            if (index < 0) { out[label] = -1; continue; }
            let right = heads[index].getBoundingClientRect().right;
            for (const row of table.querySelectorAll('tbody tr.line')) {
              right = Math.max(right, row.children[index].getBoundingClientRect().right);
            }
            out[label] = right;
          }
          return out;
        }""",
        list(MONEY),
    )
    return edges


def test_every_portal_page_holds_at_1280_and_390_px(
    page, screenshot, oscar: User, alice_owner: Owner, bob_owner: Owner, alice: User, bob: User
):
    world = build_world(oscar, alice_owner, bob_owner)
    olga = accounts.user_create(email="olga@steward.example", password=PASSWORD, is_staff=True)
    money_world.build(
        world=world, oscar=oscar, olga=olga, alice_owner=alice_owner, bob_owner=bob_owner
    )
    # A statement as the close writes it (lines with their terms), beside money_world's rows.
    full = rw.statement_build(
        owner=alice_owner,
        gpu=world.a1,
        disclosure=accounts.disclosure_standard_ensure(),
        publish_by=(oscar, olga),
    )
    now = dt.datetime.now(dt.UTC)
    PortalNotice.objects.create(
        user=alice,
        owner=alice_owner,
        kind=NoticeKind.INCIDENT_OPENED,
        key=f"incident:{world.gpu_incident.pk}",
        title=f"Incident opened: {world.gpu_incident.title}",
        link=reverse("portal:incident", args=[world.gpu_incident.pk]),
        created_at=now,
        shown_from=now,
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

    statement = reverse("portal:statement", args=[full.pk])
    pages = {
        "overview": "/",
        "gpus": "/gpus/",
        "gpu": reverse("portal:gpu", args=[world.a1.pk]),
        "gpu-no-telemetry": reverse("portal:gpu", args=[world.a2.pk]),
        "incidents": "/incidents/",
        "incident": reverse("portal:incident", args=[world.gpu_incident.pk]),
        "maintenance": "/maintenance/",
        "maintenance-window": reverse("portal:maintenance-window", args=[world.maintenance.pk]),
        "statements": "/statements/",
        "statement": statement,
        "payouts": "/payouts/",
        "notices": "/notices/",
        "notification-settings": "/settings/notifications/",
        "security": "/settings/security/",
        "partners": "/settings/partners/",
        "api-keys": "/settings/api-keys/",
        "disclosure": "/disclosure/",
    }
    wide: list[str] = []
    for width, height in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        for name, url in pages.items():
            page.goto(url)
            scroll_width, viewport = _sideways(page)
            if scroll_width > viewport:
                wide.append(
                    f"{name} at {width} px: {scroll_width} > {viewport} {_overflowing(page)}"
                )
            screenshot(page, f"layout-{width}-{name}")
            axe_check(page, f"{name} at {width} px")
    assert wide == []

    # At 1280 px every money column of the statement is on screen, the menu is open and its
    # button hidden; the table fits its box (no scrolling inside it either).
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(statement)
    edges = _money_right_edges(page)
    assert all(0 < right <= 1280 for right in edges.values()), edges
    fits = page.evaluate(
        "() => { const w = document.querySelector('table.lines').parentElement;"
        " return w.scrollWidth <= w.clientWidth; }"
    )
    assert fits
    assert not page.get_by_text("Menu", exact=True).is_visible()
    assert page.get_by_role("link", name="Payouts", exact=True).is_visible()
    # Each line's other figures and terms open under it.
    terms = page.locator("tr.line-terms summary").first
    terms.click()
    assert page.locator("tr.line-terms dl").first.is_visible()

    # At 390 px the menu is collapsed behind its button, opens without script, and works.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/")
    assert not page.get_by_role("link", name="Payouts", exact=True).is_visible()
    notices = page.get_by_role("link", name="Notices 1 unread")
    assert notices.is_visible()
    page.get_by_text("Menu", exact=True).click()
    page.get_by_role("link", name="Payouts", exact=True).click()
    page.get_by_role("heading", name="Payouts and balance").wait_for()
    assert _sideways(page)[0] <= 390
    assert page.problems == []
