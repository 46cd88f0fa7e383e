"""Validating a chunk: decoding its bodies, resolving each window's GPU from the node's
placements, refusing what cannot be stored (not placed, in the future, beyond retention,
impossible: ``rules``) and building each accepted window's COPY row once.

The per-window loop (``_validate``) is the hot path of the whole ingest: it resolves GPUs
through a per-chunk map, checks with plain comparisons and builds each COPY row once."""

from __future__ import annotations

import bisect
import datetime as dt
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.conf import settings

from telemetry.models import TelemetryEvent
from telemetry.schema import Batch, SchemaError, Window, batch_decode_gzip
from telemetry.services.processing.copy import _to_builtins, _window_row
from telemetry.services.processing.prepared import (
    COPY_SIGNATURE,
    COPY_TRAILER,
    ROW_HEAD,
    PreparedRows,
    batch_field,
    instant,
    micros,
    rows_decode,
    rows_prepare,
)
from telemetry.services.processing.rules import window_fine, window_impossible


@dataclass
class _Loaded:
    id: int
    node_id: uuid.UUID
    received_at: dt.datetime
    signed_at: dt.datetime
    body: bytes  # as received (gzip(JSON))
    rows: PreparedRows  # its windows as COPY-ready rows (``prepared``)
    decoded: Batch | None = None  # the body, once something needed it decoded
    accepted_windows: int = 0
    accepted_events: int = 0
    rejected: int = 0
    last_window_end: dt.datetime | None = None

    @property
    def batch(self) -> Batch:
        """The body, decoded on first use: for its events, a window refused (with what it
        said), or a chunk that replays stored windows."""
        if self.decoded is None:
            limit = settings.TELEMETRY_MAX_INFLATED_BYTES
            self.decoded = batch_decode_gzip(self.body, limit=limit, checked=True)
        return self.decoded


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


def _decode(rows: list[Any]) -> tuple[list[_Loaded], list[tuple[int, str]]]:
    """The claimed batches with their prepared rows: as the endpoint stored them, or made
    here from the body (a batch stored before the endpoint prepared rows, or under another
    ``prepared.LAYOUT``). A batch whose body is missing or does not decode is broken."""
    loaded, broken = [], []
    limit = settings.TELEMETRY_MAX_INFLATED_BYTES
    for bid, node_id, body, received_at, signed_at, _, _, _, stored, *_ in rows:
        if body is None:
            broken.append((bid, "no body stored"))
            continue
        prepared = rows_decode(stored)
        batch = None
        if prepared is None:
            try:
                batch = batch_decode_gzip(bytes(body), limit=limit, checked=True)
            except (SchemaError, Exception) as exc:
                broken.append((bid, f"undecodable body: {exc}"))
                continue
            prepared = rows_prepare(batch, node_id)
        loaded.append(_Loaded(bid, node_id, received_at, signed_at, bytes(body), prepared, batch))
    return loaded, broken


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
    # The same ids as a prepared row begins: its field count, then the id as a COPY field.
    whole_head: dict[str, bytes] = field(default_factory=dict)
    dated: dict[str, Intervals] = field(default_factory=dict)

    def gpu_at(self, gpu_uuid: str, at: dt.datetime) -> uuid.UUID | None:
        gpu_id = self.whole.get(gpu_uuid)
        if gpu_id is not None:
            return gpu_id
        for valid_from, valid_to, placed_id in self.dated.get(gpu_uuid, ()):
            if valid_from <= at and (valid_to is None or at < valid_to):
                return placed_id
        return None


_NOWHERE = _NodePlacements()

