"""What is derived from windows: GPU state transitions and hourly rollups.

Both are recomputed from the windows themselves for whatever a change could affect, never
patched with deltas. That makes them idempotent under at-least-once delivery, and makes an
incremental update and a rebuild of any range give exactly the same rows.

A window's counter deltas (energy, ECC) are taken against the GPU's previous window within
``LOOKAROUND`` (2 days); a counter that went backwards was reset (driver reload), so the
delta is the new value itself. The same bound limits how far a late window reaches: the next
window within it is the only other one whose delta, hour and transition can change.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from typing import Any

from django.db import connection, transaction

LOOKAROUND = dt.timedelta(days=2)
WINDOW = dt.timedelta(seconds=60)
MJ_PER_KWH = 3_600_000_000

_TOUCHED = """
CREATE TEMP TABLE IF NOT EXISTS telemetry_touched (
    gpu_id uuid PRIMARY KEY, lo timestamptz, hi timestamptz, p timestamptz, n timestamptz
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS telemetry_touched_hours (
    gpu_id uuid, hour timestamptz, PRIMARY KEY (gpu_id, hour)
) ON COMMIT DELETE ROWS;
TRUNCATE telemetry_touched, telemetry_touched_hours;
"""

# p: start of the GPU's window just before the new ones; n: of the one just after them.
_BOUNDS = """
INSERT INTO telemetry_touched (gpu_id, lo, hi, p, n)
SELECT t.gpu_id, t.lo, t.hi,
       (SELECT max(w.window_start) FROM telemetry_window w
         WHERE w.gpu_id = t.gpu_id AND w.window_start < t.lo
           AND w.window_start >= t.lo - %(around)s),
       (SELECT min(w.window_start) FROM telemetry_window w
         WHERE w.gpu_id = t.gpu_id AND w.window_start > t.hi
           AND w.window_start <= t.hi + %(around)s)
  FROM unnest(%(gpus)s::uuid[], %(los)s::timestamptz[], %(his)s::timestamptz[]) AS t(gpu_id, lo, hi)
"""

_REGION = """
JOIN telemetry_window w ON w.gpu_id = t.gpu_id
 AND w.window_start >= coalesce(t.p, t.lo) AND w.window_start <= coalesce(t.n, t.hi)
"""

_TRANSITIONS_DELETE = """
DELETE FROM telemetry_gpustatetransition s USING telemetry_touched t
 WHERE s.gpu_id = t.gpu_id
   AND s.at >= coalesce(t.p + interval '1 microsecond', t.lo)
   AND s.at <= coalesce(t.n, t.hi + interval '60 seconds')
"""

# A gap between windows is no_data from the end of the earlier one; a window whose state
# differs from the one before it starts a transition at its window_start.
_TRANSITIONS_INSERT = f"""
INSERT INTO telemetry_gpustatetransition (gpu_id, state, reason, at, recorded_at)
SELECT r.gpu_id, e.state, e.reason, e.at, now()
  FROM (SELECT w.gpu_id, w.window_start, w.state, w.state_reason, t.p,
               lag(w.window_start) OVER o AS prev_start, lag(w.state) OVER o AS prev_state
          FROM telemetry_touched t {_REGION}
        WINDOW o AS (PARTITION BY w.gpu_id ORDER BY w.window_start)) AS r
 CROSS JOIN LATERAL (VALUES
    (CASE WHEN r.window_start > r.prev_start + interval '60 seconds' THEN 'no_data' END,
     'no telemetry', r.prev_start + interval '60 seconds'),
    (CASE WHEN r.prev_start IS NULL THEN CASE WHEN r.p IS NULL THEN r.state END
          WHEN r.window_start > r.prev_start + interval '60 seconds'
            OR r.state <> r.prev_state THEN r.state END,
     coalesce(r.state_reason, ''), r.window_start)
 ) AS e(state, reason, at)
 WHERE e.state IS NOT NULL
ON CONFLICT (gpu_id, at) DO UPDATE
   SET state = EXCLUDED.state, reason = EXCLUDED.reason, recorded_at = EXCLUDED.recorded_at
"""  # noqa: S608 - constants only, no input

_HOURS_FROM_REGIONS = f"""
INSERT INTO telemetry_touched_hours (gpu_id, hour)
SELECT DISTINCT w.gpu_id, date_trunc('hour', w.window_start, 'UTC')
  FROM telemetry_touched t {_REGION}
ON CONFLICT DO NOTHING
"""  # noqa: S608 - constants only, no input

_HOURS_FROM_ARRAYS = """
INSERT INTO telemetry_touched_hours (gpu_id, hour)
SELECT DISTINCT g, date_trunc('hour', h, 'UTC')
  FROM unnest(%(gpus)s::uuid[], %(ats)s::timestamptz[]) AS x(g, h)
ON CONFLICT DO NOTHING
"""


def _delta(column: str) -> str:
    """Counter increase since the previous window; a counter that went backwards was reset."""
    prev = f"(CASE WHEN w.rn = 1 THEN prev.{column} ELSE w.prev_{column} END)"
    return (
        f"(CASE WHEN w.{column} IS NULL OR {prev} IS NULL THEN 0 "
        f"WHEN w.{column} >= {prev} THEN w.{column} - {prev} ELSE w.{column} END)"
    )


_ROLLUPS = f"""
INSERT INTO telemetry_hourlyrollup
    (gpu_id, hour, windows, seconds_up, seconds_degraded, seconds_down, util_gpu_seconds,
     energy_kwh, temp_max_c, ecc_corrected, ecc_uncorrected, xid_events, computed_at)
SELECT h.gpu_id, h.hour,
       count(w.window_start),
       60 * count(*) FILTER (WHERE w.state = 'up'),
       60 * count(*) FILTER (WHERE w.state = 'degraded'),
       60 * count(*) FILTER (WHERE w.state = 'down'),
       round(coalesce(sum(w.util_gpu_avg::numeric * 60)
                      FILTER (WHERE w.state IN ('up', 'degraded')), 0), 3),
       round(coalesce(sum({_delta("energy_mj")}), 0)::numeric / {MJ_PER_KWH}, 9),
       max(w.temp_max_c),
       coalesce(sum({_delta("ecc_corrected")}), 0),
       coalesce(sum({_delta("ecc_uncorrected")}), 0),
       (SELECT count(*) FROM telemetry_telemetryevent e
         WHERE e.gpu_id = h.gpu_id AND e.kind = 'xid'
           AND e.occurred_at >= h.hour AND e.occurred_at < h.hour + interval '1 hour'),
       now()
  FROM telemetry_touched_hours h
  LEFT JOIN LATERAL (
        SELECT pw.energy_mj, pw.ecc_corrected, pw.ecc_uncorrected FROM telemetry_window pw
         WHERE pw.gpu_id = h.gpu_id AND pw.window_start < h.hour
           AND pw.window_start >= h.hour - %(around)s
         ORDER BY pw.window_start DESC LIMIT 1) AS prev ON true
  LEFT JOIN LATERAL (
        SELECT x.window_start, x.state, x.util_gpu_avg, x.temp_max_c,
               x.energy_mj, x.ecc_corrected, x.ecc_uncorrected,
               lag(x.energy_mj) OVER o AS prev_energy_mj,
               lag(x.ecc_corrected) OVER o AS prev_ecc_corrected,
               lag(x.ecc_uncorrected) OVER o AS prev_ecc_uncorrected,
               row_number() OVER o AS rn
          FROM telemetry_window x
         WHERE x.gpu_id = h.gpu_id AND x.window_start >= h.hour
           AND x.window_start < h.hour + interval '1 hour'
        WINDOW o AS (ORDER BY x.window_start)) AS w ON true
 GROUP BY h.gpu_id, h.hour
ON CONFLICT (gpu_id, hour) DO UPDATE SET
    windows = EXCLUDED.windows, seconds_up = EXCLUDED.seconds_up,
    seconds_degraded = EXCLUDED.seconds_degraded, seconds_down = EXCLUDED.seconds_down,
    util_gpu_seconds = EXCLUDED.util_gpu_seconds, energy_kwh = EXCLUDED.energy_kwh,
    temp_max_c = EXCLUDED.temp_max_c, ecc_corrected = EXCLUDED.ecc_corrected,
    ecc_uncorrected = EXCLUDED.ecc_uncorrected, xid_events = EXCLUDED.xid_events,
    computed_at = EXCLUDED.computed_at
"""  # noqa: S608 - constants only, no input


def derived_update(
    *,
    cursor: Any,
    windows_by_gpu: dict[uuid.UUID, tuple[dt.datetime, dt.datetime]],
    xid_events: Iterable[tuple[uuid.UUID, dt.datetime]] = (),
) -> None:
    """Recomputes transitions and rollups that new windows (first..last per GPU) and new
    XID events could change. Runs inside the caller's transaction, which must hold the
    per-node locks of these GPUs."""
    cursor.execute(_TOUCHED)
    if windows_by_gpu:
        gpus = list(windows_by_gpu)
        cursor.execute(
            _BOUNDS,
            {
                "around": LOOKAROUND,
                "gpus": gpus,
                "los": [windows_by_gpu[g][0] for g in gpus],
                "his": [windows_by_gpu[g][1] for g in gpus],
            },
        )
        cursor.execute(_TRANSITIONS_DELETE)
        cursor.execute(_TRANSITIONS_INSERT)
        cursor.execute(_HOURS_FROM_REGIONS)
    xids = list(xid_events)
    if xids:
        cursor.execute(
            _HOURS_FROM_ARRAYS, {"gpus": [g for g, _ in xids], "ats": [at for _, at in xids]}
        )
    cursor.execute(_ROLLUPS, {"around": LOOKAROUND})


def rollups_rebuild(
    *, start: dt.datetime, end: dt.datetime, gpu_ids: list[uuid.UUID] | None = None
) -> int:
    """Recomputes every hourly rollup in ``[start, end)`` that has windows or XID events."""
    gpu_filter = "AND gpu_id = ANY(%(gpus)s)" if gpu_ids is not None else ""
    params: dict[str, Any] = {"start": start, "end": end, "gpus": gpu_ids, "around": LOOKAROUND}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL work_mem = '64MB'")
        cursor.execute(_TOUCHED)
        cursor.execute(
            f"""
            INSERT INTO telemetry_touched_hours (gpu_id, hour)
            SELECT DISTINCT gpu_id, date_trunc('hour', window_start, 'UTC') FROM telemetry_window
             WHERE window_start >= %(start)s AND window_start < %(end)s {gpu_filter}
            UNION
            SELECT DISTINCT gpu_id, date_trunc('hour', occurred_at, 'UTC')
              FROM telemetry_telemetryevent
             WHERE kind = 'xid' AND gpu_id IS NOT NULL
               AND occurred_at >= %(start)s AND occurred_at < %(end)s {gpu_filter}
            """,  # noqa: S608 - constants only, no input
            params,
        )
        cursor.execute(_ROLLUPS, params)
        return int(cursor.rowcount)
