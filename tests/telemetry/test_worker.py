"""The whole path on real processes: HTTP endpoint → PostgreSQL → Redis → Celery worker."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.db.models import Sum
from django.test import Client
from django.utils import timezone

from telemetry.models import HourlyRollup, IngestBatch, TelemetryWindow
from telemetry.selectors import derived_pending
from telemetry.tasks import batches_sweep
from telemetry.testing import (
    BATCHES_PATH,
    batch_document,
    batches_stored,
    fleet_node,
    minute,
    signed_batch,
    window,
)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_committed_batch_is_processed_by_a_real_worker(celery_worker):
    node = fleet_node(gpus=2)
    start = minute(timezone.now()) - dt.timedelta(minutes=3)
    client = Client()
    for offset in range(3):
        document = batch_document(
            node=node,
            windows=[window(g.nvml_uuid, start + dt.timedelta(minutes=offset)) for g in node.gpus],
        )
        body, headers = signed_batch(node, document)
        response = client.post(
            BATCHES_PATH, data=body, content_type=headers.pop("Content-Type"), headers=headers
        )
        assert response.status_code == 202
    assert wait_for(lambda: not IngestBatch.objects.exclude(status="processed").exists())
    assert TelemetryWindow.objects.count() == 6
    # The worker queued the derived pass, which left every GPU-hour computed and unmarked.
    assert wait_for(lambda: HourlyRollup.objects.aggregate(n=Sum("windows"))["n"] == 6)
    assert wait_for(lambda: derived_pending(start=start, end=start + dt.timedelta(hours=2)) == 0)


def test_the_sweep_requeues_batches_whose_task_redis_lost(celery_worker, settings):
    node = fleet_node(gpus=1)
    body = signed_batch(
        node,
        batch_document(
            node=node,
            windows=[
                window(node.gpus[0].nvml_uuid, minute(timezone.now()) - dt.timedelta(hours=2))
            ],
        ),
    )[0]
    batch = IngestBatch(
        node=node.node,
        batch_id=batch_document(node=node, windows=[])["batch_id"],
        body_sha256="0" * 64,
        signed_at=timezone.now(),
        received_at=timezone.now() - dt.timedelta(hours=1),
        window_count=1,
        answer={},
    )
    batches_stored([(batch, body)])  # stored, but its task never queued
    settings.TELEMETRY_SWEEP_AFTER_S = 60
    assert batches_sweep() == 1
    assert wait_for(lambda: IngestBatch.objects.get().status == "processed")
    assert TelemetryWindow.objects.count() == 1


def test_the_drain_waits_for_the_pass_a_processed_batch_queued(celery_worker):
    """The tests' teardown drains the worker before it truncates the windows: a derived pass
    still running beside that TRUNCATE deadlocks. The pass is queued by the processing task,
    after any ping sent while that task ran, so one ping is not enough."""
    from tests.conftest import worker_drain

    node = fleet_node(gpus=1)
    start = minute(timezone.now()) - dt.timedelta(minutes=5)
    body, headers = signed_batch(
        node, batch_document(node=node, windows=[window(node.gpus[0].nvml_uuid, start)])
    )
    response = Client().post(
        BATCHES_PATH, data=body, content_type=headers.pop("Content-Type"), headers=headers
    )
    assert response.status_code == 202
    worker_drain()
    assert IngestBatch.objects.get().status == "processed"
    assert derived_pending(start=start, end=start + dt.timedelta(hours=2)) == 0
    assert HourlyRollup.objects.aggregate(n=Sum("windows"))["n"] == 1


def test_the_drain_waits_for_a_task_held_for_its_countdown(celery_worker):
    """A task with a countdown (a retry's backoff, a pass that found the lock taken) is held by
    the worker, not queued: two pings pass it by. The drain waits until it has run."""
    from django.core.cache import cache

    from config.celery import BEAT_HEARTBEAT_KEY, beat_heartbeat
    from tests.conftest import worker_drain

    cache.delete(BEAT_HEARTBEAT_KEY)
    beat_heartbeat.apply_async(queue=celery_worker.queue, countdown=2)
    worker_drain()
    assert cache.get(BEAT_HEARTBEAT_KEY) is not None
