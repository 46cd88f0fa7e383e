"""A cluster's pool basis becomes effective-dated (issue 21): rows with ``effective_from``
instead of one undated setting per cluster, so that a change never rewrites a period already
computed. Each cluster's setting today is carried over as in force from the beginning
(1970-01-01T00:00:00Z), as every period so far was computed (and reconciled) with it."""

import datetime

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


BEGINNING = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
CARRIED = "The cluster's setting before pool bases were dated (billing 0008)."


def carry_over(apps, schema_editor):
    apps.get_model("billing", "ClusterBilling").objects.update(reason=CARRIED)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_rate_card_waive_hosting_when_down"),
        ("fleet", "0004_incident_drafts"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="clusterbilling",
            options={
                "ordering": ["cluster", "effective_from"],
                "verbose_name": "cluster pool basis",
                "verbose_name_plural": "cluster pool bases",
            },
        ),
        migrations.AddField(
            model_name="clusterbilling",
            name="created_at",
            field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
        ),
        migrations.AddField(
            model_name="clusterbilling",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="clusterbilling",
            name="effective_from",
            field=models.DateTimeField(
                default=BEGINNING,
                help_text="UTC; the first second of a calendar month (a period's start).",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="clusterbilling",
            name="reason",
            field=models.TextField(blank=True),
        ),
        migrations.RunPython(carry_over, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="clusterbilling",
            name="cluster",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="billing_settings",
                to="fleet.cluster",
            ),
        ),
        migrations.AddConstraint(
            model_name="clusterbilling",
            constraint=models.UniqueConstraint(
                fields=("cluster", "effective_from"), name="billing_clusterbilling_one_per_instant"
            ),
        ),
    ]
