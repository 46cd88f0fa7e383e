"""An owner in a real browser: logs in with a TOTP code, opens a GPU page, sees the uptime
strip and the charts drawn; axe-core finds no serious or critical problem on the main pages;
screenshots of them land in var/screenshots/ (kept by CI as artifacts)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.urls import reverse

from accounts.models import Owner, User
from tests.accounts.two_factor import current_code, give_authenticator
from tests.conftest import PASSWORD
from tests.portal import world as worlds

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def build_world(oscar: User, alice_owner: Owner, bob_owner: Owner) -> worlds.World:
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    return worlds.build(oscar=oscar, alice_owner=alice_owner, bob_owner=bob_owner, now=now)


def axe_check(page: Any, name: str) -> None:
    results = Axe().run(page)
    bad = [
        f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert bad == [], f"{name}: {bad}"


def test_owner_logs_in_with_a_code_and_reads_a_gpu(
    page, screenshot, oscar, alice_owner, bob_owner, alice, bob
):
    world = build_world(oscar, alice_owner, bob_owner)
    page.goto("/login/")
    screenshot(page, "login")
    axe_check(page, "login")
    device = give_authenticator(alice)
    page.get_by_label("Email").fill(alice.email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/login/verify/")
    screenshot(page, "login-code")
    axe_check(page, "login code")
    page.get_by_label("Authentication code").fill(current_code(device))
    page.get_by_role("button", name="Verify").click()
    page.get_by_role("heading", name="Fleet overview").wait_for()
    assert "Alice Compute Ltd" in page.content()
    screenshot(page, "overview")
    axe_check(page, "overview")

    page.get_by_role("link", name="GPUs", exact=True).click()
    page.get_by_role("heading", name="GPUs", exact=True).wait_for()
    screenshot(page, "gpus")
    axe_check(page, "GPU list")

    page.get_by_role("link", name="A1", exact=True).click()
    page.get_by_role("heading", name="GPU A1").wait_for()
    timeline = page.locator("svg.timeline")
    assert timeline.is_visible()
    assert timeline.bounding_box()["width"] > 600
    assert timeline.locator("rect").count() > 5
    assert page.get_by_role("img", name="Uptime of GPU A1, hour by hour").is_visible()
    charts = page.locator("svg.chart.line")
    assert charts.count() == 3
    for index in range(3):
        assert charts.nth(index).locator("polyline").count() >= 1
        assert charts.nth(index).bounding_box()["height"] > 100
    page.get_by_text("Figures by day, as a table").click()
    assert page.get_by_role("table", name="By day (UTC)").is_visible()
    screenshot(page, "gpu")
    axe_check(page, "GPU page")
    assert page.problems == []  # no CSP violation, no script error

    for name, url in [
        ("incidents", "/incidents/"),
        ("incident", reverse("portal:incident", args=[world.gpu_incident.pk])),
        ("maintenance", "/maintenance/"),
        ("maintenance-window", reverse("portal:maintenance-window", args=[world.maintenance.pk])),
        ("notifications", "/settings/notifications/"),
        ("security", "/settings/security/"),
    ]:
        page.goto(url)
        screenshot(page, name)
        axe_check(page, name)
    assert page.problems == []


def test_an_owner_sets_up_two_factor_in_the_browser(page, screenshot, bob_owner, bob):
    page.goto("/login/")
    page.get_by_label("Email").fill(bob.email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Fleet overview").wait_for()
    page.goto("/settings/security/2fa/enrol/")
    screenshot(page, "2fa-enrol")
    axe_check(page, "2FA enrol")
    from django_otp.plugins.otp_totp.models import TOTPDevice

    device = TOTPDevice.objects.get(user=bob, confirmed=False)
    page.get_by_label("Code from the app").fill(current_code(device))
    page.get_by_role("button", name="Confirm").click()
    page.get_by_role("heading", name="Your recovery codes").wait_for()
    assert page.locator("ul.codes li").count() == 10
    page.goto("/password-reset/")
    screenshot(page, "password-reset")
    axe_check(page, "password reset")
    assert page.problems == []


def test_an_owner_acknowledges_the_disclosure_and_manages_money_and_access(
    page, screenshot, oscar, alice_owner, bob_owner, alice, bob, carol_partner
):
    """Earnings on the overview after the disclosure, payouts and balance, granting a partner
    and making an API key — each page checked by axe-core and kept as a screenshot."""
    from accounts import services as accounts
    from tests.portal import money_world

    world = build_world(oscar, alice_owner, bob_owner)
    olga = accounts.user_create(email="olga@steward.example", password=PASSWORD, is_staff=True)
    money_world.build(
        world=world, oscar=oscar, olga=olga, alice_owner=alice_owner, bob_owner=bob_owner
    )
    accounts.disclosure_standard_ensure()
    page.goto("/login/")
    page.get_by_label("Email").fill(alice.email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Fleet overview").wait_for()
    assert page.get_by_role("link", name="Read the risk disclosure").is_visible()
    axe_check(page, "overview before the disclosure")
    page.get_by_role("link", name="Read the risk disclosure").click()
    page.get_by_label("I have read this disclosure").check()
    page.get_by_role("button", name="Acknowledge").click()
    page.get_by_role("heading", name="Fleet overview").wait_for()
    assert page.locator(".badge-preliminary").first.is_visible()
    screenshot(page, "overview-earnings")
    axe_check(page, "overview with earnings")

    page.get_by_role("link", name="Payouts", exact=True).click()
    page.get_by_role("heading", name="Payouts and balance").wait_for()
    assert page.get_by_role("table", name="Balance by owner account and currency").is_visible()
    screenshot(page, "payouts")
    axe_check(page, "payouts")

    page.get_by_role("link", name="Partner access").click()
    page.get_by_role("heading", name="Partner access", exact=True).wait_for()
    page.get_by_label("Partner handle").fill("carol-marketplace")
    page.get_by_label("fleet:read", exact=False).check()
    page.get_by_role("button", name="Grant access").click()
    assert "can now read Alice Compute Ltd" in page.locator(".messages").inner_text()
    assert page.locator("tbody tr", has_text="carol-marketplace").count() == 1
    screenshot(page, "partners")
    axe_check(page, "partner access")

    page.get_by_role("link", name="API keys").click()
    page.get_by_role("heading", name="API keys", exact=True).wait_for()
    page.get_by_label("Name").fill("spreadsheet")
    page.get_by_label("statements:read", exact=False).check()
    page.get_by_role("button", name="Create key").click()
    assert page.locator("#token").inner_text().startswith("stw_live_")
    screenshot(page, "api-keys")
    axe_check(page, "API keys")
    assert page.problems == []
