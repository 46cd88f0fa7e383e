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
The per-window loop (``_validate``) is the hot path of the whole ingest: it resolves GPUs
through a per-chunk map, checks with plain comparisons and builds each COPY row once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psycopg
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from psycopg.types.string import BytesBinaryDumper

from telemetry.dispatch import derived_kick
from telemetry.models import RejectedRecord
from telemetry.schema import EVENT_KINDS, Batch, SchemaError, Window, batch_decode_gzip
from telemetry.services.collector import collector_paused
from telemetry.services.derived import derived_mark, instant_marks
from telemetry.services.partitions import window_partitions_ensure

log = logging.getLogger(__name__)

WINDOW_COLUMNS = (
    "gpu_id", "window_start", "node_id", "batch_id", "samples_ok", "samples_expected", "state",
    "state_reason", "util_gpu_min", "util_gpu_avg", "util_gpu_max", "util_mem_avg",
    "util_mem_max", "mem_used_max_bytes", "mem_total_bytes", "power_avg_w", "power_max_w",
    "energy_mj", "temp_avg_c", "temp_max_c", "clock_sm_avg_mhz", "clock_mem_avg_mhz",
    "throttle_reasons", "ecc_corrected", "ecc_uncorrected", "remapped_rows_correctable",
    "remapped_rows_uncorrectable", "remapped_rows_pending", "retired_pages", "pcie_replays",
    "recovery_action", "observed_from", "observed_to", "util_method",
)  # fmt: skip
WINDOW_TYPES = (
    "uuid", "timestamptz", "uuid", "int8", "int2", "int2", "text", "text", "float8", "float8",
    "float8", "float8", "float8", "int8", "int8", "float8", "float8", "int8", "float8", "float8",
    "float8", "float8", "int8", "int8", "int8", "int4", "int4", "bool", "int4", "int8", "int2",
    "int2", "int2", "text",
)  # fmt: skip
# What the worker's COPY declares: the two uuid columns travel as their 16 raw bytes (a uuid's
# binary wire form, which PostgreSQL's uuid_recv reads; bytea's dumper writes them as they are,
# in C), where psycopg's uuid dumper costs two Python calls a value. Rows for ``WINDOW_TYPES``
# carry uuid.UUID objects; rows for these carry ``UUID.bytes``.
WINDOW_WIRE_TYPES = tuple("bytea" if t == "uuid" else t for t in WINDOW_TYPES)
COPY_WINDOWS = f"COPY telemetry_window ({', '.join(WINDOW_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
# The TEMP stage of a chunk that replays windows: the rows, and each one's place in the chunk.
COPY_STAGE = (
    f"COPY telemetry_window_replay ({', '.join(WINDOW_COLUMNS)}, ord) FROM STDIN (FORMAT BINARY)"
)
# What a window says (all but its keys and the batch that brought it): a second copy of a
# stored (GPU, minute) that says anything else is a conflict, not a replay. Only what is stored
# is compared: docs/telemetry.md names the contract's fields that are neither stored nor
# compared (tests/telemetry/test_conflict_fields.py keeps the two lists in step).
_WINDOW_CONTENT = [c for c in WINDOW_COLUMNS if c not in ("gpu_id", "window_start", "batch_id")]


@dataclass
class ProcessResult:
    claimed: int = 0
    full: bool = False  # the claim hit a limit: more batches are probably waiting
    processed: int = 0
    failed: int = 0
    windows: int = 0
    rejected: int = 0
    reaped: int = 0  # claims of lost workers found (their batches counted one attempt more)


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
        assert row is not None
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
    cursor.execute("SELECT id FROM telemetry_ingestclaim WHERE id = %s FOR UPDATE", [claim_id])
    return claim_id


@dataclass
class _Loaded:
    id: int
    node_id: uuid.UUID
    received_at: dt.datetime
    signed_at: dt.datetime
    batch: Batch
    accepted_windows: int = 0
    accepted_events: int = 0
    rejected: int = 0
    last_window_end: dt.datetime | None = None