# A placement on a node: NVML UUID, GPU id, valid from, valid to (None: open).
_Placed = tuple[str, uuid.UUID, dt.datetime, dt.datetime | None]
# What the placement change log says (telemetry migration 0012), as of the statement's
# snapshot: the changes made by transactions from ``%(since)s`` on (a snapshot's xmin, as
# text), counted, with their last id; and the same from this snapshot's own xmin, which a
# cache read in this snapshot keeps as its ``since``. A change committed after a snapshot was
# taken belongs to a transaction that was running then or began later, so its xid is at least
# that snapshot's xmin: it moves the count from that xmin on. Rows are never deleted, and
# only the changes of recent transactions are counted (by the index on ``xid``).
PLACEMENT_VERSION = """
SELECT count(c.id) FILTER (WHERE c.xid >= %(since)s::xid8),
       coalesce(max(c.id) FILTER (WHERE c.xid >= %(since)s::xid8), 0),
       s.xmin::text,
       count(c.id) FILTER (WHERE c.xid >= s.xmin),
       coalesce(max(c.id) FILTER (WHERE c.xid >= s.xmin), 0)
  FROM (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin) AS s
  LEFT JOIN telemetry_placementchange c ON c.xid >= least(%(since)s::xid8, s.xmin)
 GROUP BY s.xmin
"""
# (since, changes counted from it, last id among them).
Version = tuple[str, int, int]
VERSION_COLUMNS = 5  # PLACEMENT_VERSION's columns, last in the rows that carry them
NO_VERSION = "0"  # since: every change (a process that has cached nothing yet)


def version_read(row: Any, since: str) -> tuple[Version, Version]:
    """From PLACEMENT_VERSION's columns (the last of ``row``): the version counted from
    ``since``, and a fresh one counted from the snapshot's own xmin."""
    seen, seen_last, xmin, count, last = row[-VERSION_COLUMNS:]
    return (since, int(seen), int(seen_last)), (xmin, int(count), int(last))


class _NodeHistory:
    """Every placement of one node, and what they resolve to between two consecutive dates
    at which any of them begins or ends (a segment), computed once per segment."""

    def __init__(self, placed: list[_Placed]) -> None:
        self.placed = placed
        self.edges = sorted({p[2] for p in placed} | {p[3] for p in placed if p[3] is not None})
        self.segments: dict[int, _NodePlacements] = {}

    def over(self, lo: dt.datetime, hi: dt.datetime) -> _NodePlacements:
        """The node's placements over ``[lo, hi]``, as the chunk's query resolved them: a GPU
        is ``whole`` when its only placement here covers all of the span, dated otherwise."""
        segment = bisect.bisect_right(self.edges, lo)
        if segment < len(self.edges) and self.edges[segment] <= hi:
            return self._resolved(lo, hi)  # a placement begins or ends inside the span
        known = self.segments.get(segment)
        if known is None:
            # No edge in (lo, hi]: each placement covers all of it or none of it, as it does
            # the segment's first instant (before the first edge, none is placed).
            at = self.edges[segment - 1] if segment else None
            known = self.segments[segment] = (
                _NodePlacements() if at is None else self._resolved(at, at)
            )
        return known

    def _resolved(self, lo: dt.datetime, hi: dt.datetime) -> _NodePlacements:
        near = [p for p in self.placed if p[2] <= hi and (p[3] is None or p[3] > lo)]
        count: dict[str, int] = {}
        for nvml, *_ in near:
            count[nvml] = count.get(nvml, 0) + 1
        node = _NodePlacements()
        for nvml, gpu_id, valid_from, valid_to in near:
            if count[nvml] == 1 and valid_from <= lo and (valid_to is None or valid_to > hi):
                node.whole[nvml] = gpu_id
                node.whole_wire[nvml] = gpu_id.bytes
                node.whole_head[nvml] = ROW_HEAD + gpu_id.bytes
            else:
                node.dated.setdefault(nvml, []).append((valid_from, valid_to, gpu_id))
        return node


