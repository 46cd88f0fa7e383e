"""What is derived from windows: GPU state transitions and hourly rollups.

Both are recomputed from the windows themselves for whatever a change could affect, never
patched with deltas. That makes them idempotent under at-least-once delivery, and makes an
incremental update and a rebuild of any range give exactly the same rows. The one shortcut
keeps that: a recent hour whose mark shows that only windows after all its rollup holds came
is extended with them, from exact sums kept beside its rollup (``_HOURS_FROM_CLAIM``'s
``since``, ``telemetry_hourtally``), to the digits a whole read gives.

The ingest path does not compute them. Its chunk transaction only *marks* the (GPU, hour)
pairs it touched, in ``telemetry_derivedwork`` (``derived_mark``); ``derived_process`` later
claims marks in bulk, recomputes each marked hour once however many windows arrived for it,
and deletes the marks in the same transaction. So a GPU-hour that received 60 windows in 60
chunks is recomputed once per pass, not 60 times, and the window path never reads back what it
wrote.

Races, and why none loses work:

* A mark is written with ``ON CONFLICT DO UPDATE … WHERE false``: no new row version, but the
  existing mark is *locked* until the window transaction commits. The derived pass claims with
  ``FOR UPDATE SKIP LOCKED``, so it never takes a mark whose windows are not yet committed; and
  a window transaction that meets a mark the pass holds waits for the pass to commit (the mark
  is then gone) and inserts a fresh one, which the next pass takes.
* A worker process does not write a mark it wrote before while no pass can have claimed it
  since (``processing.marks``): each pass takes a number from ``telemetry_derived_pass_seq``
  before it claims, under ``MARKS_LOCK`` held exclusively (``_marks_frozen``), and every
  chunk that relies on what its process remembers holds that lock shared from the moment it
  reads the number to its commit. So a pass claims only after every such chunk that read the
  old number has committed (its windows are then visible to the pass), and a chunk that
  starts after the claim reads the new number and writes its marks again. Marks removed any
  other way (a truncate, a delete by hand) move the number too (a trigger, telemetry
  migration 0015; the pass's own delete of its marks moves it a second time), so chunks that
  start afterwards write their marks again — but a chunk already past reading the number may
  still leave out a mark such a removal took: stop the workers before removing marks by hand.
* Passes run one at a time per shard of the GPUs (``SHARDS``; a GPU is always in the same
  one), so passes of several worker processes share a backlog and never recompute one GPU
  at once. Each holds ``PASS_LOCK`` shared and its shard's lock; ``rollups_rebuild`` holds
  ``PASS_LOCK`` exclusively, so it runs alone. The locks are transaction-level, taken with
  ``pg_try_…``: a pass that finds every shard taken returns at once and is re-queued. Two
  passes over neighbouring hours of one GPU would otherwise each write transitions and
  rollups from their own snapshot, and the older one could land last; passes over different
  GPUs write different rows (a GPU's incidents are serialised on its own row).

A window's ECC deltas are taken against the GPU's previous window within ``LOOKAROUND``
(2 days); its energy against the GPU's previous *reading* (docs/accounting.md rule 6: in its
hour, else in the 2 days before, else across a silence of any length): a window without a
reading, or a silence, leaves the energy to the next reading rather than dropping it. A
counter that went backwards was reset (driver reload), so the delta is the new value itself.
A late window changes the next window's transition and ECC delta (within ``LOOKAROUND``) and
the next reading's energy delta (at any distance). Hence a marked run of hours is recomputed
together with the hour of the first window after it and the hour of the first reading after
it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import psycopg
from django.db import connection, transaction

from telemetry.services.incidents import incidents_from_events
from telemetry.services.state_events import ISLANDS, gpu_state_events_emit

LOOKAROUND = dt.timedelta(days=2)
_AROUND = "interval '2 days'"  # LOOKAROUND in SQL, where a query is built, not parameterised
WINDOW = dt.timedelta(seconds=60)
# How far back an hour keeps its tally (``telemetry_hourtally``: the exact sums behind its
# rollup), so that a pass can extend its rollup with new windows instead of reading it whole:
# the open hour and the two before it, where the last minutes of an hour still arrive.
TALLIED = dt.timedelta(hours=3)
MJ_PER_KWH = 3_600_000_000
# pg_advisory_xact_lock key of the derived passes (held shared by each) and of
# rollups_rebuild (exclusively): "derived" in ASCII.
PASS_LOCK = 0x64_65_72_69_76_65_64
# Passes run one at a time per shard of the GPUs, so that as many passes as there are worker
# processes can share a backlog; a GPU is always in the same shard (the last byte of its id,
# modulo SHARDS). A constant, not a setting: two processes that split GPUs differently could
# recompute one GPU at once. Shard s's lock key is PASS_LOCK + 1 + s.
SHARDS = 4
# Marks from which a sharing pass (the Celery task's) takes no further shard: below, one pass
# takes the whole backlog (as live, nearly always); from there on, a pass is one shard's worth
# and another process's pass takes the next shard beside it (a catch-up).
ONE_SHARD_FROM = 1_000
# Advisory lock key around the pass number (``telemetry_derived_pass_seq``, see the races
# above): "marks" in ASCII. Chunks that skip marks they remember hold it shared from reading
# the number to their commit; a pass holds it exclusively only while it takes a number and
# claims.
MARKS_LOCK = 0x6D_61_72_6B_73

# A chunk's marks as one JSON document, ``[[lo, [gpu, …]], …]`` (``marks_document``):
# msgspec encodes it in C, where psycopg would dump an array parameter element by element in
# Python, and a chunk's marks share a few instants (a minute of many GPUs), each parsed once
# here. A mark's hour is its earliest instant's UTC hour. ``%(marks)s`` is the document.
MARK_ROWS = """
SELECT g::uuid AS gpu_id, m.hour, m.lo
  FROM (SELECT date_trunc('hour', (e->>0)::timestamptz, 'UTC') AS hour,
               (e->>0)::timestamptz AS lo, e->1 AS gpus
          FROM json_array_elements(%(marks)s::json) AS e OFFSET 0) AS m,
       json_array_elements_text(m.gpus) AS g
