"""Statements' frozen inputs stored as ``json`` rather than ``jsonb`` (issue 22, goal 4a).

A close writes each statement's frozen inputs once, as the text it built, and every reader
takes them whole (the report, publishing's recomputation, the verifier); nothing queries
inside them. As ``jsonb`` the database took each ~43 KB text apart and built its binary form:
inserting a close's 1,000 of them cost ~390 ms of database CPU as ``jsonb`` and ~130 ms as
``json``, which only checks that the text is JSON and keeps it as written.

The values stay the same JSON values (every published statement's hash still recomputes
from them); the change rewrites the column, so statements stored before keep their values
as ``jsonb`` printed them (keys in ``jsonb``'s order), and new ones the text the close built.
Changing the type resets the column's compression, so lz4 is set again as migration 0010
sets it (where the server has it), after the change either way.
"""

import importlib

from django.db import migrations

import billing.models.fields

_LZ4 = importlib.import_module("billing.migrations.0010_frozen_inputs_lz4")


class Migration(migrations.Migration):
    dependencies = [("billing", "0010_frozen_inputs_lz4")]

    operations = [
        migrations.RunSQL(migrations.RunSQL.noop, _LZ4.FORWARD),  # unapplied: lz4 set again
        migrations.AlterField(
            model_name="statement",
            name="frozen_inputs",
            field=billing.models.fields.JsonTextField(
                help_text="Everything the figures were computed from."
            ),
        ),
        migrations.RunSQL(_LZ4.FORWARD, migrations.RunSQL.noop),
    ]
