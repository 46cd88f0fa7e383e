"""Incidents from events, through the real ingest path and derived pass: a down-severity XID or
a lost GPU opens one draft on that GPU, linked to the event; billing does not see it until an
operator confirms its cause; it resolves when the telemetry shows the GPU up again."""

from __future__ import annotations

import datetime as dt

import pytest

from accounts.models import AuditEntry
from billing.engine.intervals import Interval
from billing.selectors.facts import gpu_facts
from fleet.models import Incident, IncidentDraft
from fleet.services import operations
from telemetry.models import TelemetryEvent
from telemetry.services.derived import derived_drain
from telemetry.services.incidents import DOWN_XIDS
from telemetry.services.processing import batches_process
from telemetry.testing import batch_document, event, window

T0 = dt.datetime(2026, 11, 21, 9, 0, tzinfo=dt.UTC)
pytestmark = pytest.mark.usefixtures("now")


def at(minutes: int, seconds: float = 0) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes, seconds=seconds)


def deliver(post, node, windows=(), events=(), document=None):
    document = document or batch_document(node=node, windows=list(windows), events=list(events))
    response = post(node, document)
    assert response.status_code in (200, 202), response.content
    batches_process(worker="w")
    derived_drain(limit=100)
    return document


def down(gpu, minute, reason="gpu_is_lost"):
    return window(gpu.nvml_uuid, at(minute), state="down", state_reason=reason)


def up(gpu, minute):
    return window(gpu.nvml_uuid, at(minute))


def billed_incidents(gpu) -> tuple[list[Interval], list[Interval]]:
    """What billing reads: the GPU's incident and operator-incident intervals in the day."""
    (fact,) = gpu_facts(gpu_ids=[gpu.pk], start=T0, end=T0 + dt.timedelta(days=1))
    return fact.incidents, fact.operator_incidents


def xid(gpu, code, when):
    return event(
        "xid",
        when,
        gpu_uuid=gpu.nvml_uuid,
        xid=code,
        detail={"severity": "down", "name": "", "source": "kmsg"},
    )