"""
# Marks, sorted so that two window transactions lock shared marks in the same order. A mark
# that already reaches back far enough is only locked (no new row version): windows arrive in
# time order, so only a late one rewrites a mark. Also a CTE of the window path's last
# statement (``processing._CHUNK_DONE``).
MARK_UPSERT = f"""
INSERT INTO telemetry_derivedwork AS d (gpu_id, hour, lo)
SELECT r.gpu_id, r.hour, min(r.lo) FROM ({MARK_ROWS}) AS r
 GROUP BY 1, 2
 ORDER BY 1, 2
ON CONFLICT (gpu_id, hour) DO UPDATE SET lo = EXCLUDED.lo WHERE EXCLUDED.lo < d.lo
"""  # noqa: S608 - constants only

_TEMP = """
CREATE TEMP TABLE IF NOT EXISTS telemetry_claimed (
    gpu_id uuid, hour timestamptz, lo timestamptz, PRIMARY KEY (gpu_id, hour)
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS telemetry_islands (
    gpu_id uuid, lo timestamptz, hi timestamptz, p timestamptz, p_at timestamptz,
    n timestamptz, n_at timestamptz, last_at timestamptz, PRIMARY KEY (gpu_id, lo)
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS telemetry_touched_hours (
    gpu_id uuid, hour timestamptz, since timestamptz, PRIMARY KEY (gpu_id, hour)
) ON COMMIT DELETE ROWS;
TRUNCATE telemetry_claimed, telemetry_islands, telemetry_touched_hours;
"""

# A shard's oldest marks (a GPU's shard: the last byte of its id, modulo SHARDS).
_CLAIM = """
INSERT INTO telemetry_claimed (gpu_id, hour, lo)
SELECT gpu_id, hour, lo FROM telemetry_derivedwork
 WHERE mod(get_byte(uuid_send(gpu_id), 15), %(shards)s) = %(shard)s
 ORDER BY marked_at LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
"""

# Consecutive claimed hours of a GPU form one island, touched from lo (the earliest instant
# marked in it) to hi (the end of its last hour); p: the GPU's last window before lo, n: its
# first window from hi on (both within LOOKAROUND), last: its last window before hi. The
# ``*_at`` columns are the instants those windows begin observing (window_start +
# observed_from), where their state transitions are dated. Only transitions in (p_at, n_at]
# can have changed: p's own transition depends on the window before p, and what follows n on
# the window after n.
_ISLANDS = """
INSERT INTO telemetry_islands (gpu_id, lo, hi, p, p_at, n, n_at, last_at)
SELECT i.gpu_id, i.lo, i.hi,
       p.window_start, p.window_start + p.observed_from * interval '1 second',
       n.window_start, n.window_start + n.observed_from * interval '1 second',
       l.window_start + l.observed_from * interval '1 second'
  FROM (SELECT gpu_id, min(lo) AS lo, max(hour) + interval '1 hour' AS hi
          FROM (SELECT gpu_id, hour, lo,
                       hour - interval '1 hour' * row_number() OVER (
                           PARTITION BY gpu_id ORDER BY hour) AS run
                  FROM telemetry_claimed) c
         GROUP BY gpu_id, run) i
  LEFT JOIN LATERAL (
        SELECT w.window_start, w.observed_from FROM telemetry_window w
         WHERE w.gpu_id = i.gpu_id AND w.window_start < i.lo
           AND w.window_start >= i.lo - %(around)s
         ORDER BY w.window_start DESC LIMIT 1) AS p ON true
  LEFT JOIN LATERAL (
        SELECT w.window_start, w.observed_from FROM telemetry_window w
         WHERE w.gpu_id = i.gpu_id AND w.window_start >= i.hi
           AND w.window_start < i.hi + %(around)s
         ORDER BY w.window_start LIMIT 1) AS n ON true
  LEFT JOIN LATERAL (
        SELECT w.window_start, w.observed_from FROM telemetry_window w
         WHERE w.gpu_id = i.gpu_id AND w.window_start >= i.lo AND w.window_start < i.hi
         ORDER BY w.window_start DESC LIMIT 1) AS l ON true
"""

_REGION = """
JOIN telemetry_window w ON w.gpu_id = t.gpu_id
 AND w.window_start >= coalesce(t.p, t.lo) AND w.window_start <= coalesce(t.n, t.hi)
"""

# Transitions strictly after p's up to n's (or up to the island's last window's: a no_data
# that beat dated at the end of a GPU's last observed span stays until a later window replaces
# it). Bounded by where those windows' states begin, not by their window_start: a window that
# began observing mid-minute has its transition inside its minute.
_TRANSITIONS_DELETE = """
DELETE FROM telemetry_gpustatetransition s USING telemetry_islands t
 WHERE s.gpu_id = t.gpu_id
   AND s.at > coalesce(t.p_at, t.lo - interval '1 microsecond')
   AND s.at <= coalesce(t.n_at, t.last_at)
"""

# A window's state begins where it begins observing (window_start + observed_from); after a
# window, no_data begins where it stopped observing (window_start + observed_to) unless the
# next window begins observing at that very instant. A window whose state differs from the one
# before it, or that follows a gap, starts a transition. Regions of two islands of one GPU may
# overlap at their ends; they agree there, and DISTINCT ON keeps one. Only a window that
# follows nothing, a gap or another state can start either; the others (nearly all) are
# dropped before the two candidates are built for each.
_TRANSITIONS_INSERT = f"""
INSERT INTO telemetry_gpustatetransition (gpu_id, state, reason, at, recorded_at)
SELECT DISTINCT ON (r.gpu_id, e.at) r.gpu_id, e.state, e.reason, e.at, now()
  FROM (SELECT * FROM (
        SELECT w.gpu_id, w.state, w.state_reason, t.p,
               w.window_start + w.observed_from * interval '1 second' AS begins,
               lag(w.window_start + w.observed_to * interval '1 second') OVER o AS prev_end,
               lag(w.state) OVER o AS prev_state
          FROM telemetry_islands t {_REGION}
        WINDOW o AS (PARTITION BY t.gpu_id, t.lo ORDER BY w.window_start)) AS all_windows
         WHERE prev_end IS NULL OR begins > prev_end OR state <> prev_state) AS r
 CROSS JOIN LATERAL (VALUES
    (CASE WHEN r.begins > r.prev_end THEN 'no_data' END, 'no telemetry', r.prev_end),
    (CASE WHEN r.prev_end IS NULL THEN CASE WHEN r.p IS NULL THEN r.state END
          WHEN r.begins > r.prev_end OR r.state <> r.prev_state THEN r.state END,
     coalesce(r.state_reason, ''), r.begins)
 ) AS e(state, reason, at)
 WHERE e.state IS NOT NULL
 ORDER BY r.gpu_id, e.at
ON CONFLICT (gpu_id, at) DO UPDATE
   SET state = EXCLUDED.state, reason = EXCLUDED.reason, recorded_at = EXCLUDED.recorded_at
"""  # noqa: S608 - constants only, no input

# The marked hours, the hour of the first window after each island (its ECC deltas are
# taken against a window the island may have changed) and the hour of the first energy reading
# after it, however far (its previous reading may now lie in the island, or a window of the
# island may break the silence it was taken across).
#
# ``since``: where a marked hour's rollup is extended from instead of read whole (NULL: whole).
# An hour is extended from its mark's earliest instant when nothing before that instant can
# have changed: its tally agrees with its rollup (``telemetry_hourtally``), no marked hour
# just before it (its island starts here), no other island's next window or next reading in
# it, and the instant comes after the last window the rollup holds. Every window a rollup does
# not hold is marked with an instant at or before its own — windows and their marks commit
# together, a pass takes only committed marks and waits for the chunks that rely on marks
# their process remembers (the races above), and a window that commits while its hour's mark
# is claimed waits for the pass — and windows are never removed but with their partition. So
# the rollup holds every window before the instant, and the windows from it on are exactly
# the ones it does not hold.
# The statement answers how many hours it set to be extended.
_HOURS_FROM_CLAIM = """
WITH touched AS (
INSERT INTO telemetry_touched_hours (gpu_id, hour, since)
SELECT k.gpu_id, k.hour,
       CASE WHEN NOT k.after_island AND r.gpu_id IS NOT NULL AND c.lo > t.last_window_start
                 AND NOT EXISTS (SELECT FROM telemetry_claimed b
                                  WHERE b.gpu_id = k.gpu_id
                                    AND b.hour = k.hour - interval '1 hour')
            THEN c.lo
       END
  FROM (SELECT gpu_id, hour, bool_or(after_island) AS after_island
          FROM (SELECT gpu_id, hour, false AS after_island FROM telemetry_claimed
                UNION ALL
                SELECT gpu_id, date_trunc('hour', n, 'UTC'), true
                  FROM telemetry_islands WHERE n IS NOT NULL
                UNION ALL
                SELECT t.gpu_id, date_trunc('hour', r.window_start, 'UTC'), true
                  FROM telemetry_islands t
                 CROSS JOIN LATERAL (
                       SELECT w.window_start FROM telemetry_window w
                        WHERE w.gpu_id = t.gpu_id AND w.window_start >= t.hi
                          AND w.energy_mj IS NOT NULL
                        ORDER BY w.window_start LIMIT 1) AS r) AS hours
         GROUP BY gpu_id, hour) AS k
  LEFT JOIN telemetry_claimed c ON c.gpu_id = k.gpu_id AND c.hour = k.hour
  LEFT JOIN telemetry_hourtally t ON t.gpu_id = k.gpu_id AND t.hour = k.hour
  LEFT JOIN telemetry_hourlyrollup r ON r.gpu_id = k.gpu_id AND r.hour = k.hour
   AND r.windows = t.windows AND r.computed_at = t.computed_at
RETURNING since
)
SELECT count(since) FROM touched
"""


def _increase(column: str) -> str:
    """A counter's increase at a window of ``d`` over the value before it (``<column>_before``);
    none when either is missing; a counter that went backwards was reset, so its new value is
    the increase."""
    value, before = f"d.{column}", f"d.{column}_before"
    return (
        f"(CASE WHEN {value} IS NULL OR {before} IS NULL THEN 0 "
        f"WHEN {value} >= {before} THEN {value} - {before} ELSE {value} END)"
    )


def energy_reading_before_sql(gpu: str, hour: str) -> str:
    """SQL of a GPU's previous energy reading for the first reading of a UTC hour
    (docs/accounting.md rule 6): the latest reading in the two days before the hour; and when
    the GPU sent no window at all in those two days (a silence), the reading of its last
    window before them, however old. ``gpu`` and ``hour`` are SQL expressions.

    Bounded by the hour, so PostgreSQL prunes the partitions it probes: the latest window of
    the two days nearly always carries the reading (one index probe); only a silence longer
    than that searches further back."""
    return f"""
        SELECT CASE WHEN near.window_start IS NULL THEN (
                        SELECT far.energy_mj FROM telemetry_window far
                         WHERE far.gpu_id = {gpu} AND far.window_start < {hour} - {_AROUND}
                         ORDER BY far.window_start DESC LIMIT 1)
                    ELSE coalesce(near.energy_mj, (
                        SELECT r.energy_mj FROM telemetry_window r
                         WHERE r.gpu_id = {gpu} AND r.window_start < near.window_start
                           AND r.window_start >= {hour} - {_AROUND}
                           AND r.energy_mj IS NOT NULL
                         ORDER BY r.window_start DESC LIMIT 1))
               END AS energy_mj
          FROM (SELECT 1) AS one
          LEFT JOIN LATERAL (
                SELECT pw.window_start, pw.energy_mj FROM telemetry_window pw
                 WHERE pw.gpu_id = {gpu} AND pw.window_start < {hour}
                   AND pw.window_start >= {hour} - {_AROUND}
                 ORDER BY pw.window_start DESC LIMIT 1) AS near ON true"""  # noqa: S608


# A touched hour's windows are read once, in order (an index scan of the hour: no sort), with
# each one's previous window in the hour (``lag``). What a window's counters are compared with:
# ECC, the previous window (the hour's first: the GPU's last window in the LOOKAROUND before
# the hour, ``prev``); energy, the previous reading in the hour — the previous window's when it
# has one, as nearly always — else, for the hour's first reading, the reading before the hour
# (``energy_reading_before_sql``: docs/accounting.md rule 6), looked up only then.
#
# An hour extended (``since``, ``_HOURS_FROM_CLAIM``) reads only its windows from ``since``
# on, the first of them compared with the hour's last window before ``since`` (``prev``), and
# adds what they sum to its rollup's figures and its tally's exact sums: the same digits as
# reading it whole, since every sum is exact until the final rounding. Hours of the last
# ``TALLIED`` keep their exact sums in their tally for the next pass.
_ROLLUPS = f"""
WITH computed AS MATERIALIZED (
SELECT h.gpu_id, h.hour, h.since,
       count(w.window_start) AS windows,
       sum(w.observed) FILTER (WHERE w.state = 'up') AS seconds_up,
       sum(w.observed) FILTER (WHERE w.state = 'degraded') AS seconds_degraded,
       sum(w.observed) FILTER (WHERE w.state = 'down') AS seconds_down,
       sum(w.util_gpu_avg::numeric * w.observed)
           FILTER (WHERE w.state IN ('up', 'degraded')) AS util_gpu_seconds,
       sum(w.energy) AS energy_mj,
       max(w.temp_max_c) AS temp_max_c,
       sum(w.ecc_corrected) AS ecc_corrected,
       sum(w.ecc_uncorrected) AS ecc_uncorrected,
       max(w.window_start) AS last_window_start
  FROM telemetry_touched_hours h
  LEFT JOIN LATERAL (
        SELECT pw.ecc_corrected, pw.ecc_uncorrected FROM telemetry_window pw
         WHERE pw.gpu_id = h.gpu_id AND pw.window_start < coalesce(h.since, h.hour)
           AND pw.window_start >= CASE WHEN h.since IS NULL THEN h.hour - %(around)s
                                       ELSE h.hour END
         ORDER BY pw.window_start DESC LIMIT 1) AS prev ON true
  LEFT JOIN LATERAL (
        SELECT d.window_start, d.state, d.util_gpu_avg, d.temp_max_c, d.observed,
               {_increase("energy_mj")} AS energy,
               {_increase("ecc_corrected")} AS ecc_corrected,
               {_increase("ecc_uncorrected")} AS ecc_uncorrected
          FROM (SELECT x.window_start, x.state, x.util_gpu_avg, x.temp_max_c, x.observed,
                       x.energy_mj, x.ecc_corrected, x.ecc_uncorrected,
                       CASE WHEN x.first THEN prev.ecc_corrected
                            ELSE x.previous_ecc_corrected END AS ecc_corrected_before,
                       CASE WHEN x.first THEN prev.ecc_uncorrected
                            ELSE x.previous_ecc_uncorrected END AS ecc_uncorrected_before,
                       CASE WHEN x.energy_mj IS NULL THEN NULL
                            WHEN x.previous_energy_mj IS NOT NULL THEN x.previous_energy_mj
                            ELSE coalesce((
                                SELECT r.energy_mj FROM telemetry_window r
                                 WHERE r.gpu_id = h.gpu_id AND r.window_start >= h.hour
                                   AND r.window_start < x.window_start
                                   AND r.energy_mj IS NOT NULL
                                 ORDER BY r.window_start DESC LIMIT 1),
                                ({energy_reading_before_sql("h.gpu_id", "h.hour")}))
                       END AS energy_mj_before
                  FROM (SELECT y.window_start, y.state, y.util_gpu_avg, y.temp_max_c,
                               y.observed_to - y.observed_from AS observed,
                               y.energy_mj, y.ecc_corrected, y.ecc_uncorrected,
                               lag(y.window_start) OVER o IS NULL AS first,
                               lag(y.energy_mj) OVER o AS previous_energy_mj,
                               lag(y.ecc_corrected) OVER o AS previous_ecc_corrected,
                               lag(y.ecc_uncorrected) OVER o AS previous_ecc_uncorrected
                          FROM telemetry_window y
                         WHERE y.gpu_id = h.gpu_id
                           AND y.window_start >= coalesce(h.since, h.hour)
                           AND y.window_start < h.hour + interval '1 hour'
                        WINDOW o AS (ORDER BY y.window_start)) AS x
                OFFSET 0) AS d
        OFFSET 0) AS w ON true
 GROUP BY h.gpu_id, h.hour, h.since
), totals AS MATERIALIZED (
SELECT c.gpu_id, c.hour,
       c.windows + coalesce(r.windows, 0) AS windows,
       coalesce(c.seconds_up, 0) + coalesce(r.seconds_up, 0) AS seconds_up,
       coalesce(c.seconds_degraded, 0) + coalesce(r.seconds_degraded, 0) AS seconds_degraded,
       coalesce(c.seconds_down, 0) + coalesce(r.seconds_down, 0) AS seconds_down,
       coalesce(c.util_gpu_seconds, 0) + coalesce(t.util_gpu_seconds, 0) AS util_gpu_seconds,
       coalesce(c.energy_mj, 0) + coalesce(t.energy_mj, 0) AS energy_mj,
       greatest(c.temp_max_c, r.temp_max_c) AS temp_max_c,
       coalesce(c.ecc_corrected, 0) + coalesce(r.ecc_corrected, 0) AS ecc_corrected,
       coalesce(c.ecc_uncorrected, 0) + coalesce(r.ecc_uncorrected, 0) AS ecc_uncorrected,
       greatest(c.last_window_start, t.last_window_start) AS last_window_start
  FROM computed c
  LEFT JOIN telemetry_hourlyrollup r
    ON c.since IS NOT NULL AND r.gpu_id = c.gpu_id AND r.hour = c.hour
  LEFT JOIN telemetry_hourtally t
    ON c.since IS NOT NULL AND t.gpu_id = c.gpu_id AND t.hour = c.hour
), tallied AS (
INSERT INTO telemetry_hourtally AS t
    (gpu_id, hour, windows, util_gpu_seconds, energy_mj, last_window_start, computed_at)
SELECT gpu_id, hour, windows, util_gpu_seconds, energy_mj, last_window_start, now()
  FROM totals
 WHERE hour >= now() - %(tallied)s
 ORDER BY 1, 2
ON CONFLICT (gpu_id, hour) DO UPDATE SET
    windows = EXCLUDED.windows, util_gpu_seconds = EXCLUDED.util_gpu_seconds,
    energy_mj = EXCLUDED.energy_mj, last_window_start = EXCLUDED.last_window_start,
    computed_at = EXCLUDED.computed_at
)
INSERT INTO telemetry_hourlyrollup
    (gpu_id, hour, windows, seconds_up, seconds_degraded, seconds_down, util_gpu_seconds,
     energy_kwh, temp_max_c, ecc_corrected, ecc_uncorrected, xid_events, computed_at)
SELECT o.gpu_id, o.hour, o.windows, o.seconds_up, o.seconds_degraded, o.seconds_down,
       round(o.util_gpu_seconds, 3),
       round(o.energy_mj::numeric / {MJ_PER_KWH}, 9),
       o.temp_max_c, o.ecc_corrected, o.ecc_uncorrected,
       (SELECT count(*) FROM telemetry_telemetryevent e
         WHERE e.gpu_id = o.gpu_id AND e.kind = 'xid'
           AND e.occurred_at >= o.hour AND e.occurred_at < o.hour + interval '1 hour'),
       now()
  FROM totals o
ON CONFLICT (gpu_id, hour) DO UPDATE SET
    windows = EXCLUDED.windows, seconds_up = EXCLUDED.seconds_up,
    seconds_degraded = EXCLUDED.seconds_degraded, seconds_down = EXCLUDED.seconds_down,
    util_gpu_seconds = EXCLUDED.util_gpu_seconds, energy_kwh = EXCLUDED.energy_kwh,
    temp_max_c = EXCLUDED.temp_max_c, ecc_corrected = EXCLUDED.ecc_corrected,
    ecc_uncorrected = EXCLUDED.ecc_uncorrected, xid_events = EXCLUDED.xid_events,
    computed_at = EXCLUDED.computed_at
"""  # noqa: S608 - constants only, no input

_UNMARK = """
DELETE FROM telemetry_derivedwork d USING telemetry_claimed c
 WHERE d.gpu_id = c.gpu_id AND d.hour = c.hour
"""


def derived_mark(
    *, cursor: Any, marks: Iterable[tuple[uuid.UUID, dt.datetime, dt.datetime]]
) -> None:
    """Records, inside the caller's (window-writing) transaction, that these (GPU, UTC hour,
    earliest instant touched) need their transitions and rollup recomputed. The same
    (GPU, hour) may come more than once: SQL merges them."""
    document = marks_document(marks)
    if document is not None:
        cursor.execute(MARK_UPSERT, {"marks": document})


def marks_document(marks: Iterable[tuple[Any, dt.datetime, dt.datetime]]) -> str | None:
    """Marks as ``MARK_ROWS`` reads them, grouped by instant (None when there are none). The
    hour given is the instant's own UTC hour, so it is not sent."""
    by_instant: dict[dt.datetime, list[Any]] = {}
    for gpu, _, lo in marks:
        gpus = by_instant.get(lo)
        if gpus is None:
            by_instant[lo] = [gpu]
        else:
            gpus.append(gpu)
    if not by_instant:
        return None
    return msgspec.json.encode(list(by_instant.items())).decode()


def instant_marks(
    pairs: Iterable[tuple[uuid.UUID, dt.datetime]],
) -> list[tuple[uuid.UUID, dt.datetime, dt.datetime]]:
    """(GPU, instant) pairs — XID events, say — as marks."""
    return [
        (g, at.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0), at) for g, at in pairs
    ]


