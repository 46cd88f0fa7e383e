"""Batch bodies move to a table of their own: the batch row the worker rewrites (a HOT update,
two versions on one page) is then a few hundred bytes, not the whole batch."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0006_batch_queue"),
    ]

    operations = [
        migrations.CreateModel(
            name="BatchBody",
            fields=[
                (
                    "batch",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="raw",
                        serialize=False,
                        to="telemetry.ingestbatch",
                    ),
                ),
                ("body", models.BinaryField()),
            ],
        ),
        # Nullable first, so that going back re-adds the column before the bodies return.
        migrations.AlterField(
            model_name="ingestbatch",
            name="body",
            field=models.BinaryField(
                null=True, help_text="gzip(JSON) exactly as received; emptied by retention."
            ),
        ),
        migrations.RunSQL(
            "INSERT INTO telemetry_batchbody (batch_id, body) "
            "SELECT id, body FROM telemetry_ingestbatch",
            "UPDATE telemetry_ingestbatch b SET body = r.body "
            "FROM telemetry_batchbody r WHERE r.batch_id = b.id",
        ),
        migrations.RemoveField(
            model_name="ingestbatch",
            name="body",
        ),
    ]
