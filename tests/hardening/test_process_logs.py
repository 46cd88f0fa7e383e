"""Workers and beat log as the web does (issue 23): one JSON object a line on the process's
stdout, and inside a task with the task's name and id. Before, Celery replaced stdout with a
proxy of its own and every application line logged in a worker or beat was lost."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from config.celery import ping
from telemetry.models import IngestBatch
from telemetry.tasks import batches_sweep
from telemetry.testing import (
    batch_document,
    batches_stored,
    fleet_node,
    minute,
    signed_batch,
    window,
)
from tests.conftest import (
    ROOT,
    celery_worker_start,
    celery_worker_stop,
    database_url,
    kick_flags_clear,
)

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


# What Celery prints itself, outside logging (``safe_say``), when it stops.
NOT_LOGS = {"worker: Warm shutdown (MainProcess)"}


def json_lines(path: Path, *, running: bool = False) -> list[dict[str, Any]]:
    """Every line of a process's output, each of which must be one JSON object.

    While the process runs, its last line may be half written: only whole lines are read then.
    """
    text = path.read_text()
    if running:
        text = text[: text.rfind("\n") + 1]
    entries = []
    for line in text.splitlines():
        if line.strip() and line not in NOT_LOGS:
            try:
                entries.append(json.loads(line))
            except ValueError:
                raise AssertionError(f"not a JSON line: {line!r}") from None
    return entries


def queue_delete(queue: str) -> None:
    """Drops what a test's own queue still holds (the broker is the test Redis database), and
    the kick flags of the tasks it may have held: a pass the worker's last pass queued is
    dropped here, and its flag would hold back the next test's kicks for its TTL."""
    cache._cache.get_client(write=True).delete(queue)  # type: ignore[attr-defined]
    kick_flags_clear()


def a_batch_whose_task_was_lost() -> IngestBatch:
    node = fleet_node(gpus=1)
    at = minute(timezone.now()) - dt.timedelta(hours=2)
    document = batch_document(node=node, windows=[window(node.gpus[0].nvml_uuid, at)])
    body = signed_batch(node, document)[0]
    batch = IngestBatch(
        node=node.node,
        batch_id=document["batch_id"],
        body_sha256="0" * 64,
        signed_at=timezone.now(),
        received_at=timezone.now() - dt.timedelta(hours=1),
        window_count=1,
        answer={},
    )
    (stored,) = batches_stored([(batch, body)])
    return stored


def test_a_warning_logged_inside_a_real_task_is_in_the_worker_output(tmp_path):
    batch = a_batch_whose_task_was_lost()
    queue = f"steward-test-logs-{uuid.uuid4().hex[:8]}"
    output = tmp_path / "worker.out"
    with output.open("wb") as out:
        process = celery_worker_start(queue, loglevel="INFO", stdout=out, stderr=out, quiet=True)
        try:
            sweep = batches_sweep.apply_async(queue=queue)
            deadline = time.monotonic() + 60
            while IngestBatch.objects.get(pk=batch.pk).status != "processed":
                assert time.monotonic() < deadline, "the sweep's processing never ran"
                time.sleep(0.1)
            # The worker runs one task at a time: a ping answered means what came before ran.
            ping.apply_async(queue=queue, ignore_result=False).get(timeout=60)
        finally:
            celery_worker_stop(process)
            queue_delete(queue)
    entries = json_lines(output)
    warnings = [e for e in entries if e["logger"] == "telemetry.tasks"]
    assert len(warnings) == 1
    assert warnings[0]["level"] == "WARNING"
    assert warnings[0]["message"] == "sweep: 1 batches waited too long; re-queueing processing"
    assert (warnings[0]["task"], warnings[0]["task_id"]) == ("telemetry.batches_sweep", sweep.id)
    assert set(warnings[0]) >= {"ts", "level", "logger", "message", "request_id"}
    # Celery's own lines come the same way: the worker said it was ready, and ran the tasks.
    loggers = {e["logger"] for e in entries}
    assert "celery.worker.consumer.connection" in loggers or "celery.apps.worker" in loggers
    traced = [e for e in entries if e["logger"] == "celery.app.trace"]
    assert any(sweep.id in e["message"] for e in traced)


def test_beat_logs_json_on_its_stdout(tmp_path):
    queue = f"steward-test-beat-{uuid.uuid4().hex[:8]}"
    output = tmp_path / "beat.out"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "CELERY_DEFAULT_QUEUE": queue,
        "PYTHONWARNINGS": "ignore",
    }
    command = [
        sys.executable, "-m", "celery", "-A", "config", "--quiet", "beat", "--loglevel=DEBUG",
        f"--schedule={tmp_path / 'beat-schedule'}", "--max-interval=1",
    ]  # fmt: skip
    with output.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            # Stopped once its scheduler ticks: a SIGTERM while beat still opens its schedule
            # file makes Celery print a traceback of its own (seen once on a loaded CI machine).
            deadline = time.monotonic() + 60
            while not any(
                e["message"].startswith("beat: Waking up") for e in json_lines(output, running=True)
            ):
                assert process.poll() is None, output.read_text()
                assert time.monotonic() < deadline, output.read_text()
                time.sleep(0.2)
        finally:
            celery_worker_stop(process)
            queue_delete(queue)
    entries = json_lines(output)
    started = [e for e in entries if e["logger"] == "celery.beat" and e["level"] == "INFO"]
    assert started[0]["message"] == "beat: Starting..."
    assert started[0]["level"] == "INFO"
