"""The real worker: a committed change reaches the receiver through Celery; an event whose
task Redis lost is found again by beat's sweep."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.core.cache import cache
from django.utils import timezone

from fleet.services.operations import incident_open
from tests.webhooks.conftest import verify
from webhooks.dispatch import KICK_KEY
from webhooks.models import WebhookDelivery, WebhookEvent
from webhooks.tasks import deliveries_sweep

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _now() -> dt.datetime:
    return timezone.now().replace(microsecond=0)


def _wait_for(receiver, count: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while len(receiver.requests) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_committed_change_is_delivered_by_the_worker(celery_worker, hooks, receiver):
    cache.delete(KICK_KEY)
    incident_open(scope=hooks.gpu_a, title="PSU", cause="power", started_at=_now(), by=None)
    _wait_for(receiver, 1)
    (request,) = receiver.requests
    assert request.json()["type"] == "incident.opened"
    assert verify(hooks.secret, request.headers, request.body) == [True]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        delivery = WebhookDelivery.objects.get()
        if delivery.status == WebhookDelivery.Status.SUCCEEDED:
            break
        time.sleep(0.05)
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("succeeded", 1, 200)


def test_the_sweep_finds_an_event_whose_task_was_lost(celery_worker, hooks, receiver):
    # A dispatch task is "already waiting" (the flag is set) but Redis lost it.
    cache.set(KICK_KEY, 1, timeout=300)
    incident_open(scope=hooks.gpu_a, title="PSU", cause="power", started_at=_now(), by=None)
    time.sleep(1.0)
    assert receiver.requests == []
    assert WebhookEvent.objects.get().dispatched_at is None
    WebhookEvent.objects.update(created_at=timezone.now() - dt.timedelta(minutes=1))
    cache.delete(KICK_KEY)  # the flag expires; the sweep queues dispatch again
    deliveries_sweep()
    _wait_for(receiver, 1)
    assert len(receiver.requests) == 1
