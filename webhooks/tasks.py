"""Celery tasks: thin wrappers that call one service and own their retries."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from webhooks import services
from webhooks.dispatch import dispatch_kick, dispatch_started

log = logging.getLogger(__name__)

# Events left undispatched longer than this are taken to have lost their task.
SWEEP_EVENTS_AFTER_S = 30


@shared_task(
    name="webhooks.events_dispatch",
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=30,
    max_retries=None,
)
def events_dispatch() -> int:
    """Turns committed events into deliveries until none are left (bounded passes)."""
    dispatch_started()
    limit = settings.WEBHOOK_DISPATCH_BATCH
    total = 0
    for _ in range(20):
        result = services.events_dispatch(limit=limit)
        total += result.events
        if result.events < limit:
            return total
    dispatch_kick()
    return total


@shared_task(
    name="webhooks.delivery_send",
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=30,
    max_retries=None,
)
def delivery_send(delivery_id: str) -> str:
    """One attempt of one delivery (nothing if it is not due or another worker holds it)."""
    return services.delivery_attempt(delivery_id=uuid.UUID(delivery_id)).status


@shared_task(name="webhooks.deliveries_sweep", ignore_result=True)
def deliveries_sweep() -> int:
    """Queues every due delivery and a dispatch pass for waiting events: Redis may have lost
    their tasks, PostgreSQL still has the rows. Later retries are queued only from here."""
    now = timezone.now()
    waiting = services.events_waiting(
        now=now, older_than=dt.timedelta(seconds=SWEEP_EVENTS_AFTER_S)
    )
    if waiting:
        log.warning("sweep: %d webhook events waited too long; re-queueing dispatch", waiting)
        dispatch_kick()
    due = services.deliveries_due(now=now)
    services.deliveries_queue(ids=due)
    return len(due)


@shared_task(name="webhooks.events_prune", ignore_result=True)
def events_prune() -> int:
    """Drops events (with their deliveries and attempts) past ``WEBHOOK_RETENTION_DAYS``, in
    bounded passes; re-queues itself while a pass comes back full."""
    limit = settings.WEBHOOK_PRUNE_BATCH
    result = services.events_prune(
        now=timezone.now(),
        keep=dt.timedelta(days=settings.WEBHOOK_RETENTION_DAYS),
        limit=limit,
    )
    if result.events:
        log.info(
            "webhooks: pruned %d events, %d deliveries, %d attempts",
            result.events,
            result.deliveries,
            result.attempts,
        )
    if result.events == limit:
        events_prune.delay()
    return result.events
