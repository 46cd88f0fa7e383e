"""What the console showed wrong (issue 20, item 10), each checked on its page: the period page,
names instead of ids, honest telemetry counts without "delete", shares in per cent, times in
UTC, the GPU list's and page's telemetry state, and the draft incidents' confirm action."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test import Client

from accounts import admin_toolkit
from accounts import services as accounts
from accounts.models import Owner
from billing.models import Period, Statement
from billing.services.periods import period_for_month
from fleet.models import Incident, IncidentDraft, Ownership, share_percent
from fleet.services import ownership
from telemetry.testing import event, window
from tests.accounts.two_factor import console_login
from tests.console.test_dashboard import text
from tests.console.test_incidents_from_events import deliver
from tests.telemetry.conftest import NOW

pytestmark = pytest.mark.usefixtures("now")
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def operator(oscar) -> Client:
    return console_login(Client(), oscar)


@pytest.fixture
def telemetry(node, post):
    """g0 up until a minute ago; g1 lost its bus (XID 79) two minutes ago."""
    g0, g1 = node.gpus
    last = NOW.replace(second=0) - 2 * MINUTE
    deliver(
        post,
        node,
        [
            window(g0.nvml_uuid, last - MINUTE),
            window(g0.nvml_uuid, last),
            window(g1.nvml_uuid, last - MINUTE),
            window(g1.nvml_uuid, last, state="down", state_reason="xid:79"),
        ],
        [event("xid", last + dt.timedelta(seconds=10), gpu_uuid=g1.nvml_uuid, xid=79)],
    )
    return node


def test_the_period_page_shows_the_period_and_its_next_step(operator):
    accounts.disclosure_standard_ensure()  # closing issues statements under it
    period = period_for_month(year=2026, month=10)
    page = operator.get(f"/admin/billing/period/{period.pk}/change/").text
    shown = text(page)
    assert "Year" not in shown and "None" not in shown
    assert (
        "Start: 2026-10-01 00:00" in shown
        or "2026-10-01 00:00 UTC to 2026-11-01 00:00 UTC" in shown
    )
    assert "Status: Open" in shown
    assert "Back to periods" in shown and ">Close<" not in page
    assert 'value="close"' in page and "Close: compute the draft statements" in shown
    # The button runs the list's action on this period.
    response = operator.post(
        "/admin/billing/period/",
        {"action": "close", "index": "0", "_selected_action": str(period.pk)},
    )
    assert response.status_code == 302
    period.refresh_from_db()
    assert period.status == Period.Status.CLOSING
    shown = text(operator.get(f"/admin/billing/period/{period.pk}/change/").text)
    assert "Status: Closing" in shown and "Finish closing (all statements published)" in shown


def test_statements_and_other_rows_are_titled_by_names(alice_owner: Owner):
    period = period_for_month(year=2026, month=10)
    statement = Statement(owner=alice_owner, period=period, currency="EUR")
    assert str(statement) == "Alice Compute Ltd · 2026-10 · EUR (Draft)"


def test_shares_read_in_per_cent(telemetry, operator, alice_owner, oscar):
    assert [share_percent(b) for b in (10000, 2500, 3333, 50, 1)] == [
        "100 %",
        "25 %",
        "33.33 %",
        "0.5 %",
        "0.01 %",
    ]
    g0 = telemetry.gpus[0]
    ownership.ownership_sell(
        gpus=[g0],
        owner=alice_owner,
        share_bps=3333,
        at=NOW.replace(second=0) - MINUTE,
        reason="sale",
        by=oscar,
    )
    listed = text(operator.get("/admin/fleet/gpu/").text)
    assert "Alice Compute Ltd: 33.33 %" in listed
    assert ">33.33 %<" in operator.get("/admin/fleet/ownership/").text
    assert "33.33 %" in text(operator.get(f"/admin/fleet/gpu/{g0.pk}/change/").text)
    row = Ownership.objects.select_related("owner", "gpu").get()
    assert str(row) == f"Alice Compute Ltd holds 33.33 % of {g0.serial}"


def test_gpu_list_and_page_say_what_the_telemetry_says_now(telemetry, operator):
    g0, g1 = telemetry.gpus
    minute = (NOW.replace(second=0) - 3 * MINUTE).strftime("%Y-%m-%d %H:%M")
    listed = text(operator.get("/admin/fleet/gpu/").text)
    assert "Telemetry (now)" in listed
    assert f"{g0.serial} " in listed and f"Up since {minute} UTC" in listed
    down_at = (NOW.replace(second=0) - 2 * MINUTE).strftime("%Y-%m-%d %H:%M")
    assert f"Down since {down_at} UTC" in listed
    page = text(operator.get(f"/admin/fleet/gpu/{g1.pk}/change/").text)
    assert f"Now: Down since {down_at} UTC" in page
    assert "XID 79: GPU has fallen off the bus" in page and "Awaiting confirmation" in page


def test_telemetry_lists_count_honestly_and_offer_no_delete(telemetry, operator, monkeypatch):
    page = operator.get("/admin/telemetry/telemetryevent/").text
    assert "1,000,000,000" not in page and "1000000000" not in page
    assert "delete_selected" not in page and "1 telemetry event" in text(page)
    monkeypatch.setattr(admin_toolkit, "COUNT_CAP", 0)
    filtered = text(operator.get("/admin/telemetry/telemetryevent/?kind__exact=xid").text)
    assert "More than 0 telemetry events (filter further to count exactly)" in filtered
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE telemetry_gpustatetransition")
    whole = text(operator.get("/admin/telemetry/gpustatetransition/").text)
    assert re.search(r"About \d+ gpu state transitions \(the database's estimate", whole)
    for model in ("telemetryevent", "gpustatetransition", "hourlyrollup", "ingestbatch"):
        assert "delete_selected" not in operator.get(f"/admin/telemetry/{model}/").text, model


def test_list_times_say_utc(telemetry, operator):
    page = text(operator.get("/admin/telemetry/telemetryevent/").text)
    at = (NOW.replace(second=0) - 2 * MINUTE + dt.timedelta(seconds=10)).strftime(
        "%Y-%m-%d %H:%M:%S"
    )
    assert f"{at} UTC" in page
    assert f"{at} UTC" in text(operator.get("/admin/fleet/incidentdraft/").text)
    # And on a page: one only viewed (every instant), and one edited (its read-only ones).
    draft = IncidentDraft.objects.get()
    viewed = text(operator.get(f"/admin/fleet/incidentdraft/{draft.pk}/change/").text)
    assert f"{at} UTC" in viewed and "Nov. 21" not in viewed
    gpu = telemetry.gpus[0]
    created = gpu.created_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    edited = operator.get(f"/admin/fleet/gpu/{gpu.pk}/change/").text
    assert f"{created} UTC" in text(edited) and 'name="serial"' in edited


def test_an_operator_confirms_a_draft_with_its_cause_in_the_console(telemetry, operator, oscar):
    draft = IncidentDraft.objects.get()
    listed = text(operator.get("/admin/fleet/incidentdraft/?status__exact=open").text)
    assert "XID 79: GPU has fallen off the bus" in listed and "Awaiting confirmation" in listed
    form = operator.post(
        "/admin/fleet/incidentdraft/",
        {"action": "confirm", "index": "0", "_selected_action": str(draft.pk)},
    )
    assert form.status_code == 200 and "Confirm draft incidents" in form.text
    done = operator.post(
        "/admin/fleet/incidentdraft/",
        {
            "action": "confirm",
            "index": "0",
            "_selected_action": str(draft.pk),
            "apply": "1",
            "cause": "cooling",
            "title": "",
            "notes_for_owners": "Fan replaced.",
        },
    )
    assert done.status_code == 302
    incident = Incident.objects.get()
    assert (incident.cause, incident.gpu_id, incident.opened_by_id) == (
        "cooling",
        draft.gpu_id,
        oscar.pk,
    )
    assert incident.telemetry_event_id == draft.telemetry_event_id
    page = operator.get(f"/admin/fleet/incident/{incident.pk}/change/").text
    assert f"event {draft.telemetry_event_id}" in page
