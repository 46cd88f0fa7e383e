"""The hourly rollup statement as issue 22 found it, frozen. Only the tests use it, as the
reference that ``telemetry.services.derived._ROLLUPS`` must equal, row for row and digit for
digit: a faster statement (set-based, fewer numeric products — both tried, docs/scaling.md)
must give the very same rollups."""

from __future__ import annotations

from telemetry.services.derived import MJ_PER_KWH, energy_reading_before_sql


def _delta(column: str, *, first: str = "w.rn = 1", before: str = "prev") -> str:
    """Counter increase since the previous window (or reading); a counter that went backwards
    was reset. ``first`` says when the previous one is ``before`` the hour."""
    prev = f"(CASE WHEN {first} THEN {before}.{column} ELSE w.prev_{column} END)"
    return (
        f"(CASE WHEN w.{column} IS NULL OR {prev} IS NULL THEN 0 "
        f"WHEN w.{column} >= {prev} THEN w.{column} - {prev} ELSE w.{column} END)"
    )


# Into a TEMP table of the rollups' columns (``rollup_reference``), from the hours in
# ``telemetry_touched_hours``.
ROLLUPS_REFERENCE = f"""
INSERT INTO rollup_reference
    (gpu_id, hour, windows, seconds_up, seconds_degraded, seconds_down, util_gpu_seconds,
     energy_kwh, temp_max_c, ecc_corrected, ecc_uncorrected, xid_events, computed_at)
SELECT h.gpu_id, h.hour,
       count(w.window_start),
       coalesce(sum(w.observed) FILTER (WHERE w.state = 'up'), 0),
       coalesce(sum(w.observed) FILTER (WHERE w.state = 'degraded'), 0),
       coalesce(sum(w.observed) FILTER (WHERE w.state = 'down'), 0),
       round(coalesce(sum(w.util_gpu_avg::numeric * w.observed)
                      FILTER (WHERE w.state IN ('up', 'degraded')), 0), 3),
       round(coalesce(sum({_delta("energy_mj", first="w.rn_reading = 1", before="reading")}),
                      0)::numeric / {MJ_PER_KWH}, 9),
       max(w.temp_max_c),
       coalesce(sum({_delta("ecc_corrected")}), 0),
       coalesce(sum({_delta("ecc_uncorrected")}), 0),
       (SELECT count(*) FROM telemetry_telemetryevent e
         WHERE e.gpu_id = h.gpu_id AND e.kind = 'xid'
           AND e.occurred_at >= h.hour AND e.occurred_at < h.hour + interval '1 hour'),
       now()
  FROM telemetry_touched_hours h
  LEFT JOIN LATERAL (
        SELECT pw.ecc_corrected, pw.ecc_uncorrected FROM telemetry_window pw
         WHERE pw.gpu_id = h.gpu_id AND pw.window_start < h.hour
           AND pw.window_start >= h.hour - %(around)s
         ORDER BY pw.window_start DESC LIMIT 1) AS prev ON true
  LEFT JOIN LATERAL ({energy_reading_before_sql("h.gpu_id", "h.hour")}) AS reading ON true
  LEFT JOIN LATERAL (
        SELECT x.window_start, x.state, x.util_gpu_avg, x.temp_max_c,
               x.observed_to - x.observed_from AS observed,
               x.energy_mj, x.ecc_corrected, x.ecc_uncorrected,
               lag(x.energy_mj) OVER readings AS prev_energy_mj,
               row_number() OVER readings AS rn_reading,
               lag(x.ecc_corrected) OVER o AS prev_ecc_corrected,
               lag(x.ecc_uncorrected) OVER o AS prev_ecc_uncorrected,
               row_number() OVER o AS rn
          FROM telemetry_window x
         WHERE x.gpu_id = h.gpu_id AND x.window_start >= h.hour
           AND x.window_start < h.hour + interval '1 hour'
        WINDOW o AS (ORDER BY x.window_start),
               readings AS (PARTITION BY x.energy_mj IS NULL ORDER BY x.window_start)) AS w
        ON true
 GROUP BY h.gpu_id, h.hour
"""  # noqa: S608 - constants only, no input
