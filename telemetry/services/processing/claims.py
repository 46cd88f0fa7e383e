"""Claiming pending batches: the chunk's own claim (``FOR UPDATE SKIP LOCKED``), the claim
row a crash leaves behind, reaping lost workers' claims, setting a failing batch aside, and the
per-node lock that serialises writers of one node."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import logging
import os
import uuid
from typing import Any

import psycopg
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction

from core.locks import lock
from telemetry.models import IngestClaim
from telemetry.services.partitions import window_partitions_ensure
from telemetry.services.processing.validation import NO_VERSION, PLACEMENT_VERSION

log = logging.getLogger(__name__)

# A claim row is written (committed) a moment before its chunk's transaction locks it: only
# rows older than this can be a lost worker's.
REAP_AFTER_S = 5
GAVE_UP = "gave up after repeated attempts (worker lost each time)"
# This worker lost its session (the database went away, or ended it after the worker held its
# chunk idle past ``TELEMETRY_CLAIM_TIMEOUT_S``): its locks went with it, so its batches are
# pending again for any worker. Not a bad batch: never retried one by one or set aside for it.
# The chunks run on psycopg cursors, so psycopg's own classes come out too; PostgreSQL reports
# the idle timeout as SQLSTATE 25P03, an InternalError to psycopg.
SESSION_LOST: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.IdleInTransactionSessionTimeout,
)


def _batch_fail(*, batch_id: int, worker: str, error: str) -> None:
    """Sets a batch aside with its error, unless another worker holds it by now (it then
    processes it, or fails it itself)."""
    with transaction.atomic():
        connection.cursor().execute(
            """
            WITH held AS (
                SELECT batch_id FROM telemetry_queuedbatch
                 WHERE batch_id = %s AND NOT failed
                   FOR UPDATE SKIP LOCKED
            ), failed AS (
                UPDATE telemetry_ingestbatch
                   SET status = 'failed', error = %s, processed_at = now(), claimed_by = %s
                 WHERE id IN (SELECT batch_id FROM held) AND status = 'pending'
             RETURNING id
            )
            UPDATE telemetry_queuedbatch SET failed = true
             WHERE batch_id IN (SELECT id FROM failed)
            """,
            [batch_id, error[:2000], worker],
        )


def claims_reap() -> int:
    """Deletes the claims of lost workers (rows no transaction holds) and counts one lost
    attempt on each of their still-pending batches; a batch that lost its worker
    ``TELEMETRY_MAX_ATTEMPTS`` times is set aside (``failed``) for an operator. Batches that
    another worker is processing right now are skipped: it either commits them or leaves a
    claim of its own. Returns the number of claims reaped (nearly always 0, in one query)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            WITH dead AS (
                DELETE FROM telemetry_ingestclaim
                 WHERE id IN (SELECT id FROM telemetry_ingestclaim
                               WHERE claimed_at < now() - %s * interval '1 second'
                               ORDER BY id FOR UPDATE SKIP LOCKED)
             RETURNING batch_ids
            ), hit AS (
                UPDATE telemetry_queuedbatch q
                   SET attempts = q.attempts + 1, failed = q.attempts + 1 >= %s
                 WHERE q.batch_id IN (SELECT batch_id FROM telemetry_queuedbatch
                                       WHERE batch_id IN (SELECT unnest(batch_ids) FROM dead)
                                         AND NOT failed
                                       ORDER BY batch_id FOR UPDATE SKIP LOCKED)
             RETURNING q.batch_id, q.attempts, q.failed
            ), counted AS (
                UPDATE telemetry_ingestbatch b
                   SET attempts = hit.attempts,
                       status = CASE WHEN hit.failed THEN 'failed' ELSE b.status END,
                       error = CASE WHEN hit.failed THEN %s ELSE b.error END
                  FROM hit
                 WHERE b.id = hit.batch_id
            )
            SELECT (SELECT count(*) FROM dead), (SELECT count(*) FROM hit)
            """,
            [REAP_AFTER_S, settings.TELEMETRY_MAX_ATTEMPTS, GAVE_UP],
        )  # fmt: skip
        dead, hit = cursor.fetchone() or (0, 0)
    if dead:
        log.warning("%d claims of lost workers found; %d of their batches retried", dead, hit)
    return int(dead)


class _Side:
    """This process's second connection, in autocommit: the claim rows it writes are
    committed before the chunk's transaction starts its work, so they outlive a crash."""

    conn: psycopg.Connection[Any] | None = None
    pid = 0

    @classmethod
    def get(cls) -> psycopg.Connection[Any]:
        if cls.conn is None or cls.conn.closed or cls.pid != os.getpid():
            params = connection.get_connection_params()
            params.pop("cursor_factory", None)
            cls.conn = psycopg.connect(**params, autocommit=True)
            # A claim row must be visible to other workers at once (it is: visibility does not
            # wait for the disk), not durable: if the server crashes, the chunk's transaction
            # is lost with it and its batches come back with no attempt to count. Each chunk
            # then saves a flush of the write-ahead log.
            cls.conn.execute("SET synchronous_commit = off")
            cls.pid = os.getpid()
        return cls.conn

    @classmethod
    def close(cls) -> None:
        if cls.conn is not None and cls.pid == os.getpid():
            cls.conn.close()
        cls.conn = None

    @classmethod
    def claim_insert(cls, *, worker: str, batch_ids: list[int]) -> int:
        conn = cls.get()
        try:
            row = conn.execute(
                "INSERT INTO telemetry_ingestclaim (worker, claimed_at, batch_ids) "
                "VALUES (%s, now(), %s::bigint[]) RETURNING id",
                [worker, batch_ids],
            ).fetchone()
        except psycopg.Error as exc:
            conn.close()
            raise OperationalError(f"claim not recorded: {exc}") from exc
        if row is None:  # INSERT … RETURNING returns the row it inserted
            raise RuntimeError("claim not recorded: the insert returned no row")
        return int(row[0])

    @classmethod
    def partitions_ensure(cls, *, cursor: Any, days: set[dt.date]) -> None:
        conn = cls.get()
        try:
            window_partitions_ensure(days=days, cursor=cursor, ddl=conn)
        except psycopg.OperationalError as exc:
            conn.close()
            raise OperationalError(f"partitions not created: {exc}") from exc