class _PlacementCache:
    """This process's placements, per node, with the version they were read at. A chunk
    uses them only when its claim reads that same version, in its own transaction; else they
    are read again, so no window is resolved against placements that have changed."""

    database: ClassVar[tuple[Any, ...] | None] = None
    version: ClassVar[Version | None] = None
    nodes: ClassVar[dict[str, _NodeHistory]] = {}

    @classmethod
    def since(cls, database: tuple[Any, ...]) -> str:
        """Where a chunk counts changes from: the xmin of the snapshot the cache was read in."""
        if cls.version is None or cls.database != database:
            return NO_VERSION
        return cls.version[0]

    @classmethod
    def holds(cls, database: tuple[Any, ...], version: Version) -> bool:
        return cls.version is not None and (database, version) == (cls.database, cls.version)

    @classmethod
    def start(
        cls, database: tuple[Any, ...], version: Version, nodes: dict[str, _NodeHistory]
    ) -> None:
        cls.database, cls.version, cls.nodes = database, version, nodes

    @classmethod
    def clear(cls) -> None:
        cls.database, cls.version, cls.nodes = None, None, {}


def placements_forget() -> None:
    """Forgets this process's cached placements (they reload on the next chunk)."""
    _PlacementCache.clear()


_NODE_PLACEMENTS = f"""
SELECT p.node_id::text, g.nvml_uuid, p.gpu_id, p.valid_from, p.valid_to, v.*
  FROM ({PLACEMENT_VERSION}) AS v
  LEFT JOIN (fleet_placement p JOIN fleet_gpu g ON g.id = p.gpu_id)
    ON p.node_id = ANY(%(nodes)s)
"""  # noqa: S608 - constants only


def _node_histories(
    cursor: Any, node_ids: list[uuid.UUID], since: str
) -> tuple[Version, Version, dict[str, _NodeHistory]]:
    """Every placement of these nodes, with the change log's version counted from ``since``
    and its fresh version (``version_read``), all in one snapshot."""
    cursor.execute(_NODE_PLACEMENTS, {"nodes": node_ids, "since": since}, binary=True)
    rows = cursor.fetchall()
    seen, fresh = version_read(rows[0], since)  # the version's one row, with or without any
    placed: dict[str, list[_Placed]] = {str(n): [] for n in node_ids}
    for node_id, nvml_uuid, gpu_id, valid_from, valid_to, *_ in rows:
        if node_id is not None:
            placed[node_id].append((nvml_uuid, gpu_id, valid_from, valid_to))
    return seen, fresh, {node: _NodeHistory(rows) for node, rows in placed.items()}


def _placements(
    cursor: Any,
    loaded: list[_Loaded],
    starts: set[dt.datetime],
    *,
    version: Version | None = None,
    database: tuple[Any, ...] = (),
) -> dict[str, _NodePlacements]:
    """Where each GPU (by NVML UUID) sat on the batches' nodes over the batches' time span.

    ``version``: the placement change log's version as the chunk's claim read it, counted
    from the cache's own ``since``; the nodes cached at that version are not read again
    (None: nothing cached is used or kept)."""
    instants = [
        *starts, *(e.occurred_at for item in loaded if item.rows.events for e in item.batch.events)
    ]  # fmt: skip
    if not instants:
        return {}
    lo, hi = min(instants), max(instants)
    nodes = {str(item.node_id): item.node_id for item in loaded}
    if version is None:
        _, _, histories = _node_histories(cursor, list(nodes.values()), NO_VERSION)
        return {key: histories[key].over(lo, hi) for key in nodes}
    if not _PlacementCache.holds(database, version):
        # Nothing cached, or placements changed before the claim: read in one snapshot and
        # cached with its own version.
        _, fresh, read = _node_histories(cursor, list(nodes.values()), version[0])
        _PlacementCache.start(database, fresh, read)
    missing = [node_id for key, node_id in nodes.items() if key not in _PlacementCache.nodes]
    if missing:
        seen, fresh, read = _node_histories(cursor, missing, version[0])
        if seen != version:
            # Placements changed after the claim read the version: the chunk resolves against
            # this newer snapshot, all of its nodes read in it.
            if len(missing) < len(nodes):
                _, fresh, read = _node_histories(cursor, list(nodes.values()), version[0])
            _PlacementCache.start(database, fresh, {})
        _PlacementCache.nodes.update(read)
    cached = _PlacementCache.nodes
    return {key: cached[key].over(lo, hi) for key in nodes}


