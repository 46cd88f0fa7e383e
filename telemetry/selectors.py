"""Reads for operators: ingest health at a glance, without scanning telemetry tables."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import connection

from telemetry.models import NodeStatus, RejectedRecord


@dataclass(frozen=True)
class IngestHealth:
    pending: int
    claimed: int
    failed: int
    oldest_pending_at: dt.datetime | None
    lag_s: float
    stale_nodes: list[NodeStatus]
    nodes: list[NodeStatus]
    recent_rejections: list[RejectedRecord]
    rejections_by_reason: list[tuple[str, int]]


def ingest_health(*, now: dt.datetime, nodes: int = 50, rejections: int = 50) -> IngestHealth:
    """Counts come from the partial index of unfinished batches, so they stay cheap however
    many batches have been processed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, count(*), min(received_at) FROM telemetry_ingestbatch "
            "WHERE status IN ('pending', 'claimed') GROUP BY status"
        )
        by_status: dict[str, tuple[int, Any]] = {s: (c, m) for s, c, m in cursor.fetchall()}
        cursor.execute("SELECT count(*) FROM telemetry_ingestbatch WHERE status = 'failed'")
        (failed,) = cursor.fetchone() or (0,)
        cursor.execute(
            "SELECT reason, count(*) FROM telemetry_rejectedrecord "
            "WHERE recorded_at >= %s GROUP BY reason ORDER BY 2 DESC",
            [now - dt.timedelta(days=1)],
        )
        by_reason = [(reason, int(count)) for reason, count in cursor.fetchall()]
    oldest = min((m for _, m in by_status.values() if m is not None), default=None)
    return IngestHealth(
        pending=by_status.get("pending", (0, None))[0],
        claimed=by_status.get("claimed", (0, None))[0],
        failed=int(failed),
        oldest_pending_at=oldest,
        lag_s=(now - oldest).total_seconds() if oldest else 0.0,
        stale_nodes=list(
            NodeStatus.objects.filter(stale=True)
            .select_related("node")
            .order_by("-stale_since")[:nodes]
        ),
        nodes=list(NodeStatus.objects.select_related("node").order_by("last_seen_at")[:nodes]),
        recent_rejections=list(
            RejectedRecord.objects.select_related("node").order_by("-recorded_at")[:rejections]
        ),
        rejections_by_reason=by_reason,
    )
