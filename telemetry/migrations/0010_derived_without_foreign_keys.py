"""Rollups and transitions without foreign keys, as windows have none (issue 22).

The derived pass writes only GPUs whose windows it has just read; the deferred per-row checks
of the two foreign keys, with the index below, were ~6 % of its CPU (docs/scaling.md).
Transitions also lose their index on ``gpu`` alone: their unique ``(gpu, at)`` serves every
lookup by GPU.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0001_initial"),
        ("telemetry", "0009_window_coverage"),
    ]

    operations = [
        migrations.AlterField(
            model_name="gpustatetransition",
            name="gpu",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="fleet.gpu",
            ),
        ),
        migrations.AlterField(
            model_name="hourlyrollup",
            name="gpu",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="fleet.gpu",
            ),
        ),
    ]
