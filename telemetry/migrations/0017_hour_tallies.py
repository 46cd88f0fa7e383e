"""The exact sums behind the rollups of recent hours, so a pass can extend an open hour's
rollup with its new windows instead of reading the whole hour again (issue 22, live cost).

A rollup stores Σ utilization × seconds rounded to 3 places and energy rounded to 9 places
of a kWh; adding a new minute to rounded figures would not give what a recompute gives. The
tally keeps, per (GPU, hour) of the last few hours, the unrounded Σ utilization × seconds, the
energy in mJ, the window count and the start of the last window the rollup holds, with the
rollup's ``computed_at``: a tally counts only
while both say the same (whatever rewrites a rollup otherwise — a rebuild of old hours, the
ORM — leaves the tally behind, and the next pass reads the hour whole). Unlogged: derived,
rebuilt by any pass, and lost on a crash only as a fall back to reading hours whole.
No foreign key, like the rollups. Pruned hourly (``upkeep.hour_tallies_prune``).
"""

from django.db import migrations

FORWARD = """
CREATE UNLOGGED TABLE telemetry_hourtally (
    gpu_id uuid NOT NULL,
    hour timestamptz NOT NULL,
    windows integer NOT NULL,
    util_gpu_seconds numeric NOT NULL,
    energy_mj bigint NOT NULL,
    last_window_start timestamptz,
    computed_at timestamptz NOT NULL,
    PRIMARY KEY (gpu_id, hour)
);
"""

BACKWARD = "DROP TABLE telemetry_hourtally;"


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0016_daily_rollups_fresh_days")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