@dataclass
class DerivedResult:
    claimed: int = 0  # marked (GPU, hour) pairs taken and cleared
    rollups: int = 0  # hourly rollups written (marked hours and the hours after them)
    extended: int = 0  # of them, rollups extended with new windows instead of read whole
    busy: bool = False  # other passes (or a rebuild) held every lock: nothing was done


class _Rotation:
    """Which shard this process tries first in its next pass: each pass starts one further,
    so one process alone visits every shard in turn."""

    next = 0


class _Frozen:
    """Whether this process holds MARKS_LOCK (a session-level lock: released after the claim,
    not at the pass's commit, so chunks wait only while a pass claims)."""

    held = False


@contextlib.contextmanager
def _marks_frozen(cursor: Any) -> Iterator[None]:
    """Takes MARKS_LOCK exclusively — waiting for every chunk that relies on the marks its
    process remembers to commit — and a new pass number, for the claim inside; then lets
    chunks go on. If the claim fails, the lock is let go after the rollback
    (``derived_process``)."""
    # Marked held first: whatever interrupts the statement once the lock is granted (a task's
    # time limit), ``_marks_thaw`` lets it go (unlocking a lock not held only returns false).
    _Frozen.held = True
    cursor.execute(
        "SELECT pg_advisory_lock(%s), nextval('telemetry_derived_pass_seq')", [MARKS_LOCK]
    )
    yield
    cursor.execute("SELECT pg_advisory_unlock(%s)", [MARKS_LOCK])
    _Frozen.held = False


