"""Beat's work: re-queue lost batches, mark silent nodes stale, keep partitions and retention,
prune the placement change log."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction

from telemetry.services.derived import LOOKAROUND, TALLIED, WINDOW
from telemetry.services.partitions import window_partitions_ahead, window_partitions_drop_before
from telemetry.services.state_events import STALE_GPUS, gpu_state_events_emit


def batches_needing_work(*, now: dt.datetime, older_than: dt.timedelta) -> int:
    """How many batches a worker should have taken by now: pending longer than ``older_than``
    (their task was lost, e.g. Redis was flushed, or their worker died mid-chunk: its locks
    went with it and they are plain pending batches again)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM telemetry_queuedbatch WHERE NOT failed AND received_at < %s",
            [now - older_than],
        )
        (count,) = cursor.fetchone() or (0,)
    return int(count)


def derived_needing_work(*, now: dt.datetime, older_than: dt.timedelta) -> int:
    """How many (GPU, hour) marks have waited longer than ``older_than`` for a derived pass
    (its task was lost). Reads the oldest marks only, through their index."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM telemetry_derivedwork WHERE marked_at < %s "
            "LIMIT 10000) old",
            [now - older_than],
        )
        (count,) = cursor.fetchone() or (0,)
    return int(count)


@dataclass(frozen=True)
class StaleNode:
    node_id: str
    last_seen_at: dt.datetime


def nodes_mark_stale(*, now: dt.datetime) -> list[StaleNode]:
    """Marks nodes silent for ``TELEMETRY_STALE_AFTER_WINDOWS`` windows as stale and records,
    for each GPU placed on them, a ``no_data`` transition at the end of its last window's
    observed span (``window_start + observed_to``) — when the data stopped, not when beat
    noticed. Only nodes turning stale are visited."""
    cutoff = now - WINDOW * settings.TELEMETRY_STALE_AFTER_WINDOWS
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE telemetry_nodestatus ns SET stale = true, stale_since = %(now)s
             WHERE NOT ns.stale AND ns.last_seen_at < %(cutoff)s
               AND NOT EXISTS (SELECT 1 FROM telemetry_ingestbatch b
                                WHERE b.node_id = ns.node_id AND b.received_at >= %(cutoff)s)
            RETURNING ns.node_id, ns.last_seen_at
            """,
            {"now": now, "cutoff": cutoff},
        )
        stale = [StaleNode(str(node_id), seen) for node_id, seen in cursor.fetchall()]
        if stale:
            cursor.execute(
                """
                INSERT INTO telemetry_gpustatetransition (gpu_id, state, reason, at, recorded_at)
                SELECT p.gpu_id, 'no_data', 'node stale: no telemetry',
                       last.window_start + last.observed_to * interval '1 second', now()
                  FROM fleet_placement p
                  CROSS JOIN LATERAL (
                        SELECT w.window_start, w.observed_to FROM telemetry_window w
                         WHERE w.gpu_id = p.gpu_id AND w.window_start >= %(since)s
                         ORDER BY w.window_start DESC LIMIT 1) AS last
                 WHERE p.node_id = ANY(%(nodes)s::uuid[])
                   AND p.valid_from <= %(now)s AND (p.valid_to IS NULL OR p.valid_to > %(now)s)
                ON CONFLICT (gpu_id, at) DO NOTHING
                RETURNING gpu_id
                """,
                {"nodes": [s.node_id for s in stale], "now": now, "since": now - LOOKAROUND},
            )
            gpus = [row[0] for row in cursor.fetchall()]
            if gpus:
                gpu_state_events_emit(cursor=cursor, scope=STALE_GPUS, params={"stale_gpus": gpus})
    return stale


def partitions_maintain(*, now: dt.datetime) -> tuple[list[dt.date], list[dt.date]]:
    """Creates the coming days' partitions; drops those past raw retention."""
    today = now.astimezone(dt.UTC).date()
    created = window_partitions_ahead(
        today=today, days_ahead=settings.TELEMETRY_PARTITIONS_AHEAD_DAYS
    )
    dropped = window_partitions_drop_before(
        day=today - dt.timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS)
    )
    return created, dropped


def batches_purge(*, now: dt.datetime) -> int:
    """Deletes processed raw batches (with their bodies and rejections) past batch retention:
    one statement, so the batches past the cut-off are found once. Processed batches have no
    queue row. The foreign keys are checked at commit, when the three deletes are done."""
    cutoff = now - dt.timedelta(days=settings.TELEMETRY_BATCH_RETENTION_DAYS)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH gone AS (
                DELETE FROM telemetry_ingestbatch
                 WHERE status = 'processed' AND received_at < %s
             RETURNING id
            ), bodies AS (
                DELETE FROM telemetry_batchbody WHERE batch_id IN (SELECT id FROM gone)
            ), rejections AS (
                DELETE FROM telemetry_rejectedrecord WHERE batch_id IN (SELECT id FROM gone)
            )
            SELECT count(*) FROM gone
            """,
            [cutoff],
        )
        (count,) = cursor.fetchone() or (0,)
        return int(count)


# How long the placement change log keeps a change (telemetry migration 0012).
PLACEMENT_CHANGES_KEPT = dt.timedelta(days=1)


def placement_changes_prune(*, now: dt.datetime) -> int:
    """Deletes the placement change log's rows older than ``PLACEMENT_CHANGES_KEPT``, but
    never its newest row. A worker's cached placements are compared by how many changes the
    log holds from their transaction on, and the id of the last: a deletion only makes a
    cache look changed (it reads placements once more), and a change made since a cache was
    read keeps a row newer than any it saw — the newest row is never deleted, so however
    long a worker sat idle, the log never reads as it did before a change."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            DELETE FROM telemetry_placementchange
             WHERE changed_at < %s
               AND id < (SELECT max(id) FROM telemetry_placementchange)
            """,
            [now - PLACEMENT_CHANGES_KEPT],
        )
        return int(cursor.rowcount)


def hour_tallies_prune(*, now: dt.datetime) -> int:
    """Deletes the tallies of hours older than ``derived.TALLIED`` (telemetry migration 0017):
    a pass writes none for them, and one left behind only costs its row — a tally counts only
    while it agrees with its rollup."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM telemetry_hourtally WHERE hour < %s", [now - TALLIED])
        return int(cursor.rowcount)
