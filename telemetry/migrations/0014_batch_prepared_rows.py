"""A batch's windows as COPY-ready rows beside its body (issue 22, goal 1).

The endpoint decodes every body before storing it; it now also stores the windows as the
worker's binary COPY sends them, so the worker copies bytes instead of decoding the body again
and building each row (``telemetry.services.processing.prepared``). Null for batches stored
before, which the worker prepares from their bodies. Compressed with lz4 where the server has
it (a minute of a node's eight GPUs is ~3 KB, above the size PostgreSQL compresses at), as
frozen inputs are (billing migration 0010).
"""

from django.db import migrations, models

FORWARD = r"""
DO $$
BEGIN
    ALTER TABLE telemetry_batchbody ALTER COLUMN rows SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: prepared rows stay compressed with pglz';
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0013_node_status_hot")]

    operations = [
        migrations.AddField(
            model_name="batchbody",
            name="rows",
            field=models.BinaryField(blank=True, null=True),
        ),
        migrations.RunSQL(FORWARD, migrations.RunSQL.noop),
    ]