def side_connection_close() -> None:
    """Closes this process's second connection (it reopens on next use); a process that
    outlives its work — a test run dropping its database — calls it."""
    _Side.close()


def _claim_record(cursor: Any, *, worker: str, batch_ids: list[int], outer: bool) -> int:
    """Records the chunk's claim so a crash leaves a trace, and locks it for this transaction.

    Inside a caller's transaction (``outer``; tests) nothing could outlive a crash anyway,
    and a row committed aside would outlive the caller's rollback: it is written here."""
    if outer:
        cursor.execute(
            "INSERT INTO telemetry_ingestclaim (worker, claimed_at, batch_ids) "
            "VALUES (%s, now(), %s::bigint[]) RETURNING id",
            [worker, batch_ids],
        )
        row = cursor.fetchone()
        return int(row[0])
    claim_id = _Side.claim_insert(worker=worker, batch_ids=batch_ids)
    lock(IngestClaim.objects.filter(pk=claim_id))  # held by this chunk's transaction
    return claim_id


# Pending batches, oldest first, from the queue's own index; only the queue rows are locked
# (the batch rows are written once, by the chunk that processes them). The LIMIT keeps the
# plan a walk of that index joined row by row: unlimited, a long queue is planned as a hash
# join of every queued batch's row, bodies included, sorted, before the first is locked.
# A batch stored without its body is still taken, and set aside for it, not left queued.
# A batch that already lost a worker (a suspect) is taken first, alone. Each row also carries
# the placement change log's version (``validation.PLACEMENT_VERSION``, counted from
# ``%(since)s``), read in the claim's snapshot: the chunk's cached placements are of it.
_CLAIM = f"""
WITH suspect AS MATERIALIZED (
    SELECT q.batch_id, q.received_at, q.attempts FROM telemetry_queuedbatch q
     WHERE NOT q.failed AND q.attempts > 0 {{only_none}}
     ORDER BY q.received_at, q.batch_id
     LIMIT 1
       FOR UPDATE SKIP LOCKED
), fresh AS MATERIALIZED (
    SELECT q.batch_id, q.received_at, q.attempts FROM telemetry_queuedbatch q
     WHERE NOT q.failed AND NOT EXISTS (SELECT FROM suspect) {{only}} {{after}}
     ORDER BY q.received_at, q.batch_id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), queued AS (
    SELECT * FROM suspect UNION ALL SELECT * FROM fresh
)
SELECT b.id, b.node_id, r.body, b.received_at, b.signed_at, b.window_count, q.attempts,
       q.received_at, r.rows, v.*
  FROM queued q
  JOIN telemetry_ingestbatch b ON b.id = q.batch_id
  LEFT JOIN telemetry_batchbody r ON r.batch_id = q.batch_id
 CROSS JOIN ({PLACEMENT_VERSION}) AS v
 ORDER BY q.received_at, q.batch_id
"""  # noqa: S608 - constants only
_FIRST = _CLAIM.format(only_none="", only="", after="")
_NEXT = _CLAIM.format(
    only_none="AND false", only="", after="AND (q.received_at, q.batch_id) > (%(at)s, %(id)s)"
)
_ONLY = _CLAIM.format(
    only_none="AND false", only="AND q.batch_id = ANY(%(only)s::bigint[])", after=""
)


