"""Celery tasks: thin wrappers that call one service and own their retries."""

from __future__ import annotations

import datetime as dt
import logging
import os
import time

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from telemetry.dispatch import derived_kick, derived_started, processing_kick, processing_started
from telemetry.services import derived, processing, upkeep

log = logging.getLogger(__name__)

# One task drains batches for at most this long, then hands over to a fresh one.
DRAIN_BUDGET_S = 20.0


@shared_task(
    name="telemetry.batches_process",
    bind=True,
    autoretry_for=processing.SESSION_LOST,
    retry_backoff=True,
    retry_backoff_max=30,
    max_retries=None,
)
def batches_process(self: object) -> int:
    """Claims and processes pending batches until none are left or the budget is spent.

    When a claim comes back full, another task is queued at once so that a second worker
    drains in parallel. Each chunk it commits leaves (GPU, hour) marks and queues a derived
    pass for them (at most one waits).
    """
    processing_started()
    worker = f"{getattr(getattr(self, 'request', None), 'hostname', 'worker')}:{os.getpid()}"
    limit = settings.TELEMETRY_CLAIM_BATCHES
    started = time.monotonic()
    total = 0
    fanned_out = False
    while True:
        result = processing.batches_process(worker=worker, limit=limit)
        total += result.processed
        if not result.full:
            return total
        if not fanned_out:
            processing_kick()
            fanned_out = True
        if time.monotonic() - started > DRAIN_BUDGET_S:
            processing_kick()
            return total


@shared_task(
    name="telemetry.derived_process",
    autoretry_for=processing.SESSION_LOST,  # the pass runs on a psycopg cursor too
    retry_backoff=True,
    retry_backoff_max=30,
    max_retries=None,
)
def derived_process() -> int:
    """Recomputes marked (GPU, hour) pairs in passes until none are left or the budget is
    spent. Passes run one at a time per shard of the GPUs: each pass that found marks queues
    another task, so an idle worker process takes another shard beside this one; if every
    shard is taken, this one comes back a second later."""
    derived_started()
    limit = settings.TELEMETRY_DERIVED_CLAIM_HOURS
    started = time.monotonic()
    total = 0
    while True:
        result = derived.derived_process(limit=limit, share=True)
        total += result.claimed
        if result.busy:
            derived_kick(countdown=1.0)
            return total
        if not result.claimed:
            return total
        # Other shards may hold marks too: an idle process takes one beside this pass (at
        # most one task waits; one that finds nothing ends after one pass).
        derived_kick()
        if time.monotonic() - started > DRAIN_BUDGET_S:
            derived_kick()
            return total


@shared_task(name="telemetry.derived_sweep", ignore_result=True)
def derived_sweep() -> int:
    """Re-queues the derived pass when marks wait longer than they should (lost task)."""
    waiting = upkeep.derived_needing_work(
        now=timezone.now(),
        older_than=dt.timedelta(seconds=settings.TELEMETRY_DERIVED_SWEEP_AFTER_S),
    )
    if waiting:
        log.warning("sweep: %d derived marks waited too long; re-queueing the pass", waiting)
        derived_kick()
    return waiting


@shared_task(name="telemetry.batches_sweep", ignore_result=True)
def batches_sweep() -> int:
    """Re-queues processing when batches wait longer than they should (lost task)."""
    waiting = upkeep.batches_needing_work(
        now=timezone.now(), older_than=dt.timedelta(seconds=settings.TELEMETRY_SWEEP_AFTER_S)
    )
    if waiting:
        log.warning("sweep: %d batches waited too long; re-queueing processing", waiting)
        batches_process.delay()
    return waiting


@shared_task(name="telemetry.nodes_mark_stale", ignore_result=True)
def nodes_mark_stale() -> int:
    return len(upkeep.nodes_mark_stale(now=timezone.now()))


@shared_task(name="telemetry.partitions_maintain", ignore_result=True)
def partitions_maintain() -> None:
    created, dropped = upkeep.partitions_maintain(now=timezone.now())
    if created or dropped:
        log.info("partitions: created %s, dropped %s", created, dropped)


@shared_task(name="telemetry.batches_purge", ignore_result=True)
def batches_purge() -> int:
    """Retention: processed raw batches, the placement change log's old rows, and the
    tallies of hours past ``derived.TALLIED``."""
    now = timezone.now()
    upkeep.placement_changes_prune(now=now)
    upkeep.hour_tallies_prune(now=now)
    return upkeep.batches_purge(now=now)
