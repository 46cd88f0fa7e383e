"""Daily rollups: per GPU and UTC day, the sums of its hourly rollups that accounting needs.

A month close froze every GPU's days by summing the month's hourly rollups per day (7.4M rows
for 10,000 GPUs); it now reads one row per GPU and day (docs/scaling.md, goal 4a).

The table is kept equal to ``GROUP BY gpu_id, UTC day`` of ``telemetry_hourlyrollup`` by the
database, whoever writes the hourly rows (the derived pass, ``rollups_rebuild``, a bulk load or
COPY, the ORM): one trigger call per statement, with the statement's rows as transition tables,
recomputes each (GPU, day) it touched from the hourly rows — never a delta added to a sum,
like everything derived here. A TRUNCATE of the hourly table empties it.

Concurrent writers of one (GPU, day): the refresh first locks its rows (inserting the missing
ones: an insert of the same key waits for the other transaction), in key order, and only then
sums, in a statement of its own — under READ COMMITTED it sees whatever the writer before it
committed. A sum that did not change is not rewritten.
"""

import django.db.models.deletion
from django.db import migrations, models

FORWARD = r"""
CREATE FUNCTION telemetry_dailyrollup_refresh(gpus uuid[], days date[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO telemetry_dailyrollup AS d
           (gpu_id, day, seconds_up, seconds_down, util_gpu_seconds, energy_kwh)
    SELECT k.gpu_id, k.day, 0, 0, 0, 0
      FROM unnest(gpus, days) AS k (gpu_id, day)
     ORDER BY 1, 2
    ON CONFLICT (gpu_id, day) DO UPDATE SET seconds_up = d.seconds_up WHERE false;

    UPDATE telemetry_dailyrollup d
       SET seconds_up = s.up, seconds_down = s.down, util_gpu_seconds = s.busy,
           energy_kwh = s.energy
      FROM (SELECT k.gpu_id, k.day, sum(h.seconds_up + h.seconds_degraded) AS up,
                   sum(h.seconds_down) AS down, sum(h.util_gpu_seconds) AS busy,
                   sum(h.energy_kwh) AS energy
              FROM unnest(gpus, days) AS k (gpu_id, day)
              JOIN telemetry_hourlyrollup h ON h.gpu_id = k.gpu_id
               AND h.hour >= k.day::timestamp AT TIME ZONE 'UTC'
               AND h.hour < (k.day + 1)::timestamp AT TIME ZONE 'UTC'
             GROUP BY k.gpu_id, k.day) s
     WHERE d.gpu_id = s.gpu_id AND d.day = s.day
       AND (d.seconds_up, d.seconds_down, d.util_gpu_seconds, d.energy_kwh)
           IS DISTINCT FROM (s.up, s.down, s.busy, s.energy);

    -- A day whose hourly rows are all gone (deleted, or moved by an update).
    DELETE FROM telemetry_dailyrollup d
     USING unnest(gpus, days) AS k (gpu_id, day)
     WHERE d.gpu_id = k.gpu_id AND d.day = k.day
       AND NOT EXISTS (
           SELECT FROM telemetry_hourlyrollup h
            WHERE h.gpu_id = k.gpu_id
              AND h.hour >= k.day::timestamp AT TIME ZONE 'UTC'
              AND h.hour < (k.day + 1)::timestamp AT TIME ZONE 'UTC');
END $$;

-- The (GPU, UTC day) pairs of a statement's rows: ``added`` (insert), ``removed`` (delete),
-- both (update: a row may have moved to another GPU or hour).
CREATE FUNCTION telemetry_dailyrollup_touched() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gpus uuid[];
    days date[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(gpu_id), array_agg(day) INTO gpus, days
          FROM (SELECT DISTINCT gpu_id, (hour AT TIME ZONE 'UTC')::date AS day FROM added) t;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(gpu_id), array_agg(day) INTO gpus, days
          FROM (SELECT DISTINCT gpu_id, (hour AT TIME ZONE 'UTC')::date AS day FROM removed) t;
    ELSE
        SELECT array_agg(gpu_id), array_agg(day) INTO gpus, days
          FROM (SELECT gpu_id, (hour AT TIME ZONE 'UTC')::date AS day FROM added
                UNION
                SELECT gpu_id, (hour AT TIME ZONE 'UTC')::date FROM removed) t;
    END IF;
    IF gpus IS NOT NULL THEN
        PERFORM telemetry_dailyrollup_refresh(gpus, days);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER telemetry_dailyrollup_on_insert
    AFTER INSERT ON telemetry_hourlyrollup REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION telemetry_dailyrollup_touched();
CREATE TRIGGER telemetry_dailyrollup_on_update
    AFTER UPDATE ON telemetry_hourlyrollup REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION telemetry_dailyrollup_touched();
CREATE TRIGGER telemetry_dailyrollup_on_delete
    AFTER DELETE ON telemetry_hourlyrollup REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION telemetry_dailyrollup_touched();

-- DELETE, not TRUNCATE: a TRUNCATE of both tables in one statement (Django's flush) would
-- find the daily table in use.
CREATE FUNCTION telemetry_dailyrollup_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM telemetry_dailyrollup;
    RETURN NULL;
END $$;
CREATE TRIGGER telemetry_dailyrollup_on_truncate
    AFTER TRUNCATE ON telemetry_hourlyrollup
    FOR EACH STATEMENT EXECUTE FUNCTION telemetry_dailyrollup_truncate();

-- The rollups already there (the triggers above hold the hourly table until this commits).
SET LOCAL work_mem = '256MB';
INSERT INTO telemetry_dailyrollup
       (gpu_id, day, seconds_up, seconds_down, util_gpu_seconds, energy_kwh)
SELECT gpu_id, (hour AT TIME ZONE 'UTC')::date, sum(seconds_up + seconds_degraded),
       sum(seconds_down), sum(util_gpu_seconds), sum(energy_kwh)
  FROM telemetry_hourlyrollup
 GROUP BY 1, 2;
"""

BACKWARD = r"""
DROP TRIGGER telemetry_dailyrollup_on_truncate ON telemetry_hourlyrollup;
DROP TRIGGER telemetry_dailyrollup_on_delete ON telemetry_hourlyrollup;
DROP TRIGGER telemetry_dailyrollup_on_update ON telemetry_hourlyrollup;
DROP TRIGGER telemetry_dailyrollup_on_insert ON telemetry_hourlyrollup;
DROP FUNCTION telemetry_dailyrollup_truncate();
DROP FUNCTION telemetry_dailyrollup_touched();
DROP FUNCTION telemetry_dailyrollup_refresh(uuid[], date[]);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0004_incident_drafts"),
        ("telemetry", "0010_derived_without_foreign_keys"),
    ]

    operations = [
        migrations.CreateModel(
            name="DailyRollup",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "gpu",
                        "day",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("day", models.DateField(help_text="The UTC day.")),
                (
                    "seconds_up",
                    models.IntegerField(
                        help_text="Σ up and degraded seconds: what accounting counts as "
                        "telemetry-up."
                    ),
                ),
                ("seconds_down", models.IntegerField()),
                (
                    "util_gpu_seconds",
                    models.DecimalField(
                        decimal_places=3,
                        help_text="Σ utilization (%) x seconds over up and degraded windows.",
                        max_digits=22,
                    ),
                ),
                ("energy_kwh", models.DecimalField(decimal_places=9, max_digits=22)),
                (
                    "gpu",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="fleet.gpu",
                    ),
                ),
            ],
            options={
                "ordering": ["gpu", "day"],
                "indexes": [models.Index(fields=["day"], name="telemetry_d_day_fdc3b5_idx")],
            },
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
