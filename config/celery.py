"""The Celery application: ``celery -A config worker`` and ``celery -A config beat``.

DJANGO_SETTINGS_MODULE must be set by whoever starts the process (compose, the demo, tests):
importing this module must not change the environment, because ``config`` is imported by
tools such as ``config.embedded`` whose children choose their own settings.
"""

from __future__ import annotations

import os
import time

from celery import Celery
from celery.signals import task_prerun

app = Celery("steward")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

BEAT_HEARTBEAT_KEY = "steward:beat:last-tick"

# How many tasks this process has started: a ping's answer carries it, so whoever pings twice
# can tell whether anything else ran in between (the tests' drain of their worker).
_tasks_started = 0


@task_prerun.connect
def _task_started(**_: object) -> None:
    global _tasks_started
    _tasks_started += 1


@app.task(name="steward.ping")
def ping() -> dict[str, object]:
    """Answers from a worker: its pid, the database it reaches, how many tasks it has
    started (this one included) and which it holds for a later time (a countdown or a retry's
    backoff), for smoke tests, operators and the tests' drain of their worker. The held
    tasks are this process's: exact with the solo pool, where tasks run in the worker."""
    from celery.worker import state
    from django.db import connection

    held = list(state.scheduled_requests)  # type: ignore[attr-defined]  # stubs lag celery
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        (database,) = cursor.fetchone() or ("?",)
    return {
        "pong": True,
        "pid": os.getpid(),
        "database": database,
        "tasks_started": _tasks_started,
        "tasks_held": sorted(f"{r.name} at {r.eta}" for r in held),
    }


@app.task(name="steward.beat_heartbeat", ignore_result=True)
def beat_heartbeat() -> None:
    """Scheduled by beat every minute, so /readyz can say when beat last ticked."""
    from django.core.cache import cache

    cache.set(BEAT_HEARTBEAT_KEY, time.time(), timeout=None)
