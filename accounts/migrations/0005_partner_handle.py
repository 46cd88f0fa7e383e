"""Partners get a public handle, which owners type to grant them access.

Existing partners get their name as a slug (with a number on a clash), then the column
becomes required and unique.
"""

from django.db import migrations, models
from django.utils.text import slugify


def handles_fill(apps, schema_editor):
    Partner = apps.get_model("accounts", "Partner")
    taken: set[str] = set()
    for partner in Partner.objects.order_by("created_at", "id"):
        base = (slugify(partner.name) or "partner")[:44]
        handle, n = base, 1
        while handle in taken:
            n += 1
            handle = f"{base}-{n}"
        taken.add(handle)
        partner.handle = handle
        partner.save(update_fields=["handle"])


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0004_api_keys_and_partner_grants"),
    ]

    operations = [
        migrations.AddField(
            model_name="partner",
            name="handle",
            field=models.SlugField(max_length=50, null=True, db_index=False),
        ),
        migrations.RunPython(handles_fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="partner",
            name="handle",
            field=models.SlugField(
                help_text="Public identifier owners type to grant this partner access, e.g. "
                "carol-market.",
                max_length=50,
                unique=True,
            ),
        ),
    ]
