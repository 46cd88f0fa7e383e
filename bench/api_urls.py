"""The site's URLs plus, under ``/bench/raw/``, the API benchmark's baseline: a bare
``SELECT`` of the rows an endpoint reads, returned as JSON by a plain Django view (no DRF, no
authentication, no access rules). Mounted only by ``bench.api_settings``."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import path

from config.urls import urlpatterns as site_urlpatterns


def _rows(sql: str, params: list[Any]) -> HttpResponse:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [c.name for c in cursor.description or ()]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    body = json.dumps({"results": rows}, cls=DjangoJSONEncoder)
    return HttpResponse(body, content_type="application/json")


def statements(request: HttpRequest) -> HttpResponse:
    return _rows(
        "SELECT s.id, s.owner_id, s.currency, s.status, s.opening_balance, s.lines_total, "
        "s.adjustments_total, s.payouts_total, s.closing_balance, s.content_sha256, "
        "s.published_at, s.disclosure_version, s.disclosure_sha256, p.start, p.end "
        "FROM billing_statement s JOIN billing_period p ON p.id = s.period_id "
        "WHERE s.owner_id = %s AND s.status = 'published' ORDER BY p.start DESC, s.id",
        [request.GET["owner"]],
    )


def statement(request: HttpRequest) -> HttpResponse:
    return _rows(
        "SELECT * FROM billing_statementline WHERE statement_id = %s ORDER BY position",
        [request.GET["id"]],
    )


def rollups(request: HttpRequest) -> HttpResponse:
    return _rows(
        "SELECT * FROM telemetry_hourlyrollup WHERE gpu_id = %s AND hour >= %s AND hour < %s "
        "ORDER BY hour",
        [request.GET["gpu"], request.GET["start"], request.GET["end"]],
    )


def gpus(request: HttpRequest) -> HttpResponse:
    return _rows(
        "SELECT g.* FROM fleet_gpu g WHERE EXISTS (SELECT 1 FROM fleet_ownership o "
        "WHERE o.gpu_id = g.id AND o.owner_id = %s) ORDER BY g.serial LIMIT 100",
        [request.GET["owner"]],
    )


urlpatterns = [
    path("bench/raw/statements", statements),
    path("bench/raw/statement", statement),
    path("bench/raw/rollups", rollups),
    path("bench/raw/gpus", gpus),
    *site_urlpatterns,
]
