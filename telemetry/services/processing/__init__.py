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

A chunk is a few statements, whatever its size: the claim (one statement nearly always; it
also reads the placement change log's version), the claim row aside and its lock, the node
locks with the chunk's settings, the COPY, and one last statement that marks the batches
processed, updates the nodes' status, records the derived-work marks and deletes the claim
row (``_CHUNK_DONE``). Events and rejections add a statement each when there are any. Window
partitions and placements are read only when this process has not seen them: both are cached
per process, placements until the change log moves (``validation._PlacementCache``).

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
from typing import Any, ClassVar

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.string import BytesBinaryDumper

from telemetry.dispatch import derived_kick
from telemetry.services.collector import collector_paused
from telemetry.services.derived import MARK_UPSERT, MARKS_LOCK, instant_marks, marks_document
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
    NODE_STATUS,
    WINDOW_COLUMNS,
    WINDOW_TYPES,
    WINDOW_WIRE_TYPES,
    _events_write,
    _json,
    _node_status_json,
    _rejections_write,
    _window_row,
    _windows_stage,
)
from telemetry.services.processing.marks import marks_forget, marks_unwritten, marks_written
from telemetry.services.processing.prepared import COPY_PREPARED, instant
from telemetry.services.processing.validation import (
    NO_VERSION,
    _decode,
    _future_limit,
    _Loaded,
    _NodePlacements,
    _PlacementCache,
    _placements,
    _retention_floor,
    _validate,
    _validate_prepared,
    _Work,
    placements_forget,
    version_read,
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
        # What this process cached may be what failed (a partition dropped by hand).
        _Partitions.known = set()
        placements_forget()
        marks_forget()
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


# The chunk's last statement, its one write beside windows, events and rejections: the
# batches processed (or failed, undecodable), with who did it — a HOT update, no indexed
# column changes — and their queue rows gone (or set aside); the nodes' status; the derived
# work marks; the chunk's claim row deleted. One round trip, however many batches.
_CHUNK_DONE = f"""
WITH claim AS (
    DELETE FROM telemetry_ingestclaim WHERE id = %(claim)s RETURNING claimed_at
), v AS MATERIALIZED (
    SELECT * FROM json_to_recordset(%(batches)s::json)
        AS v(id bigint, s text, e text, aw int, ae int, rc int)
), dequeued AS (
    DELETE FROM telemetry_queuedbatch q USING v
     WHERE q.batch_id = v.id AND v.s = 'processed'
), set_aside AS (
    UPDATE telemetry_queuedbatch q SET failed = true FROM v
     WHERE q.batch_id = v.id AND v.s = 'failed'
), batches AS (
    UPDATE telemetry_ingestbatch b
       SET status = v.s, processed_at = now(), error = v.e, claimed_by = %(worker)s,
           claimed_at = c.claimed_at,
           accepted_windows = v.aw, accepted_events = v.ae, rejected_count = v.rc
      FROM v, claim c
     WHERE b.id = v.id
), nodes AS ({NODE_STATUS}), marked AS ({MARK_UPSERT})
SELECT count(*) FROM claim
"""  # noqa: S608 - constants only


# The chunk's settings and its node locks, taken in a fixed order (``%s``: the claim timeout
# in ms; ``%b``: the nodes' lock keys).
_SETTINGS_AND_LOCKS = """
       set_config('work_mem', '64MB', true),
       set_config('idle_in_transaction_session_timeout', %s, true),
       (SELECT count(pg_advisory_xact_lock(k))
          FROM (SELECT unnest(%b::bigint[]) AS k ORDER BY k) s)"""
_SETUP = f"SELECT {_SETTINGS_AND_LOCKS}"
# The same, and the derived pass's number read once MARKS_LOCK is held shared (to the commit).
_SETUP_REMEMBERING = f"""
WITH held AS MATERIALIZED (
    SELECT 1 AS one FROM pg_advisory_xact_lock_shared({MARKS_LOCK})
)
SELECT {_SETTINGS_AND_LOCKS},
       (SELECT last_value FROM telemetry_derived_pass_seq WHERE held.one = 1)
  FROM held
"""  # noqa: S608 - constants only


class _Partitions:
    """Days whose window partition this process has seen committed (partitions are dropped
    only by retention, and only days before any a chunk accepts). Forgotten when a chunk
    fails, so a partition dropped by hand costs one retried chunk."""

    known: ClassVar[set[tuple[Any, dt.date]]] = set()


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
    database = _database()
    with transaction.atomic():
        # A server-side-binding cursor on Django's connection (same transaction): the large
        # array parameters travel in binary instead of being quoted into the SQL text.
        cursor = psycopg.Cursor(connection.connection)
        # bytea by oid (``WINDOW_WIRE_TYPES``): psycopg's C dumper of plain bytes, not the
        # Python one that also unwraps DB-API Binary objects.
        cursor.adapters.register_dumper(None, BytesBinaryDumper)
        since = NO_VERSION if outer else _PlacementCache.since(database)
        rows = _claim(cursor, batches=batches, windows=windows, only=only, since=since)
        if not rows:
            return None
        taken.extend(row[0] for row in rows)
        claim_id = _claim_record(cursor, worker=worker, batch_ids=list(taken), outer=outer)
        # One writer per node at a time, taken in a fixed order: two chunks replaying the
        # same windows of a node would otherwise wait on each other's unique-index entries.
        # A worker that hangs holding its batches loses them (and its connection) after the
        # claim timeout.
        nodes = sorted({row[1] for row in rows})
        # With the chunk's settings and node locks, the derived pass's number, read holding
        # MARKS_LOCK shared to the commit: the marks this process wrote under it need not be
        # written again (``marks``). Not inside a caller's transaction (its commit is not
        # this chunk's, and a pass elsewhere would wait for it).
        cursor.execute(
            _SETUP if outer else _SETUP_REMEMBERING,
            [
                str(int(settings.TELEMETRY_CLAIM_TIMEOUT_S) * 1000),
                [_node_lock_id(n) for n in nodes],
            ],
        )
        setup = cursor.fetchone()
        number = None if outer or setup is None else int(setup[-1])
        loaded, broken = _decode(rows)
        # A set: a chunk's windows share a handful of minutes.
        starts = {instant(us) for us in {w[1] for item in loaded for w in item.rows.windows}}
        # UTC days: the endpoint takes only UTC times, but a batch stored before it did may not.
        days = {start.astimezone(dt.UTC).date() for start in starts if floor <= start <= ceiling}
        if days and outer:
            window_partitions_ensure(days=days, cursor=cursor)
        elif days and not {(database, day) for day in days} <= _Partitions.known:
            _Side.partitions_ensure(cursor=cursor, days=days)
            _Partitions.known |= {(database, day) for day in days}
        # Placements as of the claim's snapshot: this process's cache, while the placement
        # change log reads as it did when they were cached. Inside a caller's transaction
        # (tests) they are read afresh and not cached.
        version = None if outer else version_read(rows[0], since)[0]
        placed = _placements(cursor, loaded, starts, version=version, database=database)
        work = _validate_and_write(
            cursor, loaded, placed, now=now, floor=floor, optimistic=optimistic_copy
        )
        xids = _events_write(cursor, work.event_rows)
        if work.rejections:
            _rejections_write(cursor, work.rejections)
        gpu_ids = work.gpu_ids
        marks = [(gpu_ids[nvml], hour, lo) for (nvml, hour), lo in work.marks.items()]
        if number is not None:
            marks = marks_unwritten(database, number, marks)
        cursor.execute(
            _CHUNK_DONE,
            {
                "claim": claim_id,
                "worker": worker,
                "batches": _json(
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
                "nodes": _node_status_json(loaded),
                "marks": marks_document(marks + instant_marks(xids)),
            },
        )  # fmt: skip
        # Queue the derived pass as soon as this chunk's marks are visible, not after the
        # whole claim: in a catch-up it then runs beside the window path, not after it.
        transaction.on_commit(derived_kick)
    if number is not None:
        marks_written(database, number, marks)  # committed
    result.processed += len(loaded)
    result.failed += len(broken)
    result.windows += sum(item.accepted_windows for item in loaded)
    result.rejected += sum(item.rejected for item in loaded)
    return _Taken(len(rows), sum(row[5] for row in rows))


def _database() -> tuple[Any, ...]:
    """Which database this process's caches describe."""
    params = connection.settings_dict
    return (params["HOST"], params["PORT"], params["NAME"])


def _validate_and_write(
    cursor: Any,
    loaded: list[_Loaded],
    placed: dict[str, _NodePlacements],
    *,
    now: dt.datetime,
    floor: dt.datetime,
    optimistic: bool,
) -> _Work:
    """Validates the windows and writes them. Optimistically, the prepared rows go into a
    binary COPY straight into the partitioned table as they are checked, so PostgreSQL
    inserts while Python checks the rest. If any window is already stored (a replay in a new
    batch), the savepoint is rolled back, and the chunk's bodies are decoded, validated again
    and written through a TEMP stage with ``ON CONFLICT DO NOTHING``."""
    if optimistic:
        savepoint = transaction.savepoint_create()
        try:
            with cursor.copy(COPY_PREPARED) as copy:
                work = _validate_prepared(loaded, placed, now=now, floor=floor, write=copy.write)
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
