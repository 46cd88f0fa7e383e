"""Dirty (GPU, hour) marks: derived work the ingest path has left for the derived pass.

The chunk transaction that COPYs windows marks every (GPU, hour) it touched, with the earliest
instant it touched there (transitions are recomputed from there on only); the pass
claims marks (``FOR UPDATE SKIP LOCKED``), recomputes transitions and rollups from windows and
deletes the marks in the same transaction. A mark is bookkeeping, not data: losing the table
loses nothing a ``rollups_rebuild`` cannot redo. Raw SQL like the windows table: no model.
"""

from django.db import migrations

FORWARD = r"""
CREATE TABLE telemetry_derivedwork (
    gpu_id uuid NOT NULL,
    hour timestamptz NOT NULL,
    lo timestamptz NOT NULL,  -- the earliest window_start (or XID time) touched in the hour
    marked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (gpu_id, hour)
) WITH (fillfactor = 70);  -- room for HOT updates when a late window lowers lo
CREATE INDEX telemetry_derivedwork_marked ON telemetry_derivedwork (marked_at);
CREATE INDEX telemetry_derivedwork_hour ON telemetry_derivedwork (hour);
"""

BACKWARD = "DROP TABLE telemetry_derivedwork;"


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0002_window_partitions")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
