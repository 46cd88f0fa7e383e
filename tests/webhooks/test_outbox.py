"""Events are written with the change: none for a change that rolled back, exactly one for one
that committed, delivered only to partners granted an owner it concerns, and never carrying
another owner's data."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction

from fleet.services.operations import incident_close, incident_open
from fleet.services.ownership import ShareTo, ownership_transfer
from telemetry.services.derived import derived_mark, derived_process, instant_marks
from tests.billing import scenario as s
from webhooks import services as webhooks
from webhooks.models import EventType, WebhookDelivery, WebhookEvent

pytestmark = pytest.mark.django_db
UTC = dt.UTC
AT = dt.datetime(2026, 3, 15, 12, 0, tzinfo=UTC)


class Boom(Exception):
    pass


def test_a_change_that_rolls_back_writes_no_event(hooks):
    with pytest.raises(Boom), transaction.atomic():
        incident_open(scope=hooks.fleet.node, title="Rack", cause="power", started_at=AT, by=None)
        assert WebhookEvent.objects.count() == 1  # written inside the change's transaction
        raise Boom
    assert WebhookEvent.objects.count() == 0


def test_a_committed_change_writes_exactly_one_event_for_the_owners_it_touched(hooks):
    incident = incident_open(
        scope=hooks.fleet.node, title="Rack", cause="power", started_at=AT, by=None
    )
    (event,) = WebhookEvent.objects.all()
    assert (event.type, event.owner_ids, event.dedupe_key) == (
        "incident.opened",
        sorted([hooks.alice.pk, hooks.bob.pk], key=str),
        f"incident.opened:{incident.pk}",
    )
    incident_close(incident=incident, ended_at=AT + dt.timedelta(hours=1), by=None)
    resolved = WebhookEvent.objects.get(type="incident.resolved")
    assert resolved.data["incident"]["ended_at"] == "2026-03-15T13:00:00Z"
    assert resolved.data["incident"]["status"] == "resolved"


def test_an_event_about_an_ungranted_owner_reaches_no_partner(hooks):
    incident_open(scope=hooks.gpu_b, title="Bob's GPU", cause="hardware", started_at=AT, by=None)
    result = webhooks.events_dispatch(limit=100)
    assert (result.events, result.deliveries) == (1, [])
    assert WebhookEvent.objects.get().dispatched_at is not None
    # Dispatching again finds nothing left.
    assert webhooks.events_dispatch(limit=100).events == 0


def test_an_endpoint_receives_only_the_types_it_chose(hooks):
    webhooks.endpoint_update(endpoint=hooks.endpoint, by=None, event_types=["statement.published"])
    incident_open(scope=hooks.gpu_a, title="A", cause="hardware", started_at=AT, by=None)
    assert webhooks.events_dispatch(limit=100).deliveries == []


def test_an_ownership_change_tells_each_partner_only_its_owners_part(hooks, receiver):
    ownership_transfer(
        gpus=[hooks.gpu_a],
        from_owner=hooks.alice,
        to=[ShareTo(owner=hooks.bob, share_bps=4_000)],
        at=AT,
        reason="Sold 40 % to Bob Chen",
        by=None,
    )
    (event,) = WebhookEvent.objects.all()
    assert sorted(event.owner_ids, key=str) == sorted([hooks.alice.pk, hooks.bob.pk], key=str)
    (delivery_id,) = webhooks.events_dispatch(limit=100).deliveries
    assert webhooks.delivery_attempt(delivery_id=delivery_id).status == "succeeded"
    (request,) = receiver.requests
    assert request.json()["data"] == {
        "gpu": {"id": str(hooks.gpu_a.pk), "serial": "SN-A", "nvml_uuid": "GPU-SN-A"},
        "at": "2026-03-15T12:00:00Z",
        "change": "transfer",
        "owners": [
            {"owner_id": str(hooks.alice.pk), "share_bps_before": 10_000, "share_bps_after": 6_000}
        ],
    }
    body = request.body.decode()
    assert str(hooks.bob.pk) not in body
    assert "Bob" not in body


def test_a_published_statement_event_is_idempotent(hooks):
    from webhooks.outbox import Event, events_emit

    event = Event(
        type=EventType.STATEMENT_PUBLISHED,
        owner_ids=[hooks.alice.pk],
        data={"statement": {"id": "x"}},
        dedupe_key="statement.published:x",
    )
    events_emit(events=[event])
    events_emit(events=[event])
    assert WebhookEvent.objects.count() == 1


def _transitions_pass(gpu, start, minutes):
    with connection.cursor() as cursor:
        derived_mark(
            cursor=cursor,
            marks=instant_marks([(gpu.pk, start + dt.timedelta(minutes=m)) for m in minutes]),
        )
    derived_process(limit=100)


def test_gpu_state_changes_become_events_once_in_the_derived_pass(hooks):
    start = dt.datetime(2026, 3, 15, 10, 0, tzinfo=UTC)
    down = (start + dt.timedelta(minutes=10), start + dt.timedelta(minutes=20))
    s.windows(
        hooks.gpu_a,
        start,
        start + dt.timedelta(minutes=30),
        node=hooks.fleet.node,
        change=lambda t, v: {**v, "state": "down"} if down[0] <= t < down[1] else v,
    )
    _transitions_pass(hooks.gpu_a, start, range(30))
    events = WebhookEvent.objects.filter(type="gpu.state_changed").order_by("data__at")
    assert [(e.data["state"], e.data["at"], e.owner_ids) for e in events] == [
        ("up", "2026-03-15T10:00:00Z", [hooks.alice.pk]),
        ("down", "2026-03-15T10:10:00Z", [hooks.alice.pk]),
        ("up", "2026-03-15T10:20:00Z", [hooks.alice.pk]),
    ]
    assert events[0].data["gpu"] == {
        "id": str(hooks.gpu_a.pk),
        "serial": "SN-A",
        "nvml_uuid": "GPU-SN-A",
    }
    # The same hours recomputed rewrite the same transitions: no new event.
    _transitions_pass(hooks.gpu_a, start, range(30))
    assert WebhookEvent.objects.filter(type="gpu.state_changed").count() == 3
    # A window that arrives late and changes the state is a new event.
    s.windows(
        hooks.gpu_a,
        start + dt.timedelta(minutes=30),
        start + dt.timedelta(minutes=31),
        node=hooks.fleet.node,
        state="degraded",
    )
    _transitions_pass(hooks.gpu_a, start, [30])
    assert WebhookEvent.objects.filter(type="gpu.state_changed").count() == 4
    assert not WebhookDelivery.objects.exists()  # nothing is delivered before dispatch
    assert len(webhooks.events_dispatch(limit=100).deliveries) == 4