def _marks_thaw() -> None:
    """Lets MARKS_LOCK go if a failed claim left it held; closes the connection (which lets
    every lock go) if even that fails (a caller's transaction, aborted)."""
    if not _Frozen.held:
        return
    _Frozen.held = False
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [MARKS_LOCK])
    except Exception:  # a caller's transaction, aborted: the lock goes with the connection
        connection.close()


def derived_process(*, limit: int, share: bool = False) -> DerivedResult:
    """One pass: claims up to ``limit`` of the oldest marks of the shards of the GPUs whose
    locks are free, recomputes their transitions and rollups, and clears them, in one
    transaction. With ``share`` (the Celery task, which queues another task after each pass
    that found marks), a large backlog is left shard by shard to the passes of other
    processes (``_claim``). Returns at once with ``busy`` when other passes hold every shard,
    or a rebuild runs (the caller re-queues; marks stay until a pass takes them)."""
    try:
        return _derived_process(limit=limit, share=share)
    finally:
        _marks_thaw()


def _derived_process(*, limit: int, share: bool) -> DerivedResult:
    result = DerivedResult()
    with transaction.atomic():
        cursor = psycopg.Cursor(connection.connection)
        cursor.execute("SELECT pg_try_advisory_xact_lock_shared(%s)", [PASS_LOCK])
        row = cursor.fetchone()
        if not (row and row[0]):
            result.busy = True  # a rebuild
            return result
        cursor.execute("SET LOCAL work_mem = '64MB'")
        # On a just-loaded partition autovacuum has not analysed yet, the transition and
        # rollup statements are estimated high enough to be JIT-compiled: ~0.4 s of 2.7 s of
        # backend CPU for 16k GPU-hours, measured, for nothing (none once it is analysed).
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(_TEMP)
        with _marks_frozen(cursor):
            taken = _claim(cursor, limit=limit, share=share, result=result)
        if not taken:
            result.busy = True
            return result
        if not result.claimed:
            return result
        params = {"around": LOOKAROUND, "tallied": TALLIED}
        cursor.execute(_ISLANDS, params)
        cursor.execute(_TRANSITIONS_DELETE)
        cursor.execute(_TRANSITIONS_INSERT)
        gpu_state_events_emit(cursor=cursor, scope=ISLANDS)
        # Draft incidents from down XIDs and lost GPUs; resolved when the GPU is up again.
        incidents_from_events(cursor=cursor, around=LOOKAROUND)
        cursor.execute(_HOURS_FROM_CLAIM)
        row = cursor.fetchone()
        result.extended = int(row[0]) if row else 0
        cursor.execute(_ROLLUPS, params)
        result.rollups = int(cursor.rowcount)
        cursor.execute(_UNMARK)
    return result