def test_a_down_xid_opens_one_draft_that_billing_ignores_until_confirmed(node, post, oscar):
    g0, g1 = node.gpus
    first = deliver(post, node, [up(g0, 0), up(g1, 0), down(g0, 5)], [xid(g0, 79, at(5, 12.345))])
    stored = TelemetryEvent.objects.get(kind="xid")
    draft = IncidentDraft.objects.get()
    assert (draft.gpu_id, draft.telemetry_event_id, draft.status) == (g0.pk, stored.pk, "open")
    assert draft.title == "XID 79: GPU has fallen off the bus"
    assert (draft.started_at, draft.recovered_at, draft.cause) == (at(5, 12), None, "hardware")
    assert Incident.objects.count() == 0
    assert billed_incidents(g0) == ([], [])

    # The same batch replayed, a second down XID and the lost GPU's events: still one draft.
    deliver(post, node, document=first)
    deliver(
        post,
        node,
        [down(g0, 6), down(g0, 7)],
        [
            xid(g0, 79, at(6, 1)),
            event("gpu_lost", at(6, 2), gpu_uuid=g0.nvml_uuid, detail={"reason": "gpu_is_lost"}),
        ],
    )
    assert IncidentDraft.objects.count() == 1
    assert TelemetryEvent.objects.filter(gpu=g0).count() == 3

    # Up again: the draft records when, and still bills nothing.
    deliver(post, node, [up(g0, 8), up(g0, 9)])
    draft.refresh_from_db()
    assert (draft.status, draft.recovered_at) == ("open", at(8))
    assert billed_incidents(g0) == ([], [])

    incident = operations.incident_draft_confirm(
        draft=draft, cause="power", notes_for_owners="PSU replaced.", by=oscar
    )
    assert (incident.gpu_id, incident.cause, incident.telemetry_event_id) == (
        g0.pk,
        "power",
        stored.pk,
    )
    assert (incident.started_at, incident.ended_at) == (at(5, 12), at(8))
    draft.refresh_from_db()
    assert (draft.status, draft.incident_id, draft.decided_by_id) == (
        "confirmed",
        incident.pk,
        oscar.pk,
    )
    span = [Interval(at(5, 12), at(8))]
    assert billed_incidents(g0) == (span, span)
    assert billed_incidents(g1) == ([], [])
    assert list(
        AuditEntry.objects.filter(object_type="fleet.incidentdraft")
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["incident_draft.open", "incident_draft.recover", "incident_draft.confirm"]
    with pytest.raises(Exception, match="already confirmed"):
        operations.incident_draft_confirm(draft=draft, cause="power", by=oscar)
    # A later pass over the same hours changes nothing.
    deliver(post, node, [up(g0, 10)])
    assert (IncidentDraft.objects.count(), Incident.objects.count()) == (1, 1)


def test_the_down_xids_are_those_docs_fleet_md_lists():
    assert DOWN_XIDS == [62, 74, 79, 95, 119, 120, 140, 143]


@pytest.mark.parametrize("code", [94, 13, 154, 9999])
def test_xids_that_leave_the_gpu_working_open_nothing(node, post, code):
    g0 = node.gpus[0]
    deliver(
        post,
        node,
        [up(g0, 0), window(g0.nvml_uuid, at(1), state="degraded", state_reason=f"xid:{code}")],
        [xid(g0, code, at(1, 3))],
    )
    assert TelemetryEvent.objects.filter(kind="xid").count() == 1
    assert IncidentDraft.objects.count() == 0


def test_the_server_table_decides_not_the_severity_the_agent_sent(node, post):
    g0 = node.gpus[0]
    deliver(
        post,
        node,
        [up(g0, 0), down(g0, 1, "xid:119")],
        [event("xid", at(1, 5), gpu_uuid=g0.nvml_uuid, xid=119, detail={"severity": "unknown"})],
    )
    assert IncidentDraft.objects.get().title == "XID 119: GSP RPC timeout"


def test_a_lost_gpu_confirmed_while_down_is_closed_when_it_is_up_again(node, post, oscar):
    g0 = node.gpus[0]
    # The event comes alone (events are shipped at once); the down windows follow.
    deliver(post, node, [up(g0, 0), up(g0, 1)])
    deliver(
        post,
        node,
        events=[
            event(
                "gpu_lost", at(2, 30.5), gpu_uuid=g0.nvml_uuid, detail={"reason": "reset_required"}
            )
        ],
    )
    deliver(post, node, [down(g0, 2, "reset_required"), down(g0, 3, "reset_required")])
    draft = IncidentDraft.objects.get()
    assert (draft.title, draft.started_at) == ("GPU lost (reset_required)", at(2, 30))
    incident = operations.incident_draft_confirm(draft=draft, cause="hardware", by=oscar)
    assert incident.ended_at is None
    assert billed_incidents(g0)[0] == [Interval(at(2, 30), T0 + dt.timedelta(days=1))]

    deliver(post, node, [down(g0, 4, "reset_required"), up(g0, 5)])
    incident.refresh_from_db()
    assert incident.ended_at == at(5)
    assert billed_incidents(g0) == ([Interval(at(2, 30), at(5))],) * 2
    # Down again later: a new episode, a new draft.
    deliver(post, node, [down(g0, 20)], [event("gpu_lost", at(20, 1), gpu_uuid=g0.nvml_uuid)])
    assert IncidentDraft.objects.filter(status="open").get().started_at == at(20, 1)


def test_a_dismissed_draft_holds_back_older_events_but_not_newer_ones(node, post, oscar, now):
    g0 = node.gpus[0]
    deliver(post, node, [up(g0, 0), down(g0, 1, "xid:95")], [xid(g0, 95, at(1, 7))])
    draft = IncidentDraft.objects.get()
    with pytest.raises(Exception, match="reason"):
        operations.incident_draft_dismiss(draft=draft, reason=" ", by=oscar)
    operations.incident_draft_dismiss(draft=draft, reason="Test load on the bench.", by=oscar)
    draft.refresh_from_db()
    assert draft.status == "dismissed"
    # A late XID from before the dismissal: in hand already. One after it: a new draft.
    deliver(post, node, [down(g0, 2, "xid:95")], [xid(g0, 95, at(1, 30))])
    assert IncidentDraft.objects.count() == 1
    now.move_to(at(200))
    deliver(post, node, [down(g0, 190, "xid:95")], [xid(g0, 95, at(190, 2))])
    assert IncidentDraft.objects.filter(status="open").get().started_at == at(190, 2)
    assert Incident.objects.count() == 0
