"""Probes: ``/healthz`` says the process serves; ``/readyz`` that it can do real work."""

from __future__ import annotations

import time

from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.celery import BEAT_HEARTBEAT_KEY, app


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database() -> tuple[bool, str]:
    try:
        connection = connections[DEFAULT_DB_ALIAS]
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        pending = MigrationExecutor(connection).migration_plan(
            MigrationExecutor(connection).loader.graph.leaf_nodes()
        )
    except Exception as exc:  # a probe reports every failure instead of raising
        return False, f"unreachable: {exc.__class__.__name__}"
    if pending:
        return False, f"{len(pending)} migration(s) not applied"
    return True, "ok"


def _broker() -> tuple[bool, str]:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:  # a probe reports every failure instead of raising
        return False, f"unreachable: {exc.__class__.__name__}"
    return True, "ok"


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    database_ok, database = _database()
    broker_ok, broker = _broker()
    last_tick = cache.get(BEAT_HEARTBEAT_KEY) if broker_ok else None
    body = {
        "status": "ok" if database_ok and broker_ok else "unavailable",
        "checks": {"database": database, "broker": broker},
        # Informational: beat being late does not make this process unready.
        "beat_last_tick_age_s": round(time.time() - last_tick, 1) if last_tick else None,
    }
    return JsonResponse(body, status=200 if database_ok and broker_ok else 503)