def _claim(cursor: Any, *, limit: int, share: bool, result: DerivedResult) -> int:
    """Claims marks shard by shard, in this process's rotation, from each shard whose lock is
    free (held to the commit), until ``limit`` marks are claimed — or, with ``share``,
    ``ONE_SHARD_FROM``: a small backlog is one pass, a large one is left shard by shard to the
    passes of other processes. Returns how many shards were taken (0: every one was held
    elsewhere)."""
    first = _Rotation.next
    _Rotation.next = (first + 1) % SHARDS
    taken = 0
    for shard in ((first + i) % SHARDS for i in range(SHARDS)):
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [PASS_LOCK + 1 + shard])
        row = cursor.fetchone()
        if not (row and row[0]):
            continue
        taken += 1
        cursor.execute(_CLAIM, {"limit": limit - result.claimed, "shards": SHARDS, "shard": shard})
        result.claimed += int(cursor.rowcount)
        if result.claimed >= (min(limit, ONE_SHARD_FROM) if share else limit):
            break
    return taken


def derived_drain(*, limit: int, budget_s: float | None = None) -> DerivedResult:
    """Passes until one finds no marks in any shard it could take (or ``budget_s`` is spent,
    or other passes hold every shard)."""
    total = DerivedResult()
    started = time.monotonic()
    while True:
        result = derived_process(limit=limit)
        total.claimed += result.claimed
        total.rollups += result.rollups
        total.extended += result.extended
        total.busy = result.busy
        if result.busy or not result.claimed:
            return total
        if budget_s is not None and time.monotonic() - started > budget_s:
            return total


def rollups_rebuild(
    *, start: dt.datetime, end: dt.datetime, gpu_ids: list[uuid.UUID] | None = None
) -> int:
    """Recomputes every hourly rollup in ``[start, end)`` that has windows or XID events.

    Waits for a running derived pass (the same lock), so the two never write one row from
    different snapshots. Marks in the range stay: the next pass recomputes them (same rows).
    Every hour is read whole; those within ``TALLIED`` get their tallies too, so the next pass
    may extend them.
    """
    gpu_filter = "AND gpu_id = ANY(%(gpus)s)" if gpu_ids is not None else ""
    params: dict[str, Any] = {
        "start": start,
        "end": end,
        "gpus": gpu_ids,
        "around": LOOKAROUND,
        "tallied": TALLIED,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PASS_LOCK])
        cursor.execute("SET LOCAL work_mem = '64MB'")
        cursor.execute(_TEMP)
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
