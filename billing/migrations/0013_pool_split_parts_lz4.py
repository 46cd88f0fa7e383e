"""Pool splits' parts compressed with lz4 rather than pglz (issue 22, goal 4b).

A redraft reads the parts of a few GPUs out of a split of a whole cluster (~290 KB of JSON for
1,000 GPUs, stored out of line): taking the value back out of storage was most of that query,
~2.2 ms with pglz and ~1.5 ms with lz4 on the bench's data. Only how new values are stored
changes; a server built without lz4 keeps pglz, as for frozen inputs (migration 0010).
"""

from django.db import migrations

FORWARD = r"""
DO $$
BEGIN
    ALTER TABLE billing_poolsplit ALTER COLUMN parts SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: pool split parts stay compressed with pglz';
END $$;
"""

BACKWARD = "ALTER TABLE billing_poolsplit ALTER COLUMN parts SET COMPRESSION pglz;"


class Migration(migrations.Migration):
    dependencies = [("billing", "0012_statementline_immutable_per_statement")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
