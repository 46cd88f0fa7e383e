"""Queueing the processing and derived tasks without flooding the broker.

The endpoint may commit hundreds of batches a second, and one task drains many of them, so
at most one task of each kind waits in the queue at a time: a kick queues one only if it can
set a short-lived Redis flag, and the task clears the flag as it starts (so work committed
after that start queues the next one). Losing the flag or the task (Redis flushed) loses
nothing: batches stay pending and marks stay in PostgreSQL, and beat's sweeps re-queue them.
"""

from __future__ import annotations

from django.core.cache import cache

KICK_KEY = "telemetry:processing-queued"
DERIVED_KICK_KEY = "telemetry:derived-queued"
KICK_TTL_S = 30


def processing_kick() -> None:
    """Queue a processing task unless one is already waiting. Call on commit."""
    from telemetry.tasks import batches_process

    if cache.add(KICK_KEY, 1, timeout=KICK_TTL_S):
        batches_process.delay()


def processing_started() -> None:
    """The waiting task has started: the next committed batch must queue another."""
    cache.delete(KICK_KEY)


def derived_kick(*, countdown: float = 0.0) -> None:
    """Queue a derived pass unless one is already waiting. Call after marks are committed."""
    from telemetry.tasks import derived_process

    if cache.add(DERIVED_KICK_KEY, 1, timeout=KICK_TTL_S + int(countdown)):
        derived_process.apply_async(countdown=countdown)


def derived_started() -> None:
    """The waiting pass has started: marks committed from now on must queue another."""
    cache.delete(DERIVED_KICK_KEY)
