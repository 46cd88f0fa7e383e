"""Statements' frozen inputs compressed with lz4 rather than pglz (issue 22, goal 4a).

A month close writes ~43 MB of frozen inputs for 10,000 GPUs; compressing them was most of
the database's share of the write: a COPY of the 1,000 texts took 1.00-1.03 s of database CPU
with pglz, 0.53 s with lz4. Only how new values are stored changes: every value reads back
the same, and published statements are not rewritten (values stored before keep pglz). A
server built without lz4 keeps pglz (the setting is refused there, and the rest works).
"""

from django.db import migrations

FORWARD = r"""
DO $$
BEGIN
    ALTER TABLE billing_statement ALTER COLUMN frozen_inputs SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: frozen inputs stay compressed with pglz';
END $$;
"""

BACKWARD = "ALTER TABLE billing_statement ALTER COLUMN frozen_inputs SET COMPRESSION pglz;"


class Migration(migrations.Migration):
    dependencies = [("billing", "0009_pool_split")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
