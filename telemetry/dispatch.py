"""Queueing the processing and derived tasks without flooding the broker.

The endpoint may commit hundreds of batches a second, and one task drains many of them, so
at most one task of each kind waits in the queue at a time: a kick queues one only if it can
set a short-lived Redis flag, and the task clears the flag as it starts (so work committed
after that start queues the next one). Losing the flag or the task (Redis flushed) loses
nothing: batches stay pending and marks stay in PostgreSQL, and beat's sweeps re-queue them.
So a kick that finds Redis down logs it and returns: the batch or the chunk it follows is
committed, and an error here would only turn an agent's 202 into a 500 (and its retry into a
replay) or send a committed chunk down the worker's failure path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.cache import cache
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

KICK_KEY = "telemetry:processing-queued"
DERIVED_KICK_KEY = "telemetry:derived-queued"
KICK_TTL_S = 30


def processing_kick() -> None:
    """Queue a processing task unless one is already waiting. Call on commit."""
    from telemetry.tasks import batches_process

    _queue_once(KICK_KEY, KICK_TTL_S, batches_process.delay, "processing")


def processing_started() -> None:
    """The waiting task has started: the next committed batch must queue another."""
    cache.delete(KICK_KEY)


def derived_kick(*, countdown: float = 0.0) -> None:
    """Queue a derived pass unless one is already waiting. Call after marks are committed."""
    from telemetry.tasks import derived_process

    _queue_once(
        DERIVED_KICK_KEY,
        KICK_TTL_S + int(countdown),
        lambda: derived_process.apply_async(countdown=countdown),
        "derived pass",
    )


def derived_started() -> None:
    """The waiting pass has started: marks committed from now on must queue another."""
    cache.delete(DERIVED_KICK_KEY)


def _queue_once(key: str, ttl: int, send: Callable[[], object], what: str) -> None:
    """Sends the task unless the flag says one waits; with Redis down, logs and returns."""
    try:
        if cache.add(key, 1, timeout=ttl):
            send()
    except (RedisError, BrokerError) as exc:
        log.warning("%s not queued (Redis down: %s); beat's sweep re-queues it", what, exc)
