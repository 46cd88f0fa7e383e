"""The worker's side: claim pending batches in bulk, validate, COPY, mark derived work, done.

Each chunk is one transaction that claims its own batches (``FOR UPDATE SKIP LOCKED``, oldest
first), writes their windows, events and marks, and sets them ``processed`` — one write per
batch, and no committed "claimed" state that could outlive its worker: concurrent workers
skip each other's locked batches, and a dead or hung worker's locks go with its connection.
What a crash must leave behind (to count lost attempts, and set aside a batch that keeps
killing its worker) is one small ``IngestClaim`` row per chunk, committed aside just before
the chunk's work and deleted by its commit.

Transitions and rollups are not computed here: the chunk marks the (GPU, hour) pairs it
touched and ``telemetry.services.derived.derived_process`` recomputes them later, coalesced.

This module runs a chunk; the rest is split by what it does:

* ``claims``: taking batches, the claim row a crash leaves, reaping lost workers, setting a
  failing batch aside;
* ``validation``: decoding, placements, refusing what cannot be stored, building COPY rows
  (the per-window loop, the hot path of the whole ingest);
* ``rules``: the impossible-window rules alone (tests/telemetry/test_window_rules.py);
* ``copy``: writing windows (binary COPY, or the TEMP stage for replays), events, rejected
  records and the nodes' status.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.string import BytesBinaryDumper

from telemetry.dispatch import derived_kick
from telemetry.services.collector import collector_paused
from telemetry.services.derived import derived_mark, instant_marks
from telemetry.services.partitions import window_partitions_ensure
from telemetry.services.processing.claims import (
    GAVE_UP,
    REAP_AFTER_S,
    SESSION_LOST,
    _batch_fail,
    _claim,
    _claim_record,
    _node_lock_id,
    _Side,
    claims_reap,
    side_connection_close,
)
from telemetry.services.processing.copy import (
    _WINDOW_CONTENT,
    COPY_STAGE,
    COPY_WINDOWS,
    WINDOW_COLUMNS,
    WINDOW_TYPES,
    WINDOW_WIRE_TYPES,
    _events_write,
    _json,
    _node_status_update,
    _rejections_write,
    _window_row,
    _windows_stage,
)
from telemetry.services.processing.validation import (
    _decode,
    _future_limit,
    _Loaded,
    _NodePlacements,
    _placements,
    _retention_floor,
    _validate,
    _Work,
)

__all__ = [
    "COPY_STAGE", "COPY_WINDOWS", "GAVE_UP", "REAP_AFTER_S", "SESSION_LOST", "WINDOW_COLUMNS",
    "WINDOW_TYPES", "WINDOW_WIRE_TYPES", "_WINDOW_CONTENT", "ProcessResult", "_batch_fail",
    "_claim", "_placements", "_validate", "_window_row", "batches_process", "claims_reap",
    "side_connection_close",
]  # fmt: skip

log = logging.getLogger(__name__)


@dataclass
class ProcessResult:
    claimed: int = 0
    full: bool = False  # the claim hit a limit: more batches are probably waiting
    processed: int = 0
    failed: int = 0
    windows: int = 0
    rejected: int = 0
    reaped: int = 0  # claims of lost workers found (their batches counted one attempt more)


def batches_process(
    *, worker: str, limit: int | None = None, optimistic_copy: bool = True
) -> ProcessResult:
    """Processes up to ``limit`` of the oldest pending batches (and no more than
    ``TELEMETRY_CLAIM_WINDOWS`` windows) in chunks of about ``TELEMETRY_CHUNK_WINDOWS``
    windows, one transaction each. Each chunk's transaction claims its own batches
    (``FOR UPDATE SKIP LOCKED``) and marks them processed at its commit: a batch row is
    written once. Concurrent workers skip each other's batches; a dead worker's batches are
    pending again the moment its connection goes (see ``IngestClaim``)."""
    with collector_paused():
        return _batches_process(worker=worker, limit=limit, optimistic_copy=optimistic_copy)


def _batches_process(*, worker: str, limit: int | None, optimistic_copy: bool) -> ProcessResult:
    limit = limit or settings.TELEMETRY_CLAIM_BATCHES
    windows_cap = settings.TELEMETRY_CLAIM_WINDOWS
    result = ProcessResult()
    result.reaped = claims_reap()
    windows = 0
    while result.claimed < limit and windows < windows_cap:
        chunk = _chunk_guarded(
            worker=worker,
            result=result,
            batches=limit - result.claimed,
            windows=min(settings.TELEMETRY_CHUNK_WINDOWS, windows_cap - windows),
            optimistic_copy=optimistic_copy,
        )
        if chunk is None:
            break
        result.claimed += chunk.batches
        windows += chunk.windows
    result.full = result.claimed >= limit or windows >= windows_cap
    return result


@dataclass(frozen=True)
class _Taken:
    batches: int
    windows: int


def _chunk_guarded(
    *, worker: str, result: ProcessResult, batches: int, windows: int, optimistic_copy: bool
) -> _Taken | None:
    """One chunk; if it fails (a bug, a bad row), its batches are retried one by one and the
    one that fails is set aside with its error. None when nothing was left to claim."""
    taken: list[int] = []
    try:
        return _chunk_process(
            worker=worker, result=result, batches=batches, windows=windows,
            optimistic_copy=optimistic_copy, taken=taken,
        )  # fmt: skip
    except SESSION_LOST:
        raise  # the session is gone: its locks went with it and the batches come back
    except Exception:
        if not taken:
            raise
        log.exception("chunk of %d batches failed; retrying them one by one", len(taken))
    for one in taken:
        try:
            _chunk_process(
                worker=worker, result=result, batches=1, windows=1, optimistic_copy=False,
                only=[one], taken=[],
            )  # fmt: skip
        except SESSION_LOST:
            raise
        except Exception as exc:
            log.exception("batch %s failed", one)
            _batch_fail(batch_id=one, worker=worker, error=f"{type(exc).__name__}: {exc}")
            result.failed += 1
    return _Taken(len(taken), 0)


def _chunk_process(
    *,
    worker: str,
    result: ProcessResult,
    batches: int,
    windows: int,
    optimistic_copy: bool,
    taken: list[int],
    only: list[int] | None = None,
) -> _Taken | None:
    outer = connection.in_atomic_block
    now = timezone.now()
    floor = _retention_floor(now)
    ceiling = now + _future_limit()
    with transaction.atomic():
        # A server-side-binding cursor on Django's connection (same transaction): the large
        # array parameters travel in binary instead of being quoted into the SQL text.
        cursor = psycopg.Cursor(connection.connection)
        # bytea by oid (``WINDOW_WIRE_TYPES``): psycopg's C dumper of plain bytes, not the
        # Python one that also unwraps DB-API Binary objects.
        cursor.adapters.register_dumper(None, BytesBinaryDumper)
        cursor.execute("SET LOCAL work_mem = '64MB'")
        # A worker that hangs holding its batches loses them (and its connection) after this.
        cursor.execute(
            f"SET LOCAL idle_in_transaction_session_timeout = "
            f"{int(settings.TELEMETRY_CLAIM_TIMEOUT_S) * 1000}"
        )
        rows = _claim(cursor, batches=batches, windows=windows, only=only)
        if not rows:
            return None
        taken.extend(row[0] for row in rows)
        claim_id = _claim_record(cursor, worker=worker, batch_ids=list(taken), outer=outer)
        loaded, broken = _decode(rows)
        # A set: a chunk's windows share a handful of minutes.
        starts = {w.window_start for item in loaded for w in item.batch.windows}
        # UTC days: the endpoint takes only UTC times, but a batch stored before it did may not.
        days = {start.astimezone(dt.UTC).date() for start in starts if floor <= start <= ceiling}
        if days and outer:
            window_partitions_ensure(days=days, cursor=cursor)
        elif days:
            _Side.partitions_ensure(cursor=cursor, days=days)
        # One writer per node at a time, taken in a fixed order: two chunks replaying the
        # same windows of a node would otherwise wait on each other's unique-index entries.
        nodes = sorted({item.node_id for item in loaded})
        cursor.execute(
            "SELECT pg_advisory_xact_lock(k) FROM (SELECT unnest(%b::bigint[]) AS k ORDER BY k) s",
            [[_node_lock_id(n) for n in nodes]],
        )
        placed = _placements(cursor, loaded, starts)
        work = _validate_and_write(
            cursor, loaded, placed, now=now, floor=floor, optimistic=optimistic_copy
        )
        xids = _events_write(cursor, work.event_rows)
        if work.rejections:
            _rejections_write(cursor, work.rejections)
        gpu_ids = work.gpu_ids
        marks = [(gpu_ids[nvml], hour, lo) for (nvml, hour), lo in work.marks.items()]
        derived_mark(cursor=cursor, marks=marks + instant_marks(xids))
        # Queue the derived pass as soon as this chunk's marks are visible, not after the
        # whole claim: in a catch-up it then runs beside the window path, not after it.
        transaction.on_commit(derived_kick)
        if loaded:
            _node_status_update(cursor, loaded)
        # The batches' one write: processed (or failed, undecodable), with who did it — a HOT
        # update, no indexed column changes — and their queue rows go (or are set aside).
        cursor.execute(
            """
            WITH v AS MATERIALIZED (
                SELECT * FROM json_to_recordset(%s::json)
                    AS v(id bigint, s text, e text, aw int, ae int, rc int)
            ), dequeued AS (
                DELETE FROM telemetry_queuedbatch q USING v
                 WHERE q.batch_id = v.id AND v.s = 'processed'
            ), set_aside AS (
                UPDATE telemetry_queuedbatch q SET failed = true FROM v
                 WHERE q.batch_id = v.id AND v.s = 'failed'
            )
            UPDATE telemetry_ingestbatch b
               SET status = v.s, processed_at = now(), error = v.e, claimed_by = %s,
                   claimed_at = c.claimed_at,
                   accepted_windows = v.aw, accepted_events = v.ae, rejected_count = v.rc
              FROM v, telemetry_ingestclaim c
             WHERE b.id = v.id AND c.id = %s
            """,
            [
                _json(
                    [
                        {"id": i.id, "s": "processed", "e": "", "aw": i.accepted_windows,
                         "ae": i.accepted_events, "rc": i.rejected}
                        for i in loaded
                    ]
                    + [
                        {"id": bid, "s": "failed", "e": error[:2000], "aw": 0, "ae": 0, "rc": 0}
                        for bid, error in broken
                    ]
                ),
                worker,
                claim_id,
            ],
        )  # fmt: skip
        cursor.execute("DELETE FROM telemetry_ingestclaim WHERE id = %s", [claim_id])
    result.processed += len(loaded)
    result.failed += len(broken)
    result.windows += sum(item.accepted_windows for item in loaded)
    result.rejected += sum(item.rejected for item in loaded)
    return _Taken(len(rows), sum(row[5] for row in rows))


def _validate_and_write(
    cursor: Any,
    loaded: list[_Loaded],
    placed: dict[str, _NodePlacements],
    *,
    now: dt.datetime,
    floor: dt.datetime,
    optimistic: bool,
) -> _Work:
    """Validates the windows and writes them. Optimistically, each row goes into a binary
    COPY straight into the partitioned table as soon as it is built, so PostgreSQL inserts
    while Python validates the rest. If any window is already stored (a replay in a new
    batch), the savepoint is rolled back, and the chunk is validated again and written
    through a TEMP stage with ``ON CONFLICT DO NOTHING``."""
    if optimistic:
        savepoint = transaction.savepoint_create()
        try:
            with cursor.copy(COPY_WINDOWS) as copy:
                copy.set_types(WINDOW_WIRE_TYPES)
                work = _validate(loaded, placed, now=now, floor=floor, emit=copy.write_row)
        except psycopg.errors.UniqueViolation:
            transaction.savepoint_rollback(savepoint)
            for item in loaded:
                item.accepted_windows = item.accepted_events = item.rejected = 0
                item.last_window_end = None
        else:
            transaction.savepoint_commit(savepoint)
            return work
    work = _validate(loaded, placed, now=now, floor=floor, emit=None)
    if work.window_rows:
        _windows_stage(cursor, work)
    return work