@dataclass
class _Work:
    window_rows: list[tuple[Any, ...]] = field(default_factory=list)
    # (NVML UUID, UTC hour): strings hash in C, uuid.UUID objects in Python.
    # (NVML UUID, UTC hour) → the earliest window_start touched there.
    marks: dict[tuple[str, dt.datetime], dt.datetime] = field(default_factory=dict)
    gpu_ids: dict[str, uuid.UUID] = field(default_factory=dict)  # NVML UUID → GPU id
    # Staged path only: each of window_rows' batch, index in it and window.
    window_refs: list[tuple[_Loaded, int, Window]] = field(default_factory=list)
    event_rows: list[tuple[Any, ...]] = field(default_factory=list)
    rejections: list[tuple[Any, ...]] = field(default_factory=list)


# Pending batches, oldest first, from the queue's own index; only the queue rows are locked
# (the batch rows are written once, by the chunk that processes them). The LIMIT keeps the
# plan a walk of that index joined row by row: unlimited, a long queue is planned as a hash
# join of every queued batch's row, bodies included, sorted, before the first is locked.
# A batch stored without its body is still taken, and set aside for it, not left queued.
_CLAIM = """
SELECT b.id, b.node_id, r.body, b.received_at, b.signed_at, b.window_count, q.attempts
  FROM telemetry_queuedbatch q
  JOIN telemetry_ingestbatch b ON b.id = q.batch_id
  LEFT JOIN telemetry_batchbody r ON r.batch_id = q.batch_id
 WHERE NOT q.failed {only}
 ORDER BY q.received_at, q.batch_id
 LIMIT %s
   FOR UPDATE OF q SKIP LOCKED
"""
_CLAIM_SUSPECT = """
SELECT b.id, b.node_id, r.body, b.received_at, b.signed_at, b.window_count, q.attempts
  FROM telemetry_queuedbatch q
  JOIN telemetry_ingestbatch b ON b.id = q.batch_id
  LEFT JOIN telemetry_batchbody r ON r.batch_id = q.batch_id
 WHERE NOT q.failed AND q.attempts > 0
 ORDER BY q.received_at, q.batch_id
 LIMIT 1
   FOR UPDATE OF q SKIP LOCKED
"""


