"""Writing what a chunk accepted: windows by binary COPY (or through a TEMP stage when a
chunk replays stored windows), events, rejected records, and the nodes' status (a part of the
chunk's last statement)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from telemetry.models import RejectedRecord
from telemetry.schema import Window

if TYPE_CHECKING:
    from telemetry.services.processing.validation import _Loaded, _Work

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
    """Inserts events once per (node, event_id), the first copy in ``rows`` (the chunk's
    batches in order, each batch's events in order) where one comes twice; returns the new
    XIDs' (GPU, time)."""
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    cursor.execute(
        """
        INSERT INTO telemetry_telemetryevent
            (node_id, event_id, gpu_id, gpu_uuid, kind, occurred_at, xid, detail, batch_id)
        SELECT n, e, g, u, k, at, x, d, b
          FROM unnest(%s::uuid[], %s::uuid[], %s::uuid[], %s::text[], %s::text[],
                      %s::timestamptz[], %s::int[], %s::jsonb[], %s::bigint[])
               WITH ORDINALITY AS r(n, e, g, u, k, at, x, d, b, ord)
        ORDER BY n, e, ord
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


# The nodes' status from a chunk's batches (``%(nodes)s``: ``_node_status_json``): the latest
# batch of each node, and where its telemetry now ends.
NODE_STATUS = """
INSERT INTO telemetry_nodestatus AS ns
    (node_id, last_seen_at, last_window_end, clock_skew_s, agent_version,
     driver_version, stale, stale_since, reported_gpus)
SELECT n, seen, wend, skew, av, dv, false, NULL, '[]'::jsonb
  FROM json_to_recordset(%(nodes)s::json)
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
"""


def _node_status_json(loaded: list[_Loaded]) -> str:
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
    return _json(
        {
            "n": item.node_id,
            "seen": item.received_at,
            "wend": window_end.get(key),
            "skew": (item.signed_at - item.received_at).total_seconds(),
            "av": item.rows.agent_version,
            "dv": item.rows.driver_version,
        }
        for key, item in latest.items()
    )
