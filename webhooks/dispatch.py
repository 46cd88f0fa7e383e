"""Queueing the dispatch pass without flooding the broker (as ``telemetry.dispatch`` does):
at most one waits at a time; losing the flag or the task loses nothing, the sweep re-queues."""

from __future__ import annotations

from django.core.cache import cache

KICK_KEY = "webhooks:dispatch-queued"
KICK_TTL_S = 30


def dispatch_kick() -> None:
    from webhooks.tasks import events_dispatch

    if cache.add(KICK_KEY, 1, timeout=KICK_TTL_S):
        events_dispatch.delay()


def dispatch_started() -> None:
    cache.delete(KICK_KEY)
