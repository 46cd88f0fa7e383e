"""Retention: events past WEBHOOK_RETENTION_DAYS go with their deliveries and attempt logs,
except while a delivery is still being retried or the event is not yet dispatched."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.test import override_settings

from fleet.services.operations import incident_open
from webhooks import services as webhooks
from webhooks import tasks
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEvent

pytestmark = pytest.mark.django_db
UTC = dt.UTC
THEN = dt.datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
KEEP = dt.timedelta(days=90)


def _incident(gpu, title: str) -> WebhookEvent:
    incident_open(
        scope=gpu, title=title, cause="power", started_at=THEN, by=None, internal_notes=""
    )
    return WebhookEvent.objects.get(data__incident__title=title)


def test_old_finished_events_go_with_their_deliveries_and_attempts(hooks, receiver):
    with time_machine.travel(THEN, tick=False):
        delivered = _incident(hooks.gpu_a, "delivered")
        unseen = _incident(hooks.gpu_b, "no partner granted")  # dispatched to nobody
        retrying = _incident(hooks.gpu_a, "still retrying")
        webhooks.events_dispatch(limit=100)
        receiver.answers = [200, 503]
        for event in (delivered, retrying):
            webhooks.delivery_attempt(delivery_id=event.deliveries.get().pk)
        replay = webhooks.delivery_replay(delivery=delivered.deliveries.get(), by=None)
        webhooks.delivery_attempt(delivery_id=replay.pk)
    with time_machine.travel(THEN + dt.timedelta(days=45), tick=False):
        recent = _incident(hooks.gpu_a, "recent")
        waiting = _incident(hooks.gpu_b, "not dispatched")
        webhooks.events_dispatch(limit=100)
        webhooks.delivery_attempt(delivery_id=recent.deliveries.get().pk)
    WebhookEvent.objects.filter(pk=waiting.pk).update(
        created_at=THEN, dispatched_at=None
    )  # as if its dispatch task were lost

    assert WebhookDelivery.objects.get(event=retrying).status == "pending"
    assert WebhookAttempt.objects.filter(delivery__event=delivered).count() == 2

    result = webhooks.events_prune(now=THEN + KEEP + dt.timedelta(days=1), keep=KEEP, limit=100)

    assert result == webhooks.PruneResult(events=2, deliveries=2, attempts=2)
    left = set(WebhookEvent.objects.values_list("pk", flat=True))
    assert left == {retrying.pk, recent.pk, waiting.pk}
    assert unseen.pk not in left
    assert not WebhookDelivery.objects.filter(event_id=delivered.pk).exists()
    assert WebhookAttempt.objects.filter(delivery__event=retrying).count() == 1
    again = webhooks.events_prune(now=THEN + KEEP + dt.timedelta(days=1), keep=KEEP, limit=100)
    assert again == webhooks.PruneResult(events=0, deliveries=0, attempts=0)


def test_pruning_goes_oldest_first_in_bounded_passes(hooks):
    events = []
    for day in range(3):
        with time_machine.travel(THEN + dt.timedelta(days=day), tick=False):
            events.append(_incident(hooks.gpu_b, f"day {day}"))
            webhooks.events_dispatch(limit=100)
    now = THEN + KEEP + dt.timedelta(days=10)

    first = webhooks.events_prune(now=now, keep=KEEP, limit=2)

    assert first.events == 2
    assert list(WebhookEvent.objects.values_list("pk", flat=True)) == [events[2].pk]
    with (
        override_settings(WEBHOOK_RETENTION_DAYS=90, WEBHOOK_PRUNE_BATCH=10),
        time_machine.travel(now, tick=False),
    ):
        assert tasks.events_prune() == 1
    assert not WebhookEvent.objects.exists()