def _gpu_ids(placed: dict[str, _NodePlacements]) -> dict[str, uuid.UUID]:
    """NVML UUID → GPU id over the chunk's placements (the marks' GPUs)."""
    ids: dict[str, uuid.UUID] = {}
    for node in placed.values():
        ids.update(node.whole)
        for nvml, intervals in node.dated.items():
            for _, _, gpu_id in intervals:
                ids[nvml] = gpu_id
    return ids


def _reject(
    work: _Work, item: _Loaded, kind: str, index: int, gpu_uuid: str, at: dt.datetime,
    reason: str, detail: str, payload: Any,
) -> None:  # fmt: skip
    item.rejected += 1
    work.rejections.append(
        (item.id, item.node_id, kind, index, gpu_uuid, at, reason, detail, payload)
    )


def _judged(
    work: _Work, item: _Loaded, index: int, w: Window, gpu_wire: bytes | None,
    future: dt.datetime, floor: dt.datetime,
) -> bytes | None:  # fmt: skip
    """A window that may be refused, judged: its GPU's id as COPY sends it when it is kept,
    None once it is recorded as refused (``gpu_wire``: the id placed at its instant, if any)."""
    problem = _window_problem(w, gpu_wire, item, future, floor)
    if problem is not None:
        _reject(work, item, "window", index, w.gpu_uuid, w.window_start, *problem,
                _to_builtins(w))  # fmt: skip
        return None
    if gpu_wire is None:  # _window_problem refuses a window of no placed GPU
        raise RuntimeError(f"window of GPU {w.gpu_uuid} neither placed nor refused")
    return gpu_wire


def _validate(
    loaded: list[_Loaded],
    placed: dict[str, _NodePlacements],
    *,
    now: dt.datetime,
    floor: dt.datetime,
    emit: Callable[[tuple[Any, ...]], None] | None,
) -> _Work:
    """Checks every window and event of the decoded bodies, collects COPY rows (in
    ``WINDOW_COLUMNS`` order), rejections and (GPU, hour) marks: the path of a chunk that
    replays stored windows (``emit`` None: the rows are kept, with where each came from).
    ``_validate_prepared`` is the same checks over the prepared rows.

    Duplicates inside the chunk are not looked for: a repeated (GPU, minute) makes the
    optimistic COPY fail and the chunk goes through the ON CONFLICT stage instead."""
    work = _Work(gpu_ids=_gpu_ids(placed))
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
        for index, w in enumerate(item.batch.windows):
            start = w.window_start
            gpu_wire = whole.get(w.gpu_uuid)
            if gpu_wire is None:
                placed_id = node.gpu_at(w.gpu_uuid, start)
                gpu_wire = None if placed_id is None else placed_id.bytes
            if gpu_wire is None or start > future or start < floor or not window_fine(w):
                gpu_wire = _judged(work, item, index, w, gpu_wire, future, floor)
                if gpu_wire is None:
                    continue
            accepted += 1
            if last is None or start > last.window_start:
                last = w
            row = _window_row(w, gpu_wire, node_wire, batch_pk)
            if emit is not None:
                emit(row)
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
        _events_check(work, item, node, future)
    return work


_HOUR_US = 3_600_000_000
_FLUSH_BYTES = 1 << 16  # what the prepared path gathers before it hands it to the COPY


