"""A day's first hours insert its daily rollup with its sums at once (issue 22, goal 2).

The refresh of migration 0011 inserted every missing (GPU, day) with zero sums, to hold it,
and then rewrote it with the sums in a statement of its own: two row versions for each new
day, ~0.16 s of the derived pass's ~1.4 s over 8,000 new days. A day that has no row yet is
now inserted with its sums in one statement, which also reads whether it exists, so both
come from one snapshot in which it did not. That is as safe as summing after the lock: any
other writer of the day's hours meets this row — its insert waits for this transaction —
and sums after it commits. Days that exist (or that another writer inserted meanwhile) are
held and summed after the lock, as before.
"""

import importlib

from django.db import migrations

FORWARD = r"""
CREATE OR REPLACE FUNCTION telemetry_dailyrollup_refresh(gpus uuid[], days date[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    held_gpus uuid[];
    held_days date[];
BEGIN
    -- New days, with their sums; RETURNING names those this statement inserted.
    WITH fresh AS (
        INSERT INTO telemetry_dailyrollup AS d
               (gpu_id, day, seconds_up, seconds_down, util_gpu_seconds, energy_kwh)
        SELECT k.gpu_id, k.day, s.up, s.down, s.busy, s.energy
          FROM unnest(gpus, days) AS k (gpu_id, day)
         CROSS JOIN LATERAL (
               SELECT sum(h.seconds_up + h.seconds_degraded) AS up,
                      sum(h.seconds_down) AS down, sum(h.util_gpu_seconds) AS busy,
                      sum(h.energy_kwh) AS energy, count(*) AS hours
                 FROM telemetry_hourlyrollup h
                WHERE h.gpu_id = k.gpu_id
                  AND h.hour >= k.day::timestamp AT TIME ZONE 'UTC'
                  AND h.hour < (k.day + 1)::timestamp AT TIME ZONE 'UTC') AS s
         WHERE s.hours > 0
           AND NOT EXISTS (SELECT FROM telemetry_dailyrollup x
                            WHERE x.gpu_id = k.gpu_id AND x.day = k.day)
         ORDER BY 1, 2
        ON CONFLICT (gpu_id, day) DO UPDATE SET seconds_up = d.seconds_up WHERE false
        RETURNING d.gpu_id, d.day
    )
    SELECT array_agg(k.gpu_id), array_agg(k.day) INTO held_gpus, held_days
      FROM unnest(gpus, days) AS k (gpu_id, day)
     WHERE NOT EXISTS (SELECT FROM fresh f WHERE f.gpu_id = k.gpu_id AND f.day = k.day);

    IF held_gpus IS NULL THEN
        RETURN;
    END IF;

    -- The other days: held first (a missing one inserted to hold it), then summed in a
    -- statement of its own, which sees whatever a writer before this one committed.
    INSERT INTO telemetry_dailyrollup AS d
           (gpu_id, day, seconds_up, seconds_down, util_gpu_seconds, energy_kwh)
    SELECT k.gpu_id, k.day, 0, 0, 0, 0
      FROM unnest(held_gpus, held_days) AS k (gpu_id, day)
     ORDER BY 1, 2
    ON CONFLICT (gpu_id, day) DO UPDATE SET seconds_up = d.seconds_up WHERE false;

    UPDATE telemetry_dailyrollup d
       SET seconds_up = s.up, seconds_down = s.down, util_gpu_seconds = s.busy,
           energy_kwh = s.energy
      FROM (SELECT k.gpu_id, k.day, sum(h.seconds_up + h.seconds_degraded) AS up,
                   sum(h.seconds_down) AS down, sum(h.util_gpu_seconds) AS busy,
                   sum(h.energy_kwh) AS energy
              FROM unnest(held_gpus, held_days) AS k (gpu_id, day)
              JOIN telemetry_hourlyrollup h ON h.gpu_id = k.gpu_id
               AND h.hour >= k.day::timestamp AT TIME ZONE 'UTC'
               AND h.hour < (k.day + 1)::timestamp AT TIME ZONE 'UTC'
             GROUP BY k.gpu_id, k.day) s
     WHERE d.gpu_id = s.gpu_id AND d.day = s.day
       AND (d.seconds_up, d.seconds_down, d.util_gpu_seconds, d.energy_kwh)
           IS DISTINCT FROM (s.up, s.down, s.busy, s.energy);

    -- A day whose hourly rows are all gone (deleted, or moved by an update).
    DELETE FROM telemetry_dailyrollup d
     USING unnest(held_gpus, held_days) AS k (gpu_id, day)
     WHERE d.gpu_id = k.gpu_id AND d.day = k.day
       AND NOT EXISTS (
           SELECT FROM telemetry_hourlyrollup h
            WHERE h.gpu_id = k.gpu_id
              AND h.hour >= k.day::timestamp AT TIME ZONE 'UTC'
              AND h.hour < (k.day + 1)::timestamp AT TIME ZONE 'UTC');
END $$;
"""


def _backward() -> str:
    """Migration 0011's refresh, as it created it."""
    created = importlib.import_module("telemetry.migrations.0011_daily_rollups").FORWARD
    start = created.index("CREATE FUNCTION telemetry_dailyrollup_refresh")
    end = created.index("END $$;", start) + len("END $$;")
    return created[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0015_derived_pass_sequence")]

    operations = [migrations.RunSQL(FORWARD, _backward())]
