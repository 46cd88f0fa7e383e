"""The Celery application: ``celery -A config worker`` and ``celery -A config beat``.

DJANGO_SETTINGS_MODULE must be set by whoever starts the process (compose, the demo, tests):
importing this module must not change the environment, because ``config`` is imported by
tools such as ``config.embedded`` whose children choose their own settings.
"""

from __future__ import annotations

import logging
import logging.config
import os
import time
from contextvars import Token
from typing import Any

from celery import Celery
from celery.signals import setup_logging, task_postrun, task_prerun

from config.logs import task_var

app = Celery("steward")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

BEAT_HEARTBEAT_KEY = "steward:beat:last-tick"

# How many tasks this process has started: a ping's answer carries it, so whoever pings twice
# can tell whether anything else ran in between (the tests' drain of their worker).
_tasks_started = 0


# The task each running task's log context was set for, to be reset when it ends.
_task_context: dict[str, Token[tuple[str, str] | None]] = {}


@setup_logging.connect
def _logging_as_django(loglevel: Any = None, **_: object) -> None:
    """Workers and beat log as the web does: Django's LOGGING (one JSON object a line, on
    the process's stdout), at the level given on the command line (``--loglevel``).

    Without a receiver for this signal Celery installs its own handlers and format and
    replaces ``sys.stdout`` with a proxy that logs what is written to it: the JSON handler,
    writing to that stdout, then lost every application line (issue 23). With one, Celery
    leaves logging and stdout alone."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)


@task_prerun.connect
def _task_started(task_id: str | None = None, task: Any = None, **_: object) -> None:
    global _tasks_started
    _tasks_started += 1
    if task_id is not None:
        _task_context[task_id] = task_var.set((getattr(task, "name", "?"), task_id))


@task_postrun.connect
def _task_ended(task_id: str | None = None, **_: object) -> None:
    token = _task_context.pop(task_id or "", None)
    if token is not None:
        try:
            task_var.reset(token)
        except ValueError:  # ended in another context than it started in (a thread pool)
            task_var.set(None)


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
