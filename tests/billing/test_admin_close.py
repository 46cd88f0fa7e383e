"""The guided close: one console page per period that walks its close. Each step's state
comes from the services' own checks, blocks name what to fix with a link, and the buttons run
the same services as the list actions, under the same permissions."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from accounts import services as accounts
from accounts.models import AuditEntry, User
from billing.models import Period, Statement
from billing.services import closing, publishing, revenue
from billing.services.periods import period_for_month
from tests.accounts.two_factor import console_login
from tests.billing import scenario as s
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
D = Decimal
UTC = dt.UTC
FEB = (dt.datetime(2026, 2, 1, tzinfo=UTC), dt.datetime(2026, 3, 1, tzinfo=UTC))
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
HOURS = dt.timedelta(hours=1)


@pytest.fixture
def world(oscar, olga, disclosure) -> dict[str, Any]:
    """SN-1 wholly Alice's, SN-2 wholly Bob's, one EUR card from 2025 (100.00 a month, 0.20
    per kWh at PUE 1.5). February: both up 2 hours, closed and published. March: SN-1 up
    4 hours, SN-2 silent. Olga is a second operator who may close and publish."""
    olga.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="billing",
            codename__in=["view_period", "view_statement", "close_period", "publish_statement"],
        )
    )
    f = s.fleet()
    sn1, sn2 = s.gpu(f, "SN-1", slot=0), s.gpu(f, "SN-2", slot=1)
    alice, bob = s.owner("Alice Compute Ltd"), s.owner("Bob Chen")
    s.own(sn1, alice, 10_000, s.EPOCH)
    s.own(sn2, bob, 10_000, s.EPOCH)
    s.card(f, oscar)
    for gpu in (sn1, sn2):
        s.windows(gpu, FEB[0], FEB[0] + 2 * HOURS, node=f.node)
    s.windows(sn1, MARCH[0], MARCH[0] + 4 * HOURS, node=f.node)
    s.rebuild(FEB[0], MARCH[1])
    february = period_for_month(year=2026, month=2)
    closing.period_close(period=february, by=oscar)
    s.publish_all(february, oscar, olga)
    closing.period_close_finish(period=february, by=olga)
    march = period_for_month(year=2026, month=3)
    return {"fleet": f, "alice": alice, "bob": bob, "march": march, "february": february}


def _url(period: Period) -> str:
    return f"/admin/billing/period/{period.pk}/close/"


def _step(page: str, key: str) -> str:
    match = re.search(
        rf'<li class="step-(\w+)" id="step-{key}">(.*?)</li>\s*(?=<li class="step|</ol>)',
        page,
        re.S,
    )
    assert match, key
    return f"{match.group(1)}: {match.group(2)}"


def _state(page: str, key: str) -> str:
    return _step(page, key).split(":", 1)[0]


def _page(client: Client, period: Period) -> str:
    response = client.get(_url(period))
    assert response.status_code == 200
    return response.content.decode()


def _pool(world: dict[str, Any], by: User, currency: str = "EUR") -> None:
    revenue.pool_add(
        cluster=world["fleet"].cluster,
        period=world["march"],
        amount=D("30.00"),
        currency=currency,
        description="",
        by=by,
    )


def test_the_period_page_leads_to_the_guided_close(world, oscar):
    client = console_login(Client(), oscar)
    page = client.get(f"/admin/billing/period/{world['march'].pk}/change/").content.decode()
    assert f'href="{_url(world["march"])}"' in page


def test_an_open_period_ready_to_close(world, oscar):
    _pool(world, oscar)
    page = _page(console_login(Client(), oscar), world["march"])
    assert [_state(page, k) for k in ("telemetry", "rate_cards", "revenue", "start")] == [
        "done",
        "done",
        "done",
        "todo",
    ]
    assert [_state(page, k) for k in ("drafts", "changes", "request", "approve", "finish")] == [
        "later"
    ] * 5
    assert 'value="start"' in _step(page, "start")
    assert "Start the close: compute the drafts" in page


def test_telemetry_still_arriving_blocks_the_start_and_links_to_ingest_health(world, oscar):
    _pool(world, oscar)
    s.batch_pending(world["fleet"].node, MARCH[1] - HOURS)
    page = _page(console_login(Client(), oscar), world["march"])
    telemetry, start = _step(page, "telemetry"), _step(page, "start")
    assert telemetry.startswith("blocked:")
    assert "Still on its way: 1 pending." in telemetry
    assert 'href="/admin/telemetry/nodestatus/ingest-health/"' in telemetry
    assert start.startswith("blocked:")
    assert "telemetry that may hold data for it is not processed yet (1 pending)" in start
    assert 'value="start"' not in start


def test_a_running_period_is_blocked_until_it_ends(world, oscar):
    running = period_for_month(year=2099, month=1)
    page = _page(console_login(Client(), oscar), running)
    assert "The period runs until 2099-02-01 00:00:00 UTC" in _step(page, "telemetry")
    start = _step(page, "start")
    assert start.startswith("blocked:") and "has not ended yet" in start


def test_a_gap_in_the_rate_cards_blocks_with_a_link_to_add_one(oscar, olga, disclosure):
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    s.own(gpu, s.owner("Alice Compute Ltd"), 10_000, s.EPOCH)
    s.card(f, oscar, effective_from=dt.datetime(2026, 3, 15, tzinfo=UTC))
    march = period_for_month(year=2026, month=3)
    page = _page(console_login(Client(), oscar), march)
    cards = _step(page, "rate_cards")
    assert cards.startswith("blocked:")
    assert (
        f"No EUR rate card for cluster {f.cluster} from 2026-03-01 00:00:00 UTC to "
        "2026-03-15 00:00:00 UTC, while a GPU was in service there: the close refuses the "
        "period." in cards
    )
    assert f'href="/admin/billing/ratecard/add/?cluster={f.cluster.pk}&amp;currency=EUR"' in cards
    start = _step(page, "start")
    assert start.startswith("blocked:") and 'value="start"' not in start


def test_revenue_missing_is_a_check_and_a_currency_the_owners_are_not_billed_in_blocks(
    world, oscar
):
    client = console_login(Client(), oscar)
    revenue_step = _step(_page(client, world["march"]), "revenue")
    assert revenue_step.startswith("check:")
    assert "Nothing entered for cluster" in revenue_step
    assert f"/admin/billing/poolrevenue/add/?cluster={world['fleet'].cluster.pk}" in revenue_step
    _pool(world, oscar, currency="USD")
    page = _page(client, world["march"])
    assert _state(page, "revenue") == "blocked"
    assert "Steward converts no currencies" in _step(page, "revenue")
    assert _state(page, "start") == "blocked"


def test_the_close_walked_through_by_two_operators(world, oscar, olga):
    _pool(world, oscar)
    first, second = console_login(Client(), oscar), console_login(Client(), olga)
    march = world["march"]

    response = first.post(_url(march), {"action": "start", "reason": "Month end"})
    assert (response.status_code, response.headers["Location"]) == (302, _url(march))
    assert Period.objects.get(pk=march.pk).status == Period.Status.CLOSING
    entry = AuditEntry.objects.get(action="billing.period.close_start", object_id=str(march.pk))
    assert (entry.actor, entry.reason) == (oscar, "Month end")

    page = _page(first, march)
    assert _state(page, "start") == "done"
    assert "2 statement(s)" in _step(page, "drafts") and 'value="recompute"' in page
    # Each owner's net against February's (hosting 100.00, power 0.36 for 2 hours): Alice's
    # GPU earned the whole pool (30.00 by up seconds, less 10 % management: 27.00) and used
    # power for 4 hours (0.72); Bob's was silent all March (hosting only).
    changes = {
        (c.owner.legal_name, c.net, c.previous, c.difference)
        for c in page_context(first, march)["changes"]
    }
    assert changes == {
        ("Alice Compute Ltd", D("-73.72"), D("-100.36"), D("26.64")),
        ("Bob Chen", D("-100.00"), D("-100.36"), D("0.36")),
    }
    assert '<th scope="row">Alice Compute Ltd</th><td>EUR</td>' in page

    first.post(_url(march), {"action": "request", "reason": "Checked the changes"})
    assert set(Statement.objects.filter(period=march).values_list("status", flat=True)) == {
        Statement.Status.PUBLISH_REQUESTED
    }
    page = _page(first, march)
    approve = _step(page, "approve")
    assert "You requested 2 of them: another operator must approve those" in approve
    assert 'value="approve"' not in approve  # the requester gets no approve button

    second.post(_url(march), {"action": "approve", "reason": "Four eyes"})
    assert set(Statement.objects.filter(period=march).values_list("status", flat=True)) == {
        Statement.Status.PUBLISHED
    }
    page = _page(second, march)
    assert _state(page, "approve") == "done" and 'value="finish"' in _step(page, "finish")
    second.post(_url(march), {"action": "finish"})
    assert Period.objects.get(pk=march.pk).status == Period.Status.CLOSED

    page = _page(second, march)
    assert all(_state(page, k) == "done" for k in ("start", "drafts", "request", "approve"))
    history = page.split('id="close-history"', 1)[1]
    for action in (
        "billing.period.close_finish",
        "billing.statement.publish_approve",
        "billing.statement.publish_request",
        "billing.period.compute",
        "billing.period.close_start",
        "billing.pool.add",
    ):
        assert action in history
    assert "Checked the changes" in history and "Four eyes" in history


def page_context(client: Client, period: Period) -> Any:
    return client.get(_url(period)).context


def test_a_refusal_is_shown_and_nothing_changes(world, oscar):
    _pool(world, oscar)
    client = console_login(Client(), oscar)
    client.post(_url(world["march"]), {"action": "start"})
    client.post(_url(world["march"]), {"action": "request"})
    response = client.post(_url(world["march"]), {"action": "approve"}, follow=True)
    # Oscar requested both: nothing for him to approve, and nothing was.
    assert (
        "No statement waits for your approval: those you requested need another operator."
        in response.content.decode()
    )
    assert not Statement.objects.filter(status=Statement.Status.PUBLISHED, period=world["march"])
    response = client.post(_url(world["march"]), {"action": "finish"}, follow=True)
    assert "2 statement(s) of 2026-03 are not published yet." in response.content.decode()
    assert Period.objects.get(pk=world["march"].pk).status == Period.Status.CLOSING
    assert not AuditEntry.objects.filter(
        action="billing.period.close_finish", object_id=str(world["march"].pk)
    ).exists()


def test_an_operator_who_may_only_view_sees_the_steps_but_no_buttons(world, oscar):
    _pool(world, oscar)
    viewer = accounts.user_create(email="vera@steward.example", password=PASSWORD, is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="billing", codename__in=["view_period", "view_statement"]
        )
    )
    client = console_login(Client(), viewer)
    page = _page(client, world["march"])
    assert _state(page, "start") == "todo"
    assert 'name="action"' not in page
    assert client.post(_url(world["march"]), {"action": "start"}).status_code == 403
    assert Period.objects.get(pk=world["march"].pk).status == Period.Status.OPEN
    stranger = accounts.user_create(email="sam@steward.example", password=PASSWORD, is_staff=True)
    assert console_login(Client(), stranger).get(_url(world["march"])).status_code == 403


def test_the_dashboard_leads_to_the_close_that_comes_first(world, oscar):
    page = console_login(Client(), oscar).get("/admin/").content.decode()
    assert f'<a href="{_url(world["march"])}">Guided close of 2026-03</a>' in page


def test_a_list_action_on_several_statements_is_all_or_none(world, oscar):
    """The console's one rule for actions on several objects (accounts.admin_toolkit): the
    first refusal undoes the rest, and says so."""
    closing.period_close(period=world["march"], by=oscar)
    first, second = Statement.objects.filter(period=world["march"]).order_by("pk")
    publishing.statement_publish_request(statement=second, by=oscar)
    client = console_login(Client(), oscar)
    response = client.post(
        "/admin/billing/statement/",
        {"action": "request_publish", "_selected_action": [str(first.pk), str(second.pk)]},
        follow=True,
    )
    assert (
        "This statement is publish requested, not a draft. Nothing was changed."
        in response.content.decode()
    )
    assert Statement.objects.get(pk=first.pk).status == Statement.Status.DRAFT
    assert not AuditEntry.objects.filter(
        action="billing.statement.publish_request", object_id=str(first.pk)
    ).exists()


def test_recomputing_from_the_page_runs_the_close_again_and_is_audited(world, oscar):
    _pool(world, oscar)
    client = console_login(Client(), oscar)
    client.post(_url(world["march"]), {"action": "start"})
    response = client.post(
        _url(world["march"]), {"action": "recompute", "reason": "After a fix"}, follow=True
    )
    assert "Recomputed: 0 draft(s) written, 2 unchanged." in response.content.decode()
    runs = AuditEntry.objects.filter(
        action="billing.period.compute", object_id=str(world["march"].pk)
    ).order_by("id")
    assert [(e.actor, e.reason, (e.after or {})["unchanged"]) for e in runs] == [
        (oscar, "", 0),
        (oscar, "After a fix", 2),
    ]


def test_an_earlier_period_not_closed_blocks_the_start_and_links_to_the_periods(oscar):
    february = period_for_month(year=2026, month=2)
    march = period_for_month(year=2026, month=3)
    start = _step(_page(console_login(Client(), oscar), march), "start")
    assert start.startswith("blocked:")
    assert "Close February 2026 first: balances carry forward in order." in start
    assert '<a href="/admin/billing/period/">Periods</a>' in start
    assert Period.objects.get(pk=february.pk).status == Period.Status.OPEN


def test_one_owners_drafts_are_recomputed_from_the_table_of_changes(world, oscar):
    client = console_login(Client(), oscar)
    march = world["march"]
    client.post(_url(march), {"action": "start"})
    page = _page(client, march)
    changes = _step(page, "changes")
    assert "each pool stays split as the last whole run split it" in changes
    assert 'aria-label="Recompute the drafts of Alice Compute Ltd"' in page
    response = client.post(
        _url(march),
        {"action": "recompute_owner", "owner": str(world["alice"].pk), "reason": "Checked"},
        follow=True,
    )
    assert "Recomputed the drafts of Alice Compute Ltd: 0 written, 1 unchanged." in (
        response.content.decode()
    )
    entry = AuditEntry.objects.get(action="billing.owner.recompute")
    assert (entry.actor, entry.reason, (entry.after or {})["owner_ids"]) == (
        oscar,
        "Checked",
        [str(world["alice"].pk)],
    )
    for owner in ("not-a-uuid", str(world["fleet"].cluster.pk)):
        refused = client.post(
            _url(march), {"action": "recompute_owner", "owner": owner}, follow=True
        )
        assert "Choose an owner with a statement in this period." in refused.content.decode()
    assert AuditEntry.objects.filter(action="billing.owner.recompute").count() == 1


def test_no_recompute_buttons_for_an_operator_who_may_not_close(world, oscar):
    closing.period_close(period=world["march"], by=oscar)
    reader = accounts.user_create(email="rita@steward.example", password=PASSWORD, is_staff=True)
    reader.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="billing", codename__in=["view_period", "view_statement"]
        )
    )
    client = console_login(Client(), reader)
    page = _page(client, world["march"])
    assert 'value="recompute_owner"' not in page
    refused = client.post(
        _url(world["march"]),
        {"action": "recompute_owner", "owner": str(world["alice"].pk)},
    )
    assert refused.status_code == 403