class _BatchSize:
    """Windows per batch in this process's last claim: the first page of the next claim
    asks for as many batches as should fill its chunk (8-window batches live, 60-minute ones
    after an outage), so that a claim is nearly always one statement."""

    windows: float | None = None


def _claim(
    cursor: Any,
    *,
    batches: int,
    windows: int,
    only: list[int] | None,
    since: str = NO_VERSION,
) -> list[Any]:
    """Locks the oldest pending batches nobody else holds, up to ``batches`` batches and
    about ``windows`` windows, and reads them. Pages of batches are locked and read one
    statement each, sized by the windows per batch seen so far, until the window count is
    reached: a claim does not lock more than a page beyond what it takes.

    A batch that already lost a worker is taken alone: if it kills this one too, it takes
    no other batch's attempts with it."""
    if only is not None:
        cursor.execute(_ONLY, {"only": only, "limit": batches, "since": since}, binary=True)
        return list(cursor.fetchall())
    average = _BatchSize.windows
    page = min(batches, 16 if average is None else max(1, int(windows / average + 0.5)))
    cursor.execute(_FIRST, {"limit": page, "since": since}, binary=True)
    rows: list[Any] = []
    count = 0
    while True:
        fetched = cursor.fetchall()
        for row in fetched:
            if row[6]:  # a suspect: alone, in a chunk of its own
                return rows or [row]
            rows.append(row)
            count += row[5]
        if len(fetched) < page or count >= windows or len(rows) >= batches:
            break
        average = max(1, count / len(rows))
        page = min(batches - len(rows), max(1, -(-(windows - count) // int(average))))
        last = rows[-1]
        cursor.execute(
            _NEXT, {"limit": page, "at": last[7], "id": last[0], "since": since}, binary=True
        )
    if rows:
        _BatchSize.windows = max(1, count / len(rows))
    return rows


@functools.lru_cache(maxsize=1 << 16)
def _node_lock_id(node_id: uuid.UUID) -> int:
    digest = hashlib.sha256(f"telemetry-node:{node_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