def _claim(cursor: Any, *, batches: int, windows: int, only: list[int] | None) -> list[Any]:
    """Locks the oldest pending batches nobody else holds, up to ``batches`` batches and
    about ``windows`` windows, and reads them. Rows are locked as a server-side cursor
    fetches them, so the window count can stop the claim without locking more.

    A batch that already lost a worker is taken alone: if it kills this one too, it takes
    no other batch's attempts with it."""
    if only is None:
        cursor.execute(_CLAIM_SUSPECT, binary=True)
        suspect = cursor.fetchall()
        if suspect:
            return list(suspect)
    rows: list[Any] = []
    named = psycopg.ServerCursor(connection.connection, f"telemetry_claim_{os.getpid()}")
    try:
        named.execute(
            _CLAIM.format(only="AND q.batch_id = ANY(%s::bigint[])" if only is not None else ""),
            [only, batches] if only is not None else [batches],
            binary=True,
        )
        count, page = 0, min(batches, 16)
        while page > 0:
            fetched = named.fetchmany(page)
            for row in fetched:
                if row[6] and rows:  # a suspect: alone, in a chunk of its own next time
                    return rows
                rows.append(row)
                count += row[5]
            if len(fetched) < page or count >= windows or len(rows) >= batches:
                break
            average = max(1, count // len(rows))
            page = min(batches - len(rows), max(1, -(-(windows - count) // average)))
    finally:
        named.close()
    return rows


def _decode(rows: list[Any]) -> tuple[list[_Loaded], list[tuple[int, str]]]:
    loaded, broken = [], []
    limit = settings.TELEMETRY_MAX_INFLATED_BYTES
    for bid, node_id, body, received_at, signed_at, _, _ in rows:
        if body is None:
            broken.append((bid, "no body stored"))
            continue
        try:
            batch = batch_decode_gzip(bytes(body), limit=limit, checked=True)
        except (SchemaError, Exception) as exc:
            broken.append((bid, f"undecodable body: {exc}"))
            continue
        loaded.append(_Loaded(bid, node_id, received_at, signed_at, batch))
    return loaded, broken


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


def _node_lock_id(node_id: uuid.UUID) -> int:
    digest = hashlib.sha256(f"telemetry-node:{node_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _future_limit() -> dt.timedelta:
    return dt.timedelta(seconds=settings.TELEMETRY_MAX_FUTURE_S)


def _retention_floor(now: dt.datetime) -> dt.datetime:
    today = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - dt.timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS)


# Placements of one node: NVML UUID → gpu id, for GPUs placed there over the chunk's whole
# span (nearly all, nearly always: one dict lookup per window), and NVML UUID → dated
# placements for the rest (moved mid-chunk, placed or removed inside it).
Intervals = list[tuple[dt.datetime, dt.datetime | None, uuid.UUID]]


@dataclass
class _NodePlacements:
    whole: dict[str, uuid.UUID] = field(default_factory=dict)
    whole_wire: dict[str, bytes] = field(default_factory=dict)  # the same ids, as COPY sends them
    dated: dict[str, Intervals] = field(default_factory=dict)

    def ids(self) -> Iterator[tuple[str, uuid.UUID]]:
        yield from self.whole.items()
        for nvml, intervals in self.dated.items():
            for _, _, gpu_id in intervals:
                yield nvml, gpu_id

    def gpu_at(self, gpu_uuid: str, at: dt.datetime) -> uuid.UUID | None:
        gpu_id = self.whole.get(gpu_uuid)
        if gpu_id is not None:
            return gpu_id
        for valid_from, valid_to, placed_id in self.dated.get(gpu_uuid, ()):
            if valid_from <= at and (valid_to is None or at < valid_to):
                return placed_id
        return None


_NOWHERE = _NodePlacements()


def _placements(
    cursor: Any, loaded: list[_Loaded], starts: set[dt.datetime]
) -> dict[str, _NodePlacements]:
    """Where each GPU (by NVML UUID) sat on the batches' nodes over the batches' time span."""
    instants = [*starts, *(e.occurred_at for item in loaded for e in item.batch.events)]
    if not instants:
        return {}
    lo, hi = min(instants), max(instants)
    # ``whole``: the GPU's only placement on the node in the span, and it covers all of it.
    cursor.execute(
        """
        SELECT p.node_id::text, g.nvml_uuid, p.gpu_id, p.valid_from, p.valid_to,
               p.valid_from <= %(lo)s AND (p.valid_to IS NULL OR p.valid_to > %(hi)s)
               AND count(*) OVER (PARTITION BY p.node_id, g.nvml_uuid) = 1 AS whole
          FROM fleet_placement p JOIN fleet_gpu g ON g.id = p.gpu_id
         WHERE p.node_id = ANY(%(nodes)s) AND p.valid_from <= %(hi)s
           AND (p.valid_to IS NULL OR p.valid_to > %(lo)s)
        """,
        {"nodes": list({item.node_id for item in loaded}), "lo": lo, "hi": hi},
        binary=True,
    )
    placed: dict[str, _NodePlacements] = {}
    for node_id, nvml_uuid, gpu_id, valid_from, valid_to, whole in cursor.fetchall():
        node = placed.get(node_id)
        if node is None:
            node = placed[node_id] = _NodePlacements()
        if whole:
            node.whole[nvml_uuid] = gpu_id
            node.whole_wire[nvml_uuid] = gpu_id.bytes
        else:
            node.dated.setdefault(nvml_uuid, []).append((valid_from, valid_to, gpu_id))
    return placed


_EPS = 1e-6


def _impossible(w: Window) -> str | None:
    """A contradiction, or None: cross-field ones, and a window of no samples. The other
    single-field bounds were checked on receipt.

    Written out field by field: it runs for every window, and a loop over getattr costs
    several times as much."""
    if w.samples_expected == 0:
        return "samples_expected is 0: a window is made of samples"
    if w.samples_ok > w.samples_expected:
        return f"samples_ok {w.samples_ok} > samples_expected {w.samples_expected}"
    s: Any
    for name, s in (
        ("util_gpu", w.util_gpu),
        ("util_mem", w.util_mem),
        ("mem_used_bytes", w.mem_used_bytes),
        ("temp_c", w.temp_c),
        ("clock_sm_mhz", w.clock_sm_mhz),
        ("clock_mem_mhz", w.clock_mem_mhz),
    ):
        if s is not None and (s.min > s.avg + _EPS or s.avg > s.max + _EPS):
            return f"{name}: min {s.min}, avg {s.avg}, max {s.max} are out of order"
    p = w.power_w
    if p is not None and p.avg > p.max + _EPS:
        return f"power_w: avg {p.avg} > max {p.max}"
    if p is not None and p.min is not None and p.min > p.avg + _EPS:
        return f"power_w: min {p.min} > avg {p.avg}"
    mem, total = w.mem_used_bytes, w.mem_total_bytes
    if mem is not None and total is not None and mem.max > total:
        return f"mem_used_bytes.max {mem.max} > mem_total_bytes {total}"
    # Only a schema-2 window can contradict these (a v1 one reads as 0–60, its method as
    # what it measured).
    if w.observed_from >= w.observed_to:
        return (
            f"observed_from {w.observed_from} >= observed_to {w.observed_to}: "
            "the observed span is empty"
        )
    measured = w.util_gpu is not None or w.util_mem is not None
    if w.util_method is None and measured:
        return "util_method is null, but util_gpu or util_mem is given"
    if w.util_method is not None and not measured:
        return f"util_method is {w.util_method!r}, but neither util_gpu nor util_mem is given"
    return None


def _window_row(w: Window, gpu_id: Any, node_id: Any, batch_pk: int) -> tuple[Any, ...]:
    """The COPY row of a window (``WINDOW_COLUMNS`` order), built without checking it. The
    ids are uuid.UUID objects for ``WINDOW_TYPES``, their ``bytes`` for ``WINDOW_WIRE_TYPES``."""
    u, m, mem, p, t = w.util_gpu, w.util_mem, w.mem_used_bytes, w.power_w, w.temp_c
    sm, cm, pending = w.clock_sm_mhz, w.clock_mem_mhz, w.remapped_rows_pending
    return (
        gpu_id, w.window_start, node_id, batch_pk, w.samples_ok, w.samples_expected, w.state,
        w.state_reason,
        u.min if u else None, u.avg if u else None, u.max if u else None,
        m.avg if m else None, m.max if m else None,
        mem.max if mem else None, w.mem_total_bytes,
        p.avg if p else None, p.max if p else None,
        w.energy_mj,
        t.avg if t else None, t.max if t else None,
        sm.avg if sm else None, cm.avg if cm else None,
        w.throttle_reasons, w.ecc_corrected, w.ecc_uncorrected,
        w.remapped_rows_correctable, w.remapped_rows_uncorrectable,
        None if pending is None else bool(pending),
        w.retired_pages, w.pcie_replays, w.recovery_action,
        w.observed_from, w.observed_to, w.util_method,
    )  # fmt: skip


def _fine(w: Window) -> bool:
    """True when no cross-field check can fail: the common case, in a few comparisons."""
    u, m, mem, t, sm, p = w.util_gpu, w.util_mem, w.mem_used_bytes, w.temp_c, w.clock_sm_mhz, w.power_w  # fmt: skip  # noqa: E501
    cm = w.clock_mem_mhz
    return (
        w.samples_expected > 0
        and w.samples_ok <= w.samples_expected
        and (u is None or u.min <= u.avg <= u.max)
        and (m is None or m.min <= m.avg <= m.max)
        and (mem is None or (mem.min <= mem.avg <= mem.max
                             and (w.mem_total_bytes is None or mem.max <= w.mem_total_bytes)))
        and (t is None or t.min <= t.avg <= t.max)
        and (sm is None or sm.min <= sm.avg <= sm.max)
        and (cm is None or cm.min <= cm.avg <= cm.max)
        and (p is None or (p.avg <= p.max and (p.min is None or p.min <= p.avg)))
        and w.observed_from < w.observed_to
        and (w.util_method is None) is (u is None and m is None)
    )  # fmt: skip


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


def _validate(
    loaded: list[_Loaded],
    placed: dict[str, _NodePlacements],
    *,
    now: dt.datetime,
    floor: dt.datetime,
    emit: Callable[[tuple[Any, ...]], None] | None,
) -> _Work:
    """Checks every window and event, collects COPY rows, rejections and (GPU, hour) marks.

    Duplicates inside the chunk are not looked for: a repeated (GPU, minute) makes the
    optimistic COPY fail and the chunk goes through the ON CONFLICT stage instead."""
    work = _Work(gpu_ids={nvml: gpu_id for node in placed.values() for nvml, gpu_id in node.ids()})
    rows = work.window_rows
    marks = work.marks
    hour_of: dict[dt.datetime, dt.datetime] = {}
    future_limit = _future_limit()
    for item in loaded:
        future = item.received_at + future_limit
        node = placed.get(str(item.node_id), _NOWHERE)
        whole = node.whole_wire
        node_wire, batch_pk = item.node_id.bytes, item.id
        last: Window | None = None  # the newest window accepted
        accepted = 0

        def reject(kind: str, index: int, gpu_uuid: str, at: dt.datetime, reason: str,
                   detail: str, payload: Any, item: _Loaded = item) -> None:  # fmt: skip
            item.rejected += 1
            work.rejections.append(
                (item.id, item.node_id, kind, index, gpu_uuid, at, reason, detail, payload)
            )

        for index, w in enumerate(item.batch.windows):
            start = w.window_start
            gpu_wire = whole.get(w.gpu_uuid)
            if gpu_wire is None:
                placed_id = node.gpu_at(w.gpu_uuid, start)
                gpu_wire = None if placed_id is None else placed_id.bytes
            if gpu_wire is None or start > future or start < floor or not _fine(w):
                problem = _window_problem(w, gpu_wire, item, future, floor)
                if problem is not None:
                    reject("window", index, w.gpu_uuid, start, *problem, _to_builtins(w))
                    continue
                assert gpu_wire is not None  # _window_problem said it is placed
            accepted += 1
            if last is None or start > last.window_start:
                last = w
            row = _window_row(w, gpu_wire, node_wire, batch_pk)
            if emit is not None:
                emit(row)  # streamed: only the staged path (no emit) needs the rows kept
            else:
                rows.append(row)
                work.window_refs.append((item, index, w))
            hour = hour_of.get(start)
            if hour is None:
                hour = hour_of[start] = start.astimezone(dt.UTC).replace(
                    minute=0, second=0, microsecond=0
                )
            earliest = marks.get((w.gpu_uuid, hour))
            if earliest is None or start < earliest:
                marks[(w.gpu_uuid, hour)] = start
        item.accepted_windows = accepted
        # Where the node's telemetry ends: the end of the newest window's observed span.
        item.last_window_end = (
            None if last is None else last.window_start + dt.timedelta(seconds=last.observed_to)
        )
        for index, e in enumerate(item.batch.events):
            if e.kind not in EVENT_KINDS:
                detail = f"event kind {e.kind!r} is not one this server knows"
                reject("event", index, e.gpu_uuid or "", e.occurred_at, "unknown_kind", detail,
                       _to_builtins(e))  # fmt: skip
                continue
            if e.occurred_at > future:
                reject("event", index, e.gpu_uuid or "", e.occurred_at, "future",
                       f"occurred_at is {(e.occurred_at - item.received_at).total_seconds():.0f} s after receipt",  # noqa: E501
                       _to_builtins(e))  # fmt: skip
                continue
            # An event may name a GPU that is not (or no longer) placed here — gpu_appeared,
            # gpu_missing — so it is kept, with the GPU resolved only when it is placed.
            gpu_id = node.gpu_at(e.gpu_uuid, e.occurred_at) if e.gpu_uuid else None
            item.accepted_events += 1
            work.event_rows.append(
                (item.node_id, e.event_id, gpu_id, e.gpu_uuid or "", e.kind, e.occurred_at, e.xid,
                 json.dumps(e.detail, allow_nan=False, default=str), item.id)
            )  # fmt: skip
    return work


def _window_problem(
    w: Window, gpu_id: bytes | None, item: _Loaded, future: dt.datetime, floor: dt.datetime
) -> tuple[str, str] | None:
    """Why a window is refused (reason, detail), in the documented order; None if it is not."""
    start = w.window_start
    if gpu_id is None:
        return (
            "not_placed",
            f"GPU {w.gpu_uuid} is not placed on this node at "
            f"{start.astimezone(dt.UTC):%Y-%m-%dT%H:%M:%SZ}",
        )
    if start > future:
        return (
            "future",
            f"window_start is {(start - item.received_at).total_seconds():.0f} s after receipt (limit {settings.TELEMETRY_MAX_FUTURE_S} s)",  # noqa: E501
        )
    if start < floor:
        return (
            "beyond_retention",
            f"window_start is older than the {settings.TELEMETRY_RAW_RETENTION_DAYS}-day raw retention",  # noqa: E501
        )
    impossible = _impossible(w)
    if impossible:
        return ("impossible_value", impossible)
    return None


def _json(rows: Iterable[dict[str, Any]]) -> str:
    """Many rows as one JSON parameter (``json_to_recordset``): encoded by msgspec in C,
    where array parameters would be dumped element by element in Python."""
    return msgspec.json.encode(list(rows)).decode()


def _to_builtins(value: Any) -> Any:
    return json.loads(msgspec.json.encode(value), parse_constant=lambda c: None)


def _windows_stage(cursor: Any, work: _Work) -> None:
    """Binary COPY into a TEMP stage, then ``INSERT … ON CONFLICT DO NOTHING``: for chunks
    that replay windows already stored, or carry one (GPU, minute) twice.

    The first copy stored wins: the one already in the table, else the earliest in the
    chunk. A later copy that says the same is a replay, counted as accepted. One that says
    anything else is rejected as a ``conflict``, recorded with what it said, and not counted
    as accepted."""
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS telemetry_window_replay "
        "(LIKE telemetry_window INCLUDING DEFAULTS, ord integer) ON COMMIT DELETE ROWS"
    )
    with cursor.copy(COPY_STAGE) as copy:
        copy.set_types((*WINDOW_WIRE_TYPES, "int4"))
        for ord_, row in enumerate(work.window_rows):
            copy.write_row((*row, ord_))
    columns = ", ".join(WINDOW_COLUMNS)
    cursor.execute(
        f"INSERT INTO telemetry_window ({columns}) SELECT {columns} "  # noqa: S608
        "FROM telemetry_window_replay ORDER BY gpu_id, window_start, ord ON CONFLICT DO NOTHING"
    )
    ours = ", ".join(f"s.{c}" for c in _WINDOW_CONTENT)
    stored = ", ".join(f"w.{c}" for c in _WINDOW_CONTENT)
    cursor.execute(
        f"""
        SELECT s.ord, w.batch_id
          FROM telemetry_window_replay s
          JOIN telemetry_window w ON w.gpu_id = s.gpu_id AND w.window_start = s.window_start
         WHERE w.window_start >= (SELECT min(window_start) FROM telemetry_window_replay)
           AND w.window_start <= (SELECT max(window_start) FROM telemetry_window_replay)
           AND ({ours}) IS DISTINCT FROM ({stored})
         ORDER BY s.ord
        """  # noqa: S608 - column names only
    )
    for ord_, kept_batch in cursor.fetchall():
        item, index, w = work.window_refs[ord_]
        item.accepted_windows -= 1
        item.rejected += 1
        start = w.window_start.astimezone(dt.UTC)
        work.rejections.append(
            (item.id, item.node_id, "window", index, w.gpu_uuid, w.window_start, "conflict",
             f"GPU {w.gpu_uuid} at {start:%Y-%m-%dT%H:%M:%SZ} is already stored, with other "
             f"values, from batch {kept_batch}; the first copy is kept",
             _to_builtins(w))
        )  # fmt: skip
    cursor.execute("TRUNCATE telemetry_window_replay")


def _events_write(cursor: Any, rows: list[tuple[Any, ...]]) -> list[tuple[uuid.UUID, dt.datetime]]:
    """Inserts events once per (node, event_id); returns the new XIDs' (GPU, time)."""
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    cursor.execute(
        """
        INSERT INTO telemetry_telemetryevent
            (node_id, event_id, gpu_id, gpu_uuid, kind, occurred_at, xid, detail, batch_id)
        SELECT * FROM unnest(%s::uuid[], %s::uuid[], %s::uuid[], %s::text[], %s::text[],
                             %s::timestamptz[], %s::int[], %s::jsonb[], %s::bigint[])
        ORDER BY 1, 2
        ON CONFLICT (node_id, event_id) DO NOTHING
        RETURNING gpu_id, occurred_at, kind
        """,
        [list(c) for c in columns],
    )
    return [(g, at) for g, at, kind in cursor.fetchall() if kind == "xid" and g is not None]


def _rejections_write(cursor: Any, rows: list[tuple[Any, ...]]) -> None:
    RejectedRecord.objects.bulk_create(
        [
            RejectedRecord(
                batch_id=bid, node_id=node_id, kind=kind, index=index, gpu_uuid=gpu_uuid, at=at,
                reason=reason, detail=detail, payload=payload,
            )
            for bid, node_id, kind, index, gpu_uuid, at, reason, detail, payload in rows
        ],
        ignore_conflicts=True,
    )  # fmt: skip


def _node_status_update(cursor: Any, loaded: list[_Loaded]) -> None:
    # Keyed by the ids' integers: a uuid.UUID hashes in Python, an int in C.
    latest: dict[int, _Loaded] = {}
    window_end: dict[int, dt.datetime] = {}
    for item in loaded:
        key = item.node_id.int
        seen = latest.get(key)
        if seen is None or item.received_at > seen.received_at:
            latest[key] = item
        end = item.last_window_end
        if end is not None:
            known = window_end.get(key)
            if known is None or end > known:
                window_end[key] = end
    cursor.execute(
        """
        INSERT INTO telemetry_nodestatus AS ns
            (node_id, last_seen_at, last_window_end, clock_skew_s, agent_version,
             driver_version, stale, stale_since, reported_gpus)
        SELECT n, seen, wend, skew, av, dv, false, NULL, '[]'::jsonb
          FROM json_to_recordset(%s::json)
            AS v(n uuid, seen timestamptz, wend timestamptz, skew float8, av text, dv text)
         ORDER BY n
        ON CONFLICT (node_id) DO UPDATE SET
            last_seen_at = greatest(ns.last_seen_at, EXCLUDED.last_seen_at),
            last_window_end = greatest(ns.last_window_end, EXCLUDED.last_window_end),
            clock_skew_s = CASE WHEN ns.last_seen_at IS NULL
                                  OR EXCLUDED.last_seen_at >= ns.last_seen_at
                                THEN EXCLUDED.clock_skew_s ELSE ns.clock_skew_s END,
            agent_version = CASE WHEN EXCLUDED.agent_version <> '' THEN EXCLUDED.agent_version
                                 ELSE ns.agent_version END,
            driver_version = CASE WHEN EXCLUDED.driver_version <> ''
                                  THEN EXCLUDED.driver_version ELSE ns.driver_version END,
            stale = CASE WHEN ns.last_seen_at IS NULL OR EXCLUDED.last_seen_at > ns.last_seen_at
                         THEN false ELSE ns.stale END,
            stale_since = CASE WHEN ns.last_seen_at IS NULL
                                 OR EXCLUDED.last_seen_at > ns.last_seen_at
                               THEN NULL ELSE ns.stale_since END
        """,
        [
            _json(
                {
                    "n": item.node_id,
                    "seen": item.received_at,
                    "wend": window_end.get(key),
                    "skew": (item.signed_at - item.received_at).total_seconds(),
                    "av": item.batch.agent.version or "",
                    "dv": item.batch.agent.driver_version or "",
                }
                for key, item in latest.items()
            )
        ],
    )
