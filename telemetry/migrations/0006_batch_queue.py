"""The queue of unprocessed batches moves to a table of its own, and marking a batch
processed becomes a HOT update (no index entry written, half of each page kept free)."""

import django.db.models.deletion
from django.db import migrations, models

# Every batch stored pending (or failed) is queued by the statement that stores it, whoever
# writes it: the endpoint, a bulk load, a test. One trigger call per statement, not per row.
QUEUE_ON_INSERT = """
CREATE FUNCTION telemetry_batch_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO telemetry_queuedbatch (batch_id, received_at, attempts, failed)
    SELECT id, received_at, attempts, status = 'failed'
      FROM added
     WHERE status IN ('pending', 'failed');
    RETURN NULL;
END $$;
CREATE TRIGGER telemetry_batch_enqueue
    AFTER INSERT ON telemetry_ingestbatch
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION telemetry_batch_enqueue();
INSERT INTO telemetry_queuedbatch (batch_id, received_at, attempts, failed)
SELECT id, received_at, attempts, status = 'failed'
  FROM telemetry_ingestbatch
 WHERE status IN ('pending', 'failed');
"""
DROP_QUEUE_ON_INSERT = """
DROP TRIGGER telemetry_batch_enqueue ON telemetry_ingestbatch;
DROP FUNCTION telemetry_batch_enqueue();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0005_rollup_covering_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueuedBatch",
            fields=[
                (
                    "batch",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="queued",
                        serialize=False,
                        to="telemetry.ingestbatch",
                    ),
                ),
                ("received_at", models.DateTimeField()),
                (
                    "attempts",
                    models.PositiveSmallIntegerField(
                        default=0, help_text="Workers lost (killed, hung) while processing it."
                    ),
                ),
                ("failed", models.BooleanField(default=False)),
            ],
            options={
                "ordering": ["received_at", "batch"],
            },
        ),
        migrations.RemoveIndex(
            model_name="ingestbatch",
            name="telemetry_batch_queue",
        ),
        migrations.RemoveIndex(
            model_name="ingestbatch",
            name="telemetry_batch_suspect",
        ),
        migrations.AddIndex(
            model_name="queuedbatch",
            index=models.Index(
                condition=models.Q(("failed", False)),
                fields=["received_at", "batch"],
                name="telemetry_queue_next",
            ),
        ),
        migrations.AddIndex(
            model_name="queuedbatch",
            index=models.Index(
                condition=models.Q(("attempts__gt", 0), ("failed", False)),
                fields=["received_at", "batch"],
                name="telemetry_queue_suspect",
            ),
        ),
        migrations.RunSQL(QUEUE_ON_INSERT, DROP_QUEUE_ON_INSERT),
        # A batch's row is written twice: stored, then marked processed. With room on its
        # page the second write is a HOT update (no index entry, a small WAL record). Pages
        # written before this keep their layout; new ones are filled to half.
        migrations.RunSQL(
            "ALTER TABLE telemetry_ingestbatch SET (fillfactor = 50)",
            "ALTER TABLE telemetry_ingestbatch RESET (fillfactor)",
        ),
    ]
