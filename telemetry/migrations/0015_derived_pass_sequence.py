"""A sequence that moves whenever marks may have gone (issue 22, goal 1).

A worker process remembers the derived-work marks it wrote and does not write one again
while it stands (``processing.marks``); it reads this sequence to know. Each derived pass
takes a number from it before it claims marks, under an advisory lock every chunk that
relies on what it remembered holds shared until it commits (``derived.MARKS_LOCK``). Any
other removal of marks — a truncate in a test or a bench, a delete by hand — moves it too,
by the trigger below, so that chunks starting afterwards write their marks again (a chunk
already in flight may not: remove marks by hand only with the workers stopped).
"""

from django.db import migrations

FORWARD = """
CREATE SEQUENCE telemetry_derived_pass_seq;
-- Called once: a new sequence's first nextval() leaves last_value as it was, and readers
-- take last_value for the number.
SELECT nextval('telemetry_derived_pass_seq');
CREATE FUNCTION telemetry_derivedwork_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('telemetry_derived_pass_seq');
    RETURN NULL;
END $$;
CREATE TRIGGER telemetry_derivedwork_removed AFTER DELETE OR TRUNCATE ON telemetry_derivedwork
    FOR EACH STATEMENT EXECUTE FUNCTION telemetry_derivedwork_removed();
"""

BACKWARD = """
DROP TRIGGER telemetry_derivedwork_removed ON telemetry_derivedwork;
DROP FUNCTION telemetry_derivedwork_removed();
DROP SEQUENCE telemetry_derived_pass_seq;
"""


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0014_batch_prepared_rows")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
