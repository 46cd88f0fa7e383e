"""Node status updated in place (issue 22, goal 1).

Every chunk of the window path updates its nodes' ``last_seen_at``. The partial index on it
(``telemetry_node_fresh``, for beat's staleness check) made each of those updates write new
index entries instead of a heap-only (HOT) update; the check reads one row per node once a
minute and needs no index. Half of each page is left free so the updates stay on their page.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0012_placement_changes")]

    operations = [
        migrations.RemoveIndex(model_name="nodestatus", name="telemetry_node_fresh"),
        migrations.RunSQL(
            "ALTER TABLE telemetry_nodestatus SET (fillfactor = 50)",
            "ALTER TABLE telemetry_nodestatus RESET (fillfactor)",
        ),
    ]