def _validate_prepared(
    loaded: list[_Loaded],
    placed: dict[str, _NodePlacements],
    *,
    now: dt.datetime,
    floor: dt.datetime,
    write: Callable[[bytes | bytearray], Any],
) -> _Work:
    """``_validate`` over the prepared rows, for the optimistic COPY (``COPY_PREPARED``):
    the same checks in the same order, and the same rejections, marks and counts, from the
    stored fields. Per window it resolves the GPU, compares two instants as integers and
    appends the row's four pieces; a window that is not plainly fine (of no GPU placed at
    its instant, beyond the clock or retention, or not ``window_fine``) is judged as
    ``_validate`` judges it, from its decoded body. ``write`` gets the binary COPY data,
    signature and trailer included, about 64 KB at a time (PostgreSQL inserts them while
    Python checks the rest)."""
    work = _Work(gpu_ids=_gpu_ids(placed))
    marks: dict[tuple[str, int], int] = {}
    future_limit = _future_limit()
    floor_us = micros(floor)
    out = bytearray(COPY_SIGNATURE)
    for item in loaded:
        rows = item.rows
        future = item.received_at + future_limit
        future_us = micros(future)
        node = placed.get(str(item.node_id), _NOWHERE)
        heads = node.whole_head
        names = rows.gpus
        batch_pk = batch_field(item.id)
        last_start = last_end = -1  # the newest window accepted
        accepted = 0
        for index, (gpu, start, end, fine, fields) in enumerate(rows.windows):
            nvml = names[gpu]
            head = heads.get(nvml)
            if head is None:  # placed on the node for part of the chunk's span, or not at all
                placed_id = node.gpu_at(nvml, instant(start))
                head = None if placed_id is None else ROW_HEAD + placed_id.bytes
            if head is None or start > future_us or start < floor_us or not fine:
                wire = None if head is None else head[len(ROW_HEAD) :]
                wire = _judged(work, item, index, item.batch.windows[index], wire, future, floor)
                if wire is None:
                    continue
                head = ROW_HEAD + wire
            accepted += 1
            if start > last_start:
                last_start, last_end = start, end
            out += head
            out += batch_pk
            out += fields
            key = (nvml, start - start % _HOUR_US)
            earliest = marks.get(key)
            if earliest is None or start < earliest:
                marks[key] = start
        item.accepted_windows = accepted
        item.last_window_end = None if last_start < 0 else instant(last_end)
        if rows.events:
            _events_check(work, item, node, future)
        if len(out) >= _FLUSH_BYTES:
            write(out)
            out = bytearray()
    out += COPY_TRAILER
    write(out)
    # The marks as ``_validate`` keys them: instants, shared by the many GPUs of a minute.
    instants: dict[int, dt.datetime] = {}
    for (nvml, hour), lo in marks.items():
        at = instants.get(hour)
        if at is None:
            at = instants[hour] = instant(hour)
        since = instants.get(lo)
        if since is None:
            since = instants[lo] = instant(lo)
        work.marks[(nvml, at)] = since
    return work


# The kinds the server keeps: the contract's, plus what the agent also sends (nvml_available,
# spool_quarantined, batch_rejected) — one list, the stored column's choices.
EVENT_KINDS = frozenset(TelemetryEvent.Kind.values)


def _events_check(work: _Work, item: _Loaded, node: _NodePlacements, future: dt.datetime) -> None:
    """The batch's events: kept once their kind is known, their xid set iff they are one, and
    their instant not beyond the clock, each with its GPU resolved where that GPU is placed."""
    for index, e in enumerate(item.batch.events):
        if e.kind not in EVENT_KINDS:
            detail = f"event kind {e.kind!r} is not one this server knows"
            _reject(work, item, "event", index, e.gpu_uuid or "", e.occurred_at, "unknown_kind",
                    detail, _to_builtins(e))  # fmt: skip
            continue
        if (e.kind == "xid") is (e.xid is None):  # xid is set iff the kind is xid
            detail = (
                "an xid event needs its xid" if e.xid is None
                else f"xid {e.xid} on a {e.kind} event: only an xid event has one"
            )  # fmt: skip
            _reject(work, item, "event", index, e.gpu_uuid or "", e.occurred_at,
                    "impossible_value", detail, _to_builtins(e))  # fmt: skip
            continue
        if e.occurred_at > future:
            _reject(work, item, "event", index, e.gpu_uuid or "", e.occurred_at, "future",
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
    impossible = window_impossible(w)
    if impossible:
        return ("impossible_value", impossible)
    return None
