"""Reads for operators and for billing: ingest health at a glance, without scanning telemetry
tables, and whether the derived rows (transitions, rollups) of a range are up to date."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import QuerySet

from telemetry.models import BatchStatus, IngestBatch, NodeCredential, NodeStatus, RejectedRecord
from telemetry.services.derived import LOOKAROUND

# The health view counts waiting marks up to this many (a catch-up can leave millions).
DERIVED_COUNT_CAP = 100_000


def batches_with_status(batches: QuerySet[IngestBatch], status: str) -> QuerySet[IngestBatch]:
    """The batches of ``batches`` in ``status``. Pending and failed ones are found through
    their queue rows (a small table with its own index): no index covers ``status`` on the
    batch table, which is what keeps the worker's update of it HOT."""
    if status == BatchStatus.PENDING:
        return batches.filter(queued__failed=False)
    if status == BatchStatus.FAILED:
        return batches.filter(queued__failed=True)
    return batches.filter(status=status)


@dataclass(frozen=True)
class IngestHealth:
    pending: int  # not yet processed, in flight included
    in_flight: int  # pending batches a running worker holds (in its chunk's transaction)
    failed: int
    oldest_pending_at: dt.datetime | None
    lag_s: float
    stale_nodes: list[NodeStatus]  # the most recently stale ones, at most ``nodes`` of them
    nodes: list[NodeStatus]
    recent_rejections: list[RejectedRecord]
    rejections_by_reason: list[tuple[str, int]]
    derived_pending: int = 0
    derived_pending_capped: bool = False
    derived_oldest_at: dt.datetime | None = None
    derived_lag_s: float = 0.0
    workers: list[tuple[str, int, dt.datetime]] = field(default_factory=list)
    # Claims of workers lost mid-chunk, not yet reaped (the next claim counts their attempts).
    abandoned_claims: int = 0
    stale_count: int = 0  # every stale node, however many are listed


def ingest_health(*, now: dt.datetime, nodes: int = 50, rejections: int = 50) -> IngestHealth:
    """Counts come from the queue of unprocessed batches, so they stay cheap however many
    batches have been processed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE NOT failed), min(received_at) FILTER (WHERE NOT failed),"
            " count(*) FILTER (WHERE failed) FROM telemetry_queuedbatch"
        )
        pending, oldest, failed = cursor.fetchone() or (0, None, 0)
        # A claim row is live while its chunk's transaction holds it: the rows this cannot
        # lock (KEY SHARE conflicts only with that transaction's FOR UPDATE) are live, the
        # others belong to lost workers. Claim rows are few (one per running chunk).
        cursor.execute("SELECT id FROM telemetry_ingestclaim FOR KEY SHARE SKIP LOCKED")
        abandoned = {row[0] for row in cursor.fetchall()}
        cursor.execute(
            "SELECT id, worker, cardinality(batch_ids), claimed_at FROM telemetry_ingestclaim "
            "ORDER BY claimed_at"
        )
        workers = [(w, int(n), at) for cid, w, n, at in cursor.fetchall() if cid not in abandoned]
        cursor.execute(
            "SELECT reason, count(*) FROM telemetry_rejectedrecord "
            "WHERE recorded_at >= %s GROUP BY reason ORDER BY 2 DESC",
            [now - dt.timedelta(days=1)],
        )
        by_reason = [(reason, int(count)) for reason, count in cursor.fetchall()]
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM telemetry_derivedwork LIMIT %s) m",
            [DERIVED_COUNT_CAP],
        )
        (derived,) = cursor.fetchone() or (0,)
        cursor.execute("SELECT min(marked_at) FROM telemetry_derivedwork")
        (derived_oldest,) = cursor.fetchone() or (None,)
        # One row per node (~12,500 for 100k GPUs): counted whole, not as the list's length.
        cursor.execute("SELECT count(*) FROM telemetry_nodestatus WHERE stale")
        (stale_count,) = cursor.fetchone() or (0,)
    return IngestHealth(
        pending=int(pending),
        in_flight=sum(n for _, n, _ in workers),
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
        derived_pending=int(derived),
        derived_pending_capped=int(derived) >= DERIVED_COUNT_CAP,
        derived_oldest_at=derived_oldest,
        derived_lag_s=(now - derived_oldest).total_seconds() if derived_oldest else 0.0,
        workers=workers,
        abandoned_claims=len(abandoned),
        stale_count=int(stale_count),
    )


def derived_pending(*, start: dt.datetime, end: dt.datetime) -> int:
    """How many (GPU, hour) marks still wait for a derived pass that could change a
    transition or an hourly rollup in ``[start, end)``; 0 means those rows are up to date with
    every window processed so far.

    A late window changes its own hour and, through counter deltas and the state before it,
    the GPU's next window up to ``LOOKAROUND`` later: so marks from that far before ``start``
    count too. Batches not yet processed are not marks yet: a statement close should also see
    ``ingest_health(...).pending == 0`` (or accept the rows as of now, preliminary)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM telemetry_derivedwork WHERE hour > %s AND hour < %s",
            [start - LOOKAROUND - dt.timedelta(hours=1), end],
        )
        (count,) = cursor.fetchone() or (0,)
    return int(count)


def node_credential_current(*, node_id: uuid.UUID) -> tuple[int, str] | None:
    """The node's current key (generation, SHA-256), or None when it has none or it was
    revoked. One plain query: on the ingest endpoint's path the ORM's query building cost as
    much as the rest of the lookup."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT generation, key_sha256 FROM {NodeCredential._meta.db_table} "  # noqa: S608
            "WHERE node_id = %s AND revoked_at IS NULL LIMIT 1",
            [node_id],
        )
        row = cursor.fetchone()
    return (int(row[0]), str(row[1])) if row else None
