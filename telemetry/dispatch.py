"""Queueing the processing task without flooding the broker.

The endpoint may commit hundreds of batches a second, and one task drains many of them, so
at most one processing task waits in the queue at a time: ``processing_kick`` queues one
only if it can set a short-lived Redis flag, and the task clears the flag as it starts (so a
batch committed after that start queues the next one). Losing the flag or the task (Redis
flushed) loses nothing: the batches stay pending in PostgreSQL and the sweep re-queues them.
"""

from __future__ import annotations

from django.core.cache import cache

KICK_KEY = "telemetry:processing-queued"
KICK_TTL_S = 30


def processing_kick() -> None:
    """Queue a processing task unless one is already waiting. Call on commit."""
    from telemetry.tasks import batches_process

    if cache.add(KICK_KEY, 1, timeout=KICK_TTL_S):
        batches_process.delay()


def processing_started() -> None:
    """The waiting task has started: the next committed batch must queue another."""
    cache.delete(KICK_KEY)
