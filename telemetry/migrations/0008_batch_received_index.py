"""An index for the console's newest-first list of batches and for retention's cut-off."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0007_batch_bodies_apart"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="ingestbatch",
            index=models.Index(fields=["received_at", "id"], name="telemetry_batch_received"),
        ),
    ]
