"""A rate card says whether `down` seconds that no incident covers are charged hosting.

Off by default, as every card charged them before (docs/accounting.md rule 6, hosting).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0006_rental_no_overlap"),
    ]

    operations = [
        migrations.AddField(
            model_name="ratecard",
            name="waive_hosting_when_down",
            field=models.BooleanField(
                default=False,
                help_text=(
                    "No hosting fee for seconds telemetry says the GPU was down with no "
                    "incident recorded. Off (the default): those seconds are charged like any "
                    "in-service second."
                ),
            ),
        ),
    ]
