"""Validating a chunk: decoding its bodies, resolving each window's GPU from the node's
placements, refusing what cannot be stored (not placed, in the future, beyond retention,
impossible: ``rules``) and building each accepted window's COPY row once.

The per-window loop (``_validate``) is the hot path of the whole ingest: it resolves GPUs
through a per-chunk map, checks with plain comparisons and builds each COPY row once."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from telemetry.schema import EVENT_KINDS, Batch, SchemaError, Window, batch_decode_gzip
from telemetry.services.processing.copy import _to_builtins, _window_row
from telemetry.services.processing.rules import window_fine, window_impossible


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
            if gpu_wire is None or start > future or start < floor or not window_fine(w):
                problem = _window_problem(w, gpu_wire, item, future, floor)
                if problem is not None:
                    reject("window", index, w.gpu_uuid, start, *problem, _to_builtins(w))
                    continue
                if gpu_wire is None:  # _window_problem refuses a window of no placed GPU
                    raise RuntimeError(f"window of GPU {w.gpu_uuid} neither placed nor refused")
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
    impossible = window_impossible(w)
    if impossible:
        return ("impossible_value", impossible)
    return None
